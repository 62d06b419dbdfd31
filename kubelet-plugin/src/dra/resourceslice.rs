//! The ResourceSlices of this node's pool (driver `gpuslice.io`, pool = node name): one device
//! per GPU named `gpu-<index>`, `allowMultipleAllocations: true`, capacities `memory`, `compute`
//! and `slices` with their request policies ([`crate::capacity`]), attributes `uuid`, `index`,
//! `productName`, `architecture`, `computeCapability`, `driverVersion`. At most
//! [`MAX_DEVICES_PER_SLICE`] devices per slice; a larger node spans several slices of one pool
//! generation. Publishing them through the API server: [`crate::dra::publish`].

use std::collections::BTreeMap;

use gpuslice_admission::fit::Policy;
use k8s_openapi::api::resource::v1::{
    CapacityRequestPolicy, CapacityRequestPolicyRange, Device, DeviceAttribute, DeviceCapacity,
    ResourcePool, ResourceSlice, ResourceSliceSpec,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use crate::capacity::{self, names, Offer, PublishPolicy, MEMORY_STEP};
use crate::gpu::{semver, Gpu};
use crate::quantity::{self, quantity};
use crate::DRIVER;

/// The API's limit on devices in one ResourceSlice.
pub const MAX_DEVICES_PER_SLICE: usize = 128;

/// How a claim consumes `memory`: the whole offer when it names none (an exclusive GPU, as
/// DRA does for a capacity without a policy), else whole MiB from 1 MiB up.
pub fn memory_policy(offer: &Offer) -> CapacityRequestPolicy {
    CapacityRequestPolicy {
        default: Some(quantity(offer.memory)),
        valid_range: Some(CapacityRequestPolicyRange {
            min: quantity(MEMORY_STEP),
            max: None,
            step: Some(quantity(MEMORY_STEP)),
        }),
        valid_values: None,
    }
}

/// How a claim consumes `compute`: nothing when it names none (best effort), else whole
/// percent.
pub fn compute_policy() -> CapacityRequestPolicy {
    CapacityRequestPolicy {
        default: Some(quantity(0)),
        valid_range: Some(CapacityRequestPolicyRange {
            min: quantity(0),
            max: None,
            step: Some(quantity(1)),
        }),
        valid_values: None,
    }
}

/// How a claim consumes `slices`: always 1 (a request for 0 is rounded up to 1).
pub fn slices_policy() -> CapacityRequestPolicy {
    CapacityRequestPolicy {
        default: Some(quantity(1)),
        valid_range: None,
        valid_values: Some(vec![quantity(1)]),
    }
}

fn string(s: &str) -> DeviceAttribute {
    DeviceAttribute {
        string: Some(s.to_string()),
        ..Default::default()
    }
}

fn version(s: String) -> DeviceAttribute {
    DeviceAttribute {
        version: Some(s),
        ..Default::default()
    }
}

/// The device of `gpu`.
pub fn device(gpu: &Gpu, offer: &Offer) -> Device {
    let mut attributes = BTreeMap::new();
    attributes.insert("uuid".to_string(), string(&gpu.info.uuid));
    attributes.insert(
        "index".to_string(),
        DeviceAttribute {
            int: Some(i64::from(gpu.info.index)),
            ..Default::default()
        },
    );
    attributes.insert("productName".to_string(), string(&gpu.info.name));
    if let Some(a) = &gpu.architecture {
        attributes.insert("architecture".to_string(), string(a));
    }
    if let Some((major, minor)) = gpu.compute_capability {
        attributes.insert(
            "computeCapability".to_string(),
            version(format!("{major}.{minor}.0")),
        );
    }
    if let Some(v) = gpu.driver_version.as_deref().and_then(semver) {
        attributes.insert("driverVersion".to_string(), version(v));
    }
    let mut capacity = BTreeMap::new();
    capacity.insert(
        names::MEMORY.to_string(),
        DeviceCapacity {
            value: quantity(offer.memory),
            request_policy: Some(memory_policy(offer)),
        },
    );
    capacity.insert(
        names::COMPUTE.to_string(),
        DeviceCapacity {
            value: quantity(offer.compute),
            request_policy: Some(compute_policy()),
        },
    );
    capacity.insert(
        names::SLICES.to_string(),
        DeviceCapacity {
            value: quantity(u64::from(offer.slices)),
            request_policy: Some(slices_policy()),
        },
    );
    Device {
        name: gpu.device_name(),
        allow_multiple_allocations: Some(true),
        attributes: Some(attributes),
        capacity: Some(capacity),
        ..Default::default()
    }
}

/// The name of slice `n` of `node`'s pool.
pub fn slice_name(node: &str, n: usize) -> String {
    format!("{node}-{DRIVER}-{n}")
}

/// Every ResourceSlice of `node`'s pool at `generation`. A node without GPUs publishes one
/// empty slice (so the pool exists and says so).
pub fn resource_slices(
    node: &str,
    gpus: &[Gpu],
    policy: &Policy,
    publish: &PublishPolicy,
    generation: i64,
) -> Vec<ResourceSlice> {
    let devices: Vec<Device> = gpus
        .iter()
        .map(|g| device(g, &capacity::offer(policy, publish, &g.info)))
        .collect();
    let chunks: Vec<Vec<Device>> = if devices.is_empty() {
        vec![Vec::new()]
    } else {
        devices
            .chunks(MAX_DEVICES_PER_SLICE)
            .map(<[Device]>::to_vec)
            .collect()
    };
    let count = i64::try_from(chunks.len()).unwrap_or(i64::MAX);
    chunks
        .into_iter()
        .enumerate()
        .map(|(n, devices)| ResourceSlice {
            metadata: ObjectMeta {
                name: Some(slice_name(node, n)),
                ..Default::default()
            },
            spec: ResourceSliceSpec {
                driver: DRIVER.to_string(),
                node_name: Some(node.to_string()),
                pool: ResourcePool {
                    name: node.to_string(),
                    generation,
                    resource_slice_count: count,
                },
                devices: Some(devices),
                ..Default::default()
            },
        })
        .collect()
}

/// Calls `f` on every capacity quantity of `spec` (values and request policies).
pub fn each_quantity(spec: &mut ResourceSliceSpec, mut f: impl FnMut(&mut Quantity)) {
    for d in spec.devices.iter_mut().flatten() {
        for c in d.capacity.iter_mut().flat_map(BTreeMap::values_mut) {
            f(&mut c.value);
            let Some(p) = &mut c.request_policy else {
                continue;
            };
            p.default.iter_mut().for_each(&mut f);
            p.valid_values.iter_mut().flatten().for_each(&mut f);
            if let Some(r) = &mut p.valid_range {
                f(&mut r.min);
                r.max.iter_mut().for_each(&mut f);
                r.step.iter_mut().for_each(&mut f);
            }
        }
    }
}

/// `spec` with every capacity quantity written as this driver writes it (plain digits), so that
/// a slice read back from the API server compares by value with one computed here: the API
/// server returns quantities in canonical form (`39321600000` as `39321600k`). A quantity that is
/// not a whole number is left as it is (and so differs from anything computed here).
pub fn by_value(spec: &ResourceSliceSpec) -> ResourceSliceSpec {
    let mut spec = spec.clone();
    each_quantity(&mut spec, |q| {
        if let Ok(v) = quantity::of(q) {
            *q = quantity(v);
        }
    });
    spec
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn canonical_quantities_compare_equal_by_value() {
        let mut c = DeviceCapacity {
            value: Quantity("39321600k".into()),
            request_policy: Some(CapacityRequestPolicy {
                default: Some(Quantity("39321600k".into())),
                valid_range: Some(CapacityRequestPolicyRange {
                    min: Quantity("1Mi".into()),
                    max: Some(Quantity("2k".into())),
                    step: Some(Quantity("1048576".into())),
                }),
                valid_values: Some(vec![Quantity("1e3".into()), Quantity("0.5".into())]),
            }),
        };
        let spec = |c: &DeviceCapacity| ResourceSliceSpec {
            devices: Some(vec![Device {
                capacity: Some(BTreeMap::from([("memory".to_string(), c.clone())])),
                ..Default::default()
            }]),
            ..Default::default()
        };
        let got = by_value(&spec(&c));
        c.value = Quantity("39321600000".into());
        let p = c.request_policy.as_mut().unwrap();
        p.default = Some(Quantity("39321600000".into()));
        p.valid_range = Some(CapacityRequestPolicyRange {
            min: Quantity("1048576".into()),
            max: Some(Quantity("2000".into())),
            step: Some(Quantity("1048576".into())),
        });
        // "0.5" is not a whole number: left as it is.
        p.valid_values = Some(vec![Quantity("1000".into()), Quantity("0.5".into())]);
        assert_eq!(got, spec(&c));
    }
}
