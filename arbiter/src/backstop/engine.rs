//! The backstop's decisions: which slice each process NVML lists belongs to (from the host's
//! view), memory over cap plus allowance, device time beyond the lease, and the action taken
//! once per episode. NVML and the host are the traits [`GpuSource`] and [`Host`].

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::io;
use std::path::PathBuf;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use gpuslice_api::{
    BackstopAction, BackstopConfig, BackstopEvent, ForeignProcess, ProcessFootprint, SliceStatus,
};

use crate::owner::{read_owner, OwnerIdentity};
use crate::sched::SchedulerStatus;

/// Per tick: (device time NVML credited, lease time charged), ns.
type LeaseRing = VecDeque<(u64, u64)>;

/// NVML's process sample period (measured: 199.9 ± 2 ms on an H200, driver 580).
pub const SAMPLE_PERIOD_NS: u64 = 200_000_000;
/// Device time the lease check sums over: 25 of NVML's 200 ms samples.
const LEASE_SPAN: Duration = Duration::from_secs(5);
/// How many standard deviations of NVML's sampling error an honest slice's excess may reach
/// before it counts as running without the lease (`lease_threshold`).
const SAMPLING_SIGMAS: f64 = 5.0;
/// Deepest parent chain followed to find a slice's owner.
const MAX_DEPTH: usize = 64;

/// One process NVML lists on a device.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GpuProcess {
    /// Host pid.
    pub pid: u32,
    /// Device memory it holds, bytes (`None`: NVML cannot say).
    pub used: Option<u64>,
}

/// What NVML says about the devices.
pub trait GpuSource: Send {
    /// The processes with a context or memory on device `index`.
    fn processes(&mut self, index: u32) -> Result<Vec<GpuProcess>, String>;
    /// Device time (ns) each process ran on `index` since the previous call for that device
    /// (the first call only sets the starting point and may return nothing).
    fn busy_since_last(&mut self, index: u32) -> Result<Vec<(u32, u64)>, String>;
}

/// A process as the host sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostProc {
    /// Start time (clock ticks since boot, field 22 of `/proc/<pid>/stat`).
    pub start: u64,
    /// Parent pid.
    pub ppid: u32,
    /// Its cgroup paths, one per hierarchy line of `/proc/<pid>/cgroup`.
    pub cgroups: Vec<String>,
}

/// What the interposer counted for one process of a slice on one device (its `usage` record).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Counted {
    /// Pid in the tenant's pid namespace (as the record carries it).
    pub pid: u32,
    /// Start time (clock ticks since boot).
    pub start: u64,
    /// Bytes of allocations: the record's bytes less the slice's context charge.
    pub bytes: u64,
}

/// The host: process identity and the actions.
pub trait Host: Send {
    /// `pid` now, or `None` when there is no such (live, non-zombie) process.
    fn process(&self, pid: u32) -> Option<HostProc>;
    /// The pid host process `pid` has in its own pid namespace (the innermost of its `NSpid`;
    /// the pid itself outside containers): what its usage record carries.
    fn ns_pid(&self, pid: u32) -> Option<u32> {
        Some(pid)
    }
    /// What the interposer counted for each process of slice `slice_id` on its device at
    /// position `dev`; `None` when the slice's usage file cannot be read.
    fn ledger(&self, _slice_id: &str, _dev: usize) -> Option<Vec<Counted>> {
        None
    }
    /// Whether `pid` has the interposer mapped (`None`: its maps cannot be read).
    fn interposed(&self, _pid: u32) -> Option<bool> {
        None
    }
    /// `pid`'s command name, for messages (empty when unknown).
    fn comm(&self, _pid: u32) -> String {
        String::new()
    }
    /// SIGKILL (`pid`, `start`) — only if the process with that pid still has that start time.
    fn kill(&mut self, pid: u32, start: u64) -> io::Result<()>;
    /// SIGSTOP (`pid`, `start`), the same way (freeze of a slice without a cgroup).
    fn stop(&mut self, pid: u32, start: u64) -> io::Result<()>;
    /// Freezes the cgroup at `path` (relative to the cgroup mount).
    fn freeze(&mut self, path: &str) -> io::Result<()>;
}

/// Who belongs to a slice, from the host's view.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Membership {
    cgroup: Option<String>,
    owner: Option<(u32, Option<u64>)>,
}

impl Membership {
    fn of(slice: &SliceStatus, id: Option<OwnerIdentity>) -> Membership {
        let id = id.filter(|i| i.pid == slice.owner.pid && i.cgroup == slice.owner.cgroup);
        Membership {
            cgroup: slice
                .owner
                .cgroup
                .clone()
                .filter(|c| !c.trim_matches('/').is_empty()),
            owner: slice.owner.pid.map(|p| (p, id.and_then(|i| i.start_time))),
        }
    }
}

fn under(path: &str, root: &str) -> bool {
    let root = root.trim_end_matches('/');
    path == root || path.strip_prefix(root).is_some_and(|r| r.starts_with('/'))
}

/// Which slice a process belongs to.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Attribution {
    /// Slice index and the process's start time.
    Slice(usize, u64),
    /// Several slices make the same claim (indices).
    Ambiguous(Vec<usize>),
    /// No slice.
    None,
}

impl Attribution {
    fn of(claims: Vec<usize>, start: u64) -> Attribution {
        match claims[..] {
            [i] => Attribution::Slice(i, start),
            _ => Attribution::Ambiguous(claims),
        }
    }
}

