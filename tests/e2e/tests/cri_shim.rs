//! The Pod path through `containerd-shim-gpuslice-v2`, the way kubelet takes it, on containerd
//! 1.6, 1.7 and 2.1: a CRI runtime class `gpuslice` with `runtime_type =
//! "io.containerd.gpuslice.v2"` and `pod_annotations = ["gpuslice.io/*"]` (no runc options: the
//! runc v2 shim behind our proxy uses the distribution's runc from `PATH`), `RunPodSandbox` with
//! that handler and the Pod annotation `gpuslice.io/memory: 1Gi`, then `CreateContainer` /
//! `StartContainer` of two containers.
//!
//! Checked: the sandbox (pause) container has no slice and an unedited `config.json`; one proxy
//! and one runc v2 shim serve the whole Pod (containerd 2.1 runs `shim start` once per Pod, so
//! the containers reach us only through `Task.Create`; 1.6 and 1.7 start once per task and the
//! second `start` reuses the proxy); while both containers hold their memory the arbiter has
//! exactly one slice per container id, and each sees a 1 GiB device (CUDA and NVML) and gets
//! `CUDA_ERROR_OUT_OF_MEMORY` at exactly 1 GiB; when the containers have exited their slices are
//! released while the Pod still runs (per-container `Delete` / `poststop`); after the Pod is
//! removed nothing is left behind (state directory, mounts, processes: proxies and runc v2 shims
//! included).

use anyhow::{ensure, Context, Result};
use gpuslice_e2e::arbiter::Arbiter;
use gpuslice_e2e::containerd::{Containerd, Options};
use gpuslice_e2e::cri::{self, ContainerSpec, PodGuard, PodSpec, K8S_NS};
use gpuslice_e2e::gate::{require, Need};
use gpuslice_e2e::image::WORKLOAD;
use gpuslice_e2e::paths;
use gpuslice_e2e::shimv2::{self, cri_runtime_class, daemon_path, SHIM};
use gpuslice_e2e::snapshot::Snapshot;
use gpuslice_e2e::suite::{assert_one_gib_slice, Node};
use std::collections::BTreeSet;
use std::path::Path;
use std::time::{Duration, Instant};

const T: Duration = Duration::from_secs(120);

