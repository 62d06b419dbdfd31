//! Reclaim: a loop (every [`DEFAULT_PERIOD`], 250 ms) that
//!
//! * frees the `usage` records of dead processes in every slice (memory of a process killed by
//!   any signal returns to its slice), through the region crate's reclaim protocol, and
//! * releases slices whose owner is gone (its memory and shares return to the node), through the
//!   same path as a `release` request.
//!
//! A process is always its pid **and** its start time (field 22 of `/proc/<pid>/stat`), never a
//! bare pid, so a reused pid is never mistaken for the process that held it. The owner's start
//! time is recorded at admit in `<slice-dir>/owner.json` ([`OwnerIdentity`]). A container owner
//! may instead (or also) be a cgroup path: the slice is released when that cgroup no longer
//! exists. A slice with neither is kept.
//!
//! Cheap when nothing changes: each tick reads the record words of each slice's `usage` (memory
//! loads), looks processes up in a cache, and asks the kernel about all of them in one `poll(2)`
//! over pidfds (Linux ≥ 5.3); `/proc` is read only for processes not seen before (or every tick
//! where pidfds are unavailable, e.g. with a fake `/proc` in tests).
//!
//! Records in `usage` carry pids of the tenant's pid namespace. The arbiter judges them only for
//! slices whose owner process shares its own pid namespace (bare processes from `gpuslice run`,
//! host-pid containers); elsewhere the interposer's own reclaim (on a reservation over the cap
//! and at process exit) frees them.

use std::collections::{HashMap, HashSet};
use std::fs;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use gpuslice_api::{Request, Response, SliceStatus};
use gpuslice_region::layout::{rec_unpack, REC_CLAIMING, REC_DEAD, REC_LIVE, USAGE_FILE};
use gpuslice_region::protocol::Ledger;
use gpuslice_region::{Liveness, Usage, MAX_PROCS};

pub use crate::owner::{
    read_owner, record_owner_at_admit, write_owner, OwnerIdentity, ProcFs, OWNER_FILE,
};
use crate::state::State;

/// Default period of the loop. Dead processes and owners are noticed within one period.
pub const DEFAULT_PERIOD: Duration = Duration::from_millis(250);

/// Opens a pidfd for `pid` (None where unsupported — before Linux 5.3, in some sandboxes, or
/// with `GPUSLICE_FORCE_SYSCALL_FALLBACKS=1` — or when the process is gone): the watcher then
/// re-reads `/proc/<pid>/stat` each tick.
fn pidfd_open(pid: u32) -> Option<OwnedFd> {
    crate::syscalls::pidfd_open(pid).ok()
}

/// One process identity the loop watches.
#[derive(Debug)]
struct Watched {
    alive: bool,
    /// A pidfd for the process (readable once it exits); `None` = re-read `/proc` each tick.
    fd: Option<OwnedFd>,
    seen: bool,
}

/// Liveness of (pid, start) pairs, cached across ticks.
#[derive(Debug)]
struct Watcher {
    procfs: ProcFs,
    procs: HashMap<(u32, Option<u64>), Watched>,
}

impl Watcher {
    fn new(procfs: ProcFs) -> Watcher {
        Watcher {
            procfs,
            procs: HashMap::new(),
        }
    }

    /// Marks every entry unseen (start of a tick).
    fn begin(&mut self) {
        for w in self.procs.values_mut() {
            w.seen = false;
        }
    }

    /// Polls every pidfd once; entries whose process exited become dead.
    fn poll(&mut self) {
        let mut keys = Vec::new();
        let mut fds = Vec::new();
        for (k, w) in &mut self.procs {
            if !w.alive {
                continue;
            }
            match &w.fd {
                Some(fd) => {
                    keys.push(*k);
                    fds.push(libc::pollfd {
                        fd: fd.as_raw_fd(),
                        events: libc::POLLIN,
                        revents: 0,
                    });
                }
                None => w.alive = self.procfs.liveness(k.0, k.1) == Liveness::Alive,
            }
        }
        if fds.is_empty() {
            return;
        }
        // SAFETY: `fds` is a live, correctly sized array of pollfd; timeout 0 never blocks.
        let n = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, 0) };
        if n <= 0 {
            return;
        }
        for (k, p) in keys.iter().zip(&fds) {
            if p.revents != 0 {
                if let Some(w) = self.procs.get_mut(k) {
                    w.alive = false;
                    w.fd = None;
                }
            }
        }
    }

    /// Liveness of (`pid`, `start`) as of the last poll; a new identity is checked now.
    fn alive(&mut self, pid: u32, start: Option<u64>) -> bool {
        if let Some(w) = self.procs.get_mut(&(pid, start)) {
            w.seen = true;
            return w.alive;
        }
        // Open the pidfd first, then check the start time: if it matches, the fd is that process.
        let fd = if self.procfs.is_real() {
            pidfd_open(pid)
        } else {
            None
        };
        let alive = self.procfs.liveness(pid, start) == Liveness::Alive;
        self.procs.insert(
            (pid, start),
            Watched {
                alive,
                fd: if alive { fd } else { None },
                seen: true,
            },
        );
        alive
    }

    /// Forgets identities not looked at this tick.
    fn end(&mut self) {
        self.procs.retain(|_, w| w.seen);
    }
}

