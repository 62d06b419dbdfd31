//! From a ResourceClaim to the one slice it becomes: its allocation result for driver
//! `gpuslice.io` on this node's pool (device `gpu-<index>`, consumed `memory` / `compute`), and
//! the `SliceConfig`s that apply to that request. Every refusal names the claim, the device and
//! the field.
//!
//! Request policy, as published ([`crate::dra::resourceslice`]): the memory cap is exactly the
//! consumed `memory` (bytes; the scheduler rounded it to whole MiB, a claim that names none got
//! the whole offer); the guarantee is the consumed `compute` (0 = best effort); `computeLimit`
//! and `priority` come from the opaque `SliceConfig` (defaults 100 and normal). One claim = one
//! device = one slice: a claim with two `gpuslice.io` results is refused.

use gpuslice_api::request::{DeviceRef, DeviceSelector};
use gpuslice_api::{MemoryRequest, Priority, SliceRequest};
use k8s_openapi::api::resource::v1::{
    AllocationResult, DeviceRequestAllocationResult, ResourceClaim,
};
use serde::{Deserialize, Serialize};

use crate::capacity::{names, Offer};
use crate::dra::claim::ClaimRef;
use crate::dra::sliceconfig::{self, SliceConfig};
use crate::gpu::{index_of, Gpu};
use crate::{quantity, DRIVER};

/// What one claim becomes.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Plan {
    /// The claim's request the device was allocated for.
    pub request: String,
    /// Pool (this node's name).
    pub pool: String,
    /// `gpu-<index>`.
    pub device: String,
    /// The GPU's UUID (the slice is admitted on exactly this device).
    pub uuid: String,
    /// What the arbiter is asked for.
    pub slice: SliceRequest,
}

/// A claim that cannot be prepared.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{claim}: {}{field}: {reason}", .device.as_ref().map(|d| format!("device {d}: ")).unwrap_or_default())]
pub struct PlanError {
    /// The claim.
    pub claim: String,
    /// The device, when one is concerned.
    pub device: Option<String>,
    /// The field of the claim at fault.
    pub field: String,
    /// Why.
    pub reason: String,
}

/// Plans `claim` (as read from the API server) for `node` with its `gpus` and their offers.
pub fn plan(
    r: &ClaimRef,
    claim: &ResourceClaim,
    node: &str,
    gpus: &[(Gpu, Offer)],
) -> Result<Plan, PlanError> {
    check_uid(r, claim)?;
    let alloc = claim
        .status
        .as_ref()
        .and_then(|s| s.allocation.as_ref())
        .ok_or_else(|| fail(r, None, "status.allocation", "not allocated".into()))?;
    let (i, result) = our_result(r, alloc)?;
    let dev = result.device.as_str();
    let (gpu, offer) = our_device(r, i, result, node, gpus)?;
    let (memory, compute) = consumed(r, i, result, offer)?;
    let config = slice_config(r, alloc, result)?;
    let compute = u8::try_from(compute).unwrap_or(100);
    let slice = SliceRequest {
        memory: Some(MemoryRequest::Bytes(memory)),
        compute: (compute > 0).then_some(compute),
        compute_limit: config.compute_limit,
        priority: config.priority.unwrap_or(Priority::Normal),
        devices: DeviceSelector::List(vec![DeviceRef::Uuid(gpu.info.uuid.clone())]),
        model: None,
    };
    slice.validate().map_err(|e| {
        fail(
            r,
            Some(dev),
            "status.allocation.devices.config",
            format!("consumed compute {compute} with this SliceConfig: {e}"),
        )
    })?;
    Ok(Plan {
        request: result.request.clone(),
        pool: result.pool.clone(),
        device: dev.to_string(),
        uuid: gpu.info.uuid.clone(),
        slice,
    })
}

/// The refusal of claim `r` at `field` (of `device`, when one is concerned).
fn fail(r: &ClaimRef, device: Option<&str>, field: &str, reason: String) -> PlanError {
    PlanError {
        claim: r.to_string(),
        device: device.map(str::to_string),
        field: field.to_string(),
        reason,
    }
}

/// The API server's copy is the claim the kubelet named (not one deleted and recreated).
fn check_uid(r: &ClaimRef, claim: &ResourceClaim) -> Result<(), PlanError> {
    match claim.metadata.uid.as_deref() {
        Some(uid) if uid == r.uid => Ok(()),
        Some(uid) => Err(fail(
            r,
            None,
            "metadata.uid",
            format!("the API server has {uid}: the claim was deleted and recreated"),
        )),
        None => Err(fail(
            r,
            None,
            "metadata.uid",
            "the API server's copy has none".into(),
        )),
    }
}

/// The one allocation result of driver `gpuslice.io`, with its index among the results.
fn our_result<'a>(
    r: &ClaimRef,
    alloc: &'a AllocationResult,
) -> Result<(usize, &'a DeviceRequestAllocationResult), PlanError> {
    let results = alloc
        .devices
        .as_ref()
        .and_then(|d| d.results.as_ref())
        .map(Vec::as_slice)
        .unwrap_or_default();
    let ours: Vec<(usize, _)> = results
        .iter()
        .enumerate()
        .filter(|(_, x)| x.driver == DRIVER)
        .collect();
    match ours.as_slice() {
        [one] => Ok(*one),
        [] => {
            let others: Vec<&str> = results.iter().map(|x| x.driver.as_str()).collect();
            Err(fail(
                r,
                None,
                "status.allocation.devices.results",
                format!("no device of driver {DRIVER} (drivers: {others:?})"),
            ))
        }
        many => Err(fail(
            r,
            None,
            "status.allocation.devices.results",
            format!(
                "{} devices of driver {DRIVER}; a claim is one slice on one GPU",
                many.len()
            ),
        )),
    }
}

