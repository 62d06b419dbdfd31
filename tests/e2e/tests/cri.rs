//! The Pod path the way kubelet takes it, on containerd 1.6, 1.7 and 2.1: CRI `RunPodSandbox`
//! with the RuntimeClass handler `gpuslice` (runc v2 shim, `BinaryName = gpuslice-runtime`,
//! `pod_annotations = ["gpuslice.io/*"]`) and the Pod annotation `gpuslice.io/memory: 1Gi`, host
//! network, no hostname; then `CreateContainer` / `StartContainer` of two containers.
//!
//! Checked: each container sees a 1 GiB device (`cuDeviceTotalMem`, `cuMemGetInfo`, NVML) and
//! gets `CUDA_ERROR_OUT_OF_MEMORY` at exactly 1 GiB while the other holds its own 1 GiB (each
//! has its own slice: the arbiter's state directory holds one slice per container id); the
//! sandbox has no slice and its `config.json` carries no gpuslice edit (the containers' do);
//! after the Pod is removed, nothing is left behind.

use anyhow::{ensure, Context, Result};
use gpuslice_e2e::arbiter::Arbiter;
use gpuslice_e2e::containerd::{Containerd, Options};
use gpuslice_e2e::cri::{self, ContainerSpec, PodGuard, PodSpec, K8S_NS};
use gpuslice_e2e::gate::{containerd_needs, require};
use gpuslice_e2e::image::WORKLOAD;
use gpuslice_e2e::paths;
use gpuslice_e2e::snapshot::Snapshot;
use gpuslice_e2e::suite::{assert_one_gib_slice, Node};
use std::collections::BTreeSet;
use std::time::{Duration, Instant};

const T: Duration = Duration::from_secs(120);

/// Slice directories in the arbiter's state directory.
fn slices(state_dir: &std::path::Path) -> BTreeSet<String> {
    std::fs::read_dir(state_dir)
        .map(|rd| {
            rd.filter_map(|e| e.ok())
                .filter(|e| e.file_type().map(|t| t.is_dir()).unwrap_or(false))
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default()
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
    let suite = format!("cri-{series}/pod");
    if !require(&suite, &containerd_needs(&bins)) {
        return Ok(());
    }
    let t0 = Instant::now();
    let node = Node::new(&format!("p{series}"))?;
    let arbiter = Arbiter::start(&node.scratch, &node.sim)?;
    let ctd = Containerd::start(
        &bins,
        &node.scratch,
        &Options {
            gpuslice_runtime: Some(paths::product("gpuslice-runtime")),
            env: arbiter.client_env(),
        },
    )?;
    let client = cri::client_with_image(&ctd, &node)?;
    let before = Snapshot::take(Some(&arbiter.state_dir));
    let slices_before = slices(&arbiter.state_dir);

    let log_dir = node.scratch.dir("pod-logs")?;
    let pod = PodSpec {
        name: "gpuslice-pod".into(),
        uid: format!("uid-{series}-{}", std::process::id()),
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
    // `gpuslice status` sees each container's process (a pid of the container's namespace)
    // once the container holds memory.
    let rows = |view: &serde_json::Value| -> Vec<serde_json::Value> {
        view["devices"]
            .as_array()
            .into_iter()
            .flatten()
            .flat_map(|d| d["slices"].as_array().cloned().unwrap_or_default())
            .collect()
    };
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let status = gpuslice_e2e::procs::run_ok(
            std::process::Command::new(paths::product("gpuslice"))
                .args(["status", "--json"])
                .envs(arbiter.client_env()),
            Duration::from_secs(30),
        )?;
        let view: serde_json::Value = serde_json::from_str(&status)?;
        let mine: Vec<serde_json::Value> = rows(&view)
            .into_iter()
            .filter(|r| ids.iter().any(|id| r["slice_id"] == id.as_str()))
            .collect();
        let holding: Vec<&serde_json::Value> = mine
            .iter()
            .filter(|r| r["memory_used"].as_u64().unwrap_or(0) > 0)
            .collect();
        if holding.len() == ids.len() {
            // A process that just exited keeps its charges (its context among them) until the
            // arbiter's reclaim finds it dead, so memory without a process may show for a
            // moment; it must not last.
            let orphaned: Vec<&&serde_json::Value> = holding
                .iter()
                .filter(|r| r["processes"].as_array().map_or(0, Vec::len) == 0)
                .collect();
            if orphaned.is_empty() {
                break;
            }
            ensure!(
                Instant::now() < deadline,
                "gpuslice status shows memory held but no live process for 20 s (pids of the container's namespace judged on the host?): {:?}",
                orphaned
            );
            std::thread::sleep(Duration::from_millis(100));
            continue;
        }
        ensure!(
            Instant::now() < deadline,
            "the containers hold no memory after 20 s: {mine:?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
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
            "containerd {series}, Pod container {} ({id}):\n{out}",
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
    guard.remove()?;
    if let Some(d) = Snapshot::settle(&before, Some(&arbiter.state_dir), Duration::from_secs(10)) {
        anyhow::bail!("CRI Pod on containerd {series} left something behind:\n{d}");
    }
    println!(
        "cri-{series}/pod passed in {:.1}s",
        t0.elapsed().as_secs_f64()
    );
    Ok(())
}

#[test]
fn cri_1_6_pod_two_containers() -> Result<()> {
    pod_path("1.6")
}

#[test]
fn cri_1_7_pod_two_containers() -> Result<()> {
    pod_path("1.7")
}

#[test]
fn cri_2_1_pod_two_containers() -> Result<()> {
    pod_path("2.1")
}
