//! Units of `gpuslice.io/gpu-memory`: how many each GPU offers and which are available.
//!
//! A GPU offers what the DRA mode publishes as its `memory` capacity ([`capacity::offer`]: the
//! device's memory less the context reserves of `--slices-per-gpu` slices), in whole units:
//!
//! ```text
//! units = floor(offer.memory / unit)
//! ```
//!
//! A remainder below one unit is not advertised (real GPUs never hold a round number of GiB);
//! [`units_of`] says so in [`GpuUnits::note`]. Units `0..available` of a GPU are reported
//! `Healthy`, the rest `Unhealthy`, where `available` follows what the arbiter holds:
//!
//! * slices in the plugin's form (a container's slice whose request is a whole number of units
//!   in bytes on exactly this GPU's UUID — what `Allocate` produces) are units kubelet already
//!   counts: they stay available;
//! * every other slice on the GPU (annotations, `gpuslice run`, another engine) takes the units
//!   its commitment covers, and a GPU holding `--slices-per-gpu` slices has no reserve left for
//!   another: `available = plugin units + floor(free / unit)` with
//!   `free = total − committed − (slices_per_gpu − slices) × reserve`;
//! * a GPU NVML stops reporting, or any GPU while the arbiter cannot be asked, has none.
//!
//! So the count kubelet reports (healthy units) minus what it allocated is what the arbiter will
//! still admit. With `overcommit_memory` the arbiter checks no memory: every unit is available.

use gpuslice_admission::fit::Policy;
use gpuslice_api::quantity::format_bytes;
use gpuslice_api::{DeviceRef, DeviceSelector, MemoryRequest, NodeStatus, SliceStatus};

use crate::capacity::{self, PublishPolicy, MEMORY_STEP};
use crate::gpu::Gpu;

/// Default unit: 1 GiB.
pub const DEFAULT_UNIT: u64 = 1 << 30;

/// What the plugin's accounting needs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnitPolicy {
    /// Bytes per unit, a multiple of 1 MiB.
    pub unit: u64,
    /// The arbiter's admission policy.
    pub policy: Policy,
    /// Slices per GPU whose reserves are set aside (`--slices-per-gpu`).
    pub publish: PublishPolicy,
}

/// A `--unit` that is not a unit.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum UnitError {
    /// Not a whole number of MiB.
    #[error("--unit \"{text}\": {bytes} bytes is not a whole number of MiB (at least 1Mi)")]
    NotMiB {
        /// As given.
        text: String,
        /// Its bytes.
        bytes: u64,
    },
    /// A percentage.
    #[error("--unit \"{text}\": a unit is a size, not a percent")]
    Percent {
        /// As given.
        text: String,
    },
    /// Not a quantity.
    #[error("--unit \"{text}\": {source}")]
    Quantity {
        /// As given.
        text: String,
        /// Why.
        source: gpuslice_api::QuantityError,
    },
}

/// Parses `--unit`: a byte quantity (`1Gi`, `256Mi`, bytes), a whole number of MiB.
pub fn parse_unit(text: &str) -> Result<u64, UnitError> {
    let text_ = || text.to_string();
    match MemoryRequest::parse(text) {
        Ok(MemoryRequest::Bytes(b)) if b >= MEMORY_STEP && b % MEMORY_STEP == 0 => Ok(b),
        Ok(MemoryRequest::Bytes(bytes)) => Err(UnitError::NotMiB {
            text: text_(),
            bytes,
        }),
        Ok(MemoryRequest::Percent(_)) => Err(UnitError::Percent { text: text_() }),
        Err(source) => Err(UnitError::Quantity {
            text: text_(),
            source,
        }),
    }
}

/// The device id of unit `n` of GPU `uuid`.
pub fn device_id(uuid: &str, n: u32) -> String {
    format!("{uuid}::{n}")
}

/// `(uuid, n)` of a device id, if it is one.
pub fn parse_id(id: &str) -> Option<(&str, u32)> {
    let (uuid, n) = id.rsplit_once("::")?;
    if uuid.is_empty() || n.is_empty() || !n.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    if n.len() > 1 && n.starts_with('0') {
        return None;
    }
    Some((uuid, n.parse().ok()?))
}

/// One GPU's units.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GpuUnits {
    /// NVML index.
    pub index: u32,
    /// UUID.
    pub uuid: String,
    /// Device name.
    pub name: String,
    /// Units advertised (ids `0..units`).
    pub units: u32,
    /// Units reported `Healthy` (ids `0..available`).
    pub available: u32,
    /// Why some units are unavailable, or what rounding left out; empty when nothing to say.
    pub note: String,
}