/// The field `f` of result `i`.
fn result_field(i: usize, f: &str) -> String {
    format!("status.allocation.devices.results[{i}].{f}")
}

/// This node's GPU (and its offer) that result `i` allocated.
fn our_device<'g>(
    r: &ClaimRef,
    i: usize,
    result: &DeviceRequestAllocationResult,
    node: &str,
    gpus: &'g [(Gpu, Offer)],
) -> Result<&'g (Gpu, Offer), PlanError> {
    let dev = result.device.as_str();
    if result.pool != node {
        return Err(fail(
            r,
            Some(dev),
            &result_field(i, "pool"),
            format!("\"{}\" is not this node's pool \"{node}\"", result.pool),
        ));
    }
    index_of(dev)
        .and_then(|idx| gpus.iter().find(|(g, _)| g.info.index == idx))
        .ok_or_else(|| {
            fail(
                r,
                Some(dev),
                &result_field(i, "device"),
                format!(
                    "this node has no such device (it has {:?})",
                    gpus.iter()
                        .map(|(g, _)| g.device_name())
                        .collect::<Vec<_>>()
                ),
            )
        })
}

/// The consumed `(memory, compute)` of result `i`, each within the device's `offer`; memory
/// must be named and non-zero, compute defaults to 0 (best effort).
fn consumed(
    r: &ClaimRef,
    i: usize,
    result: &DeviceRequestAllocationResult,
    offer: &Offer,
) -> Result<(u64, u64), PlanError> {
    let dev = result.device.as_str();
    let consumed = result.consumed_capacity.as_ref();
    let amount = |name: &str, default: Option<u64>, max: u64| -> Result<u64, PlanError> {
        let f = result_field(i, &format!("consumedCapacity.{name}"));
        let v = match consumed.and_then(|c| c.get(name)) {
            Some(q) => quantity::of(q).map_err(|e| fail(r, Some(dev), &f, e.to_string()))?,
            None => default.ok_or_else(|| {
                fail(
                    r,
                    Some(dev),
                    &f,
                    "missing (the scheduler records it)".into(),
                )
            })?,
        };
        if v > max {
            return Err(fail(
                r,
                Some(dev),
                &f,
                format!("{v} is above the device's published {name} capacity {max}"),
            ));
        }
        Ok(v)
    };
    let memory = amount(names::MEMORY, None, offer.memory)?;
    if memory == 0 {
        return Err(fail(
            r,
            Some(dev),
            &result_field(i, "consumedCapacity.memory"),
            "0: a slice needs a memory cap".into(),
        ));
    }
    let compute = amount(names::COMPUTE, Some(0), offer.compute)?;
    Ok((memory, compute))
}

/// The `SliceConfig`s of driver `gpuslice.io` that apply to `result`'s request, overlaid in
/// order (a config naming no request applies to all).
fn slice_config(
    r: &ClaimRef,
    alloc: &AllocationResult,
    result: &DeviceRequestAllocationResult,
) -> Result<SliceConfig, PlanError> {
    let mut config = SliceConfig::default();
    let configs = alloc
        .devices
        .as_ref()
        .and_then(|d| d.config.as_ref())
        .map(Vec::as_slice)
        .unwrap_or_default();
    for (j, c) in configs.iter().enumerate() {
        let Some(opaque) = c.opaque.as_ref().filter(|o| o.driver == DRIVER) else {
            continue;
        };
        let applies = c
            .requests
            .as_ref()
            .is_none_or(|reqs| reqs.is_empty() || reqs.contains(&result.request));
        if !applies {
            continue;
        }
        let parsed = sliceconfig::parse(&opaque.parameters.0).map_err(|e| {
            fail(
                r,
                Some(&result.device),
                &format!(
                    "status.allocation.devices.config[{j}].opaque.parameters.{}",
                    e.field
                ),
                e.reason,
            )
        })?;
        config = config.overlay(parsed);
    }
    Ok(config)
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    #[test]
    fn a_claim_of_another_uid_or_none_is_refused_naming_the_uid() {
        let r = ClaimRef {
            namespace: "default".into(),
            name: "trainer".into(),
            uid: "uid-old".into(),
        };
        let with_uid = |uid: Option<&str>| ResourceClaim {
            metadata: ObjectMeta {
                uid: uid.map(str::to_string),
                ..Default::default()
            },
            ..Default::default()
        };
        let err = |uid| {
            plan(&r, &with_uid(uid), "node-a", &[])
                .unwrap_err()
                .to_string()
        };
        assert_eq!(
            err(Some("uid-new")),
            "claim default/trainer (uid-old): metadata.uid: the API server has uid-new: the claim \
             was deleted and recreated"
        );
        assert_eq!(
            err(None),
            "claim default/trainer (uid-old): metadata.uid: the API server's copy has none"
        );
    }
}
