//! "Nothing left behind": the state directory's listing, the mount table, containerd's shim
//! socket directory and this test's descendant processes, taken before and compared after an
//! operation.

use crate::procs;
use crate::scratch::unescape_mount;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// What a node looks like at one moment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Snapshot {
    /// Every path below the state directory (relative), directories marked with a trailing `/`.
    pub state: Vec<String>,
    /// Mounts as `mount point (fstype source)`, sorted (a multiset).
    pub mounts: Vec<String>,
    /// Descendant processes as `pid comm`.
    pub procs: Vec<String>,
    /// Files in containerd's shim socket directory ([`SHIM_SOCKETS`]): every shim's socket
    /// (and lock) must go with it.
    pub shim_sockets: Vec<String>,
}

/// Where containerd's shims (runc's, ours) keep their sockets, for every containerd version.
pub const SHIM_SOCKETS: &str = "/run/containerd/s";

impl Snapshot {
    /// Take a snapshot; `state_dir` may be absent (then `state` is empty).
    pub fn take(state_dir: Option<&Path>) -> Self {
        procs::reap_orphans(&BTreeSet::new());
        let mut state = Vec::new();
        if let Some(d) = state_dir {
            list(d, d, &mut state);
        }
        state.sort();
        let mut mounts: Vec<String> = std::fs::read_to_string("/proc/self/mountinfo")
            .unwrap_or_default()
            .lines()
            .filter_map(|l| {
                let f: Vec<&str> = l.split(' ').collect();
                let sep = f.iter().position(|x| *x == "-")?;
                Some(format!(
                    "{} ({} {})",
                    unescape_mount(f.get(4)?),
                    f.get(sep + 1)?,
                    f.get(sep + 2)?
                ))
            })
            .collect();
        mounts.sort();
        let procs = procs::descendants()
            .into_iter()
            .map(|p| format!("{} {}", p.pid, p.comm))
            .collect();
        let mut shim_sockets: Vec<String> = std::fs::read_dir(SHIM_SOCKETS)
            .map(|rd| {
                rd.flatten()
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default();
        shim_sockets.sort();
        Self {
            state,
            mounts,
            procs,
            shim_sockets,
        }
    }

    /// What differs from `before`, or `None`.
    pub fn diff(&self, before: &Snapshot) -> Option<String> {
        let mut out = String::new();
        for (what, b, a) in [
            ("state directory", &before.state, &self.state),
            ("mount table", &before.mounts, &self.mounts),
            ("processes", &before.procs, &self.procs),
            ("shim sockets", &before.shim_sockets, &self.shim_sockets),
        ] {
            let (mut gone, new) = multiset_diff(b, a);
            if what == "processes" {
                // A process that ended is not left behind; only new ones are.
                gone.clear();
            }
            if !gone.is_empty() || !new.is_empty() {
                out.push_str(&format!("{what}: new {new:?}, gone {gone:?}\n"));
            }
        }
        (!out.is_empty()).then_some(out)
    }

    /// Wait up to `timeout` for the node to look like `before` again (engines clean up
    /// asynchronously); returns the remaining difference if it never does.
    pub fn settle(
        before: &Snapshot,
        state_dir: Option<&Path>,
        timeout: Duration,
    ) -> Option<String> {
        let end = Instant::now() + timeout;
        loop {
            let d = Snapshot::take(state_dir).diff(before);
            if d.is_none() || Instant::now() >= end {
                return d;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

fn multiset_diff(before: &[String], after: &[String]) -> (Vec<String>, Vec<String>) {
    let mut b: Vec<String> = before.to_vec();
    let mut new = Vec::new();
    for x in after {
        if let Some(i) = b.iter().position(|y| y == x) {
            b.swap_remove(i);
        } else {
            new.push(x.clone());
        }
    }
    (b, new)
}

fn list(root: &Path, dir: &Path, out: &mut Vec<String>) {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return;
    };
    for e in rd.flatten() {
        let p: PathBuf = e.path();
        let rel = p
            .strip_prefix(root)
            .unwrap_or(&p)
            .to_string_lossy()
            .into_owned();
        if e.file_type().map(|t| t.is_dir()).unwrap_or(false) {
            out.push(format!("{rel}/"));
            list(root, &p, out);
        } else {
            out.push(rel);
        }
    }
}