impl GpuUnits {
    /// `GPU 0 GPU-… (NVIDIA H100 80GB HBM3)`.
    pub fn label(&self) -> String {
        format!("GPU {} {} ({})", self.index, self.uuid, self.name)
    }
}

/// The units `gpu` offers under `p`, all available.
pub fn units_of(p: &UnitPolicy, gpu: &Gpu) -> GpuUnits {
    let offer = capacity::offer(&p.policy, &p.publish, &gpu.info).memory;
    let units = u32::try_from(offer / p.unit).unwrap_or(u32::MAX);
    let left = offer % p.unit;
    let note = if left == 0 {
        String::new()
    } else {
        format!(
            "offers {} ({} memory less {} context reserves); {units} units of {} are advertised, {} is left over",
            format_bytes(offer),
            format_bytes(gpu.info.memory_total),
            p.publish.slices_per_gpu,
            format_bytes(p.unit),
            format_bytes(left)
        )
    };
    GpuUnits {
        index: gpu.info.index,
        uuid: gpu.info.uuid.clone(),
        name: gpu.info.name.clone(),
        units,
        available: units,
        note,
    }
}

/// Whether `s` is in the form `Allocate` gives a container: one GPU named by UUID, a cap of a
/// whole number of units, owned by a container.
pub fn is_plugin_slice(s: &SliceStatus, unit: u64) -> bool {
    let one_uuid = matches!(&s.request.devices, DeviceSelector::List(l)
        if matches!(l.as_slice(), [DeviceRef::Uuid(u)] if s.devices.len() == 1 && s.devices[0].uuid == *u));
    let units = matches!(s.request.memory, Some(MemoryRequest::Bytes(b)) if b > 0 && b % unit == 0);
    one_uuid && units && s.owner.container_id.is_some()
}

/// Every GPU's units: `gpus` as NVML reports them now, `previous` (the last result: a GPU gone
/// from `gpus` stays listed with no unit available, so kubelet sees its units turn unhealthy
/// rather than vanish), `status` the arbiter's view (`Err`: why it could not be asked).
pub fn inventory(
    p: &UnitPolicy,
    gpus: &[Gpu],
    previous: &[GpuUnits],
    status: Result<&NodeStatus, &str>,
) -> Vec<GpuUnits> {
    let mut out: Vec<GpuUnits> = gpus.iter().map(|g| units_of(p, g)).collect();
    for g in &mut out {
        g.available = match status {
            Err(why) => {
                g.note = format!("the arbiter cannot be asked: {why}");
                0
            }
            Ok(st) => available(p, g, st),
        };
    }
    for old in previous {
        if !out.iter().any(|g| g.uuid == old.uuid) {
            out.push(GpuUnits {
                available: 0,
                note: "NVML no longer reports this GPU (lost, unhealthy or being reset)".into(),
                ..old.clone()
            });
        }
    }
    out.sort_by_key(|g| g.index);
    out
}

