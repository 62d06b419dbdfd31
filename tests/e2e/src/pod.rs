//! The two-container Pod the CRI suites run the way kubelet does, on whichever runtime class the
//! caller's containerd serves as `gpuslice` (runc v2 with `BinaryName = gpuslice-runtime`, or
//! `containerd-shim-gpuslice-v2`): `RunPodSandbox` with the Pod annotation
//! `gpuslice.io/memory: 1Gi`, then `CreateContainer` / `StartContainer` of two workload
//! containers.
//!
//! Checked for every runtime: the sandbox has no slice and an unedited `config.json` (the
//! annotation reached it); while both containers run there is exactly one slice per container
//! id and `gpuslice status` shows each holding memory with its live process; each container's
//! `config.json` carries gpuslice's edits; each sees a 1 GiB device and gets
//! `CUDA_ERROR_OUT_OF_MEMORY` at exactly 1 GiB; with the arbiter's metrics endpoint given, each
//! slice's series carry the Pod's `namespace`, `pod` and `container` labels (from the CRI
//! annotations); after the Pod is removed nothing is left behind.
//! The caller adds its runtime's own checks at each [`Stage`].

use crate::containerd::Containerd;
use crate::cri::{self, ContainerSpec, PodGuard, PodSpec, K8S_NS};
use crate::image::WORKLOAD;
use crate::paths;
use crate::snapshot::Snapshot;
use crate::suite::{assert_one_gib_slice, Node};
use crate::Arbiter;
use anyhow::{ensure, Context, Result};
use std::collections::BTreeSet;
use std::path::Path;
use std::time::{Duration, Instant};

const T: Duration = Duration::from_secs(120);

/// Slice directories in the arbiter's state directory.
pub fn slices(state_dir: &Path) -> BTreeSet<String> {
    std::fs::read_dir(state_dir)
        .map(|rd| {
            rd.filter_map(|e| e.ok())
                .filter(|e| e.file_type().map(|t| t.is_dir()).unwrap_or(false))
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default()
}

/// Polls until the slice set is `want` (the arbiter and the runtime work asynchronously).
pub fn wait_slices(state_dir: &Path, want: &BTreeSet<String>, timeout: Duration) -> bool {
    let t0 = Instant::now();
    while t0.elapsed() < timeout {
        if &slices(state_dir) == want {
            return true;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    false
}

/// A workload container that prints what it sees, then fills its device in 256 MiB chunks and
/// holds the memory 4 s (so both containers of the Pod hold their slices at the same time).
pub fn workload_container(node: &Node, name: &str) -> ContainerSpec {
    let env = crate::sim::env_pairs(node.sim.container_env());
    ContainerSpec {
        name: name.into(),
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

/// Where the flow is, for the caller's own checks.
pub enum Stage<'a> {
    /// The sandbox runs, no container yet.
    SandboxUp,
    /// Both containers run and hold their slices (these container ids).
    ContainersRunning(&'a [String]),
    /// Both containers have exited; the Pod still runs. The slice set before the Pod.
    ContainersExited(&'a BTreeSet<String>),
}

/// One run of the Pod.
pub struct PodRun<'a> {
    /// containerd series (`1.6`, …), for messages.
    pub series: &'a str,
    /// What the suite calls this path (`pod`, `shim-v2-pod`), for messages and the Pod's uid.
    pub label: &'a str,
    /// The node.
    pub node: &'a Node,
    /// The arbiter.
    pub arbiter: &'a Arbiter,
    /// containerd, serving the runtime class `gpuslice`.
    pub ctd: &'a Containerd,
    /// The arbiter's metrics endpoint (`host:port`): while the containers run, each one's
    /// slice series must carry the Pod's namespace, name and container name.
    pub metrics: Option<&'a str>,
}

impl PodRun<'_> {
    /// Runs the Pod, calling `check` at each [`Stage`].
    pub fn run(&self, mut check: impl FnMut(Stage<'_>) -> Result<()>) -> Result<()> {
        let (series, label, node, arbiter, ctd) =
            (self.series, self.label, self.node, self.arbiter, self.ctd);
        let t0 = Instant::now();
        let client = cri::client_with_image(ctd, node)?;
        let before = Snapshot::take(Some(&arbiter.state_dir));
        let slices_before = slices(&arbiter.state_dir);
        let log_dir = node.scratch.dir("pod-logs")?;
        let pod = PodSpec {
            name: format!("gpuslice-{label}"),
            uid: format!("uid-{label}-{series}-{}", std::process::id()),
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
        check(Stage::SandboxUp)?;
        ensure!(
            slices(&arbiter.state_dir) == slices_before,
            "the sandbox got a slice: {:?}",
            slices(&arbiter.state_dir)
        );
        let sb_spec = cri::bundle_config(ctd, K8S_NS, &sandbox)?;
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

        let specs = [
            workload_container(node, "trainer"),
            workload_container(node, "evaluator"),
        ];
        let mut ids = Vec::new();
        for c in &specs {
            let id = client
                .create_container(&sandbox, &pod, c)
                .with_context(|| {
                    format!("CreateContainer {}; log:\n{}", c.name, ctd.log_tail(30))
                })?;
            client.start_container(&id)?;
            ids.push(id);
        }
        // One slice per container, none for the sandbox.
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
        status_shows_both_holding(arbiter, &ids)?;
        if let Some(addr) = self.metrics {
            let want: Vec<(&str, &str, &str, &str)> = ids
                .iter()
                .zip(&specs)
                .map(|(id, c)| (id.as_str(), "default", pod.name.as_str(), c.name.as_str()))
                .collect();
            crate::metrics::check_pod_labels(addr, &want)
                .with_context(|| format!("metrics of the Pod's slices on containerd {series}"))?;
            println!("containerd {series}, {label}: metrics labelled with the Pod: {want:?}");
        }
        check(Stage::ContainersRunning(&ids))?;
        for id in &ids {
            let edits = cri::gpuslice_edits(&cri::bundle_config(ctd, K8S_NS, id)?);
            ensure!(
                edits.len() >= 3,
                "container {id}'s config.json lacks gpuslice's edits: {edits:?}"
            );
        }
        for (c, id) in specs.iter().zip(&ids) {
            let st = client.wait_exited(id, T)?;
            let out = cri::read_log(&log_dir.join(c.log_path()))?;
            println!(
                "containerd {series}, {label}, Pod container {} ({id}):\n{out}",
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
        check(Stage::ContainersExited(&slices_before))?;
        guard.remove()?;
        if let Some(d) =
            Snapshot::settle(&before, Some(&arbiter.state_dir), Duration::from_secs(30))
        {
            anyhow::bail!("CRI {label} on containerd {series} left something behind:\n{d}");
        }
        println!(
            "cri-{series}/{label} passed in {:.1}s",
            t0.elapsed().as_secs_f64()
        );
        Ok(())
    }
}

/// `gpuslice status` sees each container's process (a pid of the container's namespace) once
/// the container holds memory.
fn status_shows_both_holding(arbiter: &Arbiter, ids: &[String]) -> Result<()> {
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
        let status = crate::procs::run_ok(
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
                return Ok(());
            }
            ensure!(
                Instant::now() < deadline,
                "gpuslice status shows memory held but no live process for 20 s (pids of the \
                 container's namespace judged on the host?): {orphaned:?}"
            );
        } else {
            ensure!(
                Instant::now() < deadline,
                "the containers hold no memory after 20 s: {mine:?}"
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}
