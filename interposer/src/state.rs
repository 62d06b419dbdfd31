//! Lazily initialised process state: which mode (pass-through, slice, standalone), the mapped
//! slice, this process's usage record, the device map and the table of live allocations.
//! Nothing here runs before the first wrapped CUDA/NVML call.

use crate::log::Level;
use gpuslice_cuda_abi::result::*;
use gpuslice_cuda_abi::types::CUdevice;
use gpuslice_region::{layout, MemQuantity, Slice, UNCAPPED};
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering::*};
use std::sync::{Mutex, OnceLock};

const NO_RECORD: usize = usize::MAX;
const MAX_ORDINALS: usize = 64;
/// Default charge granularity (the driver's large-page size).
pub const GRANULARITY: u64 = 2 << 20;

/// The memory gate: the enforcing state of this process (absent in pass-through mode) — the
/// slice, its caps, this process's charges and tables. (`mod gate` is the launch gate.)
pub struct MemoryGate {
    /// The slice files.
    pub slice: Slice,
    /// Standalone mode: the requested cap per ordinal (`None` entry = uncapped).
    standalone: Option<Vec<Option<MemQuantity>>>,
    record: AtomicUsize,
    record_pid: AtomicU32,
    /// ordinal → slice entry + 1 (0 = unknown, u32::MAX = not in the slice).
    devmap: [AtomicU32; MAX_ORDINALS],
    /// ordinal → resolved cap (standalone percentages need the device total); 0 = unknown.
    capcache: [AtomicU64; MAX_ORDINALS],
    /// Live allocations: address/handle → (entry, charged bytes).
    pub allocs: Mutex<HashMap<u64, (usize, u64)>>,
    /// Pools: handle → what we charge for it (its last seen reserved size).
    pub pools: Mutex<HashMap<usize, PoolCharge>>,
    /// Graph memory (allocation nodes, launches, frees): see `crate::graph`.
    pub graphs: Mutex<crate::graphmem::Graphs>,
    /// Bytes this process has charged per slice entry, in its own memory: a process is never
    /// let past the cap on its own, whatever the tenant-writable `usage` file says.
    mine: [AtomicU64; layout::MAX_DEVICES],
    /// Bytes this process has charged per slice entry for its CUDA context (0 = none yet).
    ctx: [AtomicU64; layout::MAX_DEVICES],
}

/// What a memory pool is charged: its device and last seen reserved size.
#[derive(Clone, Copy, Debug)]
pub struct PoolCharge {
    /// Slice entry of the pool's device.
    pub entry: usize,
    /// CUDA ordinal of the pool's device.
    pub ordinal: CUdevice,
    /// Bytes charged (= `CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT` when last seen).
    pub charged: u64,
}

static STATE: OnceLock<Option<MemoryGate>> = OnceLock::new();

/// Set (once, at initialisation) when this process was placed in a slice — the runtime set
/// `GPUSLICE_SLICE_DIR` — that it cannot attach to, and no request of its own environment
/// applies: its CUDA contexts are refused ([`refused`]) rather than run without the slice's caps.
static REFUSED: OnceLock<()> = OnceLock::new();

/// The gate, initialising on first use; `None` = pass-through (or [`refused`]).
pub fn memory_gate() -> Option<&'static MemoryGate> {
    STATE.get_or_init(init).as_ref()
}

/// Whether this process must create no CUDA context: it belongs to a slice it cannot attach to
/// (its directory is missing, garbled or not the node's). Initialises the state on first use;
/// the reason was logged then.
pub fn refused() -> bool {
    let _ = memory_gate();
    REFUSED.get().is_some()
}

/// Fails closed for the slice directory `dir` named by `GPUSLICE_SLICE_DIR`: logs `why` once and
/// marks the process [`refused`].
fn refuse(dir: &std::path::Path, why: &str) -> Option<MemoryGate> {
    crate::log!(
        Level::Error,
        "GPUSLICE_SLICE_DIR={}: {why}; this process belongs to a slice it cannot attach to, so \
         its CUDA contexts are refused (CUDA_ERROR_NOT_PERMITTED) rather than run without the \
         slice's caps",
        dir.display()
    );
    let _ = REFUSED.set(());
    None
}

