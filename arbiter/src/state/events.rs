//! What the arbiter counts and remembers, owned by the [`State`](super::State): the node's event
//! counters as `prometheus-client` families, registered once in their own registry (admission
//! refusals, reclaimed processes, slices released by reclaim, backstop actions), and the recent
//! backstop actions per slice that `status` returns. A released slice's per-slice series and
//! history are dropped ([`Events::forget`]); node totals are kept. Names: `docs/metrics.md`.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Mutex, PoisonError};

use gpuslice_api::{BackstopEvent, ErrorCode, ProcessFootprint};
use prometheus_client::encoding::prometheus_text;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::{Metric, Registry};

/// Backstop events kept per slice for `status`.
pub const EVENTS_PER_SLICE: usize = 8;

/// What the backstop checks (`kind` label).
const BACKSTOP_KINDS: [&str; 2] = ["memory", "lease"];
/// What it did (`action` label): a configured action, or `failed`.
const BACKSTOP_ACTIONS: [&str; 4] = ["kill", "freeze", "log", "failed"];

type Labels = Vec<(String, String)>;

fn labels(pairs: &[(&str, &str)]) -> Labels {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// The counters and the backstop history.
#[derive(Debug)]
pub struct Events {
    registry: Registry,
    refusals: Family<Labels, Counter>,
    reclaimed_by_slice: Family<Labels, Counter>,
    reclaimed: Counter,
    released_by_reclaim: Counter,
    backstop_by_slice: Family<Labels, Counter>,
    backstop: Family<Labels, Counter>,
    history: Mutex<BTreeMap<String, VecDeque<BackstopEvent>>>,
    /// Each slice process's own footprint from the backstop's last check.
    footprints: Mutex<Vec<ProcessFootprint>>,
}

impl Default for Events {
    fn default() -> Events {
        Events::new()
    }
}

/// A zeroed metric, registered in `reg` under `name`.
fn registered<M: Metric + Clone + Default>(reg: &mut Registry, name: &str, help: &str) -> M {
    let m = M::default();
    reg.register(name, help, m.clone());
    m
}

fn code_name(code: ErrorCode) -> &'static str {
    match code {
        ErrorCode::BadRequest => "bad_request",
        ErrorCode::Version => "version",
        ErrorCode::Refused => "refused",
        ErrorCode::NotFound => "not_found",
        ErrorCode::Conflict => "conflict",
        ErrorCode::Internal => "internal",
        ErrorCode::Busy => "busy",
    }
}

impl Events {
    /// Zeroed counters, registered.
    pub fn new() -> Events {
        let mut reg = Registry::default();
        Events {
            refusals: registered(
                &mut reg,
                "gpuslice_admission_refusals",
                "Admit requests refused, by error code",
            ),
            reclaimed_by_slice: registered(
                &mut reg,
                "gpuslice_slice_reclaimed_processes",
                "Usage records of dead processes freed in the slice by the arbiter",
            ),
            reclaimed: registered(
                &mut reg,
                "gpuslice_reclaimed_processes",
                "Usage records of dead processes freed by the arbiter (all slices, ever)",
            ),
            released_by_reclaim: registered(
                &mut reg,
                "gpuslice_reclaim_released_slices",
                "Slices released because their owner process or cgroup was gone",
            ),
            backstop_by_slice: registered(
                &mut reg,
                "gpuslice_slice_backstop_actions",
                "Backstop actions on the slice (kind: memory or lease; action: kill, freeze, log, failed)",
            ),
            backstop: registered(
                &mut reg,
                "gpuslice_backstop_actions",
                "Backstop actions on all slices, ever (kind: memory or lease; action: kill, freeze, log, failed)",
            ),
            registry: reg,
            history: Mutex::default(),
            footprints: Mutex::default(),
        }
    }

    /// An admit was refused with `code`.
    pub fn count_refusal(&self, code: ErrorCode) {
        self.refusals
            .get_or_create(&labels(&[("code", code_name(code))]))
            .inc();
    }

    /// Reclaim freed `n` records of dead processes in `slice` (`None`: a slice already gone,
    /// counted in the node total only).
    pub fn count_reclaimed(&self, slice: Option<&str>, n: u64) {
        self.reclaimed.inc_by(n);
        if let Some(id) = slice {
            self.reclaimed_by_slice
                .get_or_create(&labels(&[("slice", id)]))
                .inc_by(n);
        }
    }

    /// Reclaim released a slice whose owner is gone.
    pub fn count_released_by_reclaim(&self) {
        self.released_by_reclaim.inc();
    }