/// One device as a tick read it: its NVML processes, and the device time (ns) each pid ran
/// since the last tick.
type DeviceReading = (u32, Vec<GpuProcess>, Vec<(u32, u64)>);

/// One violation found in a tick, before it is acted on.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Violation {
    slice: usize,
    device: u32,
    kind: &'static str,
    /// (pid, start) of the processes to act on.
    targets: Vec<(u32, u64)>,
    detail: String,
}

/// The backstop's state.
pub struct Backstop<G: GpuSource, H: Host> {
    cfg: BackstopConfig,
    gpu: G,
    host: H,
    /// Episodes in progress: (slice, device, kind) that were acted on and are still over.
    open: HashSet<(String, u32, &'static str)>,
    /// Per (slice, device): the scheduler's charged ns at the last tick, and per tick of the
    /// last [`LEASE_SPAN`] the device time NVML credited and the time charged.
    lease: HashMap<(String, u32), (u64, LeaseRing)>,
    /// Owner identities read from the slice directories (by slice id).
    owners: HashMap<String, Option<OwnerIdentity>>,
    state_dir: Option<PathBuf>,
    /// Per device, the tick it was last queried on: a device not queried on the previous tick
    /// (it had no slices) starts again from a baseline, since what NVML answers over such a
    /// gap is no measure of the slices judged now.
    queried: HashMap<u32, u64>,
    /// Ticks so far.
    ticks: u64,
    /// Sets of slices already warned about as indistinguishable (comma-joined ids).
    ambiguous: HashSet<String>,
    /// The context reserve admission promised each slice beyond its cap, on a device without
    /// its own in `device_reserves`.
    slice_reserve: u64,
    /// Each device's own reserve per slice (NVML index → bytes): its contexts' charge.
    device_reserves: HashMap<u32, u64>,
    /// Each slice process's footprint at the last tick (NVML's figure less what was counted).
    footprints: Vec<ProcessFootprint>,
    /// Every device of the node (NVML indices): each is checked for foreign processes, with
    /// slices or without.
    all_devices: Vec<u32>,
    /// (device, pid, start) of the processes outside gpuslice seen at the last tick: one is
    /// foreign once seen on two ticks in a row ([`Self::find_foreign`]).
    suspects: HashSet<(u32, u32, u64)>,
    /// The foreign processes found at the last tick.
    foreign: Vec<ForeignProcess>,
}

fn gib(b: u64) -> String {
    const MI: u64 = 1 << 20;
    if b >= 1 << 30 {
        let g = b as f64 / (1u64 << 30) as f64;
        if (g - g.round()).abs() < 0.005 {
            format!("{} GiB", g.round())
        } else {
            format!("{g:.2} GiB")
        }
    } else {
        format!("{} MiB", b.div_ceil(MI))
    }
}

/// What each of `targets` holds beyond what the interposer counted for it, for the message:
/// `; pid 4121: NVML 8.51 GiB, counted 8 GiB, its own 520 MiB` (nothing when unknown).
fn own_footprints(learned: &[ProcessFootprint], targets: &[(u32, u64)]) -> String {
    let mut out = String::new();
    for (pid, _) in targets {
        let Some(f) = learned.iter().find(|f| f.pid == *pid) else {
            continue;
        };
        if let (Some(c), Some(own)) = (f.counted, f.footprint) {
            out.push_str(&format!(
                "; pid {pid}: NVML {}, counted {}, its own {}",
                gib(f.used),
                gib(c),
                gib(own)
            ));
        }
    }
    out
}

/// Ticks of history the lease check keeps at `period`: [`LEASE_SPAN`] of them, at least 4.
fn lease_ticks(period: Duration) -> usize {
    let p = period.as_nanos().max(1);
    usize::try_from(LEASE_SPAN.as_nanos() / p)
        .unwrap_or(usize::MAX)
        .max(4)
}

/// How far (ns) the device time NVML credits a slice over `span` may exceed the `charged`
/// lease time before the slice counts as running without the lease.
///
/// NVML credits each 200 ms sample wholly to one process (`nvml.rs`), so a slice that held
/// the device a fraction `p` of the time is credited about `Binomial(W, p)` windows of the `W`
/// in the span: its standard deviation is one window times `√(W·p·(1−p))`. The threshold is
/// `tolerance` (charging lag) plus [`SAMPLING_SIGMAS`] of that. A slice charged nothing (a
/// bypass in a slice of its own) has no sampling error and is judged on `tolerance` alone.
fn lease_threshold(tolerance: Duration, span: Duration, charged: u64) -> i64 {
    let window = SAMPLE_PERIOD_NS as f64;
    let span_ns = span.as_nanos() as f64;
    let w = (span_ns / window).max(1.0);
    let p = if span_ns > 0.0 {
        (charged as f64 / span_ns).clamp(0.0, 1.0)
    } else {
        0.0
    };
    let sigma = window * (w * p * (1.0 - p)).sqrt();
    let tol = tolerance.as_nanos() as f64 + SAMPLING_SIGMAS * sigma;
    crate::convert::f64_to_i64(tol)
}

impl<G: GpuSource, H: Host> Backstop<G, H> {
    /// A backstop with `cfg` over `gpu` and `host`; `state_dir` is where owner identities
    /// (`owner.json`, with the owner's start time) are read from (`None` in unit tests).
    pub fn new(cfg: BackstopConfig, gpu: G, host: H, state_dir: Option<PathBuf>) -> Self {
        Backstop {
            cfg,
            gpu,
            host,
            open: HashSet::new(),
            lease: HashMap::new(),
            owners: HashMap::new(),
            state_dir,
            queried: HashMap::new(),
            ticks: 0,
            ambiguous: HashSet::new(),
            slice_reserve: 0,
            device_reserves: HashMap::new(),
            footprints: Vec::new(),
            all_devices: Vec::new(),
            suspects: HashSet::new(),
            foreign: Vec::new(),
        }
    }