fn env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.trim().is_empty())
}

fn init() -> Option<MemoryGate> {
    let explicit = env(layout::SLICE_DIR_ENV);
    let dir = PathBuf::from(
        explicit
            .clone()
            .unwrap_or_else(|| layout::CONTAINER_SLICE_DIR.into()),
    );
    if dir.join(layout::LIMITS_FILE).exists() {
        if let Err(why) = trusted(&dir) {
            // Limits the tenant could have written are no limits: what the environment asks
            // for still applies (standalone); else a process the runtime placed in a slice
            // fails closed, and any other runs unenforced here (the backstop is not).
            let gate = standalone();
            if gate.is_none() && explicit.is_some() {
                return refuse(&dir, &format!("the slice directory is not trusted ({why})"));
            }
            crate::log!(
                Level::Error,
                "slice directory {} is not trusted ({why}); its limits are ignored{}",
                dir.display(),
                if gate.is_some() {
                    ", enforcing the environment's request instead"
                } else {
                    " and memory caps are NOT enforced by this process"
                }
            );
            return gate;
        }
        match Slice::open(&dir) {
            Ok(slice) => {
                crate::log!(Level::Info, "enforcing slice {}", dir.display());
                return Some(MemoryGate::new(slice, None));
            }
            Err(e) => {
                if let Some(g) = private_usage(&dir, &e) {
                    return Some(g);
                }
                if explicit.is_some() {
                    return refuse(&dir, &format!("the slice directory is unusable ({e})"));
                }
                crate::log!(
                    Level::Error,
                    "slice directory {} is unusable ({e}); memory caps are NOT enforced",
                    dir.display()
                );
                return None;
            }
        }
    } else if explicit.is_some() {
        // A request in the environment still applies (standalone mode): say which case it is.
        let gate = standalone();
        if gate.is_some() {
            crate::log!(
                Level::Warn,
                "GPUSLICE_SLICE_DIR={} has no slice files; enforcing the environment's request instead",
                dir.display()
            );
        } else {
            return refuse(
                &dir,
                "no slice files there and the environment asks for no cap",
            );
        }
        return gate;
    }
    standalone()
}

/// Whether the limits in `dir` could only have been written by the node's runtime: the directory,
/// `limits` and `lease` are each on a read-only mount (what the runtime and `gpuslice run` make),
/// or owned by root and writable by nobody else (no group or other write bit). A directory the
/// tenant made (owned by its uid) or could rewrite (group/other-writable) is refused.
pub fn trusted(dir: &std::path::Path) -> Result<(), String> {
    use std::os::unix::fs::MetadataExt;
    let read_only_mount = |p: &std::path::Path| -> bool {
        let Ok(c) = std::ffi::CString::new(p.as_os_str().as_encoded_bytes()) else {
            return false;
        };
        // SAFETY: statvfs is plain data: all zeroes is a valid value.
        let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
        // SAFETY: statvfs writes one struct into `st`; `c` is NUL-terminated.
        let ok = unsafe { libc::statvfs(c.as_ptr(), &mut st) } == 0;
        ok && st.f_flag & libc::ST_RDONLY != 0
    };
    for p in [
        dir.to_path_buf(),
        dir.join(layout::LIMITS_FILE),
        dir.join(layout::LEASE_FILE),
    ] {
        let m = std::fs::metadata(&p).map_err(|e| format!("{}: {e}", p.display()))?;
        if read_only_mount(&p) {
            continue;
        }
        if m.uid() != 0 {
            return Err(format!(
                "{} is owned by uid {}, not root",
                p.display(),
                m.uid()
            ));
        }
        if m.mode() & 0o022 != 0 {
            return Err(format!(
                "{} is writable by others (mode {:o})",
                p.display(),
                m.mode() & 0o7777
            ));
        }
    }
    Ok(())
}

