//! Time-slicing: one lease scheduler per device. [`Scheduler`] owns a loop thread per
//! device (`device`), fed by commands from the control socket (admit → add, update → new
//! shares at once, release → remove after revoking). The algorithm is the pure, clock-injected
//! [`policy::Policy`]; [`status::SchedulerStatus`] is what `gpuslice status` and metrics read.
//! Design and measurements: `docs/scheduling.md`.

pub mod device;
pub mod futex;
pub mod policy;
pub mod realtime;
pub mod status;
pub mod wakes;
pub mod window;

pub use policy::{Params, FULL};
pub use status::{fill_shares, DeviceSched, SchedulerStatus, SliceShare};

use device::{Cmd, Ctl};
use gpuslice_api::{Priority, SliceRequest};
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::AtomicU32;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

/// The shares of a request, in basis points.
pub fn params_of(req: &SliceRequest) -> Params {
    Params {
        guarantee: u32::from(req.compute.unwrap_or(0).min(100)) * 100,
        limit: u32::from(req.compute_limit.unwrap_or(100).clamp(1, 100)) * 100,
        high: req.priority == Priority::High,
    }
}

/// The node's per-device lease schedulers.
pub struct Scheduler {
    quantum_ns: u64,
    realtime_priority: u32,
    tuning: device::Tuning,
    devices: Mutex<BTreeMap<u32, Arc<Ctl>>>,
}

impl std::fmt::Debug for Scheduler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Scheduler")
            .field("quantum_ns", &self.quantum_ns)
            .field("realtime_priority", &self.realtime_priority)
            .finish()
    }
}

impl Scheduler {
    /// A scheduler with lease quantum `quantum`; device loops start on first use.
    pub fn new(quantum: Duration) -> Scheduler {
        Scheduler::with_realtime(quantum, 0)
    }

    /// [`Scheduler::new`] whose device threads run under `SCHED_FIFO` at `realtime_priority`
    /// (1–99; 0 = normal scheduling). A thread that cannot get it logs why
    /// ([`realtime::apply`]) and runs normally; [`DeviceSched::realtime_priority`] says which.
    pub fn with_realtime(quantum: Duration, realtime_priority: u32) -> Scheduler {
        Scheduler {
            quantum_ns: quantum.as_nanos().clamp(100_000, 1_000_000_000) as u64,
            realtime_priority,
            tuning: device::Tuning::default(),
            devices: Mutex::new(BTreeMap::new()),
        }
    }

    /// How long an idle `priority: high` holder keeps the lease while others wait
    /// (`scheduler.high_linger`, [`policy::Policy::set_high_linger`]); for device loops started
    /// after this call (call it before scheduling any slice).
    pub fn with_high_linger(mut self, linger: Duration) -> Scheduler {
        self.tuning.high_linger_ns = u64::try_from(linger.as_nanos()).unwrap_or(u64::MAX);
        self
    }

    /// Whether a `priority: high` slice past its share gets turns while it repays
    /// (`scheduler.high_repay_turns`, [`policy::Policy::set_high_repay_turns`]); for device
    /// loops started after this call.
    pub fn with_high_repay_turns(mut self, on: bool) -> Scheduler {
        self.tuning.high_repay_turns = on;
        self
    }

    fn ctl(&self, index: u32) -> Arc<Ctl> {
        let mut m = self.devices.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(c) = m.get(&index) {
            return Arc::clone(c);
        }
        let ctl = Arc::new(Ctl {
            word: AtomicU32::new(0),
            cmds: Mutex::new(Vec::new()),
            status: Mutex::new(DeviceSched {
                index,
                quantum_ns: self.quantum_ns,
                ..Default::default()
            }),
        });
        let c2 = Arc::clone(&ctl);
        let (q, rt, tuning) = (self.quantum_ns, self.realtime_priority, self.tuning);
        let spawned = std::thread::Builder::new()
            .name(format!("sched-gpu{index}"))
            .spawn(move || {
                let rt = realtime::apply(rt, index);
                device::run(index, q, rt, tuning, c2)
            });
        if let Err(e) = spawned {
            tracing::error!("cannot start the scheduler of device {index}: {e}");
        }
        m.insert(index, Arc::clone(&ctl));
        ctl
    }

    /// Schedules slice `id` on host device `index`, entry `entry` of the files in `dir`.
    pub fn add(&self, index: u32, id: &str, dir: &Path, entry: usize, params: Params) {
        self.ctl(index).send(Cmd::Add {
            id: id.to_string(),
            dir: dir.to_path_buf(),
            entry,
            params,
        });
    }

    /// New shares for slice `id` on every device it is on; effective at the loop's next turn
    /// (it is woken at once).
    pub fn update(&self, id: &str, params: Params) {
        for ctl in self.all() {
            ctl.send(Cmd::Update {
                id: id.to_string(),
                params,
            });
        }
    }

    /// Stops scheduling slice `id`; returns once no device loop lets it hold the lease (at most
    /// one drain timeout per device).
    pub fn remove(&self, id: &str) {
        let mut acks = Vec::new();
        for ctl in self.all() {
            let (tx, rx) = std::sync::mpsc::channel();
            ctl.send(Cmd::Remove {
                id: id.to_string(),
                ack: tx,
            });
            acks.push(rx);
        }
        for rx in acks {
            let _ = rx.recv_timeout(Duration::from_secs(2));
        }
    }

    fn all(&self) -> Vec<Arc<Ctl>> {
        self.devices
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .values()
            .cloned()
            .collect()
    }

    /// The last published state of every device loop (refreshed every 100 ms while leases
    /// move).
    pub fn status(&self) -> SchedulerStatus {
        SchedulerStatus {
            devices: self
                .all()
                .iter()
                .map(|c| {
                    c.status
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .clone()
                })
                .collect(),
        }
    }
}

/// Writes `sched.status()` as JSON to `path` every second (a debugging and benchmark hook, on
/// only when `GPUSLICE_SCHED_STATUS_FILE` names a file; see `docs/scheduling.md`).
pub fn spawn_status_file(sched: Arc<Scheduler>, path: std::path::PathBuf) {
    let r = std::thread::Builder::new()
        .name("sched-status".into())
        .spawn(move || loop {
            if let Ok(body) = serde_json::to_vec(&sched.status()) {
                let tmp = path.with_extension("tmp");
                if std::fs::write(&tmp, body).is_ok() {
                    let _ = std::fs::rename(&tmp, &path);
                }
            }
            std::thread::sleep(Duration::from_secs(1));
        });
    if let Err(e) = r {
        tracing::warn!("cannot start the status-file writer: {e}");
    }
}

impl Drop for Scheduler {
    fn drop(&mut self) {
        for ctl in self.all() {
            ctl.send(Cmd::Stop);
        }
    }
}