    /// Sets every device of the node (NVML indices), for the foreign-process check.
    pub fn with_devices(mut self, devices: Vec<u32>) -> Self {
        self.all_devices = devices;
        self
    }

    /// The CUDA processes outside gpuslice the last tick found ([`Self::find_foreign`]).
    pub fn foreign(&self) -> &[ForeignProcess] {
        &self.foreign
    }

    /// The processes of `listed` (per device, NVML's list) that run CUDA outside gpuslice: in
    /// no slice from the host's view, and without the interposer mapped (or with maps it
    /// cannot read). Not foreign: the arbiter and its children (the probe context), a process
    /// two slices could claim, a process gone. One counts only once seen on two ticks in a row
    /// with the same start time, so a tenant whose slice was admitted between this tick's
    /// reading of the slices and of NVML is never reported.
    fn find_foreign(
        &mut self,
        listed: &[(u32, Vec<GpuProcess>)],
        members: &[Membership],
    ) -> Vec<ForeignProcess> {
        let me = std::process::id();
        let mut now = HashSet::new();
        let mut out = Vec::new();
        for (dev, procs) in listed {
            for p in procs {
                let Some(h) = self.host.process(p.pid) else {
                    continue;
                };
                if p.pid == me
                    || h.ppid == me
                    || self.slice_of(p.pid, members) != Attribution::None
                    || self.host.interposed(p.pid) == Some(true)
                {
                    continue;
                }
                let key = (*dev, p.pid, h.start);
                if self.suspects.contains(&key) {
                    out.push(ForeignProcess {
                        device: *dev,
                        pid: p.pid,
                        comm: self.host.comm(p.pid),
                        used: p.used,
                    });
                }
                now.insert(key);
            }
        }
        self.suspects = now;
        out
    }

    /// Each slice process's own footprint as the last tick saw it (`docs/contexts.md`).
    pub fn footprints(&self) -> &[ProcessFootprint] {
        &self.footprints
    }

    /// The footprint of each of `list` — (host pid, start, NVML's bytes) of slice `s` on
    /// device `dev` — against what the interposer counted for it.
    fn learn(&self, s: &SliceStatus, dev: u32, list: &[(u32, u64, u64)]) -> Vec<ProcessFootprint> {
        let ledger = s
            .devices
            .iter()
            .position(|d| d.index == dev)
            .and_then(|pos| self.host.ledger(&s.slice_id, pos));
        list.iter()
            .map(|&(pid, start, used)| {
                let counted = ledger.as_ref().map(|l| {
                    let ns = self.host.ns_pid(pid);
                    l.iter()
                        .find(|c| c.start == start && Some(c.pid) == ns)
                        .map_or(0, |c| c.bytes)
                });
                ProcessFootprint {
                    slice_id: s.slice_id.clone(),
                    device: dev,
                    pid,
                    used,
                    counted,
                    footprint: counted.map(|c| used.saturating_sub(c)),
                }
            })
            .collect()
    }

    /// Sets the context reserve admission promises each slice beyond its cap (the
    /// policy's `context_reserve × processes_per_slice`).
    pub fn with_slice_reserve(mut self, reserve: u64) -> Self {
        self.slice_reserve = reserve;
        self
    }

    /// Sets the reserve admission promises each slice on device `index` (a mixed node: each
    /// device's contexts cost what they cost there).
    pub fn with_device_reserve(mut self, index: u32, reserve: u64) -> Self {
        self.device_reserves.insert(index, reserve);
        self
    }

    /// Device memory a slice's processes may hold together on device `dev` beyond its cap: the
    /// larger of `context_allowance` and the reserve admission promised it there.
    fn slice_allowance(&self, dev: u32) -> u64 {
        let reserve = self
            .device_reserves
            .get(&dev)
            .copied()
            .unwrap_or(self.slice_reserve);
        self.cfg.context_allowance.0.max(reserve)
    }

    /// The host (tests inspect what was done).
    pub fn host(&self) -> &H {
        &self.host
    }

