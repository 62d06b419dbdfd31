//! Process identity and liveness from `/proc`: a process is its pid plus its start time (field 22
//! of `/proc/<pid>/stat`), so a reused pid is never mistaken for the process that held it.

use crate::protocol::{Env, Liveness, Waiter};
use std::time::{Duration, Instant};

/// What `/proc/<pid>/stat` says of a process: the fields liveness and attribution need.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProcStat {
    /// State letter (field 3): `R`, `S`, `D`, `Z`, …
    pub state: u8,
    /// Parent pid (field 4).
    pub ppid: u32,
    /// Threads of the thread group still counted (field 20).
    pub threads: u32,
    /// Start time in clock ticks after boot (field 22).
    pub start: u64,
}

impl ProcStat {
    /// Whether the whole process has exited: its device memory (and every descriptor, the
    /// driver's included) is released. A leader shows `Z` as soon as its own thread has exited,
    /// while other threads may still run and hold the process's descriptors — and with them
    /// its contexts: that process is exiting, not gone. Once the last other thread has been
    /// released the zombie counts only itself.
    pub fn exited(&self) -> bool {
        match self.state {
            b'X' | b'x' => true,
            b'Z' => self.threads <= 1,
            _ => false,
        }
    }
}

/// What `/proc/<pid>/stat` says of `pid`, or `None` if it does not exist.
/// `Err` when `/proc` could not be read for another reason.
pub fn stat_of(pid: u32) -> Result<Option<ProcStat>, std::io::Error> {
    stat_of_at(std::path::Path::new("/proc"), pid)
}

/// Parses a `stat` line. The command name (field 2) may contain spaces and parentheses, so
/// fields are counted after the last `)`.
pub fn parse_stat(text: &[u8]) -> Option<ProcStat> {
    let close = text.iter().rposition(|&b| b == b')')?;
    let rest = std::str::from_utf8(text.get(close + 1..)?).ok()?;
    let mut fields = rest.split_ascii_whitespace();
    let state = fields.next()?.as_bytes().first().copied()?;
    let ppid = fields.next()?.parse::<u32>().ok()?;
    // Fields 5..=19 precede the thread count: skip 15 of them; 21 precedes the start time.
    let threads = fields.nth(15)?.parse::<u32>().ok()?;
    let start = fields.nth(1)?.parse::<u64>().ok()?;
    Some(ProcStat {
        state,
        ppid,
        threads,
        start,
    })
}

/// Start time of the calling process.
pub fn self_start_time() -> Option<u64> {
    let text = std::fs::read("/proc/self/stat").ok()?;
    parse_stat(&text).map(|s| s.start)
}

/// Liveness of (`pid`, `start`) as seen from `/proc`.
pub fn liveness(pid: u32, start: Option<u64>) -> Liveness {
    if pid == 0 {
        return Liveness::Dead;
    }
    match stat_of(pid) {
        Ok(None) => Liveness::Dead,
        // Exited processes have released their device memory; an exiting one may not have.
        Ok(Some(s)) if s.exited() => Liveness::Dead,
        Ok(Some(s)) => match start {
            Some(want) if want != s.start => Liveness::Dead,
            _ => Liveness::Alive,
        },
        // Cannot tell (e.g. hidepid): assume alive, which can only leak, never overshoot.
        Err(_) => Liveness::Alive,
    }
}

/// The production [`Env`]: `/proc` liveness and a spin → yield → sleep backoff with a deadline.
#[derive(Clone, Copy, Debug)]
pub struct ProcEnv {
    /// How long one wait may last before it is given up.
    pub limit: Duration,
}

impl Default for ProcEnv {
    fn default() -> Self {
        ProcEnv {
            limit: Duration::from_secs(2),
        }
    }
}

impl Env for ProcEnv {
    type Waiter = ProcWaiter;
    fn liveness(&self, pid: u32, start: Option<u64>) -> Liveness {
        liveness(pid, start)
    }
    fn waiter(&self) -> ProcWaiter {
        ProcWaiter {
            round: 0,
            started: None,
            limit: self.limit,
        }
    }
}

/// Backoff of [`ProcEnv`].
#[derive(Debug)]
pub struct ProcWaiter {
    round: u32,
    started: Option<Instant>,
    limit: Duration,
}

