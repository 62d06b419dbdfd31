//! containerd 1.7 with CDI through the CRI path (no runtime wrapper): the CRI table has
//! `enable_cdi = true` and `cdi_spec_dirs` = a scratch directory holding the spec `gpuslice cdi
//! generate` writes for a fake node. A Pod (default runtime class `runc`, host network) gets two
//! containers that ask for the CDI device the two ways kubelet passes it: `ContainerConfig`'s
//! `CDI_devices` field (17, containerd ≥ 1.7.2) and the older `cdi.k8s.io/<name>` annotation;
//! each sets `GPUSLICE_MEMORY=1Gi`.
//!
//! Checked: containerd applied the CDI edits (the spec's `gpuslice-hook --standalone` hooks and
//! the GPU node are in each container's `config.json`); each container has its own slice while
//! both hold their memory; each sees 1 GiB (`cuDeviceTotalMem`, `cuMemGetInfo`, NVML) and gets
//! `CUDA_ERROR_OUT_OF_MEMORY` at exactly 1 GiB; the sandbox has no slice; after the Pod is
//! removed no slice and nothing else is left behind.

use anyhow::{ensure, Context, Result};
use gpuslice_e2e::cdi;
use gpuslice_e2e::cri::{self, ContainerSpec, PodGuard, PodSpec, K8S_NS};
use gpuslice_e2e::gate::{require, Need};
use gpuslice_e2e::image::WORKLOAD;
use gpuslice_e2e::paths;
use gpuslice_e2e::snapshot::Snapshot;
use gpuslice_e2e::suite::{assert_one_gib_slice, Node};
use std::time::Duration;

const T: Duration = Duration::from_secs(120);
const SERIES: &str = "1.7";

fn container(node: &Node, name: &str, annotations: Vec<(String, String)>) -> ContainerSpec {
    let mut env: Vec<(String, String)> = gpuslice_e2e::sim::env_pairs(cdi::container_env());
    env.push(("GPUSLICE_MEMORY".into(), "1Gi".into()));
    let mut command = cdi::command();
    // Hold the 1 GiB for a while so both containers hold their slices at the same time.
    if let Some(script) = command.last_mut() {
        *script = script.replace(
            &format!("{WORKLOAD} fill --chunk 256Mi"),
            &format!("{WORKLOAD} fill --chunk 256Mi --hold-ms 4000"),
        );
    }
    ContainerSpec {
        name: name.into(),
        command,
        env,
        mounts: cdi::container_binds(node),
        annotations,
    }
}

#[test]
fn cri_1_7_cdi_devices_enforce_the_cap() -> Result<()> {
    let bins = paths::containerd(SERIES);
    if !require(
        "cri-1.7/cdi",
        &[
            Need::Root,
            Need::Binary(bins.containerd()),
            Need::Binary(paths::runc()),
            Need::Dist,
            Need::Product,
            Need::Binary(paths::product("gpuslice")),
            Need::Binary(paths::product("gpuslice-hook")),
        ],
    ) {
        return Ok(());
    }
    let node = Node::new("ccdi")?;
    let arbiter = node.start_arbiter()?;
    let spec = cdi::generate(&node, &arbiter)?;
    let ctd = cdi::containerd(&bins, &node, &arbiter, &spec)?;
    let client = cri::client_with_image(&ctd, &node)?;
    let before = Snapshot::take(Some(&arbiter.state_dir));

    let log_dir = node.scratch.dir("pod-logs")?;
    let pod = PodSpec {
        name: "gpuslice-cdi-pod".into(),
        uid: format!("uid-cdi-{}", std::process::id()),
        annotations: vec![],
        log_dir: log_dir.clone(),
        handler: "runc".into(),
    };
    let sandbox = client
        .run_pod(&pod)
        .with_context(|| format!("RunPodSandbox; containerd log:\n{}", ctd.log_tail(30)))?;
    let guard = PodGuard {
        cri: &client,
        id: sandbox.clone(),
    };
    ensure!(
        cdi::slices(&arbiter).is_empty(),
        "the sandbox got a slice: {:?}",
        cdi::slices(&arbiter)
    );

    let by_field = container(&node, "by-field", vec![]);
    let by_annotation = container(
        &node,
        "by-annotation",
        vec![("cdi.k8s.io/gpuslice".into(), cdi::DEVICE.into())],
    );
    let mut ids = Vec::new();
    let id = client
        .create_container_with_cdi(&sandbox, &pod, &by_field, &[cdi::DEVICE])
        .with_context(|| format!("CreateContainer by-field; log:\n{}", ctd.log_tail(30)))?;
    ids.push(id);
    let id = client
        .create_container(&sandbox, &pod, &by_annotation)
        .with_context(|| format!("CreateContainer by-annotation; log:\n{}", ctd.log_tail(30)))?;
    ids.push(id);
    for id in &ids {
        client.start_container(id)?;
    }
    // The bundles exist once the tasks do (StartContainer).
    for id in &ids {
        let spec = cri::bundle_config(&ctd, K8S_NS, id)?;
        let hooks = spec["hooks"].to_string();
        ensure!(
            hooks.contains("gpuslice-hook") && hooks.contains("--standalone"),
            "container {id}: the CDI spec's hooks are not in config.json: {hooks}"
        );
        let devices = spec["linux"]["devices"].to_string();
        ensure!(
            devices.contains("/dev/nvidia0"),
            "container {id}: the CDI device node is not in config.json: {devices}"
        );
    }
    // Both hold their 1 GiB now (fill holds for 4 s): one slice per container.
    let mut want = ids.clone();
    want.sort();
    let live = cdi::slices(&arbiter);
    ensure!(
        live == want,
        "slices while both containers run: {live:?}, expected {want:?} (sandbox {sandbox})"
    );
    for (c, id) in [&by_field, &by_annotation].iter().zip(&ids) {
        let st = client.wait_exited(id, T)?;
        let out = cri::read_log(&log_dir.join(c.log_path()))?;
        println!(
            "containerd {SERIES} CRI, CDI {} ({}), container {id}:\n{out}",
            cdi::DEVICE,
            c.name
        );
        ensure!(
            st.exit_code == 0,
            "{} exited {} ({}):\n{out}\narbiter log:\n{}",
            c.name,
            st.exit_code,
            st.reason,
            arbiter.log()
        );
        assert_one_gib_slice(&out).with_context(|| format!("container {}", c.name))?;
        ensure!(
            out.contains("slice=mounted"),
            "{}: no arbiter slice at /run/gpuslice (the CDI hook did not run?):\n{out}",
            c.name
        );
    }
    guard.remove()?;
    if let Some(d) = Snapshot::settle(&before, Some(&arbiter.state_dir), Duration::from_secs(10)) {
        anyhow::bail!("CRI CDI Pod on containerd {SERIES} left something behind:\n{d}");
    }
    Ok(())
}