    /// The slice `pid` belongs to, from the host's view, and its start time.
    ///
    /// The most specific claim wins: the slice with the deepest cgroup that contains the
    /// process, else the slice whose owner is the process's nearest owning ancestor. When two
    /// slices make the same claim (the same cgroup, or the same owner process) the process is
    /// [`Attribution::Ambiguous`]: NVML's per-process figures cannot be split between them, and
    /// charging one slice with both slices' processes flags honest tenants.
    fn slice_of(&self, pid: u32, members: &[Membership]) -> Attribution {
        let Some(me) = self.host.process(pid) else {
            return Attribution::None;
        };
        let mut deepest: Option<usize> = None;
        let mut claims: Vec<usize> = Vec::new();
        for (i, m) in members.iter().enumerate() {
            let Some(cg) = m.cgroup.as_deref() else {
                continue;
            };
            if !me.cgroups.iter().any(|c| under(c, cg)) {
                continue;
            }
            let depth = cg.trim_end_matches('/').len();
            match deepest {
                Some(d) if d > depth => {}
                Some(d) if d == depth => claims.push(i),
                _ => {
                    deepest = Some(depth);
                    claims = vec![i];
                }
            }
        }
        if !claims.is_empty() {
            return Attribution::of(claims, me.start);
        }
        // Descent from an owner process (bare `gpuslice run` slices, or a container's init).
        let (mut cur, mut info) = (pid, me.clone());
        for _ in 0..MAX_DEPTH {
            let claims: Vec<usize> = members
                .iter()
                .enumerate()
                .filter(|(_, m)| {
                    m.owner
                        .is_some_and(|(p, s)| p == cur && s.is_none_or(|s| s == info.start))
                })
                .map(|(i, _)| i)
                .collect();
            if !claims.is_empty() {
                return Attribution::of(claims, me.start);
            }
            if info.ppid <= 1 || info.ppid == cur {
                return Attribution::None;
            }
            cur = info.ppid;
            let Some(next) = self.host.process(cur) else {
                return Attribution::None;
            };
            info = next;
        }
        Attribution::None
    }

    /// [`Self::slice_of`] for a check: an ambiguous process is left out (it is not acted on),
    /// and the slices it could belong to are named in a warning once.
    fn attribute(
        &mut self,
        pid: u32,
        members: &[Membership],
        slices: &[SliceStatus],
    ) -> Option<(usize, u64)> {
        match self.slice_of(pid, members) {
            Attribution::Slice(i, start) => Some((i, start)),
            Attribution::None => None,
            Attribution::Ambiguous(list) => {
                let ids: Vec<&str> = list.iter().map(|&i| slices[i].slice_id.as_str()).collect();
                let key = ids.join(",");
                if self.ambiguous.len() >= 1024 {
                    self.ambiguous.clear();
                }
                if self.ambiguous.insert(key) {
                    tracing::warn!(
                        "backstop cannot tell slices {} apart (the same cgroup or owner process): \
                         their processes (pid {pid}) are not checked",
                        ids.join(", ")
                    );
                }
                None
            }
        }
    }

    fn membership(&mut self, slices: &[SliceStatus]) -> Vec<Membership> {
        let live: HashSet<&str> = slices.iter().map(|s| s.slice_id.as_str()).collect();
        self.owners.retain(|k, _| live.contains(k.as_str()));
        self.open.retain(|(s, _, _)| live.contains(s.as_str()));
        self.lease.retain(|(s, _), _| live.contains(s.as_str()));
        slices
            .iter()
            .map(|s| {
                let cached = self.owners.get(&s.slice_id).cloned().flatten().filter(|i| {
                    i.pid == s.owner.pid && i.cgroup == s.owner.cgroup && i.start_time.is_some()
                });
                let id = match (cached, &self.state_dir) {
                    (Some(id), _) => Some(id),
                    (None, Some(dir)) => {
                        let id = read_owner(&dir.join(&s.slice_id));
                        self.owners.insert(s.slice_id.clone(), id.clone());
                        id
                    }
                    (None, None) => None,
                };
                Membership::of(s, id)
            })
            .collect()
    }

    /// One check of every device the slices use. `sched` is the scheduler's status (`None`: no
    /// lease check). Returns the events of the actions taken.
    pub fn tick(
        &mut self,
        slices: &[SliceStatus],
        sched: Option<&SchedulerStatus>,
    ) -> Vec<BackstopEvent> {
        self.tick_with(slices, || sched.cloned())
    }

    /// Every device's NVML process list (the foreign-process check reads them all), then, for
    /// the devices slices use, their processes and the device time each ran since last time.
    fn read_devices(
        &mut self,
        slices: &[SliceStatus],
        members: &[Membership],
    ) -> Vec<DeviceReading> {
        let mut devices: Vec<u32> = slices
            .iter()
            .flat_map(|s| s.devices.iter().map(|d| d.index))
            .collect();
        devices.sort_unstable();
        devices.dedup();
        let mut every: Vec<u32> = self.all_devices.iter().chain(&devices).copied().collect();
        every.sort_unstable();
        every.dedup();
        let mut listed = Vec::with_capacity(every.len());
        for dev in every {
            match self.gpu.processes(dev) {
                Ok(p) => listed.push((dev, p)),
                Err(e) => tracing::debug!("backstop: NVML processes of device {dev}: {e}"),
            }
        }
        self.foreign = self.find_foreign(&listed, members);
        let mut seen = Vec::with_capacity(devices.len());
        for dev in devices {
            let procs = listed
                .iter()
                .find(|(d, _)| *d == dev)
                .map(|(_, p)| p.clone())
                .unwrap_or_default();
            let busy = match self.gpu.busy_since_last(dev) {
                Ok(b) => b,
                Err(e) => {
                    tracing::debug!("backstop: NVML utilisation of device {dev}: {e}");
                    Vec::new()
                }
            };
            seen.push((dev, procs, busy));
        }
        seen
    }