    /// The backstop acted: each event is counted, and remembered for `status` (at most
    /// [`EVENTS_PER_SLICE`] per slice) when `live` says its slice is still admitted.
    pub fn record_backstop(&self, events: &[BackstopEvent], live: impl Fn(&str) -> bool) {
        let mut h = self.history.lock().unwrap_or_else(PoisonError::into_inner);
        for e in events {
            let (kind, action) = (e.kind.as_str(), e.action.as_str());
            self.backstop
                .get_or_create(&labels(&[("kind", kind), ("action", action)]))
                .inc();
            if !live(&e.slice_id) {
                continue;
            }
            self.backstop_by_slice
                .get_or_create(&labels(&[
                    ("slice", &e.slice_id),
                    ("kind", kind),
                    ("action", action),
                ]))
                .inc();
            let q = h.entry(e.slice_id.clone()).or_default();
            q.push_back(e.clone());
            while q.len() > EVENTS_PER_SLICE {
                q.pop_front();
            }
        }
    }

    /// The recent backstop events of the admitted slices, oldest first.
    pub fn recent_backstop(&self) -> Vec<BackstopEvent> {
        let h = self.history.lock().unwrap_or_else(PoisonError::into_inner);
        let mut out: Vec<BackstopEvent> = h.values().flatten().cloned().collect();
        out.sort_by_key(|e| e.at_ms);
        out
    }

    /// The slice processes' footprints the backstop found at its last check.
    pub fn set_footprints(&self, list: Vec<ProcessFootprint>) {
        *self
            .footprints
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = list;
    }

    /// The footprints of the processes of admitted slices (`live`), from the last check.
    pub fn footprints(&self, live: impl Fn(&str) -> bool) -> Vec<ProcessFootprint> {
        let f = self
            .footprints
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        f.iter().filter(|p| live(&p.slice_id)).cloned().collect()
    }

    /// Drops the per-slice series and history of `slice` (released).
    pub fn forget(&self, slice: &str) {
        self.reclaimed_by_slice.remove(&labels(&[("slice", slice)]));
        for kind in BACKSTOP_KINDS {
            for action in BACKSTOP_ACTIONS {
                self.backstop_by_slice.remove(&labels(&[
                    ("slice", slice),
                    ("kind", kind),
                    ("action", action),
                ]));
            }
        }
        self.history
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(slice);
    }

    /// Admit requests refused with `code` so far.
    pub fn refusals(&self, code: ErrorCode) -> u64 {
        self.refusals
            .get(&labels(&[("code", code_name(code))]))
            .map_or(0, |c| c.get())
    }

    /// Processes reclaimed so far (node total).
    pub fn reclaimed(&self) -> u64 {
        self.reclaimed.get()
    }

    /// Slices released by reclaim so far.
    pub fn released_by_reclaim(&self) -> u64 {
        self.released_by_reclaim.get()
    }

    /// Appends the counters to a scrape, in the Prometheus text format.
    pub fn encode(&self, out: &mut String) -> std::fmt::Result {
        prometheus_text::encode(out, &self.registry)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(slice: &str, at_ms: u64) -> BackstopEvent {
        BackstopEvent {
            slice_id: slice.into(),
            device: 0,
            kind: "memory".into(),
            action: "kill".into(),
            pids: vec![1],
            message: String::new(),
            at_ms,
        }
    }

    #[test]
    fn a_released_slice_leaves_the_series_and_the_totals_stay() {
        let e = Events::new();
        e.count_reclaimed(Some("a"), 2);
        e.record_backstop(&[event("a", 2), event("b", 1)], |s| s == "a");
        assert_eq!(e.recent_backstop().len(), 1, "b was not admitted");
        let mut text = String::new();
        e.encode(&mut text).unwrap();
        assert!(text.contains("gpuslice_slice_reclaimed_processes_total{slice=\"a\"} 2"));
        assert!(text.contains(
            "gpuslice_slice_backstop_actions_total{slice=\"a\",kind=\"memory\",action=\"kill\"} 1"
        ));
        e.forget("a");
        let mut text = String::new();
        e.encode(&mut text).unwrap();
        assert!(!text.contains("slice=\"a\""), "{text}");
        assert!(text.contains("gpuslice_backstop_actions_total{kind=\"memory\",action=\"kill\"} 2"));
        assert!(text.contains("gpuslice_reclaimed_processes_total 2"));
        assert!(e.recent_backstop().is_empty());
    }

    #[test]
    fn history_keeps_the_newest_per_slice() {
        let e = Events::new();
        let many: Vec<_> = (0..20).map(|t| event("a", t)).collect();
        e.record_backstop(&many, |_| true);
        let kept = e.recent_backstop();
        assert_eq!(kept.len(), EVENTS_PER_SLICE);
        assert_eq!(kept[0].at_ms, 20 - EVENTS_PER_SLICE as u64);
    }
}