/// Slice directories in the arbiter's state directory.
fn slices(state_dir: &Path) -> BTreeSet<String> {
    std::fs::read_dir(state_dir)
        .map(|rd| {
            rd.filter_map(|e| e.ok())
                .filter(|e| e.file_type().map(|t| t.is_dir()).unwrap_or(false))
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default()
}

/// Polls until the slice set is `want` (the arbiter and the hooks work asynchronously).
fn wait_slices(state_dir: &Path, want: &BTreeSet<String>, timeout: Duration) -> bool {
    let t0 = Instant::now();
    while t0.elapsed() < timeout {
        if &slices(state_dir) == want {
            return true;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    false
}

fn container(node: &Node, name: &str) -> ContainerSpec {
    let env = gpuslice_e2e::sim::env_pairs(node.sim.container_env());
    ContainerSpec {
        name: name.into(),
        // Hold the 1 GiB for a while so both containers hold their slices at the same time.
        command: vec![
            "/bin/sh".into(),
            "-c".into(),
            format!("{WORKLOAD} info && echo --- && {WORKLOAD} fill --chunk 256Mi --hold-ms 4000"),
        ],
        env,
        mounts: node.sim.container_binds(),
        annotations: vec![],
    }
}

fn pod_path(series: &str) -> Result<()> {
    let bins = paths::containerd(series);
    let suite = format!("cri-{series}/shim-v2-pod");
    if !require(
        &suite,
        &[
            Need::Root,
            Need::Binary(bins.containerd()),
            Need::Binary(paths::runc()),
            Need::Binary(paths::product(SHIM)),
            Need::Dist,
            Need::Product,
        ],
    ) {
        return Ok(());
    }
    let t0 = Instant::now();
    let node = Node::new(&format!("q{series}"))?;
    let arbiter = Arbiter::start(&node.scratch, &node.sim)?;
    let mut env = arbiter.client_env();
    env.push(daemon_path(&bins));
    let ctd = Containerd::start_with_extra(
        &bins,
        &node.scratch,
        &Options {
            gpuslice_runtime: None,
            env,
        },
        &cri_runtime_class(&bins, "gpuslice"),
    )?;
    let client = cri::client_with_image(&ctd, &node)?;
    let before = Snapshot::take(Some(&arbiter.state_dir));
    let slices_before = slices(&arbiter.state_dir);

    let log_dir = node.scratch.dir("pod-logs")?;
    let pod = PodSpec {
        name: "gpuslice-shim-pod".into(),
        uid: format!("uid-v2-{series}-{}", std::process::id()),
        annotations: vec![("gpuslice.io/memory".into(), "1Gi".into())],
        log_dir: log_dir.clone(),
        handler: "gpuslice".into(),
    };
    let sandbox = client
        .run_pod(&pod)
        .with_context(|| format!("RunPodSandbox; containerd log:\n{}", ctd.log_tail(30)))?;
    let guard = PodGuard {
        cri: &client,
        id: sandbox.clone(),
    };
    ensure!(
        shimv2::proxies().len() == 1,
        "the sandbox is not served by exactly one gpuslice proxy: {:?}",
        shimv2::proxies()
    );
    ensure!(
        slices(&arbiter.state_dir) == slices_before,
        "the sandbox got a slice: {:?}",
        slices(&arbiter.state_dir)
    );
    let sb_spec = cri::bundle_config(&ctd, K8S_NS, &sandbox)?;
    ensure!(
        sb_spec["annotations"]["gpuslice.io/memory"] == "1Gi",
        "the Pod annotation did not reach the sandbox spec (pod_annotations): {}",
        sb_spec["annotations"]
    );
    let edits = cri::gpuslice_edits(&sb_spec);
    ensure!(
        edits.is_empty(),
        "the sandbox's config.json was edited: {edits:?}"
    );

    let specs = [container(&node, "trainer"), container(&node, "evaluator")];
    let mut ids = Vec::new();
    for c in &specs {
        let id = client
            .create_container(&sandbox, &pod, c)
            .with_context(|| format!("CreateContainer {}; log:\n{}", c.name, ctd.log_tail(30)))?;
        client.start_container(&id)?;
        ids.push(id);
    }
    // Both hold their 1 GiB now (fill holds for 4 s): one slice per container, none for the sandbox.
    let want: BTreeSet<String> = slices_before
        .iter()
        .cloned()
        .chain(ids.iter().cloned())
        .collect();
    let live = slices(&arbiter.state_dir);
    ensure!(
        live == want,
        "slices while both containers run: {live:?}, expected {want:?} (sandbox {sandbox})"
    );
    let (proxies, runc_shims) = (shimv2::proxies(), shimv2::runc_v2_shims());
    println!(
        "containerd {series}: Pod served by proxies {proxies:?} in front of runc v2 shims {runc_shims:?}"
    );
    ensure!(
        proxies.len() == 1 && runc_shims.len() == 1,
        "expected one proxy and one runc v2 shim for the Pod, found {proxies:?} / {runc_shims:?}"
    );
    for id in &ids {
        let edits = cri::gpuslice_edits(&cri::bundle_config(&ctd, K8S_NS, id)?);
        ensure!(
            edits.len() >= 3,
            "container {id}'s config.json lacks gpuslice's edits: {edits:?}"
        );
    }
    for (c, id) in specs.iter().zip(&ids) {
        let st = client.wait_exited(id, T)?;
        let out = cri::read_log(&log_dir.join(c.log_path()))?;
        println!(
            "containerd {series}, {SHIM}, Pod container {} ({id}):\n{out}",
            c.name
        );
        ensure!(
            st.exit_code == 0,
            "{} exited {} ({}):\n{out}",
            c.name,
            st.exit_code,
            st.reason
        );
        assert_one_gib_slice(&out).with_context(|| format!("container {}", c.name))?;
    }
    // The containers have exited; the Pod (and its shim) still runs: their slices are released.
    ensure!(
        wait_slices(&arbiter.state_dir, &slices_before, Duration::from_secs(20)),
        "slices of exited containers not released while the Pod runs: {:?}",
        slices(&arbiter.state_dir)
    );
    ensure!(
        shimv2::proxies().len() == 1,
        "the Pod's proxy went away before the Pod"
    );
    guard.remove()?;
    if let Some(d) = Snapshot::settle(&before, Some(&arbiter.state_dir), Duration::from_secs(30)) {
        anyhow::bail!("CRI Pod with {SHIM} on containerd {series} left something behind:\n{d}");
    }
    println!(
        "cri-{series}/shim-v2-pod passed in {:.1}s",
        t0.elapsed().as_secs_f64()
    );
    Ok(())
}

#[test]
fn cri_1_6_shim_v2_pod_two_containers() -> Result<()> {
    pod_path("1.6")
}

#[test]
fn cri_1_7_shim_v2_pod_two_containers() -> Result<()> {
    pod_path("1.7")
}

#[test]
fn cri_2_1_shim_v2_pod_two_containers() -> Result<()> {
    pod_path("2.1")
}
