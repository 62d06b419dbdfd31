//! A DRA claim prepared by the kubelet plugin, then a container created through CRI with the
//! CDI device id the plugin returned — on real containerd 1.7 and 2.1, the real arbiter and the
//! simulated GPU. No real kubelet, scheduler or API server runs: the claim is allocated by hand
//! the way the scheduler would (device `gpu-0` of this node's pool, consumed `memory: 16Gi`,
//! `compute: 40`, `slices: 1`, SliceConfig `priority: high`), read from an in-memory claim
//! source, and prepared by the plugin's own `Driver` (what its `NodePrepareResources` handler
//! runs), with claim CDI specs derived from the node's `gpuslice cdi generate` spec as in the
//! DaemonSet (`--node-cdi-spec`). kubelet's part is played by this test: `CreateContainer` with
//! `ContainerConfig.CDI_devices` = the returned ids.
//!
//! Checked: the arbiter holds slice `dra-<uid>` on exactly the claimed GPU with the claimed cap,
//! guarantee and priority; containerd applied the claim's CDI spec (no hooks needed); the
//! container sees 16 GiB in `cuDeviceTotalMem`, `cuMemGetInfo` and NVML and gets
//! `CUDA_ERROR_OUT_OF_MEMORY` at exactly 16 GiB; a plugin restart before unprepare loses
//! nothing; after the Pod is removed and the claim unprepared, no slice, spec or anything else
//! is left.

use std::sync::Arc;
use std::time::Duration;

use anyhow::{ensure, Context, Result};
use gpuslice_api::protocol::{Request, Response};
use gpuslice_api::Priority;
use gpuslice_arbiter::fit::Policy;
use gpuslice_arbiter::inventory::DeviceInfo;
use gpuslice_e2e::arbiter::Arbiter;
use gpuslice_e2e::cdi;
use gpuslice_e2e::cri::{self, ContainerSpec, Cri, K8S_NS};
use gpuslice_e2e::gate::{require, Need};
use gpuslice_e2e::paths;
use gpuslice_e2e::snapshot::Snapshot;
use gpuslice_e2e::suite::{assert_capped_slice, Node};
use gpuslice_kubelet_plugin::arbiter::SocketArbiter;
use gpuslice_kubelet_plugin::capacity::PublishPolicy;
use gpuslice_kubelet_plugin::cdi::CdiDir;
use gpuslice_kubelet_plugin::checkpoint;
use gpuslice_kubelet_plugin::claim::{ClaimRef, MemoryClaims};
use gpuslice_kubelet_plugin::driver::{slice_id, Driver, Parts};
use gpuslice_kubelet_plugin::gpu::{Gpu, StaticGpus};
use gpuslice_shim::client::Client;
use k8s_openapi::api::resource::v1::ResourceClaim;
use serde_json::json;

const T: Duration = Duration::from_secs(120);
const GIB: u64 = 1 << 30;
const NODE: &str = "e2e-node";
const UID: &str = "6a7b8c9d-0000-4000-8000-00000000e2e1";

/// The claim as the scheduler leaves it: allocated on `gpu-0` of this node's pool.
fn claim() -> Result<ResourceClaim> {
    Ok(serde_json::from_value(json!({
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": "trainer-gpu", "namespace": "default", "uid": UID},
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {
            "deviceClassName": "gpuslice.io",
            "capacity": {"requests": {"memory": "16Gi", "compute": "40"}}}}]}},
        "status": {"allocation": {"devices": {
            "results": [{"request": "gpu", "driver": "gpuslice.io", "pool": NODE,
                         "device": "gpu-0", "shareID": "0c1d2e3f",
                         "consumedCapacity": {"memory": "16Gi", "compute": "40", "slices": "1"}}],
            "config": [{"source": "FromClaim", "requests": ["gpu"], "opaque": {
                "driver": "gpuslice.io",
                "parameters": {"apiVersion": "gpuslice.io/v1", "kind": "SliceConfig",
                               "priority": "high"}}}]}}}
    }))?)
}

