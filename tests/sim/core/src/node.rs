//! The node: opening / initialising the shared state file, the process table, memory accounting.

use std::fs::{File, OpenOptions};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Condvar, Mutex, OnceLock};

use crate::config::{DeviceSpec, SimConfig};
use crate::error::SimError;
use crate::layout as L;
use crate::liveness::{self, LockFile, Owner};
use crate::procs::{self_identity, RobustLock};
use crate::shm::Shm;
use crate::trace::Trace;

/// A live process holding a context or memory on a device.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProcessUsage {
    /// Pid in the reader's pid namespace (processes the reader cannot see are not listed).
    pub pid: u32,
    /// Bytes charged to it on the device (context overheads included).
    pub used_bytes: u64,
}

/// Per-device, process-local FIFO of threads waiting for the shared engine.
#[derive(Default)]
pub(crate) struct LocalQueue {
    pub(crate) pid: u32,
    pub(crate) next: u64,
    pub(crate) serving: u64,
}

/// The simulated node as seen from this process: configuration plus the shared mapping.
pub struct Node {
    pub(crate) cfg: SimConfig,
    pub(crate) shm: Shm,
    /// Keeps the shared `flock` that marks the state file as in use.
    _file: File,
    /// `(st_dev, st_ino)` of the state file: this process's claim on it is shared by every
    /// `Node` of the process on the same file.
    key: (u64, u64),
    pub(crate) queues: Vec<(Mutex<LocalQueue>, Condvar)>,
    /// `GPUSLICE_SIM_TRACE`'s file, when set.
    pub(crate) trace: Option<Trace>,
}

impl std::fmt::Debug for Node {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Node")
            .field("state", &self.cfg.state_path)
            .field("devices", &self.cfg.devices.len())
            .finish()
    }
}

