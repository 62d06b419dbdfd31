//! Which units a container gets (`GetPreferredAllocation`) and what a container made of units
//! becomes (`Allocate`), independent of gRPC.
//!
//! A container's units are always on one GPU: its slice is one cap on one device. Among the GPUs
//! with enough free units the preferred one is the one left with the fewest free units — the
//! arbiter's bin-pack (`placement = "binpack"`, least memory left after placement) in units —
//! ties to the lower index; within it the lowest-numbered free units, so allocated units fill a
//! GPU from 0 and the units [`crate::deviceplugin::units`] reports unavailable (the highest
//! numbers) are the ones kubelet has not handed out.

use std::collections::{BTreeMap, BTreeSet};

use gpuslice_api::quantity::format_bytes;
use gpuslice_oci::select::{device_plugin_value, DEVICE_PLUGIN_ENV};

use super::units::{device_id, parse_id, GpuUnits};
use super::{ENV_DEVICES, ENV_MEMORY, RESOURCE};

/// Free ids per GPU (by UUID, in GPU order), from kubelet's list.
fn free_by_gpu<'a>(gpus: &'a [GpuUnits], ids: &[String]) -> Vec<(&'a GpuUnits, BTreeSet<u32>)> {
    gpus.iter()
        .map(|g| {
            let free: BTreeSet<u32> = ids
                .iter()
                .filter_map(|id| parse_id(id))
                .filter(|(u, n)| *u == g.uuid && *n < g.units)
                .map(|(_, n)| n)
                .collect();
            (g, free)
        })
        .collect()
}

/// Why kubelet's request cannot be answered; every message starts with the resource's name.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum PlaceError {
    /// `GetPreferredAllocation` with a size that is not a positive count.
    #[error("{RESOURCE}: allocation size {0} is not a positive count")]
    BadSize(i32),
    /// An id kubelet must include is not a unit of this node.
    #[error("{RESOURCE}: device {0:?} kubelet must include is not a unit of this node")]
    UnknownMustInclude(String),
    /// The ids kubelet must include are on two GPUs.
    #[error("{RESOURCE}: kubelet must include units of two GPUs ({0} and {1}); one container's units are never split across GPUs")]
    MustIncludeTwoGpus(String, String),
    /// No single GPU has enough free units.
    #[error("{RESOURCE}: the container asks {asks} and no single GPU of this node has that many free (one container's units are never split across GPUs); {free}")]
    NoRoom {
        /// The request (`50 units (50Gi)`).
        asks: String,
        /// Every GPU's free units.
        free: String,
    },
    /// `Allocate` without ids.
    #[error("{RESOURCE}: Allocate with no device ids")]
    NoIds,
    /// An id that is not of the form `GPU-<uuid>::<n>`.
    #[error(
        "{RESOURCE}: unknown device id {0:?}: not a unit of this node (ids are GPU-<uuid>::<n>)"
    )]
    NotAnId(String),
    /// An id of a GPU this node does not have.
    #[error("{RESOURCE}: unknown device id {id:?}: GPU {gpu} is not on this node")]
    UnknownGpu {
        /// The id.
        id: String,
        /// Its GPU.
        gpu: String,
    },
    /// A unit number beyond the GPU's units.
    #[error("{RESOURCE}: unknown device id {id:?}: {gpu} has units 0..{last}")]
    UnknownUnit {
        /// The id.
        id: String,
        /// The GPU's label.
        gpu: String,
        /// Its highest unit.
        last: u32,
    },
    /// A unit this node reports unavailable.
    #[error("{RESOURCE}: device {id:?} is unavailable: {gpu}: {why}")]
    Unavailable {
        /// The id.
        id: String,
        /// The GPU's label.
        gpu: String,
        /// Why its units are unavailable.
        why: String,
    },
    /// The same id twice.
    #[error("{RESOURCE}: device {0:?} is listed twice")]
    Twice(String),
    /// One container's ids on several GPUs.
    #[error("{RESOURCE}: one container's units span {count} GPUs ({each}); a slice is one cap on one GPU, so they are refused")]
    SpansGpus {
        /// How many GPUs.
        count: usize,
        /// The units on each.
        each: String,
    },
}

fn amount(units: u64, unit: u64) -> String {
    format!(
        "{units} units ({})",
        format_bytes(units.saturating_mul(unit))
    )
}

