//! Foreign-owned devices: the CUDA processes outside gpuslice the backstop found (a whole-GPU
//! tenant, such as a Pod given `nvidia.com/gpu` by NVIDIA's device plugin) are recorded in the
//! admission state, which then places no new slice on their devices. Slices already there are
//! never killed or moved for it — they were there first — but are named loudly: a warning when
//! the device becomes foreign-owned, `gpuslice status`, and the metrics
//! `gpuslice_device_foreign_processes` and `gpuslice_slice_beside_foreign`.

use std::collections::{BTreeMap, BTreeSet};

use gpuslice_api::ForeignProcess;

use super::State;

/// `pid 7001 (python3)` for each process, comma-joined.
fn names(list: &[&ForeignProcess]) -> String {
    list.iter()
        .map(|f| {
            if f.comm.is_empty() {
                format!("pid {}", f.pid)
            } else {
                format!("pid {} ({})", f.pid, f.comm)
            }
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// The processes of `list` by device.
fn by_device(list: &[ForeignProcess]) -> BTreeMap<u32, Vec<&ForeignProcess>> {
    let mut out: BTreeMap<u32, Vec<&ForeignProcess>> = BTreeMap::new();
    for f in list {
        out.entry(f.device).or_default().push(f);
    }
    out
}

impl State {
    /// Records the foreign processes of the backstop's last check, logging each device that
    /// becomes foreign-owned (with the slices already on it) or stops being so.
    pub fn set_foreign(&mut self, list: Vec<ForeignProcess>) {
        let before: BTreeSet<(u32, u32)> = self
            .admission
            .foreign()
            .iter()
            .map(|f| (f.device, f.pid))
            .collect();
        let now = by_device(&list);
        for (dev, procs) in &now {
            if procs.iter().all(|f| before.contains(&(*dev, f.pid))) {
                continue;
            }
            let here: Vec<&str> = self
                .admission
                .slices()
                .filter(|s| s.devices.iter().any(|d| d.index == *dev))
                .map(|s| s.slice_id.as_str())
                .collect();
            let beside = if here.is_empty() {
                String::new()
            } else {
                format!(
                    "; slice(s) {} were placed there first and now share the GPU with it \
                     (not killed: move them, or stop the process)",
                    here.join(", ")
                )
            };
            tracing::warn!(
                "device {dev} is foreign-owned: {} runs CUDA outside gpuslice (a whole-GPU \
                 tenant); no new slice is placed there{beside}",
                names(procs)
            );
        }
        for dev in before.iter().map(|(d, _)| *d).collect::<BTreeSet<u32>>() {
            if !now.contains_key(&dev) {
                tracing::info!("device {dev} is no longer foreign-owned: it takes slices again");
            }
        }
        self.admission.set_foreign(list);
    }

    /// Drops the foreign processes that have exited since the backstop's last check, so a
    /// device is open again as soon as its whole-GPU tenant is gone, not one period later (an
    /// admit right after a bare CUDA run ends would otherwise be refused).
    pub(super) fn forget_exited_foreign(&mut self) {
        let list = self.admission.foreign();
        let live: Vec<ForeignProcess> = list
            .iter()
            .filter(|f| {
                gpuslice_region::liveness::stat_of(f.pid)
                    .ok()
                    .flatten()
                    .is_some_and(|st| !st.exited())
            })
            .cloned()
            .collect();
        if live.len() != list.len() {
            self.set_foreign(live);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::inventory::{DeviceInventory, StaticInventory};
    use crate::store::Store;
    use gpuslice_api::{Request, Response};

    fn admit_on(st: &mut State, id: &str, dev: u32) -> Response {
        let line = format!("{{\"memory\":\"1Gi\",\"devices\":{{\"list\":[{{\"index\":{dev}}}]}}}}");
        st.handle(Request::Admit {
            slice_id: id.into(),
            request: serde_json::from_str(&line).unwrap(),
            owner: Default::default(),
        })
    }

    /// A foreign process that has exited no longer keeps its device closed, even before the
    /// backstop's next check; one still running does.
    #[test]
    fn an_exited_foreign_process_is_forgotten_at_admission() {
        let dir = std::env::temp_dir().join(format!("gs-foreign-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let devs = StaticInventory::fake(&[("GPU", 8 << 30), ("GPU", 8 << 30)])
            .devices()
            .unwrap();
        let (mut st, _) =
            State::open(devs, crate::Policy::default(), Store::open(&dir).unwrap()).unwrap();
        let mut gone = std::process::Command::new("true").spawn().unwrap();
        gone.wait().unwrap();
        let f = |device, pid| ForeignProcess {
            device,
            pid,
            ..ForeignProcess::default()
        };
        st.set_foreign(vec![f(0, std::process::id()), f(1, gone.id())]);
        assert!(matches!(admit_on(&mut st, "a", 0), Response::Error { .. }));
        let r = admit_on(&mut st, "b", 1);
        assert!(matches!(r, Response::Admitted { .. }), "{r:?}");
        assert_eq!(st.admission.foreign().len(), 1);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