/// The slice's read-only `limits` and `lease` are valid but its tenant-writable `usage` is not
/// (the tenant wrote over it): rather than run unenforced, this process (and the children it
/// forks) is held to the slice's caps through a private usage region — anonymous in effect: its
/// files are unlinked as soon as they are mapped.
fn private_usage(dir: &std::path::Path, why: &gpuslice_region::RegionError) -> Option<MemoryGate> {
    let limits = gpuslice_region::Limits::open(dir).ok()?;
    let lease = gpuslice_region::Lease::open(dir).ok()?;
    let start = gpuslice_region::liveness::self_start_time()?;
    // SAFETY: getuid has no preconditions.
    let uid = unsafe { libc::getuid() };
    let tmp = PathBuf::from(format!(
        "/dev/shm/gpuslice-{uid}-private-{}-{start}",
        std::process::id()
    ));
    let spec = gpuslice_region::SliceSpec {
        devices: limits.devices(),
        flags: layout::LIMITS_FLAG_STANDALONE,
    };
    let usage = std::fs::create_dir(&tmp)
        .ok()
        .and_then(|()| gpuslice_region::create_slice(&tmp, &spec, true).ok())
        .and_then(|_| gpuslice_region::Usage::open(&tmp, limits.device_count()).ok());
    let _ = std::fs::remove_dir_all(&tmp);
    let usage = usage?;
    crate::log!(
        Level::Error,
        "slice directory {}: damaged usage file ({why}); this process is held to the slice's \
         caps on its own",
        dir.display()
    );
    Some(MemoryGate::new(
        Slice {
            dir: dir.to_path_buf(),
            limits,
            lease,
            usage,
        },
        None,
    ))
}

fn standalone() -> Option<MemoryGate> {
    let (var, text, q) = if let Some(v) = env("GPUSLICE_MEMORY") {
        let q = gpuslice_region::parse_quantity(&v);
        ("GPUSLICE_MEMORY", v, Some(q))
    } else if let Some(v) = env("CUDA_DEVICE_MEMORY_LIMIT") {
        let q = gpuslice_region::parse_hami_limit(&v);
        ("CUDA_DEVICE_MEMORY_LIMIT", v, Some(q))
    } else {
        let any =
            (0..MAX_ORDINALS).any(|i| env(&format!("CUDA_DEVICE_MEMORY_LIMIT_{i}")).is_some());
        if !any {
            return None;
        }
        ("CUDA_DEVICE_MEMORY_LIMIT_<n>", String::new(), None)
    };
    let default = match q {
        Some(Ok(q)) => Some(q),
        Some(Err(e)) => {
            crate::log!(
                Level::Error,
                "{var}={text}: {e}; memory caps are NOT enforced"
            );
            return None;
        }
        None => None,
    };
    let mut caps = vec![default; MAX_ORDINALS];
    for (i, c) in caps.iter_mut().enumerate() {
        if let Some(v) = env(&format!("CUDA_DEVICE_MEMORY_LIMIT_{i}")) {
            match gpuslice_region::parse_hami_limit(&v) {
                Ok(q) => *c = Some(q),
                Err(e) => crate::log!(Level::Error, "CUDA_DEVICE_MEMORY_LIMIT_{i}={v}: {e}"),
            }
        }
    }
    let id = env("GPUSLICE_STANDALONE_ID").unwrap_or_else(crate::ctor::own_id);
    // SAFETY: getuid has no preconditions.
    let uid = unsafe { libc::getuid() };
    let dir = PathBuf::from(format!("/dev/shm/gpuslice-{uid}-{id}"));
    let spec = gpuslice_region::SliceSpec {
        devices: (0u32..)
            .take(layout::MAX_DEVICES)
            .map(|i| gpuslice_region::DeviceSpec {
                host_index: i,
                ..Default::default()
            })
            .collect(),
        flags: layout::LIMITS_FLAG_STANDALONE,
    };
    let made = std::fs::create_dir(&dir).is_ok();
    if let Err(e) = gpuslice_region::create_slice(&dir, &spec, false) {
        crate::log!(
            Level::Error,
            "cannot create {}: {e}; memory caps are NOT enforced",
            dir.display()
        );
        return None;
    }
    match Slice::open(&dir) {
        Ok(slice) => {
            crate::log!(
                Level::Info,
                "standalone {var}={text} shared through {}",
                dir.display()
            );
            if made && crate::ctor::is_top(&id) {
                crate::ctor::remove_at_exit(dir);
            }
            Some(MemoryGate::new(slice, Some(caps)))
        }
        Err(e) => {
            crate::log!(
                Level::Error,
                "cannot open {}: {e}; memory caps are NOT enforced",
                dir.display()
            );
            None
        }
    }
}

