//! The ResourceSlice content this node would publish (no API server ran: the objects are
//! round-tripped through k8s-openapi's v1 types and checked against the documented validation),
//! and that its capacities are exactly what the arbiter's admission admits.

mod common;

use common::{gpus, ClaimSpec, Node, GI, NODE};
use gpuslice_admission::admission::Admission;
use gpuslice_admission::fit::Policy;
use gpuslice_api::{MemoryRequest, Owner, SliceRequest};
use gpuslice_kubelet_plugin::capacity::{offer, PublishPolicy};
use gpuslice_kubelet_plugin::dra::claim::ClaimRef;
use gpuslice_kubelet_plugin::dra::resourceslice::resource_slices;
use gpuslice_kubelet_plugin::dra::validate::resource_slice;
use gpuslice_kubelet_plugin::gpu::Gpu;
use k8s_openapi::api::resource::v1::ResourceSlice;

#[test]
fn published_slice_is_valid_and_round_trips() {
    let slices = resource_slices(
        NODE,
        &gpus(),
        &Policy::default(),
        &PublishPolicy::default(),
        3,
    );
    assert_eq!(slices.len(), 1);
    let json = serde_json::to_value(&slices[0]).unwrap();
    let back: ResourceSlice = serde_json::from_value(json.clone()).unwrap();
    assert_eq!(back, slices[0]);
    assert_eq!(resource_slice(&back), []);
    let d = &json["spec"]["devices"][0];
    assert_eq!(json["spec"]["driver"], "gpuslice.io");
    assert_eq!(json["spec"]["pool"]["name"], NODE);
    assert_eq!(d["name"], "gpu-0");
    assert_eq!(d["allowMultipleAllocations"], true);
    assert_eq!(
        d["attributes"]["productName"]["string"],
        "NVIDIA H100 80GB HBM3"
    );
    assert_eq!(d["attributes"]["computeCapability"]["version"], "9.0.0");
    assert_eq!(d["attributes"]["driverVersion"]["version"], "550.54.15");
    assert_eq!(d["attributes"]["index"]["int"], 0);
    assert_eq!(d["capacity"]["compute"]["value"], "100");
    // 80 GiB less 8 slots × 512 MiB of context reserve.
    assert_eq!(
        d["capacity"]["memory"]["value"],
        ((80 * GI) - 8 * (512 << 20)).to_string()
    );
    assert_eq!(d["capacity"]["slices"]["value"], "8");
}

#[test]
fn large_nodes_span_slices_of_at_most_128_devices() {
    let many: Vec<Gpu> = (0..300)
        .map(|i| {
            let mut g = gpus()[i % 2].clone();
            g.info.index = i as u32;
            g.info.uuid = format!("GPU-{i}");
            g
        })
        .collect();
    let slices = resource_slices(
        NODE,
        &many,
        &Policy::default(),
        &PublishPolicy::default(),
        1,
    );
    let counts: Vec<usize> = slices
        .iter()
        .map(|s| s.spec.devices.as_ref().unwrap().len())
        .collect();
    assert_eq!(counts, [128, 128, 44]);
    for s in &slices {
        assert_eq!(s.spec.pool.resource_slice_count, 3);
        assert_eq!(resource_slice(s), []);
    }
    // The validator catches what the API server would refuse.
    let mut bad = slices[0].clone();
    let devs = bad.spec.devices.as_mut().unwrap();
    devs.extend(slices[1].spec.devices.clone().unwrap());
    devs[0].name = "GPU_0".into();
    let found: Vec<String> = resource_slice(&bad).into_iter().map(|v| v.field).collect();
    assert!(found.contains(&"spec.devices".to_string()), "{found:?}");
    assert!(
        found.contains(&"spec.devices[0].name".to_string()),
        "{found:?}"
    );
    let mut q = slices[2].clone();
    q.spec.devices.as_mut().unwrap()[0]
        .capacity
        .as_mut()
        .unwrap()
        .get_mut("memory")
        .unwrap()
        .value
        .0 = "1.5".into();
    assert_eq!(
        resource_slice(&q)[0].field,
        "spec.devices[0].capacity[memory].value"
    );
}

/// On the heterogeneous node (H100-class + A100-class): claims filling every slot up to the
/// published memory and compute are all admitted by the arbiter's own admission; the next claim
/// is refused by the plugin (as the scheduler would refuse to allocate it).
#[test]
fn published_capacity_is_exactly_what_the_arbiter_admits() {
    let policy = Policy::default();
    let publish = PublishPolicy { slices_per_gpu: 4 };
    for gpu in gpus() {
        let o = offer(&policy, &publish, &gpu.info);
        let mut adm = Admission::new(vec![gpu.info.clone()], policy.clone());
        let n = u64::from(o.slices);
        for k in 0..n {
            // Uneven split summing exactly to the offer.
            let mem = if k + 1 == n {
                o.memory - (n - 1) * (o.memory / n)
            } else {
                o.memory / n
            };
            let r = SliceRequest {
                memory: Some(MemoryRequest::Bytes(mem)),
                compute: Some(25),
                devices: gpuslice_api::DeviceSelector::List(vec![gpuslice_api::DeviceRef::Uuid(
                    gpu.info.uuid.clone(),
                )]),
                ..Default::default()
            };
            adm.admit(&format!("s{k}"), r, Owner::default())
                .unwrap_or_else(|e| panic!("{}: {e}", gpu.info.name));
        }
        let st = adm.status();
        assert!(st.devices[0].memory_committed <= gpu.info.memory_total);
        assert_eq!(st.devices[0].compute_guaranteed, 100);
        // A single claim of the whole offer (the default of a claim naming no memory) fits.
        let mut alone = Admission::new(vec![gpu.info.clone()], policy.clone());
        alone
            .admit(
                "big",
                SliceRequest {
                    memory: Some(MemoryRequest::Bytes(o.memory)),
                    ..Default::default()
                },
                Owner::default(),
            )
            .unwrap();
    }
    // Through the driver: a fifth claim on gpu-1 (4 slots) is refused by the plugin.
    let node = Node::new("cap");
    let driver = node.driver();
    let o = offer(&node.policy, &node.publish, &gpus()[1].info);
    let uids: Vec<String> = (0..5)
        .map(|i| format!("00000000-0000-4000-8000-00000000000{i}"))
        .collect();
    for (i, uid) in uids.iter().enumerate() {
        node.claims.put(
            ClaimSpec::new(uid, "gpu-1", if i < 4 { o.memory / 4 } else { 1 << 20 }, 0).build(),
        );
    }
    let refs: Vec<ClaimRef> = uids
        .iter()
        .map(|u| ClaimRef {
            namespace: "default".into(),
            name: u.clone(),
            uid: u.clone(),
        })
        .collect();
    let r = driver.prepare(&refs);
    for u in &uids[..4] {
        assert!(r[u].is_ok(), "{:?}", r[u]);
    }
    let e = r[&uids[4]].as_ref().unwrap_err().to_string();
    assert!(
        e.contains("device gpu-1") && e.contains("capacity slices"),
        "{e}"
    );
    assert_eq!(node.arbiter.slices().len(), 4);
}
