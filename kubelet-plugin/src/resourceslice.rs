//! The ResourceSlices of this node's pool (driver `gpuslice.io`, pool = node name): one device
//! per GPU named `gpu-<index>`, `allowMultipleAllocations: true`, capacities `memory`, `compute`
//! and `slices` with their request policies ([`crate::capacity`]), attributes `uuid`, `index`,
//! `productName`, `architecture`, `computeCapability`, `driverVersion`. At most
//! [`MAX_DEVICES_PER_SLICE`] devices per slice; a larger node spans several slices of one pool
//! generation. Publishing them through the API server is not here yet.

use std::collections::BTreeMap;

use gpuslice_arbiter::fit::Policy;
use k8s_openapi::api::resource::v1::{
    CapacityRequestPolicy, CapacityRequestPolicyRange, Device, DeviceAttribute, DeviceCapacity,
    ResourcePool, ResourceSlice, ResourceSliceSpec,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use crate::capacity::{self, names, Offer, PublishPolicy, MEMORY_STEP};
use crate::gpu::{semver, Gpu};
use crate::quantity::quantity;
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
