//! The Pod path the way kubelet takes it, on containerd 1.6, 1.7 and 2.1: CRI `RunPodSandbox`
//! with the RuntimeClass handler `gpuslice` (runc v2 shim, `BinaryName = gpuslice-runtime`,
//! `pod_annotations = ["gpuslice.io/*"]`) and the Pod annotation `gpuslice.io/memory: 1Gi`, host
//! network, no hostname; then `CreateContainer` / `StartContainer` of two containers.
//!
//! Checked: each container sees a 1 GiB device (`cuDeviceTotalMem`, `cuMemGetInfo`, NVML) and
//! gets `CUDA_ERROR_OUT_OF_MEMORY` at exactly 1 GiB while the other holds its own 1 GiB (each
//! has its own slice: the arbiter's state directory holds one slice per container id, and
//! `gpuslice status` shows each holding memory with its process); the sandbox has no slice and
//! its `config.json` carries no gpuslice edit (the containers' do); a scrape of the arbiter's
//! metrics labels each container's slice with the Pod's `namespace`, `pod` and `container`;
//! after the Pod is removed, nothing is left behind. The flow is `gpuslice_e2e::pod`, shared with `cri_shim.rs`.

use anyhow::Result;
use gpuslice_e2e::containerd::{Containerd, Options};
use gpuslice_e2e::gate::{containerd_needs, require};
use gpuslice_e2e::paths;
use gpuslice_e2e::pod::PodRun;
use gpuslice_e2e::suite::Node;

fn pod_path(series: &str) -> Result<()> {
    let bins = paths::containerd(series);
    let suite = format!("cri-{series}/pod");
    if !require(&suite, &containerd_needs(&bins)) {
        return Ok(());
    }
    let node = Node::new(&format!("p{series}"))?;
    let (arbiter, metrics) = node.start_arbiter_with_metrics()?;
    let ctd = Containerd::start(
        &bins,
        &node.scratch,
        &Options {
            gpuslice_runtime: Some(paths::product("gpuslice-runtime")),
            env: arbiter.client_env(),
        },
    )?;
    PodRun {
        series,
        label: "pod",
        node: &node,
        arbiter: &arbiter,
        ctd: &ctd,
        metrics: Some(&metrics),
    }
    .run(|_| Ok(()))
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