/// Where the loop looks and how often.
#[derive(Clone, Debug)]
pub struct ReclaimConfig {
    /// The state directory (slice directories).
    pub state_dir: PathBuf,
    /// Period of the loop (≤ 250 ms keeps the "within 1 s" promise with margin).
    pub period: Duration,
    /// `/proc` (a fake root in tests).
    pub proc_root: PathBuf,
    /// The cgroup mount (`/sys/fs/cgroup`).
    pub cgroup_root: PathBuf,
}

impl ReclaimConfig {
    /// Production settings for `state_dir`.
    pub fn new(state_dir: &Path) -> ReclaimConfig {
        ReclaimConfig {
            state_dir: state_dir.to_path_buf(),
            period: DEFAULT_PERIOD,
            proc_root: PathBuf::from("/proc"),
            cgroup_root: PathBuf::from("/sys/fs/cgroup"),
        }
    }
}

/// A slice's `usage` mapping plus the arbiter's own record in it (the freeze tag reclaim needs).
#[derive(Debug)]
struct SliceUsage {
    usage: Usage,
    mine: Option<usize>,
    /// Length and inode of `usage` when mapped: a tenant that truncates or replaces the file
    /// must not make the arbiter touch pages that are gone (SIGBUS).
    file: (u64, u64),
}

fn file_id(path: &Path) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    fs::metadata(path).ok().map(|m| (m.len(), m.ino()))
}

/// What one tick did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TickReport {
    /// `usage` records of dead processes freed, per slice.
    pub reclaimed: Vec<(String, usize)>,
    /// Slices released because their owner is gone.
    pub released: Vec<String>,
}

/// The reclaim loop's state.
#[derive(Debug)]
pub struct Reclaimer {
    cfg: ReclaimConfig,
    state: Arc<Mutex<State>>,
    watcher: Watcher,
    usages: HashMap<String, SliceUsage>,
    owners: HashMap<String, Option<OwnerIdentity>>,
    me: (u32, Option<u64>),
}

impl Reclaimer {
    /// A reclaimer over `state`.
    pub fn new(state: Arc<Mutex<State>>, cfg: ReclaimConfig) -> Reclaimer {
        let procfs = ProcFs::new(cfg.proc_root.clone());
        let me = std::process::id();
        let start = procfs.start_time(me);
        Reclaimer {
            watcher: Watcher::new(procfs),
            cfg,
            state,
            usages: HashMap::new(),
            owners: HashMap::new(),
            me: (me, start),
        }
    }

    fn cgroup_gone(&self, path: &str) -> bool {
        let root = &self.cfg.cgroup_root;
        if !root.is_dir() {
            return false; // cannot tell: keep
        }
        let rel = path.trim_start_matches('/');
        // cgroup v2 (unified), then the v1 hierarchies a container is always in.
        let candidates = ["", "unified", "memory", "pids", "cpu,cpuacct", "systemd"];
        !candidates.iter().any(|h| root.join(h).join(rel).exists())
    }

    fn owner_gone(&mut self, dir: &Path, slice: &SliceStatus) -> bool {
        // The cached identity is stale once the owner changed (a `bind` after admit): re-read it.
        let cached = self
            .owners
            .get(&slice.slice_id)
            .cloned()
            .flatten()
            .filter(|id| id.matches(&slice.owner));
        let id = match cached {
            Some(id) => Some(id),
            None => {
                let fresh = read_owner(dir).filter(|id| id.matches(&slice.owner));
                self.owners.insert(slice.slice_id.clone(), fresh.clone());
                fresh
            }
        };
        let id = id.unwrap_or_else(|| OwnerIdentity {
            pid: slice.owner.pid,
            start_time: None,
            cgroup: slice.owner.cgroup.clone(),
        });
        // A cgroup, when given, bounds the slice's life; otherwise the pid (with start time).
        if let Some(cg) = &id.cgroup {
            return self.cgroup_gone(cg);
        }
        match id.pid {
            Some(pid) => !self.watcher.alive(pid, id.start_time),
            None => false,
        }
    }