impl MemoryGate {
    fn new(slice: Slice, standalone: Option<Vec<Option<MemQuantity>>>) -> MemoryGate {
        // SAFETY: registering plain extern "C" handlers; they only touch atomics.
        unsafe {
            libc::pthread_atfork(None, None, Some(after_fork_child));
            libc::atexit(at_exit);
        }
        MemoryGate {
            slice,
            standalone,
            record: AtomicUsize::new(NO_RECORD),
            record_pid: AtomicU32::new(0),
            devmap: [const { AtomicU32::new(0) }; MAX_ORDINALS],
            capcache: [const { AtomicU64::new(0) }; MAX_ORDINALS],
            allocs: Mutex::new(HashMap::new()),
            pools: Mutex::new(HashMap::new()),
            graphs: Mutex::new(crate::graphmem::Graphs::default()),
            mine: [const { AtomicU64::new(0) }; layout::MAX_DEVICES],
            ctx: [const { AtomicU64::new(0) }; layout::MAX_DEVICES],
        }
    }

    /// This process's record, claimed on first use (and again in a forked child).
    fn me(&self) -> Option<usize> {
        let r = self.record.load(Acquire);
        if r != NO_RECORD {
            return Some(r);
        }
        let pid = std::process::id();
        let start = gpuslice_region::liveness::self_start_time()?;
        match self.slice.usage.claim(pid, start) {
            Ok(r) => {
                self.record_pid.store(pid, Release);
                self.record.store(r, Release);
                Some(r)
            }
            Err(e) => {
                crate::log!(Level::Error, "cannot register in the slice: {e}");
                None
            }
        }
    }

    /// Slice entry of CUDA device `ordinal` (by UUID, else by ordinal).
    pub fn entry(&self, ordinal: CUdevice) -> Option<usize> {
        let o = usize::try_from(ordinal)
            .ok()
            .filter(|&o| o < MAX_ORDINALS)?;
        let slot = self.devmap.get(o)?;
        match slot.load(Relaxed) {
            0 => {}
            u32::MAX => return None,
            v => return Some(v as usize - 1),
        }
        let found = self.lookup_entry(ordinal);
        // Cached as entry + 1 (0: not looked up, `u32::MAX`: none); entries are
        // < MAX_DEVICES, so the conversion cannot fail, and an entry that did not fit would
        // only go uncached.
        match found.map(|e| u32::try_from(e).ok().and_then(|e| e.checked_add(1))) {
            None => slot.store(u32::MAX, Relaxed),
            Some(Some(v)) if v != u32::MAX => slot.store(v, Relaxed),
            Some(_) => {}
        }
        found
    }

    fn lookup_entry(&self, ordinal: CUdevice) -> Option<usize> {
        let n = self.slice.limits.device_count();
        if self.standalone.is_none() {
            if let Some(uuid) = crate::driver::device_uuid(ordinal) {
                for i in 0..n {
                    if let Some(d) = self.slice.limits.device(i) {
                        if !d.uuid.is_empty() && d.uuid.eq_ignore_ascii_case(&uuid) {
                            return Some(i);
                        }
                    }
                }
            }
        }
        let o = usize::try_from(ordinal).ok()?;
        (o < n).then_some(o)
    }

    /// The cap of device `ordinal` / `entry`.
    pub fn cap(&self, ordinal: CUdevice, entry: usize) -> u64 {
        self.cap_with(ordinal, entry, None)
    }

    /// The cap, with the device's total known by the caller (NVML) for percentage caps.
    pub fn cap_with(&self, ordinal: CUdevice, entry: usize, total: Option<u64>) -> u64 {
        let Some(sa) = &self.standalone else {
            return self.slice.limits.memory_cap(entry);
        };
        let o = usize::try_from(ordinal).unwrap_or(0).min(MAX_ORDINALS - 1);
        let Some(cache) = self.capcache.get(o) else {
            return UNCAPPED;
        };
        let c = cache.load(Relaxed);
        if c != 0 {
            return c;
        }
        let cap = match sa.get(o).copied().flatten() {
            None => UNCAPPED,
            Some(MemQuantity::Bytes(b)) => b,
            Some(q) => match total.or_else(|| crate::driver::real_total(ordinal)) {
                Some(t) => q.resolve(t),
                // Unknown device size: do not cache a guess.
                None => return UNCAPPED,
            },
        };
        cache.store(cap.max(1), Relaxed);
        cap
    }

