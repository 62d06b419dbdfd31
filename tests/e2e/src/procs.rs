//! Processes: running commands with a timeout, the test process as a child subreaper, listing
//! descendants, reaping orphans, and stopping processes this test started.
//!
//! The test process makes itself a child subreaper ([`become_subreaper`]), so everything an
//! engine daemonises (containerd shims, `runc` children, container init processes) stays its
//! descendant: "nothing left behind" compares the descendant list, and cleanup can stop exactly
//! the processes this test caused, by PID.

use anyhow::{bail, Context, Result};
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// Make this process a child subreaper (idempotent).
pub fn become_subreaper() {
    // SAFETY: PR_SET_CHILD_SUBREAPER takes an integer flag and touches no memory of ours.
    unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) };
}

/// One process as `/proc/<pid>/stat` describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Proc {
    /// PID.
    pub pid: i32,
    /// Parent PID.
    pub ppid: i32,
    /// State letter (`R`, `S`, `Z`, …).
    pub state: char,
    /// `comm`.
    pub comm: String,
}

/// Every process on the machine.
pub fn all() -> BTreeMap<i32, Proc> {
    let mut m = BTreeMap::new();
    for e in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        // comm is in parentheses and may contain anything; the fields after the last ')' are fixed.
        let (Some(open), Some(close)) = (stat.find('('), stat.rfind(')')) else {
            continue;
        };
        let comm = stat[open + 1..close].to_string();
        let mut rest = stat[close + 1..].split_whitespace();
        let state = rest.next().and_then(|s| s.chars().next()).unwrap_or('?');
        let ppid = rest.next().and_then(|s| s.parse().ok()).unwrap_or(0);
        m.insert(
            pid,
            Proc {
                pid,
                ppid,
                state,
                comm,
            },
        );
    }
    m
}

/// Descendants of this process (not including itself).
pub fn descendants() -> Vec<Proc> {
    let me = std::process::id() as i32;
    let all = all();
    let mut set = BTreeSet::from([me]);
    let mut out = Vec::new();
    // Parents can have higher PIDs than children after PID wrap-around: iterate to a fixed point.
    loop {
        let before = set.len();
        for p in all.values() {
            if set.contains(&p.ppid) && set.insert(p.pid) {
                out.push(p.clone());
            }
        }
        if set.len() == before {
            break;
        }
    }
    out.sort_by_key(|p| p.pid);
    out
}

/// Reap zombies among our direct children, except `keep` (PIDs a `std::process::Child` still
/// owns). Orphans reparented to us (we are a subreaper) would otherwise linger as zombies.
pub fn reap_orphans(keep: &BTreeSet<i32>) {
    let me = std::process::id() as i32;
    for p in all().values() {
        if p.ppid == me && p.state == 'Z' && !keep.contains(&p.pid) {
            let mut status = 0;
            // SAFETY: waitpid on a specific zombie child; `status` is a valid out-pointer.
            unsafe { libc::waitpid(p.pid, &mut status, libc::WNOHANG) };
        }
    }
}

/// The command line of a process, NUL separators turned into spaces.
pub fn cmdline(pid: i32) -> String {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .map(|b| {
            String::from_utf8_lossy(&b)
                .split('\0')
                .collect::<Vec<_>>()
                .join(" ")
        })
        .unwrap_or_default()
}

/// Descendants whose command line mentions `needle` (e.g. a scratch directory only this test uses).
pub fn descendants_mentioning(needle: &Path) -> Vec<Proc> {
    let n = needle.to_string_lossy();
    descendants()
        .into_iter()
        .filter(|p| p.state != 'Z' && cmdline(p.pid).contains(n.as_ref()))
        .collect()
}

/// Send `sig` to `pid`.
pub fn signal(pid: i32, sig: i32) {
    // SAFETY: kill() has no memory-safety preconditions.
    unsafe { libc::kill(pid, sig) };
}

/// Whether `pid` exists and is not a zombie.
pub fn alive(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(s) => s
            .rfind(')')
            .and_then(|i| s[i + 1..].split_whitespace().next())
            .is_some_and(|st| st != "Z"),
        Err(_) => false,
    }
}

