//! The arbiter's state: the admission state, the slice records on disk, the attached time-slice
//! scheduler, and the slices' region files kept in step with them. Requests change it through
//! [`State::handle`] (`state/handle.rs`), so memory state and disk change together or not at all.
//!
//! Layering (no module imports one above it): the socket layer ([`crate::server`]), the
//! metrics endpoint, reclaim, the backstop loop and the orderly stop sit on top and reach the
//! state through `Arc<Mutex<State>>`; the state sits on admission, the store, the scheduler and
//! the slice files, which import nothing of the daemon.

mod events;
mod foreign;
mod handle;

pub use events::{Events, EVENTS_PER_SLICE};

use std::io;
use std::sync::Arc;

use gpuslice_api::SliceStatus;

use crate::admission::Admission;
use crate::fit::Policy;
use crate::inventory::DeviceInfo;
use crate::sched::Scheduler;
use crate::store::Store;

/// The arbiter's state: admission plus the records on disk.
#[derive(Debug)]
pub struct State {
    admission: Admission,
    store: Store,
    sched: Option<Arc<Scheduler>>,
    events: Events,
    /// Each device's context footprint (`crate::contexts`), for `status` and metrics.
    contexts: Vec<crate::contexts::Footprint>,
}

impl State {
    /// This state with the devices' context footprints (`crate::contexts`).
    pub fn with_contexts(mut self, contexts: Vec<crate::contexts::Footprint>) -> State {
        self.contexts = contexts;
        self
    }

    /// Each device's context footprint (empty when not measured: tests).
    pub fn contexts(&self) -> &[crate::contexts::Footprint] {
        &self.contexts
    }

    /// Builds the state from the devices and the records in `store`. Returns the state and the
    /// warnings to log (unreadable records, records for devices that are gone, over-capacity).
    pub fn open(
        devices: Vec<DeviceInfo>,
        policy: Policy,
        store: Store,
    ) -> io::Result<(State, Vec<String>)> {
        let mut admission = Admission::new(devices, policy);
        let (records, mut warnings) = store.load_all()?;
        for r in records {
            let id = r.slice_id.clone();
            match admission.restore(r) {
                Ok(w) => warnings.extend(w),
                Err(e) => warnings.push(format!("slice \"{id}\" not restored: {e}")),
            }
        }
        Ok((
            State {
                admission,
                store,
                sched: None,
                events: Events::new(),
                contexts: Vec::new(),
            },
            warnings,
        ))
    }

    /// Attaches the time-slice scheduler: every slice (restored ones now, new ones on admit)
    /// gets leased region files and is scheduled on its devices. Returns warnings to log.
    pub fn attach_scheduler(&mut self, sched: Arc<Scheduler>) -> Vec<String> {
        self.sched = Some(sched);
        let mut warnings = Vec::new();
        let slices: Vec<_> = self.admission.slices().cloned().collect();
        for rec in slices {
            if let Err(e) = self.start_slice(&rec) {
                warnings.push(format!("slice \"{}\": {e}", rec.slice_id));
            }
        }
        warnings
    }

    /// The scheduler, when attached.
    pub fn scheduler(&self) -> Option<&Arc<Scheduler>> {
        self.sched.as_ref()
    }

    /// The admission state.
    pub fn admission(&self) -> &Admission {
        &self.admission
    }

    /// The event counters and the backstop history.
    pub fn events(&self) -> &Events {
        &self.events
    }

    /// Creates the slice's region files and schedules it (with a scheduler attached).
    fn start_slice(&self, rec: &SliceStatus) -> Result<(), String> {
        let Some(sched) = &self.sched else {
            return Ok(());
        };
        let dir = self.store.slice_dir(&rec.slice_id);
        let p = self.admission.policy();
        crate::slices::create(&dir, rec, |index| (p.charge_on(index), p.reserve_on(index)))
            .map_err(|e| e.to_string())?;
        let params = crate::sched::params_of(&rec.request);
        for (entry, d) in rec.devices.iter().enumerate() {
            sched.add(d.index, &rec.slice_id, &dir, entry, params);
        }
        Ok(())
    }

    /// What each admitted slice holds now, read from its `usage` file (0 without one).
    fn held(&self, id: &str, uuid: &str) -> u64 {
        self.admission
            .slice(id)
            .and_then(|s| {
                crate::slices::measured_use(&self.store.slice_dir(id), s)
                    .get(uuid)
                    .copied()
            })
            .unwrap_or(0)
    }

    /// Rewrites the region caps of the best-effort slices whose effective cap changed since
    /// `before` (a neighbour came, went or changed), all but `skip` (whose files were just
    /// written whole). Region files exist only with a scheduler attached.
    fn rewrite_best_effort(&self, before: &Admission, skip: &str) {
        if self.sched.is_none() {
            return;
        }
        for s in self.admission.slices() {
            if s.slice_id == skip
                || before.slice(&s.slice_id).map(|o| &o.devices) == Some(&s.devices)
            {
                continue;
            }
            let dir = self.store.slice_dir(&s.slice_id);
            if let Err(e) = crate::slices::write_memory_caps(&dir, s) {
                tracing::warn!(
                    "slice {}: cannot rewrite its best-effort memory cap: {e}",
                    s.slice_id
                );
            }
        }
    }
}