    /// Whether this is a standalone region (entries are ordinals, no UUIDs).
    pub fn is_standalone(&self) -> bool {
        self.standalone.is_some()
    }

    /// Slice entry whose UUID is `uuid` (case-insensitive).
    pub fn entry_by_uuid(&self, uuid: &str) -> Option<usize> {
        (0..self.slice.limits.device_count()).find(|&i| {
            self.slice
                .limits
                .device(i)
                .is_some_and(|d| !d.uuid.is_empty() && d.uuid.eq_ignore_ascii_case(uuid))
        })
    }

    /// Reserves `bytes` on `entry` of `ordinal`: `Err(OOM)` over the cap, nothing changed.
    pub fn charge(&self, ordinal: CUdevice, entry: usize, bytes: u64) -> Result<(), CUresult> {
        let Some(me) = self.me() else {
            return Ok(()); // cannot account (logged once at claim): degrade to pass-through
        };
        // A process holds memory only after its context is charged (whatever created it).
        self.charge_context(ordinal, entry)?;
        let cap = self.cap(ordinal, entry);
        let mine = self.mine.get(entry).ok_or(CUDA_ERROR_OUT_OF_MEMORY)?;
        // The process's own bound first: the shared total lives in a file the tenant can write.
        let held = mine.load(Acquire);
        if !matches!(held.checked_add(bytes), Some(n) if n <= cap) {
            crate::log!(
                Level::Debug,
                "refused {bytes} B on device {ordinal}: this process alone holds {held} of {cap} B"
            );
            return Err(CUDA_ERROR_OUT_OF_MEMORY);
        }
        match self
            .slice
            .usage
            .reserve(me, entry, bytes, self.limit(cap, entry))
        {
            Ok(()) => {
                mine.fetch_add(bytes, AcqRel);
                Ok(())
            }
            Err(gpuslice_region::ReserveError::OverCap { used, cap }) => {
                crate::log!(
                    Level::Debug,
                    "refused {bytes} B on device {ordinal}: {used} of {cap} B used"
                );
                Err(CUDA_ERROR_OUT_OF_MEMORY)
            }
            Err(gpuslice_region::ReserveError::Busy) => {
                crate::log!(Level::Warn, "slice usage stayed frozen; refusing {bytes} B");
                Err(CUDA_ERROR_OUT_OF_MEMORY)
            }
        }
    }

    /// What allocations and context charges together may reach on `entry` (cap `cap`): the cap
    /// plus the slice's context reserve when its contexts are charged.
    fn limit(&self, cap: u64, entry: usize) -> u64 {
        match self.context(entry) {
            (0, _) => cap,
            (_, reserve) => cap.saturating_add(reserve),
        }
    }

    /// The slice's context accounting on `entry`: (charge per process, reserve); (0, 0) in
    /// standalone mode.
    pub fn context(&self, entry: usize) -> (u64, u64) {
        if self.standalone.is_some() {
            return (0, 0);
        }
        self.slice.limits.context(entry)
    }

    /// Charges this process's CUDA context on `entry` once, before the driver creates it:
    /// `Err(OOM)` when the slice's processes already hold all it was promised (cap + reserve).
    pub fn charge_context(&self, ordinal: CUdevice, entry: usize) -> Result<(), CUresult> {
        let (charge, _) = self.context(entry);
        let Some(slot) = self.ctx.get(entry) else {
            return Ok(());
        };
        if charge == 0 || slot.load(Acquire) != 0 {
            return Ok(());
        }
        let Some(me) = self.me() else { return Ok(()) };
        let limit = self.limit(self.cap(ordinal, entry), entry);
        self.refresh();
        match self.slice.usage.reserve(me, entry, charge, limit) {
            Ok(()) => {
                if slot.compare_exchange(0, charge, AcqRel, Acquire).is_err() {
                    // Another thread charged it first.
                    self.slice.usage.release(me, entry, charge);
                }
                Ok(())
            }
            Err(e) => {
                crate::log!(
                    Level::Debug,
                    "refused a context on device {ordinal}: {e:?} (context {charge} B)"
                );
                Err(CUDA_ERROR_OUT_OF_MEMORY)
            }
        }
    }