/// Stop descendants that mention `needle`: SIGTERM, then SIGKILL after `grace`.
pub fn stop_descendants_mentioning(needle: &Path, grace: Duration) {
    let victims = descendants_mentioning(needle);
    for p in &victims {
        signal(p.pid, libc::SIGTERM);
    }
    let end = Instant::now() + grace;
    while Instant::now() < end && victims.iter().any(|p| alive(p.pid)) {
        std::thread::sleep(Duration::from_millis(50));
    }
    for p in &victims {
        if alive(p.pid) {
            signal(p.pid, libc::SIGKILL);
        }
    }
    std::thread::sleep(Duration::from_millis(50));
    reap_orphans(&BTreeSet::new());
}

/// Run a command to completion with a timeout; on timeout the child is killed and an error returned.
pub fn run_timeout(cmd: &mut Command, timeout: Duration) -> Result<Output> {
    let what = format!("{cmd:?}");
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("spawning {what}"))?;
    let pid = child.id() as i32;
    let (tx, rx) = std::sync::mpsc::channel();
    let stdout = child.stdout.take();
    let stderr = child.stderr.take();
    let reader = std::thread::spawn(move || {
        use std::io::Read;
        let mut o = Vec::new();
        let mut e = Vec::new();
        let t = stderr.map(|mut s| {
            std::thread::spawn(move || {
                let mut b = Vec::new();
                let _ = s.read_to_end(&mut b);
                b
            })
        });
        if let Some(mut s) = stdout {
            let _ = s.read_to_end(&mut o);
        }
        if let Some(t) = t {
            e = t.join().unwrap_or_default();
        }
        let _ = tx.send(());
        (o, e)
    });
    let end = Instant::now() + timeout;
    loop {
        if let Some(status) = child.try_wait()? {
            // Output pipes may be held open by grandchildren (daemonised shims): don't wait forever.
            let done = rx.recv_timeout(Duration::from_secs(5)).is_ok();
            // After the reader's message it only returns: join it (is_finished() could still
            // be false for a moment).
            let (stdout, stderr) = if done {
                reader.join().unwrap_or_default()
            } else {
                (
                    Vec::new(),
                    b"<output pipes still held open by a descendant>".to_vec(),
                )
            };
            return Ok(Output {
                status,
                stdout,
                stderr,
            });
        }
        if Instant::now() >= end {
            signal(pid, libc::SIGKILL);
            let _ = child.wait();
            bail!("{what} timed out after {timeout:?}");
        }
        wait_exit_until(pid, end);
    }
}

/// Blocks until `pid` (a child of ours, not yet reaped) exits or `end` passes, whichever comes
/// first, without reaping it. Uses a pidfd so the caller sees the exit at once — a sleep-poll
/// loop quantised every sample of `cargo xtask bench container-start` to its 20 ms period. Falls
/// back to a 1 ms sleep where pidfd_open(2) is missing (kernels before 5.3).
fn wait_exit_until(pid: i32, end: Instant) {
    // SAFETY: pidfd_open takes a pid and flags and returns a new descriptor or -1; no memory
    // is passed.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) } as i32;
    if fd < 0 {
        std::thread::sleep(Duration::from_millis(1));
        return;
    }
    let left = end.saturating_duration_since(Instant::now());
    let ms = left.as_millis().clamp(1, i32::MAX as u128) as i32;
    let mut pfd = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: `pfd` is a valid pollfd for the duration of the call and the count is 1; `fd`
    // is ours and closed exactly once below.
    unsafe {
        libc::poll(&mut pfd, 1, ms);
        libc::close(fd);
    }
}

/// Stdout and stderr of an output, for messages.
pub fn describe(o: &Output) -> String {
    format!(
        "status {}\n--- stdout\n{}\n--- stderr\n{}",
        o.status,
        String::from_utf8_lossy(&o.stdout).trim_end(),
        String::from_utf8_lossy(&o.stderr).trim_end()
    )
}

/// Run and require success; returns stdout.
pub fn run_ok(cmd: &mut Command, timeout: Duration) -> Result<String> {
    let what = format!("{cmd:?}");
    let o = run_timeout(cmd, timeout)?;
    if !o.status.success() {
        bail!("{what} failed: {}", describe(&o));
    }
    Ok(String::from_utf8_lossy(&o.stdout).into_owned())
}
