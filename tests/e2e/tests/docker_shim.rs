//! Docker 26 with `containerd-shim-gpuslice-v2`: `daemon.json` runtimes `gpuslice` with
//! `runtimeType: io.containerd.gpuslice.v2` (containerd finds the shim as
//! `containerd-shim-gpuslice-v2` on its `PATH`, the dist tree's `usr/bin` first) and
//! `gpuslice-path` with the shim binary's full path as `runtimeType` (Docker 24+). dockerd 26 on
//! a private containerd 1.7 (Docker mounts the root filesystem itself; the bundle's `root.path`
//! is absolute).
//!
//! Checked: `docker run --runtime gpuslice --annotation gpuslice.io/memory=1Gi` (dockerd puts
//! the annotation into the spec the shim reads at `Task.Create`) sees a 1 GiB device (CUDA and
//! NVML) and gets OOM at exactly 1 GiB; the same through the full-path runtime with
//! `-e GPUSLICE_MEMORY=1Gi`; no request: the whole device; an image with its own
//! `/etc/ld.so.preload` keeps its entry after the interposer; a malformed annotation fails
//! `docker run` with a message naming key and value; afterwards no container, slice, mount or
//! process (proxy, runc v2 shim) is left.

use gpuslice_e2e::containerd::{Containerd, Options};
use gpuslice_e2e::docker::{self, Dockerd};
use gpuslice_e2e::gate::{require, Need};
use gpuslice_e2e::image::{self, IMAGE};
use gpuslice_e2e::paths;
use gpuslice_e2e::procs::{run_ok, run_timeout};
use gpuslice_e2e::shimv2::{
    check_merged_preload, daemon_path, image_library, image_preload_text, preload_info_and_fill,
    RUNTIME, SHIM,
};
use gpuslice_e2e::snapshot::Snapshot;
use gpuslice_e2e::suite::{
    assert_one_gib_slice, assert_whole_device, info_and_fill, stdout_ok, Node,
};
use serde_json::json;
use std::time::{Duration, Instant};

const T: Duration = Duration::from_secs(180);
const PRELOAD_IMAGE: &str = "localhost/gpuslice-preload:latest";

/// `docker run` arguments: the simulated driver's environment and mounts, `extra`, the image
/// and the command.
fn docker_args(node: &Node, extra: &[&str], image: &str, cmd: Vec<String>) -> Vec<String> {
    docker::run_args(
        node.sim.container_env(),
        node.sim.container_binds(),
        extra,
        image,
        cmd,
    )
}

#[test]
fn docker_26_runtime_type_shim_v2() -> anyhow::Result<()> {
    let ctd_bins = paths::containerd("1.7");
    let d = paths::docker("26");
    let shim = paths::product(SHIM);
    if !require(
        "docker-26/shim-v2",
        &[
            Need::Root,
            Need::Binary(ctd_bins.containerd()),
            Need::Binary(paths::runc()),
            Need::Binary(d.dockerd.clone()),
            Need::Binary(d.docker.clone()),
            Need::Binary(shim.clone()),
            Need::Dist,
            Need::Product,
        ],
    ) {
        return Ok(());
    }
    let t0 = Instant::now();
    let node = Node::new("k26")?;
    let arbiter = node.start_arbiter()?;
    let env = arbiter.client_env();
    let mut ctd_env = env.clone();
    ctd_env.push(daemon_path(&ctd_bins));
    let ctd = Containerd::start(
        &ctd_bins,
        &node.scratch,
        &Options {
            gpuslice_runtime: None,
            env: ctd_env,
        },
    )?;
    let cfg = json!({ "runtimes": {
        "gpuslice": { "runtimeType": RUNTIME },
        "gpuslice-path": { "runtimeType": shim },
    } });
    let dk = Dockerd::start(&d, &ctd, &node.scratch, &cfg, &env)?;
    dk.import(&node.image.layer)?;
    let entry = image_library(&node.image.rootfs)?;
    let pimg = image::build_with_preload(
        &node.scratch.dir("preload-image")?,
        &image_preload_text(&entry),
    )?;
    run_ok(
        dk.docker()
            .arg("import")
            .arg(&pimg.layer)
            .arg(PRELOAD_IMAGE),
        Duration::from_secs(120),
    )?;
    let before = Snapshot::take(Some(&arbiter.state_dir));

    let cases: [(&str, Vec<&str>); 2] = [
        (
            "runtimeType io.containerd.gpuslice.v2, --annotation",
            vec![
                "--runtime",
                "gpuslice",
                "--annotation",
                "gpuslice.io/memory=1Gi",
            ],
        ),
        (
            "runtimeType = full path, -e GPUSLICE_MEMORY",
            vec!["--runtime", "gpuslice-path", "-e", "GPUSLICE_MEMORY=1Gi"],
        ),
    ];
    for (how, extra) in cases {
        let out = dk.run(&docker_args(&node, &extra, IMAGE, info_and_fill()), T)?;
        let out = stdout_ok(&format!("docker 26 run ({how})"), &out)
            .map_err(|e| e.context(ctd.log_tail(30)))?;
        println!("docker 26, {how}:\n{out}");
        assert_one_gib_slice(&out)?;
    }

    let out = dk.run(
        &docker_args(&node, &["--runtime", "gpuslice"], IMAGE, info_and_fill()),
        T,
    )?;
    let out = stdout_ok("docker 26 run --runtime gpuslice (no request)", &out)?;
    assert_whole_device(&out)?;

    let o = dk.run(
        &docker_args(
            &node,
            &[
                "--runtime",
                "gpuslice",
                "--annotation",
                "gpuslice.io/memory=1Gi",
            ],
            PRELOAD_IMAGE,
            preload_info_and_fill(),
        ),
        T,
    )?;
    let out = stdout_ok("docker 26 run (image with ld.so.preload)", &o)?;
    println!("docker 26, image with its own ld.so.preload:\n{out}");
    let rest = check_merged_preload(&out, &String::from_utf8_lossy(&o.stderr), &entry)?;
    assert_one_gib_slice(&rest)?;

    let mut bad_args = vec!["--name".to_string(), "e2e-d26-bad".to_string()];
    bad_args.extend(docker_args(
        &node,
        &[
            "--runtime",
            "gpuslice",
            "--annotation",
            "gpuslice.io/memory=12Q",
        ],
        IMAGE,
        info_and_fill(),
    ));
    let bad = dk.run(&bad_args, T)?;
    let err = String::from_utf8_lossy(&bad.stderr).into_owned();
    println!("docker 26, --annotation gpuslice.io/memory=12Q: {err}");
    // Docker may keep the record of a container whose start failed; that is Docker's, not ours.
    let _ = run_timeout(
        dk.docker().args(["rm", "-f", "e2e-d26-bad"]),
        Duration::from_secs(30),
    );
    anyhow::ensure!(!bad.status.success(), "a malformed request started: {err}");
    anyhow::ensure!(
        err.contains("gpuslice.io/memory") && err.contains("12Q"),
        "the failure does not name the key and value: {err}"
    );

    anyhow::ensure!(dk.containers()?.is_empty(), "containers left in dockerd");
    if let Some(diff) = Snapshot::settle(&before, Some(&arbiter.state_dir), Duration::from_secs(30))
    {
        anyhow::bail!("docker 26 + {RUNTIME} left something behind:\n{diff}");
    }
    println!(
        "docker-26/shim-v2 passed in {:.1}s",
        t0.elapsed().as_secs_f64()
    );
    Ok(())
}