    /// Before figures are reported or memory refused: records of dead processes go back to
    /// the slice, and this process's pools give back what the driver released.
    pub fn refresh(&self) {
        let me = self.record.load(Acquire);
        let tag = if me == NO_RECORD {
            layout::MAX_PROCS - 1
        } else {
            me
        };
        let _ = self.slice.usage.reclaim(tag);
    }

    /// Bytes the slice holds on `entry` as the tenant sees them against its cap: its contexts
    /// within the reserve are not part of it.
    pub fn used_view(&self, entry: usize) -> u64 {
        let (charge, reserve) = self.context(entry);
        let used = self.used(entry);
        if charge == 0 {
            used
        } else {
            used.saturating_sub(reserve)
        }
    }

    /// What this process can still be given on `entry` against `cap`: what the slice has left
    /// of its promise (cap + reserve), and no more than its cap less what this process holds.
    pub fn free_view(&self, cap: u64, entry: usize) -> u64 {
        let own = self.mine.get(entry).map_or(0, |m| m.load(Acquire));
        self.limit(cap, entry)
            .saturating_sub(self.used(entry))
            .min(cap.saturating_sub(own))
    }

    /// Returns `bytes` on `entry`.
    pub fn uncharge(&self, entry: usize, bytes: u64) {
        let r = self.record.load(Acquire);
        if r != NO_RECORD && bytes > 0 {
            self.slice.usage.release(r, entry, bytes);
            if let Some(m) = self.mine.get(entry) {
                let _ = m.fetch_update(AcqRel, Acquire, |v| Some(v - v.min(bytes)));
            }
        }
    }

    /// Bytes the slice holds on `entry`.
    pub fn used(&self, entry: usize) -> u64 {
        self.slice.usage.used(entry)
    }

    /// Remembers a live allocation.
    pub fn track(&self, key: u64, entry: usize, bytes: u64) {
        if let Ok(mut m) = self.allocs.lock() {
            if let Some((e, b)) = m.insert(key, (entry, bytes)) {
                // The driver reused an address we thought live: return the stale charge.
                self.uncharge(e, b);
            }
        }
    }

    /// Forgets a live allocation and returns its charge.
    pub fn untrack(&self, key: u64) -> Option<(usize, u64)> {
        self.allocs.lock().ok()?.remove(&key)
    }
}

extern "C" fn after_fork_child() {
    if let Some(Some(g)) = STATE.get() {
        // The child is a new process: it registers its own record on first use. Allocations of
        // the parent are not usable in the child and stay charged to the parent.
        g.record.store(NO_RECORD, Relaxed);
        for m in g.mine.iter().chain(&g.ctx) {
            m.store(0, Relaxed);
        }
        if let Ok(mut m) = g.allocs.try_lock() {
            m.clear();
        }
        if let Ok(mut m) = g.pools.try_lock() {
            m.clear();
        }
        if let Ok(mut m) = g.graphs.try_lock() {
            *m = crate::graphmem::Graphs::default();
        }
    }
}

extern "C" fn at_exit() {
    if let Some(Some(g)) = STATE.get() {
        let r = g.record.load(Acquire);
        let pid = g.record_pid.load(Acquire);
        // Memory still charged at exit (contexts, pool reserves, leaked allocations) is held
        // by the driver until the process is gone: its device files close after every exit
        // handler has run, and other handlers may run long. The record then stays, and is
        // reclaimed once the process is dead (pid + start time). Giving a context's charge back
        // here let the slice's other processes create contexts into memory this one still
        // held, beyond the slice's promise. An empty record is given back at once.
        let empty = (0..g.slice.limits.device_count()).all(|d| g.slice.usage.held(r, d) == 0);
        if r != NO_RECORD && pid == std::process::id() && empty {
            g.slice.usage.unclaim(r, pid);
            let _ = g.slice.usage.reclaim(r);
        }
    }
}