/// The preferred `size` units out of `available` (kubelet's free, healthy ids), including
/// `must_include`; `Err` when no single GPU has that many free, naming every GPU's free units.
pub fn preferred(
    gpus: &[GpuUnits],
    unit: u64,
    available: &[String],
    must_include: &[String],
    size: i32,
) -> Result<Vec<String>, PlaceError> {
    let size = u32::try_from(size)
        .ok()
        .filter(|s| *s > 0)
        .ok_or(PlaceError::BadSize(size))?;
    let free = free_by_gpu(gpus, available);
    let mut must_gpu: Option<&str> = None;
    for id in must_include {
        let Some((u, _)) =
            parse_id(id).filter(|(u, n)| gpus.iter().any(|g| g.uuid == *u && *n < g.units))
        else {
            return Err(PlaceError::UnknownMustInclude(id.clone()));
        };
        match must_gpu {
            Some(m) if m != u => {
                return Err(PlaceError::MustIncludeTwoGpus(m.to_string(), u.to_string()))
            }
            _ => must_gpu = Some(u),
        }
    }
    let must: BTreeSet<u32> = must_include
        .iter()
        .filter_map(|id| parse_id(id).map(|(_, n)| n))
        .collect();
    let best = free
        .iter()
        .filter(|(g, _)| must_gpu.is_none_or(|m| m == g.uuid))
        .filter(|(_, f)| f.union(&must).count() >= size as usize)
        .min_by_key(|(g, f)| (f.union(&must).count(), g.index));
    let Some((g, f)) = best else {
        let each: Vec<String> = free
            .iter()
            .map(|(g, f)| {
                format!(
                    "{}: {} free of {}",
                    g.label(),
                    amount(f.len() as u64, unit),
                    g.units
                )
            })
            .collect();
        return Err(PlaceError::NoRoom {
            asks: amount(u64::from(size), unit),
            free: each.join("; "),
        });
    };
    let mut chosen: Vec<u32> = must.iter().copied().collect();
    chosen.extend(
        f.iter()
            .filter(|n| !must.contains(n))
            .take(size as usize - must.len()),
    );
    chosen.truncate(size as usize);
    chosen.sort_unstable();
    Ok(chosen.into_iter().map(|n| device_id(&g.uuid, n)).collect())
}

/// What one container's units become.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Allocation {
    /// The GPU.
    pub uuid: String,
    /// Units.
    pub units: u32,
    /// The cap they add up to, bytes.
    pub bytes: u64,
}

impl Allocation {
    /// The container's environment: the cap, the GPU, and the mark that makes the runtime refuse
    /// a disagreeing `gpuslice.io/memory` / `gpuslice.io/devices`.
    pub fn envs(&self) -> BTreeMap<String, String> {
        BTreeMap::from([
            (ENV_MEMORY.to_string(), self.bytes.to_string()),
            (ENV_DEVICES.to_string(), self.uuid.clone()),
            (
                DEVICE_PLUGIN_ENV.to_string(),
                device_plugin_value(&self.uuid, self.bytes),
            ),
        ])
    }
}