/// The node's GPUs as the arbiter sees them (the simulated NVML).
fn gpus(arbiter: &Arbiter) -> Result<Vec<Gpu>> {
    let mut c = Client::connect(&arbiter.state_dir, Duration::from_secs(10))?;
    let Response::Status(st) = c.call(Request::Status)? else {
        anyhow::bail!("arbiter status: unexpected answer");
    };
    Ok(st
        .devices
        .iter()
        .map(|d| Gpu {
            info: DeviceInfo {
                index: d.index,
                uuid: d.uuid.clone(),
                name: d.name.clone(),
                memory_total: d.memory_total,
            },
            minor: d.index,
            architecture: None,
            compute_capability: None,
            driver_version: None,
        })
        .collect())
}

fn claim_to_container(series: &str) -> Result<()> {
    let bins = paths::containerd(series);
    if !require(
        &format!("dra-cri-{series}"),
        &[
            Need::Root,
            Need::Binary(bins.containerd()),
            Need::Binary(paths::runc()),
            Need::Dist,
            Need::Product,
            Need::Binary(paths::product("gpuslice")),
        ],
    ) {
        return Ok(());
    }
    let node = Node::new(&format!("dra{}", series.replace('.', "")))?;
    let arbiter = Arbiter::start(&node.scratch, &node.sim)?;
    // The node's spec, as the DaemonSet's cdi init container writes it.
    let spec = cdi::generate(&node, &arbiter)?;
    let ctd = cdi::containerd(&bins, &node, &arbiter, &spec)?;
    cri::import_cri_image(&ctd, &node.image, &node.scratch.dir("cri-image")?)?;
    let client = Cri::new(&ctd.sock)?;
    println!("CRI: {}", client.version()?);
    // After containerd is up (it is a descendant too), before the claim is prepared.
    let before = Snapshot::take(Some(&arbiter.state_dir));
    let gpus = gpus(&arbiter)?;
    ensure!(!gpus.is_empty(), "the simulated node has no GPU");
    let claims = Arc::new(MemoryClaims::default());
    claims.put(claim()?);
    let plugin_dir = node.scratch.dir("plugins-gpuslice.io")?;
    let parts = || Parts {
        node: NODE.into(),
        gpus: Arc::new(StaticGpus(gpus.clone())),
        policy: Policy::default(),
        publish: PublishPolicy::default(),
        claims: claims.clone(),
        arbiter: Arc::new(SocketArbiter::new(
            &arbiter.state_dir,
            Duration::from_secs(10),
        )),
        cdi: Arc::new(CdiDir {
            dir: spec.dir.clone(),
            // Only the node's spec is read (--node-cdi-spec): nothing is discovered here.
            options: gpuslice_cdi::Options {
                driver_root: "/nonexistent".into(),
                dev_root: "/nonexistent".into(),
                interposer: "/nonexistent".into(),
                preload_file: "/nonexistent".into(),
                hook: "/nonexistent".into(),
                state_dir: arbiter.state_dir.clone(),
                config: None,
            },
            node_spec: Some(spec.file.clone()),
        }),
        checkpoint: plugin_dir.join(checkpoint::FILE),
    };
    let r = ClaimRef {
        namespace: "default".into(),
        name: "trainer-gpu".into(),
        uid: UID.into(),
    };
    let driver = Driver::new(parts())?;
    let prepared = driver.prepare(std::slice::from_ref(&r));
    let devices = prepared[UID]
        .clone()
        .map_err(anyhow::Error::msg)
        .with_context(|| format!("NodePrepareResources; arbiter log:\n{}", arbiter.log()))?;
    let ids = devices[0].cdi_device_ids.clone();
    ensure!(
        ids == [format!("gpuslice.io/claim={UID}")],
        "CDI ids {ids:?}"
    );
    // The arbiter's slice: on the claimed GPU, with the claimed amounts.
    let mut c = Client::connect(&arbiter.state_dir, Duration::from_secs(10))?;
    let Response::Status(st) = c.call(Request::Status)? else {
        anyhow::bail!("arbiter status: unexpected answer");
    };
    let id = slice_id(UID);
    let slice = st
        .slices
        .iter()
        .find(|s| s.slice_id == id)
        .with_context(|| format!("no slice {id} at the arbiter: {st:?}"))?;
    ensure!(slice.devices.len() == 1 && slice.devices[0].uuid == gpus[0].info.uuid);
    ensure!(slice.devices[0].memory_cap == Some(16 * GIB), "{slice:?}");
    ensure!(slice.request.compute == Some(40), "{slice:?}");
    ensure!(slice.request.priority == Priority::High, "{slice:?}");

    let log_dir = node.scratch.dir("pod-logs")?;
    let (pod, guard) = client
        .start_pod("dra-trainer", "runc", &log_dir)
        .with_context(|| format!("RunPodSandbox; containerd log:\n{}", ctd.log_tail(30)))?;
    let sandbox = guard.id.clone();
    // No GPUSLICE_* request: everything comes from the claim's CDI device.
    let trainer = ContainerSpec {
        name: "trainer".into(),
        command: cdi::command(),
        env: cdi::container_env()
            .into_iter()
            .filter_map(|kv| kv.split_once('=').map(|(k, v)| (k.into(), v.into())))
            .collect(),
        mounts: cdi::container_binds(&node),
        annotations: vec![],
    };
    let refs: Vec<&str> = ids.iter().map(String::as_str).collect();
    let cid = client
        .create_container_with_cdi(&sandbox, &pod, &trainer, &refs)
        .with_context(|| format!("CreateContainer; containerd log:\n{}", ctd.log_tail(30)))?;
    client.start_container(&cid)?;
    let bundle = cri::bundle_config(&ctd, K8S_NS, &cid)?;
    let env = bundle["process"]["env"].to_string();
    ensure!(
        env.contains("GPUSLICE_SLICE_DIR=/run/gpuslice"),
        "the claim's CDI edits are not in config.json: {env}"
    );
    let st = client.wait_exited(&cid, T)?;
    let out = cri::read_log(&log_dir.join(trainer.log_path()))?;
    println!("containerd {series} CRI, DRA claim {UID}:\n{out}");
    ensure!(
        st.exit_code == 0,
        "trainer exited {} ({}):\n{out}\narbiter log:\n{}",
        st.exit_code,
        st.reason,
        arbiter.log()
    );
    ensure!(
        out.contains("slice=mounted"),
        "the claim's slice is not at /run/gpuslice:\n{out}"
    );
    assert_capped_slice(&out, 16 * GIB)?;
    guard.remove()?;

    // The plugin restarts between prepare and unprepare: the checkpoint has the claim.
    drop(driver);
    let restarted = Driver::new(parts())?;
    ensure!(restarted.checkpoint().claims.contains_key(UID));
    restarted.unprepare(std::slice::from_ref(&r))[UID]
        .clone()
        .map_err(anyhow::Error::msg)?;
    ensure!(
        !spec
            .dir
            .join(format!("gpuslice.io-claim_{UID}.yaml"))
            .exists(),
        "the claim's CDI spec is left"
    );
    ensure!(restarted.checkpoint().claims.is_empty());
    if let Some(d) = Snapshot::settle(&before, Some(&arbiter.state_dir), Duration::from_secs(10)) {
        anyhow::bail!("DRA claim on containerd {series} left something behind:\n{d}");
    }
    Ok(())
}

#[test]
fn dra_cri_1_7_claim_cdi_device_caps_the_container_at_16gi() -> Result<()> {
    claim_to_container("1.7")
}

#[test]
fn dra_cri_2_1_claim_cdi_device_caps_the_container_at_16gi() -> Result<()> {
    claim_to_container("2.1")
}