fn available(p: &UnitPolicy, g: &mut GpuUnits, st: &NodeStatus) -> u32 {
    let Some(dev) = st.devices.iter().find(|d| d.uuid == g.uuid) else {
        g.note = "the arbiter does not list this GPU".into();
        return 0;
    };
    // A whole-GPU tenant outside gpuslice holds it: the arbiter admits no slice there.
    if let Some(f) = st.foreign.iter().find(|f| f.device == dev.index) {
        g.note = format!(
            "foreign-owned: pid {} runs CUDA outside gpuslice; the arbiter places no slice here",
            f.pid
        );
        return 0;
    }
    if p.policy.overcommit_memory {
        return g.units;
    }
    let here: Vec<&SliceStatus> = st
        .slices
        .iter()
        .filter(|s| s.devices.iter().any(|d| d.uuid == g.uuid))
        .collect();
    let (mine, others): (Vec<&SliceStatus>, Vec<&SliceStatus>) =
        here.iter().partition(|s| is_plugin_slice(s, p.unit));
    let plugin_units: u64 = mine
        .iter()
        .map(|s| match s.request.memory {
            Some(MemoryRequest::Bytes(b)) => b / p.unit,
            _ => 0,
        })
        .sum();
    let slots = u64::from(p.publish.slices_per_gpu);
    let n = here.len() as u64;
    let usable = if n >= slots {
        0
    } else {
        dev.memory_total
            .saturating_sub(dev.memory_committed)
            .saturating_sub((slots - n) * p.policy.reserve_on(dev.index))
            / p.unit
    };
    let avail = u32::try_from((plugin_units + usable).min(u64::from(g.units))).unwrap_or(g.units);
    if avail < g.units {
        let ids: Vec<&str> = others.iter().map(|s| s.slice_id.as_str()).collect();
        let mut why = Vec::new();
        if !ids.is_empty() {
            why.push(format!(
                "{} slice(s) not made through the device plugin hold memory here ({})",
                ids.len(),
                ids.join(", ")
            ));
        }
        if n >= slots {
            why.push(format!(
                "it holds {n} slices, --slices-per-gpu is {slots}: no context reserve is left for another"
            ));
        }
        if why.is_empty() {
            why.push(format!(
                "the arbiter has {} committed of {}",
                format_bytes(dev.memory_committed),
                format_bytes(dev.memory_total)
            ));
        }
        g.note = format!(
            "{} of {} units unavailable: {}",
            g.units - avail,
            g.units,
            why.join("; ")
        );
    }
    avail
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_round_trip_and_junk_is_refused() {
        let id = device_id("GPU-a1", 12);
        assert_eq!(id, "GPU-a1::12");
        assert_eq!(parse_id(&id), Some(("GPU-a1", 12)));
        for bad in [
            "GPU-a1",
            "GPU-a1::",
            "::3",
            "GPU-a1::03",
            "GPU-a1::x",
            "GPU-a1::-1",
        ] {
            assert_eq!(parse_id(bad), None, "{bad}");
        }
    }

    #[test]
    fn units_are_whole_mib() {
        assert_eq!(parse_unit("1Gi"), Ok(1 << 30));
        assert_eq!(parse_unit("256Mi"), Ok(256 << 20));
        assert_eq!(
            parse_unit("1000"),
            Err(UnitError::NotMiB {
                text: "1000".into(),
                bytes: 1000
            })
        );
        assert!(parse_unit("1000")
            .unwrap_err()
            .to_string()
            .contains("whole number of MiB"));
        assert!(parse_unit("10%")
            .unwrap_err()
            .to_string()
            .contains("not a percent"));
        assert!(parse_unit("1Q")
            .unwrap_err()
            .to_string()
            .contains("--unit \"1Q\""));
    }

    fn gpu(index: u32, gib: u64) -> Gpu {
        Gpu {
            info: gpuslice_admission::inventory::DeviceInfo {
                index,
                uuid: format!("GPU-{index}"),
                name: "sim".into(),
                memory_total: gib << 30,
            },
            minor: index,
            architecture: None,
            compute_capability: None,
            driver_version: None,
        }
    }

    #[test]
    fn arbiter_down_or_gpu_gone_leaves_no_unit_available() {
        let p = UnitPolicy {
            unit: 1 << 30,
            policy: Policy::default(),
            publish: PublishPolicy::default(),
        };
        let gpus = [gpu(0, 80), gpu(1, 40)];
        let down = inventory(&p, &gpus, &[], Err("connection refused"));
        assert_eq!(
            down.iter()
                .map(|g| (g.units, g.available))
                .collect::<Vec<_>>(),
            [(76, 0), (36, 0)]
        );
        assert!(down[0].note.contains("connection refused"));
        let st = NodeStatus {
            devices: gpus
                .iter()
                .map(|g| gpuslice_api::DeviceStatus {
                    index: g.info.index,
                    uuid: g.info.uuid.clone(),
                    name: g.info.name.clone(),
                    memory_total: g.info.memory_total,
                    memory_committed: 0,
                    compute_guaranteed: 0,
                    slices: vec![],
                    shares: vec![],
                    context: None,
                })
                .collect(),
            ..NodeStatus::default()
        };
        let up = inventory(&p, &gpus, &down, Ok(&st));
        assert_eq!(up.iter().map(|g| g.available).collect::<Vec<_>>(), [76, 36]);
        // A foreign-owned GPU (a process outside gpuslice on it): nothing available there.
        let mut owned = st.clone();
        owned.foreign = vec![gpuslice_api::ForeignProcess {
            device: gpus[1].info.index,
            pid: 7001,
            ..Default::default()
        }];
        let held = inventory(&p, &gpus, &down, Ok(&owned));
        assert_eq!(
            held.iter().map(|g| g.available).collect::<Vec<_>>(),
            [76, 0]
        );
        assert!(held[1].note.contains("pid 7001"), "{}", held[1].note);
        // GPU 1 gone from NVML: still listed, nothing available.
        let gone = inventory(&p, &gpus[..1], &up, Ok(&st));
        assert_eq!(gone.len(), 2);
        assert_eq!((gone[1].units, gone[1].available), (36, 0));
        assert!(gone[1].note.contains("NVML no longer reports"));
        // A unit that does not divide the offer: rounded down, said so.
        let odd = UnitPolicy { unit: 5 << 30, ..p };
        let g = units_of(&odd, &gpus[1]);
        assert_eq!(g.units, 7);
        assert!(g.note.contains("left over"), "{}", g.note);
    }
}