impl Waiter for ProcWaiter {
    fn pause(&mut self) -> bool {
        self.round = self.round.saturating_add(1);
        if self.round < 64 {
            std::hint::spin_loop();
            return true;
        }
        let started = *self.started.get_or_insert_with(Instant::now);
        if started.elapsed() > self.limit {
            return false;
        }
        if self.round < 128 {
            std::thread::yield_now();
        } else {
            std::thread::sleep(Duration::from_micros(50));
        }
        true
    }
    fn check_owner(&self) -> bool {
        self.round >= 64 && self.round.is_multiple_of(32)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_comm_with_spaces_and_parens() {
        let line = b"1234 (a b) c)) S 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 3 18 987654 20 21\n";
        let st = parse_stat(line).expect("parsed");
        assert_eq!(
            (st.state, st.ppid, st.threads, st.start),
            (b'S', 1, 3, 987654)
        );
        assert_eq!(parse_stat(b"garbage"), None);
        assert_eq!(parse_stat(b"1 (x) S 1 2"), None);
    }

    #[test]
    fn self_is_alive_and_wrong_start_is_dead() {
        let me = std::process::id();
        let start = self_start_time().expect("own start time");
        assert_eq!(liveness(me, Some(start)), Liveness::Alive);
        assert_eq!(liveness(me, Some(start + 1)), Liveness::Dead);
        assert_eq!(liveness(0, None), Liveness::Dead);
    }
}

/// The processes of one pid namespace as its members see them: namespace pid → start time,
/// read from the host's `/proc` (`NSpid` of `/proc/<pid>/status`, innermost last). Built for
/// one namespace, named by a member's host pid (a container's init).
#[derive(Debug, Default, Clone)]
pub struct PidNamespace {
    members: std::collections::HashMap<u32, u64>,
    same_as_reader: bool,
}

/// Every process of the host's `/proc` by pid namespace, read once (one `readlink` each) so
/// that the namespaces of many slices are found without a pass over `/proc` per slice.
#[derive(Debug, Default, Clone)]
pub struct ProcessTable {
    root: std::path::PathBuf,
    mine: Option<std::path::PathBuf>,
    by_ns: std::collections::HashMap<std::path::PathBuf, Vec<u32>>,
}

impl ProcessTable {
    /// One pass over `proc_root` (`/proc`). Empty (no namespace found) when it cannot be read.
    pub fn scan(proc_root: &std::path::Path) -> ProcessTable {
        let mut by_ns: std::collections::HashMap<std::path::PathBuf, Vec<u32>> = Default::default();
        for e in std::fs::read_dir(proc_root).into_iter().flatten().flatten() {
            let Some(pid) = e.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else {
                continue;
            };
            if let Ok(ns) = std::fs::read_link(e.path().join("ns/pid")) {
                by_ns.entry(ns).or_default().push(pid);
            }
        }
        ProcessTable {
            root: proc_root.to_path_buf(),
            mine: std::fs::read_link(proc_root.join("self/ns/pid")).ok(),
            by_ns,
        }
    }

    /// The namespace of host process `member`; `None` when `member` is gone or its namespace
    /// cannot be read. Reads only that namespace's members.
    pub fn namespace_of(&self, member: u32) -> Option<PidNamespace> {
        let ns = std::fs::read_link(self.root.join(member.to_string()).join("ns/pid")).ok()?;
        if self.mine.as_ref() == Some(&ns) {
            return Some(PidNamespace {
                members: Default::default(),
                same_as_reader: true,
            });
        }
        let mut members = std::collections::HashMap::new();
        for &host_pid in self.by_ns.get(&ns).into_iter().flatten() {
            let Some(inner) =
                std::fs::read_to_string(self.root.join(host_pid.to_string()).join("status"))
                    .ok()
                    .and_then(|t| innermost_nspid(&t))
            else {
                continue;
            };
            if let Ok(Some(st)) = stat_of_at(&self.root, host_pid) {
                if !st.exited() {
                    members.insert(inner, st.start);
                }
            }
        }
        Some(PidNamespace {
            members,
            same_as_reader: false,
        })
    }
}

impl PidNamespace {
    /// The namespace of host process `member`, read from `proc_root` (`/proc`). `None` when
    /// `member` is gone or its namespace cannot be read. For many slices, scan once with
    /// [`ProcessTable`].
    pub fn of(proc_root: &std::path::Path, member: u32) -> Option<PidNamespace> {
        ProcessTable::scan(proc_root).namespace_of(member)
    }

    /// Whether the process (`pid` in this namespace, `start` time) is alive.
    pub fn alive(&self, pid: u32, start: u64) -> bool {
        if self.same_as_reader {
            return liveness(pid, Some(start)) != Liveness::Dead;
        }
        self.members.get(&pid) == Some(&start)
    }
}

/// The last pid of the `NSpid:` line of a `/proc/<pid>/status` text.
pub fn innermost_nspid(status: &str) -> Option<u32> {
    status
        .lines()
        .find_map(|l| l.strip_prefix("NSpid:"))?
        .split_ascii_whitespace()
        .last()?
        .parse()
        .ok()
}

fn stat_of_at(proc_root: &std::path::Path, pid: u32) -> Result<Option<ProcStat>, std::io::Error> {
    match std::fs::read(proc_root.join(pid.to_string()).join("stat")) {
        Ok(t) => Ok(parse_stat(&t)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) if e.raw_os_error() == Some(libc::ESRCH) => Ok(None),
        Err(e) => Err(e),
    }
}
