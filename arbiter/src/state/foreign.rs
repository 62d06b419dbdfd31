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
}
