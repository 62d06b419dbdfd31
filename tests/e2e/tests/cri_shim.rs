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
//! `CUDA_ERROR_OUT_OF_MEMORY` at exactly 1 GiB, and a scrape of the arbiter's metrics labels each
//! slice with the Pod's `namespace`, `pod` and `container`; when the containers have exited their slices are
//! released while the Pod still runs (per-container `Delete`); after the Pod is removed nothing
//! is left behind (state directory, mounts, processes: proxies and runc v2 shims included). The
//! flow is `gpuslice_e2e::pod`, shared with `cri.rs`; the shim's own checks are here.

use anyhow::{ensure, Result};
use gpuslice_e2e::gate::require;
use gpuslice_e2e::paths;
use gpuslice_e2e::pod::{slices, wait_slices, PodRun, Stage};
use gpuslice_e2e::shimv2;
use gpuslice_e2e::suite::Node;
use std::time::Duration;

fn pod_path(series: &str) -> Result<()> {
    let bins = paths::containerd(series);
    let suite = format!("cri-{series}/shim-v2-pod");
    if !require(&suite, &shimv2::shim_needs(&bins)) {
        return Ok(());
    }
    let node = Node::new(&format!("q{series}"))?;
    let (arbiter, metrics) = node.start_arbiter_with_metrics()?;
    let ctd = shimv2::start_cri_shim(&bins, &node, &arbiter)?;
    let run = PodRun {
        series,
        label: "shim-v2-pod",
        node: &node,
        arbiter: &arbiter,
        ctd: &ctd,
        metrics: Some(&metrics),
    };
    run.run(|stage| {
        match stage {
            Stage::SandboxUp => ensure!(
                shimv2::proxies().len() == 1,
                "the sandbox is not served by exactly one gpuslice proxy: {:?}",
                shimv2::proxies()
            ),
            Stage::ContainersRunning(_) => {
                let (proxies, runc_shims) = (shimv2::proxies(), shimv2::runc_v2_shims());
                println!(
                    "containerd {series}: Pod served by proxies {proxies:?} in front of runc v2 \
                     shims {runc_shims:?}"
                );
                ensure!(
                    proxies.len() == 1 && runc_shims.len() == 1,
                    "expected one proxy and one runc v2 shim for the Pod, found {proxies:?} / \
                     {runc_shims:?}"
                );
            }
            // The containers have exited; the Pod (and its shim) still runs: their slices are
            // released.
            Stage::ContainersExited(before) => {
                ensure!(
                    wait_slices(&arbiter.state_dir, before, Duration::from_secs(20)),
                    "slices of exited containers not released while the Pod runs: {:?}",
                    slices(&arbiter.state_dir)
                );
                ensure!(
                    shimv2::proxies().len() == 1,
                    "the Pod's proxy went away before the Pod"
                );
            }
        }
        Ok(())
    })
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