/// Checks one container's `ids`: every one a unit this node advertises and reports available,
/// none twice, all on one GPU.
pub fn allocate(gpus: &[GpuUnits], unit: u64, ids: &[String]) -> Result<Allocation, PlaceError> {
    if ids.is_empty() {
        return Err(PlaceError::NoIds);
    }
    let mut per_gpu: BTreeMap<&str, BTreeSet<u32>> = BTreeMap::new();
    for id in ids {
        let Some((u, n)) = parse_id(id) else {
            return Err(PlaceError::NotAnId(id.clone()));
        };
        let Some(g) = gpus.iter().find(|g| g.uuid == u) else {
            return Err(PlaceError::UnknownGpu {
                id: id.clone(),
                gpu: u.to_string(),
            });
        };
        if n >= g.units {
            return Err(PlaceError::UnknownUnit {
                id: id.clone(),
                gpu: g.label(),
                last: g.units.saturating_sub(1),
            });
        }
        if n >= g.available {
            return Err(PlaceError::Unavailable {
                id: id.clone(),
                gpu: g.label(),
                why: g.note.clone(),
            });
        }
        if !per_gpu.entry(u).or_default().insert(n) {
            return Err(PlaceError::Twice(id.clone()));
        }
    }
    if per_gpu.len() > 1 {
        let each: Vec<String> = per_gpu
            .iter()
            .map(|(u, s)| format!("{} on {u}", amount(s.len() as u64, unit)))
            .collect();
        return Err(PlaceError::SpansGpus {
            count: per_gpu.len(),
            each: each.join(", "),
        });
    }
    let (uuid, set) = per_gpu.into_iter().next().unwrap_or_default();
    let units = u32::try_from(set.len()).unwrap_or(u32::MAX);
    Ok(Allocation {
        uuid: uuid.to_string(),
        units,
        bytes: u64::from(units) * unit,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const GI: u64 = 1 << 30;

    fn node() -> Vec<GpuUnits> {
        [("GPU-h", "H100", 76), ("GPU-a", "A100", 36)]
            .iter()
            .enumerate()
            .map(|(i, (u, n, k))| GpuUnits {
                index: i as u32,
                uuid: (*u).into(),
                name: (*n).into(),
                units: *k,
                available: *k,
                note: String::new(),
            })
            .collect()
    }

    fn all(gpus: &[GpuUnits]) -> Vec<String> {
        gpus.iter()
            .flat_map(|g| (0..g.units).map(|n| device_id(&g.uuid, n)))
            .collect()
    }

    #[test]
    fn preferred_packs_the_fullest_gpu_that_fits_and_never_splits() {
        let g = node();
        let mut free = all(&g);
        let take = |size: i32, free: &mut Vec<String>| {
            let got = preferred(&g, GI, free, &[], size).unwrap();
            free.retain(|id| !got.contains(id));
            let a = allocate(&g, GI, &got).unwrap();
            (a.uuid, a.units)
        };
        assert_eq!(take(30, &mut free), ("GPU-a".into(), 30));
        assert_eq!(take(30, &mut free), ("GPU-h".into(), 30));
        assert_eq!(take(40, &mut free), ("GPU-h".into(), 40));
        let e = preferred(&g, GI, &free, &[], 50).unwrap_err();
        assert!(matches!(e, PlaceError::NoRoom { .. }), "{e:?}");
        let e = e.to_string();
        assert!(
            e.contains("asks 50 units (50Gi)")
                && e.contains("GPU 0 GPU-h (H100): 6 units (6Gi) free of 76")
                && e.contains("GPU 1 GPU-a (A100): 6 units (6Gi) free of 36"),
            "{e}"
        );
    }

    #[test]
    fn must_include_pins_the_gpu() {
        let g = node();
        let free = all(&g);
        let got = preferred(&g, GI, &free, &["GPU-h::5".into()], 2).unwrap();
        assert_eq!(got, vec!["GPU-h::0", "GPU-h::5"]);
        let e = preferred(&g, GI, &free, &["GPU-h::5".into(), "GPU-a::1".into()], 3).unwrap_err();
        assert!(e.to_string().contains("two GPUs"), "{e}");
        assert_eq!(
            preferred(&g, GI, &free, &[], 0),
            Err(PlaceError::BadSize(0))
        );
        let e = preferred(&g, GI, &free, &["GPU-h::999".into()], 1).unwrap_err();
        assert_eq!(e, PlaceError::UnknownMustInclude("GPU-h::999".into()));
        assert!(e.to_string().starts_with(RESOURCE), "{e}");
    }

    #[test]
    fn allocate_refuses_unknown_duplicate_unavailable_and_split_ids() {
        let mut g = node();
        let ok = allocate(&g, GI, &["GPU-a::0".into(), "GPU-a::1".into()]).unwrap();
        assert_eq!(ok.bytes, 2 * GI);
        assert_eq!(
            ok.envs()["GPUSLICE_DEVICE_PLUGIN"],
            format!("GPU-a:{}", 2 * GI)
        );
        let e = |ids: &[&str], g: &[GpuUnits]| {
            allocate(
                g,
                GI,
                &ids.iter().map(|s| s.to_string()).collect::<Vec<_>>(),
            )
            .unwrap_err()
            .to_string()
        };
        assert_eq!(allocate(&g, GI, &[]).unwrap_err(), PlaceError::NoIds);
        assert!(e(&["nope"], &g).contains("unknown device id \"nope\""));
        assert!(e(&["GPU-x::1"], &g).contains("GPU GPU-x is not on this node"));
        assert!(e(&["GPU-a::36"], &g).contains("has units 0..35"));
        assert!(e(&["GPU-a::1", "GPU-a::1"], &g).contains("listed twice"));
        let split = e(&["GPU-a::1", "GPU-h::1", "GPU-h::2"], &g);
        assert!(
            split.contains("span 2 GPUs")
                && split.contains("1 units (1Gi) on GPU-a")
                && split.contains("2 units (2Gi) on GPU-h"),
            "{split}"
        );
        g[1].available = 10;
        g[1].note = "busy".into();
        assert!(e(&["GPU-a::10"], &g).contains("unavailable"));
    }
}
