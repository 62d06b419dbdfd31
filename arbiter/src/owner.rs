//! Who owns a slice, from the host's view: the owner's pid with its start time (field 22 of
//! `/proc/<pid>/stat`) and/or its cgroup, recorded at admit in `<slice-dir>/owner.json`, and the
//! `/proc` reader that takes those identities. Reclaim judges owners by it, the backstop maps
//! processes to slices by it; neither trusts anything the tenant can write.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use gpuslice_api::Owner;
use gpuslice_region::liveness::ProcStat;
use gpuslice_region::Liveness;
use serde::{Deserialize, Serialize};

/// The owner identity file inside a slice directory.
pub const OWNER_FILE: &str = "owner.json";

/// Who owns a slice, as recorded at admit: the pid with its start time, and/or a cgroup path.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OwnerIdentity {
    /// Host pid of the owner.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pid: Option<u32>,
    /// Its start time (clock ticks since boot); `None` when it could not be read at admit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_time: Option<u64>,
    /// cgroup path, relative to the cgroup mount (`/kubepods/pod1/3f9c1e`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cgroup: Option<String>,
}

impl OwnerIdentity {
    /// The identity of `owner` now: its pid's start time is read from `procfs`.
    pub fn capture(owner: &Owner, procfs: &ProcFs) -> OwnerIdentity {
        OwnerIdentity {
            pid: owner.pid,
            start_time: owner.pid.and_then(|p| procfs.start_time(p)),
            cgroup: owner.cgroup.clone(),
        }
    }

    /// Whether this identity still describes `owner` (the slice was not replaced meanwhile).
    pub fn matches(&self, owner: &Owner) -> bool {
        self.pid == owner.pid && self.cgroup == owner.cgroup
    }
}

/// Writes `<dir>/owner.json` atomically (mode 0600). Called at admit.
pub fn write_owner(dir: &Path, id: &OwnerIdentity) -> io::Result<()> {
    let body = serde_json::to_vec(id).map_err(io::Error::other)?;
    crate::store::write_private(dir, OWNER_FILE, &body)
}

/// Reads `<dir>/owner.json`; `None` when absent or unreadable.
pub fn read_owner(dir: &Path) -> Option<OwnerIdentity> {
    let bytes = fs::read(dir.join(OWNER_FILE)).ok()?;
    serde_json::from_slice(&bytes).ok()
}

/// Records the owner of a freshly admitted slice (best effort: a failure is logged, and the
/// slice then falls back to the pid alone, which is judged dead only once no such pid exists).
pub fn record_owner_at_admit(dir: &Path, owner: &Owner) {
    let id = OwnerIdentity::capture(owner, &ProcFs::default());
    if id == OwnerIdentity::default() {
        return;
    }
    if let Err(e) = write_owner(dir, &id) {
        tracing::warn!("{}: cannot record the owner: {e}", dir.display());
    }
}

/// A view of `/proc` (a fake root in tests).
#[derive(Clone, Debug)]
pub struct ProcFs {
    root: PathBuf,
}

impl Default for ProcFs {
    fn default() -> Self {
        ProcFs {
            root: PathBuf::from("/proc"),
        }
    }
}

impl ProcFs {
    /// `/proc` at `root`.
    pub fn new(root: impl Into<PathBuf>) -> ProcFs {
        ProcFs { root: root.into() }
    }

    /// Whether this is the real `/proc` (pidfds then describe the same processes).
    pub fn is_real(&self) -> bool {
        self.root == Path::new("/proc")
    }

    /// What `/proc/<pid>/stat` says of `pid`; `Ok(None)` when there is no such process.
    pub fn stat(&self, pid: u32) -> io::Result<Option<ProcStat>> {
        match fs::read(self.root.join(pid.to_string()).join("stat")) {
            Ok(t) => Ok(gpuslice_region::liveness::parse_stat(&t)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) if e.raw_os_error() == Some(libc::ESRCH) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Start time of `pid` while it has not exited (an exiting process still counts: see
    /// [`ProcStat::exited`]).
    pub fn start_time(&self, pid: u32) -> Option<u64> {
        match self.stat(pid) {
            Ok(Some(s)) if !s.exited() => Some(s.start),
            _ => None,
        }
    }

    /// Liveness of (`pid`, `start`). A pid that exists with another start time is another
    /// process: dead. Unreadable means alive (a leak, never an overshoot).
    pub fn liveness(&self, pid: u32, start: Option<u64>) -> Liveness {
        if pid == 0 {
            return Liveness::Dead;
        }
        match self.stat(pid) {
            Ok(None) => Liveness::Dead,
            Ok(Some(s)) if s.exited() => Liveness::Dead,
            Ok(Some(s)) if start.is_some_and(|want| want != s.start) => Liveness::Dead,
            Ok(Some(_)) | Err(_) => Liveness::Alive,
        }
    }

    /// Whether `pid` lives in the same pid namespace as the reader (`self`).
    pub fn same_pid_ns(&self, pid: u32) -> bool {
        let mine = fs::read_link(self.root.join("self/ns/pid"));
        let theirs = fs::read_link(self.root.join(pid.to_string()).join("ns/pid"));
        matches!((mine, theirs), (Ok(a), Ok(b)) if a == b)
    }
}
