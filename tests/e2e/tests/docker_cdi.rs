//! Docker 26 with CDI (no runtime wrapper): dockerd's `daemon.json` enables CDI
//! (`"features": {"cdi": true}`) and points `cdi-spec-dirs` at a scratch directory holding the
//! spec `gpuslice cdi generate` writes for a fake node (simulated libraries behind a real
//! `ld.so.cache`, mknod'd device nodes). `docker run --device gpuslice.io/gpu=0 -e
//! GPUSLICE_MEMORY=1Gi` with the default runtime (runc): the spec's `gpuslice-hook
//! --standalone` admits the slice and mounts it, and the workload sees 1 GiB in
//! `cuDeviceTotalMem`, `cuMemGetInfo` and NVML and gets `CUDA_ERROR_OUT_OF_MEMORY` at exactly
//! 1 GiB. Afterwards the slice is released (poststop) and nothing is left behind.

use gpuslice_e2e::cdi;
use gpuslice_e2e::containerd::{Containerd, Options};
use gpuslice_e2e::docker::{self, Dockerd};
use gpuslice_e2e::gate::{require, Need};
use gpuslice_e2e::image::IMAGE;
use gpuslice_e2e::paths;
use gpuslice_e2e::snapshot::Snapshot;
use gpuslice_e2e::suite::{assert_one_gib_slice, stdout_ok, Node};
use serde_json::json;
use std::time::Duration;

const T: Duration = Duration::from_secs(180);

#[test]
fn docker_26_cdi_device_with_gpuslice_memory_enforces_the_cap() -> anyhow::Result<()> {
    let d = paths::docker("26");
    if !require(
        "docker-26/cdi",
        &[
            Need::Root,
            Need::Binary(paths::containerd("1.7").containerd()),
            Need::Binary(paths::runc()),
            Need::Binary(d.dockerd.clone()),
            Need::Binary(d.docker.clone()),
            Need::Dist,
            Need::Product,
            Need::Binary(paths::product("gpuslice")),
            Need::Binary(paths::product("gpuslice-hook")),
        ],
    ) {
        return Ok(());
    }
    let node = Node::new("dcdi")?;
    let arbiter = node.start_arbiter()?;
    let spec = cdi::generate(&node, &arbiter)?;
    println!("{}", spec.text);
    let env = arbiter.client_env();
    let ctd = Containerd::start(
        &paths::containerd("1.7"),
        &node.scratch,
        &Options {
            gpuslice_runtime: None,
            env: env.clone(),
        },
    )?;
    let cfg = json!({
        "features": { "cdi": true },
        "cdi-spec-dirs": [spec.dir],
    });
    let dk = Dockerd::start(&d, &ctd, &node.scratch, &cfg, &env)?;
    dk.import(&node.image.layer)?;
    let before = Snapshot::take(Some(&arbiter.state_dir));

    let args = docker::run_args(
        cdi::container_env(),
        cdi::container_binds(&node),
        &["--device", cdi::DEVICE, "-e", "GPUSLICE_MEMORY=1Gi"],
        IMAGE,
        cdi::command(),
    );
    let run = dk.run(&args, T)?;
    let out = stdout_ok("docker 26 run --device gpuslice.io/gpu=0", &run).map_err(|e| {
        anyhow::anyhow!(
            "{e:#}\ndockerd log:\n{}\narbiter log:\n{}",
            dk.log_tail(30),
            arbiter.log()
        )
    })?;
    println!("docker 26, CDI device {}:\n{out}", cdi::DEVICE);
    assert_one_gib_slice(&out)?;
    anyhow::ensure!(
        out.contains("slice=mounted"),
        "no arbiter slice at /run/gpuslice in the container (the CDI hook did not run?):\n{out}"
    );
    anyhow::ensure!(dk.containers()?.is_empty(), "containers left in dockerd");
    let left = cdi::slices(&arbiter);
    anyhow::ensure!(left.is_empty(), "slices left after poststop: {left:?}");
    if let Some(diff) = Snapshot::settle(&before, Some(&arbiter.state_dir), Duration::from_secs(10))
    {
        anyhow::bail!("docker 26 + CDI left something behind:\n{diff}");
    }
    Ok(())
}