    /// A slice over its cap plus the context allowance on `dev`: a violation naming its
    /// largest processes, until what is left fits.
    fn judge_memory(
        &mut self,
        dev: u32,
        procs: &[GpuProcess],
        members: &[Membership],
        slices: &[SliceStatus],
        found: &mut Vec<Violation>,
        over: &mut HashSet<(String, u32, &'static str)>,
    ) {
        let mut by_slice: BTreeMap<usize, Vec<(u32, u64, u64)>> = BTreeMap::new();
        for p in procs {
            if let Some((i, start)) = self.attribute(p.pid, members, slices) {
                by_slice
                    .entry(i)
                    .or_default()
                    .push((p.pid, start, p.used.unwrap_or(0)));
            }
        }
        for (&i, list) in &by_slice {
            let s = &slices[i];
            let learned = self.learn(s, dev, list);
            self.footprints.extend(learned.iter().cloned());
            let Some(cap) = s
                .devices
                .iter()
                .find(|d| d.index == dev)
                .and_then(|d| d.memory_cap.or(d.memory_best_effort))
            else {
                continue; // unbounded, or not this slice's device: nothing to compare with
            };
            let used: u64 = list.iter().map(|p| p.2).sum();
            // What the slice was promised, however many processes it runs: the interposer
            // charges every context under the same bound.
            let allowance = self.slice_allowance(dev);
            let limit = cap.saturating_add(allowance);
            if used <= limit {
                continue;
            }
            over.insert((s.slice_id.clone(), dev, "memory"));
            // The largest first, until what is left fits.
            let mut sorted = list.clone();
            sorted.sort_by(|a, b| b.2.cmp(&a.2).then(a.0.cmp(&b.0)));
            let mut left = used;
            let mut targets = Vec::new();
            for (pid, start, u) in sorted {
                if left <= limit {
                    break;
                }
                targets.push((pid, start));
                left = left.saturating_sub(u);
            }
            let detail = format!(
                "memory {} > cap {} + context allowance {}{}",
                gib(used),
                gib(cap),
                gib(allowance),
                own_footprints(&learned, &targets)
            );
            found.push(Violation {
                slice: i,
                device: dev,
                kind: "memory",
                targets,
                detail,
            });
        }
    }

    /// A slice credited by NVML with more device time than its leases over the last checks,
    /// beyond NVML's sampling error: a violation naming the processes that ran.
    #[allow(clippy::too_many_arguments)] // the tick's own state, passed down whole
    fn judge_lease(
        &mut self,
        dev: u32,
        busy: Vec<(u32, u64)>,
        sched: &SchedulerStatus,
        members: &[Membership],
        slices: &[SliceStatus],
        found: &mut Vec<Violation>,
        over: &mut HashSet<(String, u32, &'static str)>,
    ) {
        let tick = self.ticks;
        let first = self.queried.insert(dev, tick) != Some(tick - 1);
        if first {
            // Re-baselined: every slice's ring starts over with this tick's charged time.
            self.lease.retain(|k, _| k.1 != dev);
        }
        let mut ran: BTreeMap<usize, (u64, Vec<(u32, u64)>)> = BTreeMap::new();
        for (pid, ns) in busy {
            if ns == 0 {
                continue;
            }
            if let Some((i, start)) = self.attribute(pid, members, slices) {
                let e = ran.entry(i).or_default();
                e.0 += ns;
                e.1.push((pid, start));
            }
        }
        for (i, s) in slices.iter().enumerate() {
            if !s.devices.iter().any(|d| d.index == dev) {
                continue;
            }
            let Some(share) = sched.slice(dev, &s.slice_id) else {
                continue;
            };
            let key = (s.slice_id.clone(), dev);
            let (ran_ns, pids) = ran.remove(&i).unwrap_or_default();
            let entry = self
                .lease
                .entry(key)
                .or_insert_with(|| (share.charged_ns, VecDeque::new()));
            let charged = share.charged_ns.saturating_sub(entry.0);
            entry.0 = share.charged_ns;
            if first {
                continue;
            }
            entry.1.push_back((ran_ns, charged));
            let ticks = lease_ticks(self.cfg.period);
            while entry.1.len() > ticks {
                entry.1.pop_front();
            }
            let span = self
                .cfg
                .period
                .saturating_mul(crate::convert::usize_to_u32(entry.1.len()));
            let (ran_sum, charged_sum) = entry
                .1
                .iter()
                .fold((0u64, 0u64), |a, &(r, c)| (a.0 + r, a.1 + c));
            let excess = i64::try_from(ran_sum).unwrap_or(i64::MAX)
                - i64::try_from(charged_sum).unwrap_or(i64::MAX);
            tracing::debug!(
                "backstop: slice {} device {dev}: ran {} µs, charged {} µs, excess over the \
                 last {} checks {} µs (pids {pids:?})",
                s.slice_id,
                ran_ns / 1000,
                charged / 1000,
                entry.1.len(),
                excess / 1000,
            );
            let tol = lease_threshold(self.cfg.lease_tolerance, span, charged_sum);
            // The holder's time is charged when the scheduler next decides (or, for its last
            // kernels, when its drain is reported): while it holds the lease its excess may
            // be charging lag, judged once it no longer holds it.
            if excess > tol && !pids.is_empty() && !share.holding {
                over.insert((s.slice_id.clone(), dev, "lease"));
                found.push(Violation {
                    slice: i,
                    device: dev,
                    kind: "lease",
                    targets: pids,
                    detail: format!(
                        "NVML credited it {} ms of device time beyond its lease over the \
                         last {} ms (allowed {} ms for NVML's sampling)",
                        excess / 1_000_000,
                        span.as_millis(),
                        tol / 1_000_000
                    ),
                });
            }
        }
    }

    /// [`Self::tick`], reading the scheduler's status with `sched` only after NVML: the charged
    /// time then never lags the device time it is compared with (a thread preempted between
    /// the two reads would otherwise see device time the scheduler charges a moment later).
    pub fn tick_with(
        &mut self,
        slices: &[SliceStatus],
        sched: impl FnOnce() -> Option<SchedulerStatus>,
    ) -> Vec<BackstopEvent> {
        let members = self.membership(slices);
        let seen = self.read_devices(slices, &members);
        let sched = sched();
        let sched = sched.as_ref();
        self.ticks += 1;
        // Lease rings of slices (or devices) no longer judged are dropped: a slice that comes
        // back, or a new one under a reused id, starts from a fresh baseline.
        let judged: HashSet<(String, u32)> = slices
            .iter()
            .flat_map(|s| s.devices.iter().map(|d| (s.slice_id.clone(), d.index)))
            .collect();
        self.lease.retain(|k, _| judged.contains(k));
        let mut found = Vec::new();
        let mut over: HashSet<(String, u32, &'static str)> = HashSet::new();
        self.footprints.clear();
        for (dev, procs, busy) in seen {
            self.judge_memory(dev, &procs, &members, slices, &mut found, &mut over);
            if let Some(sched) = sched {
                self.judge_lease(dev, busy, sched, &members, slices, &mut found, &mut over);
            }
        }
        // Episodes that ended may be acted on again next time.
        self.open.retain(|k| over.contains(k));
        let mut events = Vec::new();
        for v in found {
            let s = &slices[v.slice];
            let key = (s.slice_id.clone(), v.device, v.kind);
            if self.open.contains(&key) {
                continue;
            }
            let action = if v.kind == "memory" {
                self.cfg.memory_action
            } else {
                self.cfg.lease_action
            };
            let ev = self.act(s, &members[v.slice], &v, action);
            if v.kind == "lease" && action == BackstopAction::Kill {
                // What the killed processes ran is judged; a next offender starts afresh.
                if let Some(e) = self.lease.get_mut(&(s.slice_id.clone(), v.device)) {
                    e.1.clear();
                }
            }
            // Acted on once per episode: it stays open while the slice stays over (a killed
            // process leaves NVML's list at once, so a kill ends it).
            self.open.insert(key);
            events.push(ev);
        }
        events
    }

    fn act(
        &mut self,
        s: &SliceStatus,
        m: &Membership,
        v: &Violation,
        action: BackstopAction,
    ) -> BackstopEvent {
        let pids: Vec<u32> = v.targets.iter().map(|t| t.0).collect();
        let list = pids
            .iter()
            .map(u32::to_string)
            .collect::<Vec<_>>()
            .join(", ");
        let what = if v.kind == "memory" {
            "over its memory cap"
        } else {
            "ran kernels without the lease"
        };
        let mut failed = Vec::new();
        let verb = match action {
            BackstopAction::Log => "logged",
            BackstopAction::Kill => {
                for &(pid, start) in &v.targets {
                    if let Err(e) = self.host.kill(pid, start) {
                        failed.push(format!("kill {pid}: {e}"));
                    }
                }
                "killed"
            }
            BackstopAction::Freeze => {
                match &m.cgroup {
                    Some(cg) => {
                        if let Err(e) = self.host.freeze(cg) {
                            failed.push(format!("freeze {cg}: {e}"));
                        }
                    }
                    None => {
                        for &(pid, start) in &v.targets {
                            if let Err(e) = self.host.stop(pid, start) {
                                failed.push(format!("stop {pid}: {e}"));
                            }
                        }
                    }
                }
                "froze"
            }
        };
        let whom = match (action, &m.cgroup) {
            (BackstopAction::Freeze, Some(cg)) => format!("cgroup {cg} (pid {list})"),
            _ if pids.len() == 1 => format!("pid {list}"),
            _ => format!("pids {list}"),
        };
        let mut message = format!(
            "{verb} {whom} on device {} ({}: {})",
            v.device, what, v.detail
        );
        if !failed.is_empty() {
            message.push_str(&format!("; failed: {}", failed.join("; ")));
        }
        let action_name = if failed.is_empty() {
            action.as_str()
        } else {
            "failed"
        };
        tracing::warn!("backstop: slice {}: {message}", s.slice_id);
        BackstopEvent {
            slice_id: s.slice_id.clone(),
            device: v.device,
            kind: v.kind.to_string(),
            action: action_name.to_string(),
            pids,
            message,
            at_ms: SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| crate::convert::u128_to_u64(d.as_millis())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct NoGpu;
    impl GpuSource for NoGpu {
        fn processes(&mut self, _: u32) -> Result<Vec<GpuProcess>, String> {
            Ok(Vec::new())
        }
        fn busy_since_last(&mut self, _: u32) -> Result<Vec<(u32, u64)>, String> {
            Ok(Vec::new())
        }
    }

    /// A fake host: pid → (start, ppid, cgroup); acting on anything is an error.
    struct Procs(HashMap<u32, HostProc>);
    impl Host for Procs {
        fn process(&self, pid: u32) -> Option<HostProc> {
            self.0.get(&pid).cloned()
        }
        fn kill(&mut self, _: u32, _: u64) -> io::Result<()> {
            Err(io::Error::other("no"))
        }
        fn stop(&mut self, _: u32, _: u64) -> io::Result<()> {
            Err(io::Error::other("no"))
        }
        fn freeze(&mut self, _: &str) -> io::Result<()> {
            Err(io::Error::other("no"))
        }
    }

    fn backstop(procs: &[(u32, u64, u32, &str)]) -> Backstop<NoGpu, Procs> {
        let map = procs
            .iter()
            .map(|&(pid, start, ppid, cg)| {
                let p = HostProc {
                    start,
                    ppid,
                    cgroups: vec![cg.to_string()],
                };
                (pid, p)
            })
            .collect();
        Backstop::new(BackstopConfig::default(), NoGpu, Procs(map), None)
    }

    fn member(cgroup: Option<&str>, owner: Option<(u32, u64)>) -> Membership {
        Membership {
            cgroup: cgroup.map(str::to_string),
            owner: owner.map(|(p, s)| (p, Some(s))),
        }
    }

    #[test]
    fn slices_sharing_an_owner_cannot_claim_its_children() {
        // Two slices admitted by the same process (as a test harness does): each tenant
        // descends from both owners. The first slice used to win, and was charged with both
        // tenants' device time.
        let b = backstop(&[(10, 100, 1, "/u"), (11, 110, 10, "/u"), (12, 120, 10, "/u")]);
        let m = [member(None, Some((10, 100))), member(None, Some((10, 100)))];
        assert_eq!(b.slice_of(11, &m), Attribution::Ambiguous(vec![0, 1]));
        assert_eq!(b.slice_of(12, &m), Attribution::Ambiguous(vec![0, 1]));
        // Each tenant its own owner (a process that execs the workload): exact.
        let m = [member(None, Some((11, 110))), member(None, Some((12, 120)))];
        assert_eq!(b.slice_of(11, &m), Attribution::Slice(0, 110));
        assert_eq!(b.slice_of(12, &m), Attribution::Slice(1, 120));
        assert_eq!(b.slice_of(10, &m), Attribution::None);
        assert_eq!(b.slice_of(99, &m), Attribution::None);
    }

    #[test]
    fn the_nearest_owner_and_the_deepest_cgroup_win() {
        let b = backstop(&[
            (10, 100, 1, "/u"),
            (11, 110, 10, "/u"),
            (12, 120, 11, "/u"),
            (20, 200, 1, "/pods/p/c"),
            (21, 210, 20, "/pods/p/c/sub"),
        ]);
        // "outer" owns 10, "inner" owns 11 (a slice started inside another's tree): 12 is inner's.
        let m = [member(None, Some((10, 100))), member(None, Some((11, 110)))];
        assert_eq!(b.slice_of(12, &m), Attribution::Slice(1, 120));
        // The pod's cgroup and the container's below it: the container's slice, whatever the order.
        for (pod, ctr) in [(0, 1), (1, 0)] {
            let mut m = vec![member(None, None), member(None, None)];
            m[pod].cgroup = Some("/pods/p/".into());
            m[ctr].cgroup = Some("/pods/p/c".into());
            assert_eq!(b.slice_of(21, &m), Attribution::Slice(ctr, 210));
        }
        // The same cgroup twice: ambiguous (trailing slashes do not make it deeper).
        let m = [
            member(Some("/pods/p/c/"), None),
            member(Some("/pods/p/c"), None),
        ];
        assert_eq!(b.slice_of(21, &m), Attribution::Ambiguous(vec![0, 1]));
    }

    #[test]
    fn an_ambiguous_process_is_warned_about_once_and_not_attributed() {
        let mut b = backstop(&[(10, 100, 1, "/u"), (11, 110, 10, "/u")]);
        let m = [member(None, Some((10, 100))), member(None, Some((10, 100)))];
        let slices: Vec<SliceStatus> = ["a", "b"]
            .iter()
            .map(|id| SliceStatus {
                slice_id: id.to_string(),
                request: Default::default(),
                owner: Default::default(),
                devices: Vec::new(),
            })
            .collect();
        assert_eq!(b.attribute(11, &m, &slices), None);
        assert_eq!(b.attribute(11, &m, &slices), None);
        assert_eq!(b.ambiguous.len(), 1);
        assert!(b.ambiguous.contains("a,b"));
    }

    /// Device time per tick of one process (pid 11).
    struct Busy(u64);
    impl GpuSource for Busy {
        fn processes(&mut self, _: u32) -> Result<Vec<GpuProcess>, String> {
            Ok(Vec::new())
        }
        fn busy_since_last(&mut self, _: u32) -> Result<Vec<(u32, u64)>, String> {
            Ok(vec![(11, self.0)])
        }
    }

    fn status(charged_ns: u64, holding: bool) -> SchedulerStatus {
        use crate::sched::{DeviceSched, SliceShare};
        SchedulerStatus {
            devices: vec![DeviceSched {
                slices: vec![SliceShare {
                    slice_id: "a".into(),
                    charged_ns,
                    holding,
                    ..SliceShare::default()
                }],
                ..DeviceSched::default()
            }],
        }
    }

    #[test]
    fn a_holders_charging_lag_is_judged_once_it_lets_go() {
        const MS: u64 = 1_000_000;
        let mut procs = HashMap::new();
        procs.insert(
            11,
            HostProc {
                start: 5,
                ppid: 1,
                cgroups: vec!["/u".into()],
            },
        );
        let slices = vec![SliceStatus {
            slice_id: "a".into(),
            request: Default::default(),
            owner: gpuslice_api::Owner {
                pid: Some(11),
                ..Default::default()
            },
            devices: vec![gpuslice_api::AssignedDevice {
                index: 0,
                uuid: "GPU-0".into(),
                name: "sim".into(),
                memory_total: 1 << 30,
                memory_cap: None,
                memory_best_effort: None,
            }],
        }];
        let run = |catch_up: u64| {
            let mut b = Backstop::new(
                BackstopConfig::default(),
                Busy(250 * MS),
                Procs(procs.clone()),
                None,
            );
            // Baseline, then a second and a half of holding the lease while the scheduler's
            // loop (starved of CPU) charges nothing: not judged while it holds.
            assert!(b.tick_with(&slices, || Some(status(0, true))).is_empty());
            for _ in 0..6 {
                assert!(b.tick_with(&slices, || Some(status(0, true))).is_empty());
            }
            // It lets go; the scheduler charged `catch_up` meanwhile.
            b.tick_with(&slices, || Some(status(catch_up, false)))
        };
        // Charged in full (lease time caught up): nothing.
        assert!(run(1750 * MS).is_empty());
        // Never charged (it ran beside the lease): flagged as soon as it no longer holds it.
        let ev = run(0);
        assert_eq!(ev.len(), 1, "{ev:?}");
        assert_eq!(ev[0].kind, "lease");
        assert_eq!(ev[0].pids, vec![11]);
    }

    /// NVML's sampling as measured on the H200: each 200 ms window credited wholly (97 %) to
    /// the process holding the device, here with probability `p` (its lease share). Over 20 000
    /// five-second spans per share, an honest slice is never over the threshold; a slice charged
    /// nothing is over it with two windows.
    #[test]
    fn the_lease_threshold_allows_for_nvml_sampling() {
        const MS: u64 = 1_000_000;
        let tol = Duration::from_millis(250);
        let span = Duration::from_secs(5);
        let mut x: u64 = 0x2545_f491_4f6c_dd1d;
        let mut uniform = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 11) as f64 / (1u64 << 53) as f64
        };
        for p in [0.02, 0.05, 0.1, 0.2, 0.3, 0.5, 0.7, 0.9, 1.0] {
            let charged = crate::convert::f64_to_u64(p * 5_000.0) * MS;
            let threshold = lease_threshold(tol, span, charged);
            let mut worst = i64::MIN;
            for _ in 0..20_000 {
                let credited: u64 = (0..25).filter(|_| uniform() < p).count() as u64 * 194 * MS;
                worst =
                    worst.max(i64::try_from(credited).unwrap() - i64::try_from(charged).unwrap());
            }
            assert!(
                worst <= threshold,
                "share {p}: excess {worst} > {threshold}"
            );
        }
        let bypass = lease_threshold(tol, span, 0);
        let ms = i64::try_from(MS).unwrap();
        assert_eq!(bypass, 250 * ms);
        assert!(2 * 194 * ms > bypass);
    }

    /// NVML's list of device 1 only.
    struct OnOne(Vec<GpuProcess>);
    impl GpuSource for OnOne {
        fn processes(&mut self, index: u32) -> Result<Vec<GpuProcess>, String> {
            Ok(if index == 1 {
                self.0.clone()
            } else {
                Vec::new()
            })
        }
        fn busy_since_last(&mut self, _: u32) -> Result<Vec<(u32, u64)>, String> {
            Ok(Vec::new())
        }
    }

    /// A pid reused by another process between two checks starts over; a foreign process that
    /// exits is no longer foreign at the next check; a device with no slice is checked only
    /// when the node's devices are set.
    #[test]
    fn a_foreign_process_is_one_pid_and_start_time() {
        let whole = GpuProcess {
            pid: 400,
            used: Some(1 << 30),
        };
        let host = backstop(&[(400, 8000, 1, "/kubepods/whole")]).host;
        let mut b = Backstop::new(BackstopConfig::default(), OnOne(vec![whole]), host, None);
        b.tick(&[], None);
        b.tick(&[], None);
        assert!(b.foreign().is_empty(), "device 1 not known: not checked");
        b = b.with_devices(vec![0, 1]);
        b.tick(&[], None);
        b.tick(&[], None);
        assert_eq!(b.foreign().len(), 1);
        assert_eq!((b.foreign()[0].device, b.foreign()[0].pid), (1, 400));
        // Pid 400 reused by a process started later: a new suspect.
        b.host.0.get_mut(&400).unwrap().start = 9000;
        b.tick(&[], None);
        assert!(b.foreign().is_empty());
        b.tick(&[], None);
        assert_eq!(b.foreign().len(), 1);
        // Gone from /proc (exited; NVML may list it a moment longer): not foreign.
        b.host.0.remove(&400);
        b.tick(&[], None);
        assert!(b.foreign().is_empty());
    }

    #[test]
    fn cgroup_prefix_is_per_component() {
        assert!(under("/kubepods/pod1/abc", "/kubepods/pod1"));
        assert!(under("/kubepods/pod1", "/kubepods/pod1/"));
        assert!(!under("/kubepods/pod10", "/kubepods/pod1"));
    }

    #[test]
    fn sizes_read_well() {
        assert_eq!(gib(1 << 30), "1 GiB");
        assert_eq!(gib((13 << 30) / 10), "1.30 GiB");
        assert_eq!(gib(256 << 20), "256 MiB");
    }
}