fn flock(f: &File, op: libc::c_int) -> std::io::Result<()> {
    loop {
        // SAFETY: `f` is an open file descriptor owned by `f` for the duration of the call.
        let r = unsafe { libc::flock(f.as_raw_fd(), op) };
        if r == 0 {
            return Ok(());
        }
        let e = std::io::Error::last_os_error();
        if e.kind() != std::io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

fn header_matches(shm: &Shm, fp: u64) -> bool {
    shm.u64(L::H_MAGIC).load(Ordering::Acquire) == L::MAGIC
        && shm.u64(L::H_VERSION).load(Ordering::Relaxed) == L::VERSION
        && shm.u64(L::H_FINGERPRINT).load(Ordering::Relaxed) == fp
        && shm.u64(L::H_SIZE).load(Ordering::Relaxed) == L::FILE_SIZE as u64
}

static GLOBAL: OnceLock<Result<Node, SimError>> = OnceLock::new();

impl Node {
    /// The process-wide node, configured from the environment on first use.
    pub fn global() -> Result<&'static Node, SimError> {
        match GLOBAL.get_or_init(|| SimConfig::from_env().and_then(Node::open)) {
            Ok(n) => Ok(n),
            Err(e) => Err(e.clone()),
        }
    }

    /// Creates or attaches the shared state file named by `cfg.state_path`.
    ///
    /// Every attached process holds a shared `flock` on the file for as long as its `Node`
    /// lives (released by the kernel when it dies). Initialisation happens only under an
    /// exclusive lock, so it is race-free, and a file with another configuration is
    /// re-initialised only when no live process has it attached.
    pub fn open(cfg: SimConfig) -> Result<Node, SimError> {
        cfg.validate()?;
        let path = &cfg.state_path;
        let st = |what: &str, e: std::io::Error| {
            SimError::State(format!("{}: {what}: {e}", path.display()))
        };
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .open(path)
            .map_err(|e| st("open", e))?;
        let fp = cfg.fingerprint();
        let shm = match flock(&file, libc::LOCK_EX | libc::LOCK_NB) {
            Ok(()) => {
                // Nobody has the file attached: validate or (re-)initialise it.
                let len = file.metadata().map_err(|e| st("stat", e))?.len();
                let existing = if len == L::FILE_SIZE as u64 {
                    let m = Shm::map(file.as_raw_fd(), L::FILE_SIZE).map_err(|e| st("mmap", e))?;
                    header_matches(&m, fp).then_some(m)
                } else {
                    None
                };
                let shm = match existing {
                    Some(m) => m,
                    None => {
                        file.set_len(0).map_err(|e| st("truncate", e))?;
                        file.set_len(L::FILE_SIZE as u64)
                            .map_err(|e| st("truncate", e))?;
                        let m =
                            Shm::map(file.as_raw_fd(), L::FILE_SIZE).map_err(|e| st("mmap", e))?;
                        m.u64(L::H_VERSION).store(L::VERSION, Ordering::Relaxed);
                        m.u64(L::H_FINGERPRINT).store(fp, Ordering::Relaxed);
                        m.u64(L::H_SIZE)
                            .store(L::FILE_SIZE as u64, Ordering::Relaxed);
                        m.u64(L::H_DEVICES)
                            .store(cfg.devices.len() as u64, Ordering::Relaxed);
                        m.u64(L::H_SLOTS)
                            .store(L::MAX_SLOTS as u64, Ordering::Relaxed);
                        m.u64(L::H_MAGIC).store(L::MAGIC, Ordering::Release);
                        m
                    }
                };
                // Downgrade to shared: we stay attached.
                flock(&file, libc::LOCK_SH).map_err(|e| st("flock", e))?;
                shm
            }
            Err(e) if e.raw_os_error() == Some(libc::EWOULDBLOCK) => {
                // Others have it attached (or are initialising it): wait for a shared lock.
                flock(&file, libc::LOCK_SH).map_err(|e| st("flock", e))?;
                let len = file.metadata().map_err(|e| st("stat", e))?.len();
                let m = (len == L::FILE_SIZE as u64)
                    .then(|| Shm::map(file.as_raw_fd(), L::FILE_SIZE))
                    .transpose()
                    .map_err(|e| st("mmap", e))?;
                match m {
                    Some(m) if header_matches(&m, fp) => m,
                    _ => {
                        return Err(SimError::State(format!(
                            "{} is in use by live processes with a different simulator \
                             configuration (or layout); stop them or set GPUSLICE_SIM_STATE \
                             to another file",
                            path.display()
                        )))
                    }
                }
            }
            Err(e) => return Err(st("flock", e)),
        };
        let queues = cfg
            .devices
            .iter()
            .map(|_| (Mutex::new(LocalQueue::default()), Condvar::new()))
            .collect();
        let meta = file.metadata().map_err(|e| st("stat", e))?;
        let trace = cfg.trace.as_deref().map(Trace::open).transpose()?;
        Ok(Node {
            cfg,
            shm,
            _file: file,
            key: (meta.dev(), meta.ino()),
            queues,
            trace,
        })
    }

    /// The configuration this node was opened with.
    pub fn config(&self) -> &SimConfig {
        &self.cfg
    }

    /// Number of devices.
    pub fn device_count(&self) -> u32 {
        self.cfg.devices.len() as u32
    }

    /// Description of device `dev`.
    pub fn device(&self, dev: u32) -> Result<&DeviceSpec, SimError> {
        self.cfg
            .devices
            .get(dev as usize)
            .ok_or(SimError::InvalidDevice(dev))
    }

    pub(crate) fn check_dev(&self, dev: u32) -> Result<usize, SimError> {
        self.device(dev).map(|_| dev as usize)
    }

    // ---- process table ----

    fn tag_of(pid: u32) -> u64 {
        (L::SLOT_LIVE << 32) | u64::from(pid)
    }

    /// This process's claim on the state file (its lock description and slot), made anew in a
    /// forked child: the inherited description is the parent's and is closed here.
    fn claim(&self) -> Result<(Arc<LockFile>, Option<SlotClaim>), SimError> {
        let (pid, _) = self_identity();
        let mut claims = CLAIMS.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(c) = claims.iter().find(|c| c.key == self.key && c.pid == pid) {
            return Ok((c.lock.clone(), c.slot));
        }
        claims.retain(|c| c.key != self.key);
        let lock = LockFile::open(&self.cfg.state_path).map_err(|e| {
            SimError::State(format!("{}: open: {e}", self.cfg.state_path.display()))
        })?;
        let lock = Arc::new(lock);
        claims.push(Claim {
            key: self.key,
            pid,
            lock: lock.clone(),
            slot: None,
        });
        Ok((lock, None))
    }

    fn lock_file(&self) -> Result<Arc<LockFile>, SimError> {
        self.claim().map(|(l, _)| l)
    }

    /// The calling process's slot, claimed on first use (a forked child claims its own).
    pub(crate) fn my_slot(&self) -> Result<usize, SimError> {
        let (pid, start) = self_identity();
        let (lock, slot) = self.claim()?;
        if let Some((s, gen)) = slot {
            // Still ours unless somebody wrote over our identity (the file is writable by every
            // tenant that maps it): then claim again.
            if self.shm.u64(L::slot(s, L::S_TAG)).load(Ordering::Acquire) == Self::tag_of(pid)
                && self.shm.u64(L::slot(s, L::S_START)).load(Ordering::Relaxed) == start
                && self.shm.u64(L::slot(s, L::S_GEN)).load(Ordering::Relaxed) == gen
            {
                return Ok(s);
            }
        }
        let claimed = self.claim_slot(&lock, pid, start)?;
        let mut claims = CLAIMS.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(c) = claims
            .iter_mut()
            .find(|c| c.key == self.key && c.pid == pid)
        {
            if let Some((old, _)) = c.slot.replace(claimed) {
                if old != claimed.0 {
                    lock.unlock(old);
                }
            }
        }
        Ok(claimed.0)
    }

    /// Takes the first slot whose lock byte nobody holds; a slot still tagged there belonged to
    /// a process that died and nobody reaped yet, so its holdings are released first.
    fn claim_slot(&self, lock: &LockFile, pid: u32, start: u64) -> Result<(usize, u64), SimError> {
        let pid_ns = liveness::my_pid_namespace();
        // Another copy of this library in the process (libcuda and libnvidia-ml each carry one)
        // may have claimed already: one process is one slot, as one process is one driver
        // client. No other process can have our pid, start and namespace while we live.
        let me = Owner { pid, start, pid_ns };
        for (s, p) in self.tagged_slots() {
            if p == pid && self.owner_of(s, p) == me {
                let _ = lock.try_lock(s);
                let _ = lock.hold_owner(s);
                let gen = self.shm.u64(L::slot(s, L::S_GEN)).load(Ordering::Acquire);
                return Ok((s, gen));
            }
        }
        for s in 0..L::MAX_SLOTS {
            match lock.try_lock(s) {
                Ok(true) => {}
                Ok(false) => continue,
                Err(e) => {
                    return Err(SimError::State(format!(
                        "{}: slot lock: {e}",
                        self.cfg.state_path.display()
                    )))
                }
            }
            let gen = self
                .shm
                .u64(L::slot(s, L::S_GEN))
                .fetch_add(1, Ordering::AcqRel)
                .wrapping_add(1);
            if self.shm.u64(L::slot(s, L::S_TAG)).load(Ordering::Acquire) != 0 {
                self.release_holdings(s, (gen, s));
            }
            self.clear_slot_devices(s);
            self.shm
                .u64(L::slot(s, L::S_START))
                .store(start, Ordering::Relaxed);
            self.shm
                .u64(L::slot(s, L::S_PIDNS))
                .store(pid_ns, Ordering::Relaxed);
            // Only after the dead owner's holdings are gone: until then its byte stays free,
            // so readers leave those holdings out (see `owner_alive`).
            lock.hold_owner(s).map_err(|e| {
                SimError::State(format!(
                    "{}: owner lock: {e}",
                    self.cfg.state_path.display()
                ))
            })?;
            self.shm
                .u64(L::slot(s, L::S_TAG))
                .store(Self::tag_of(pid), Ordering::Release);
            self.shm
                .u64(L::H_SLOT_HWM)
                .fetch_max(s as u64 + 1, Ordering::AcqRel);
            return Ok((s, gen));
        }
        Err(SimError::ProcessTableFull(L::MAX_SLOTS))
    }

    fn clear_slot_devices(&self, s: usize) {
        for d in 0..self.cfg.devices.len() {
            for f in [
                L::SD_USED,
                L::SD_CTX,
                L::SD_WANT_READY,
                L::SD_WANT_DUR,
                L::SD_GRANT_START,
                L::SD_GRANT_END,
                L::SD_BUSY,
                L::SD_KERNELS,
                L::SD_REM,
                L::SD_STARTED,
            ] {
                self.shm.u64(L::sdev(s, d, f)).store(0, Ordering::Relaxed);
            }
            for b in 0..L::BUCKETS {
                self.shm
                    .u64(L::sdev(s, d, L::SD_BUCKETS + b * 16))
                    .store(0, Ordering::Relaxed);
            }
        }
    }

    /// Scan bound of the slot table (garbage-proof).
    pub(crate) fn slot_hwm(&self) -> usize {
        (self.shm.u64(L::H_SLOT_HWM).load(Ordering::Acquire) as usize).min(L::MAX_SLOTS)
    }

    /// `(slot, pid)` of every live-tagged slot (not checked for liveness; the pid is the owner's
    /// in its own namespace).
    pub(crate) fn tagged_slots(&self) -> Vec<(usize, u32)> {
        (0..self.slot_hwm())
            .filter_map(|s| {
                let tag = self.shm.u64(L::slot(s, L::S_TAG)).load(Ordering::Acquire);
                (tag >> 32 == L::SLOT_LIVE).then_some((s, tag as u32))
            })
            .collect()
    }

    /// The owner recorded in slot `s` (tagged with `pid`).
    fn owner_of(&self, s: usize, pid: u32) -> Owner {
        Owner {
            pid,
            start: self.shm.u64(L::slot(s, L::S_START)).load(Ordering::Relaxed),
            pid_ns: self.shm.u64(L::slot(s, L::S_PIDNS)).load(Ordering::Relaxed),
        }
    }

    /// Live-tagged slots with the pid their owner has in the calling process's namespace;
    /// owners the caller cannot see are left out (the driver names processes by the reader's
    /// pids, and a sibling container's processes have none there).
    pub(crate) fn visible_slots(&self) -> Vec<(usize, u32)> {
        self.tagged_slots()
            .into_iter()
            .filter_map(|(s, pid)| {
                liveness::pid_in_my_namespace(self.owner_of(s, pid)).map(|p| (s, p))
            })
            .collect()
    }

    /// Whether the process owning slot `s` is alive: it is ours, or another description holds
    /// its lock byte.
    pub(crate) fn slot_alive(&self, s: usize) -> bool {
        match self.claim() {
            Ok((_, Some((mine, _)))) if mine == s => true,
            Ok((lock, _)) => lock.held_by_other(s),
            Err(_) => true,
        }
    }

    /// Whether slot `s`'s owner still has its descriptors open (it is ours, or another
    /// description holds its owner byte). Unlike [`Node::slot_alive`] this never mistakes a
    /// reaper or claimant working on a dead owner's slot for the owner: it is what the driver
    /// reports from. A reaper's lock byte still decides who may touch the slot.
    fn owner_alive(&self, s: usize) -> bool {
        match self.claim() {
            Ok((_, Some((mine, _)))) if mine == s => true,
            Ok((lock, _)) => lock.owner_held_by_other(s),
            Err(_) => true,
        }
    }

    /// Bytes on device index `d` that slots of owners already gone still hold, not yet
    /// released by a reaper (one may be working on them, or descheduled halfway).
    fn held_by_gone(&self, d: usize) -> u64 {
        self.tagged_slots()
            .into_iter()
            .filter(|&(s, _)| !self.owner_alive(s))
            .map(|(s, _)| {
                self.shm
                    .u64(L::sdev(s, d, L::SD_USED))
                    .load(Ordering::Acquire)
            })
            .fold(0, u64::saturating_add)
    }

    /// The owner word naming the calling process in a [`RobustLock`]: its slot and that slot's
    /// claim generation. A process without a slot (table full) gets a word that is never stolen.
    fn owner_word(&self) -> u64 {
        match self.my_slot() {
            Ok(s) => {
                let gen = self.shm.u64(L::slot(s, L::S_GEN)).load(Ordering::Relaxed);
                ((gen & 0xffff_ffff) << 32) | (1 << 31) | (s as u64 + 1)
            }
            Err(_) => 1 << 31,
        }
    }

    /// Whether the owner named by a [`RobustLock`] word is alive.
    pub(crate) fn word_owner_alive(&self, word: u64) -> bool {
        let slot = (word & 0x7fff_ffff) as usize;
        if slot == 0 {
            return true;
        }
        let s = slot - 1;
        if s >= L::MAX_SLOTS {
            return false;
        }
        let gen = self.shm.u64(L::slot(s, L::S_GEN)).load(Ordering::Relaxed);
        (gen & 0xffff_ffff) == word >> 32 && self.slot_alive(s)
    }

    /// Takes the robust lock at byte offset `off` of the state file.
    pub(crate) fn lock(&self, off: usize) -> RobustLock<'_> {
        RobustLock::acquire(self.shm.u64(off), self.owner_word(), |w| {
            self.word_owner_alive(w)
        })
    }

    /// Releases everything slot `s` holds (its owner is dead and the caller holds its lock
    /// byte), as the driver does at process exit. `me` is the `(gen, slot)` the caller acts as
    /// when the caller is claiming `s` itself (its own slot is not recorded yet).
    fn release_holdings(&self, s: usize, me: (u64, usize)) {
        let word = ((me.0 & 0xffff_ffff) << 32) | (1 << 31) | (me.1 as u64 + 1);
        for d in 0..self.cfg.devices.len() {
            // One step (`memtxn`): a reader never sees the slot zeroed with the device's total
            // not yet lowered, and a reaper killed halfway leaves it for the next to finish.
            let _ = self.mem_txn(d, s, Some(word), |dev, held| {
                Ok::<_, ()>((dev.saturating_sub(held), 0, ()))
            });
            self.shm
                .u64(L::sdev(s, d, L::SD_CTX))
                .store(0, Ordering::Relaxed);
            let _e = RobustLock::acquire(self.shm.u64(L::dev(d, L::D_ENGINE_LOCK)), word, |w| {
                self.word_owner_alive(w)
            });
            self.shm
                .u64(L::sdev(s, d, L::SD_WANT_READY))
                .store(0, Ordering::Relaxed);
        }
    }

    /// Releases everything dead processes held, like the driver does at process exit.
    /// Returns how many slots were reclaimed.
    pub fn reap_dead(&self) -> usize {
        // A reaper has a slot of its own (so it can name itself as a lock owner); without one
        // (table full) it acts as the dead slot it holds.
        let me = self.my_slot().ok();
        let Ok(lock) = self.lock_file() else {
            return 0;
        };
        let mut n = 0;
        for (s, pid) in self.tagged_slots() {
            if Some(s) == me || lock.held_by_other(s) {
                continue;
            }
            // Taking the byte makes us the only one judging this slot until we let go.
            if !matches!(lock.try_lock(s), Ok(true)) {
                continue;
            }
            if self.shm.u64(L::slot(s, L::S_TAG)).load(Ordering::Acquire) == Self::tag_of(pid) {
                let me = me.unwrap_or(s);
                let gen = self.shm.u64(L::slot(me, L::S_GEN)).load(Ordering::Relaxed);
                self.release_holdings(s, (gen, me));
                self.shm
                    .u64(L::slot(s, L::S_TAG))
                    .store(0, Ordering::Release);
                n += 1;
            }
            lock.unlock(s);
        }
        n
    }

    // ---- memory ----

    /// Device capacity in bytes (0 for an invalid index).
    pub fn mem_total(&self, dev: u32) -> u64 {
        self.device(dev).map(|d| d.total_mem).unwrap_or(0)
    }

    /// Bytes in use on `dev` by all live processes, context overheads included. A process
    /// whose descriptors have closed holds nothing, as with the driver, even while a reaper is
    /// still releasing its slot: the device's total and what gone owners still hold are read
    /// under the device's release lock, which a reaper holds across its two steps.
    pub fn mem_used(&self, dev: u32) -> u64 {
        let Ok(d) = self.check_dev(dev) else { return 0 };
        self.reap_dead();
        let _mem = self.mem_lock(d, None);
        let gone = self.held_by_gone(d);
        let used = self.shm.u64(L::dev(d, L::D_USED)).load(Ordering::Acquire);
        used.saturating_sub(gone)
    }

    /// Bytes charged to the calling process on `dev`.
    pub fn mem_used_by_me(&self, dev: u32) -> u64 {
        let Ok(d) = self.check_dev(dev) else { return 0 };
        match self.my_slot() {
            Ok(s) => self
                .shm
                .u64(L::sdev(s, d, L::SD_USED))
                .load(Ordering::Acquire),
            Err(_) => 0,
        }
    }

    /// Charges `bytes` on `dev` to the calling process; atomic across processes, so concurrent
    /// callers can never together exceed the capacity. Exact: no rounding here (the simulated
    /// driver applies `alloc_granularity` itself).
    pub fn mem_alloc(&self, dev: u32, bytes: u64) -> Result<(), SimError> {
        let d = self.check_dev(dev)?;
        let s = self.my_slot()?;
        if bytes == 0 {
            return Ok(());
        }
        let total = self.mem_total(dev);
        for attempt in 0..2 {
            // The device's total and this slot's figure in one step (`memtxn`).
            let r = self.mem_txn(d, s, None, |cur, mine| {
                match cur.checked_add(bytes).filter(|&n| n <= total) {
                    Some(n) => Ok((n, mine.saturating_add(bytes), ())),
                    None => Err(cur),
                }
            });
            match r {
                Ok(()) => return Ok(()),
                Err(cur) if attempt == 1 || self.reap_dead() == 0 => {
                    return Err(SimError::OutOfMemory {
                        dev,
                        requested: bytes,
                        free: total.saturating_sub(cur),
                        total,
                    })
                }
                Err(_) => {}
            }
        }
        unreachable_oom(dev, bytes, total)
    }

    /// Returns `bytes` on `dev` charged to the calling process (clamped to what it holds).
    pub fn mem_free(&self, dev: u32, bytes: u64) {
        let Ok(d) = self.check_dev(dev) else { return };
        let Ok(s) = self.my_slot() else { return };
        let _ = self.mem_txn(d, s, None, |dev, mine| {
            let taken = mine.min(bytes);
            Ok::<_, ()>((dev.saturating_sub(taken), mine - taken, ()))
        });
    }

    /// A context was created on `dev` by this process: charge the context overhead.
    pub fn ctx_attach(&self, dev: u32) -> Result<(), SimError> {
        let d = self.check_dev(dev)?;
        let s = self.my_slot()?;
        self.mem_alloc(dev, self.cfg.ctx_overhead_of(d))?;
        self.shm
            .u64(L::sdev(s, d, L::SD_CTX))
            .fetch_add(1, Ordering::AcqRel);
        Ok(())
    }

    /// A context of this process on `dev` was destroyed: return its overhead.
    pub fn ctx_detach(&self, dev: u32) {
        let Ok(d) = self.check_dev(dev) else { return };
        let Ok(s) = self.my_slot() else { return };
        let ctx = self.shm.u64(L::sdev(s, d, L::SD_CTX));
        if ctx
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |c| c.checked_sub(1))
            .is_ok()
        {
            self.mem_free(dev, self.cfg.ctx_overhead_of(d));
        }
    }

    /// A context of this process on `dev` loaded a module lazily (its first launch): charges
    /// the device's module overhead, outside any allocation, as the driver's lazy loading grows
    /// a process. Returns the bytes charged, for [`Node::module_unload`].
    pub fn module_load(&self, dev: u32) -> Result<u64, SimError> {
        let d = self.check_dev(dev)?;
        let bytes = self.cfg.module_overhead_of(d);
        self.mem_alloc(dev, bytes)?;
        Ok(bytes)
    }

    /// Returns what [`Node::module_load`] charged (module unloaded, or its context destroyed).
    pub fn module_unload(&self, dev: u32, bytes: u64) {
        self.mem_free(dev, bytes);
    }

    /// Live processes holding a context or memory on `dev`, with their usage.
    pub fn processes(&self, dev: u32) -> Vec<ProcessUsage> {
        let Ok(d) = self.check_dev(dev) else {
            return Vec::new();
        };
        self.reap_dead();
        self.visible_slots()
            .into_iter()
            .filter(|&(s, _)| self.owner_alive(s))
            .filter_map(|(s, pid)| {
                let used = self
                    .shm
                    .u64(L::sdev(s, d, L::SD_USED))
                    .load(Ordering::Acquire);
                let ctx = self
                    .shm
                    .u64(L::sdev(s, d, L::SD_CTX))
                    .load(Ordering::Acquire);
                (used > 0 || ctx > 0).then_some(ProcessUsage {
                    pid,
                    used_bytes: used,
                })
            })
            .collect()
    }
}

/// One process's claim on one state file.
struct Claim {
    key: (u64, u64),
    pid: u32,
    lock: Arc<LockFile>,
    slot: Option<SlotClaim>,
}

/// `(slot, generation)` of a claimed slot.
type SlotClaim = (usize, u64);

static CLAIMS: Mutex<Vec<Claim>> = Mutex::new(Vec::new());

fn unreachable_oom(dev: u32, bytes: u64, total: u64) -> Result<(), SimError> {
    Err(SimError::OutOfMemory {
        dev,
        requested: bytes,
        free: 0,
        total,
    })
}