    /// Frees dead records in `slice`'s usage; returns how many were freed.
    fn reclaim_usage(&mut self, dir: &Path, slice: &SliceStatus) -> usize {
        let Some(owner) = slice.owner.pid else {
            return 0;
        };
        if !self.usages.contains_key(&slice.slice_id) {
            let procfs = ProcFs::new(self.cfg.proc_root.clone());
            if !procfs.same_pid_ns(owner) {
                return 0;
            }
            let before = file_id(&dir.join(USAGE_FILE));
            match (Usage::open(dir, slice.devices.len()), before) {
                (Ok(usage), Some(file)) => {
                    self.usages.insert(
                        slice.slice_id.clone(),
                        SliceUsage {
                            usage,
                            mine: None,
                            file,
                        },
                    );
                }
                _ => return 0, // no region files (yet): nothing to reclaim
            }
        }
        // The mapping was validated at open; re-check that the file is still that file, whole.
        if let Some(su) = self.usages.get(&slice.slice_id) {
            if file_id(&dir.join(USAGE_FILE)) != Some(su.file) {
                tracing::warn!(
                    "slice {}: usage file truncated or replaced; not touching it",
                    slice.slice_id
                );
                self.usages.remove(&slice.slice_id);
                return 0;
            }
        }
        let me = self.me;
        let mut dead_found = false;
        let mut records = Vec::new();
        if let Some(su) = self.usages.get(&slice.slice_id) {
            for rec in 0..MAX_PROCS {
                let (st, pid) = rec_unpack(
                    su.usage
                        .state(rec)
                        .load(std::sync::atomic::Ordering::Acquire),
                );
                if Some(rec) == su.mine {
                    continue;
                }
                match st {
                    REC_LIVE => records.push((
                        pid,
                        Some(
                            su.usage
                                .start_time(rec)
                                .load(std::sync::atomic::Ordering::Acquire),
                        ),
                    )),
                    REC_CLAIMING => records.push((pid, None)),
                    REC_DEAD => dead_found = true,
                    _ => {}
                }
            }
        }
        for (pid, start) in records {
            if !self.watcher.alive(pid, start) {
                dead_found = true;
            }
        }
        if !dead_found {
            return 0;
        }
        let Some(su) = self.usages.get_mut(&slice.slice_id) else {
            return 0;
        };
        // The freeze during recomputation is tagged with a record; the arbiter uses its own,
        // claimed once per slice with its pid and start time (so waiters see a live freezer).
        let valid = su.mine.is_some_and(|r| {
            let (st, pid) =
                rec_unpack(su.usage.state(r).load(std::sync::atomic::Ordering::Acquire));
            st == REC_LIVE
                && pid == me.0
                && Some(
                    su.usage
                        .start_time(r)
                        .load(std::sync::atomic::Ordering::Acquire),
                ) == me.1
        });
        if !valid {
            su.mine = me.1.and_then(|start| su.usage.claim(me.0, start).ok());
        }
        let Some(mine) = su.mine else {
            return 0;
        };
        match su.usage.reclaim(mine) {
            Ok(n) => n,
            Err(e) => {
                tracing::debug!("slice {}: reclaim deferred: {e:?}", slice.slice_id);
                0
            }
        }
    }

    /// One pass over every slice.
    pub fn tick(&mut self) -> TickReport {
        let slices: Vec<SliceStatus> = self
            .state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .admission()
            .slices()
            .cloned()
            .collect();
        let live_ids: HashSet<&str> = slices.iter().map(|s| s.slice_id.as_str()).collect();
        self.usages.retain(|id, _| live_ids.contains(id.as_str()));
        self.owners.retain(|id, _| live_ids.contains(id.as_str()));
        self.watcher.begin();
        self.watcher.poll();
        let mut report = TickReport::default();
        let mut gone = Vec::new();
        for s in &slices {
            let dir = self.cfg.state_dir.join(&s.slice_id);
            if self.owner_gone(&dir, s) {
                gone.push(s.clone());
                continue;
            }
            let n = self.reclaim_usage(&dir, s);
            if n > 0 {
                report.reclaimed.push((s.slice_id.clone(), n));
            }
        }
        self.watcher.end();
        if !report.reclaimed.is_empty() {
            let st = self.state.lock().unwrap_or_else(PoisonError::into_inner);
            for (id, n) in &report.reclaimed {
                let live = st.admission().slice(id).is_some();
                st.events()
                    .count_reclaimed(live.then_some(id.as_str()), *n as u64);
            }
        }
        for s in gone {
            let mut st = self.state.lock().unwrap_or_else(PoisonError::into_inner);
            // Release only the slice that was judged (not a newer one with the same id).
            if st.admission().slice(&s.slice_id).map(|c| &c.owner) != Some(&s.owner) {
                continue;
            }
            match st.handle(Request::Release {
                slice_id: s.slice_id.clone(),
            }) {
                Response::Released { .. } => {
                    tracing::info!("slice {}: owner gone, released", s.slice_id);
                    st.events().count_released_by_reclaim();
                    self.usages.remove(&s.slice_id);
                    self.owners.remove(&s.slice_id);
                    report.released.push(s.slice_id);
                }
                other => tracing::warn!("slice {}: release failed: {other:?}", s.slice_id),
            }
        }
        report
    }

    /// Runs forever, one tick per period.
    pub fn run(mut self) {
        loop {
            self.tick();
            std::thread::sleep(self.cfg.period);
        }
    }
}

/// Starts the loop on its own thread.
pub fn spawn(
    state: Arc<Mutex<State>>,
    cfg: ReclaimConfig,
) -> io::Result<std::thread::JoinHandle<()>> {
    std::thread::Builder::new()
        .name("reclaim".into())
        .spawn(move || Reclaimer::new(state, cfg).run())
}
