//! Podman suite (CDI, no runtime wrapper): `gpuslice cdi generate` writes the spec for a fake
//! node (simulated libraries behind a real ld.so.cache, mknod'd device nodes) into an isolated
//! CDI directory; `podman run --device gpuslice.io/gpu=0 -e GPUSLICE_MEMORY=1Gi` then sees and is
//! held to 1 GiB, through the spec's interposer, preload file and gpuslice-hook (standalone).

use gpuslice_e2e::gate::{require, Need};
use gpuslice_e2e::paths;
use gpuslice_e2e::podman::{self, Podman, DRIVER_LIB_DIR};
use gpuslice_e2e::procs::run_ok;
use gpuslice_e2e::sim::CONTAINER_STATE_DIR;
use gpuslice_e2e::suite::{assert_one_gib_slice, info_and_fill, stdout_ok, Node};
use std::process::Command;
use std::time::Duration;

const T: Duration = Duration::from_secs(300);
const IMAGE: &str = "localhost/gpuslice-e2e:cdi";

/// `info` + `fill`, after saying whether the arbiter's slice is mounted at /run/gpuslice.
fn command() -> Vec<String> {
    let mut c = info_and_fill();
    if let Some(script) = c.last_mut() {
        *script = format!(
            "if test -f /run/gpuslice/limits; then echo slice=mounted; else echo slice=none; fi; {script}"
        );
    }
    c
}

#[test]
fn podman_cdi_device_with_gpuslice_memory_enforces_the_cap() -> anyhow::Result<()> {
    if !require(
        "podman/cdi",
        &[
            Need::Root,
            Need::Binary(podman::binary()),
            Need::Binary(paths::runc()),
            Need::Dist,
            Need::Product,
            Need::Binary(paths::product("gpuslice")),
            Need::Binary(paths::product("gpuslice-hook")),
        ],
    ) {
        return Ok(());
    }
    let node = Node::new("podman-cdi")?;
    let arbiter = node.start_arbiter()?;
    let (driver_root, dev_root) = podman::fake_driver(&node.scratch.dir("fake-node")?)?;
    let pm = Podman::new(&node.scratch.dir("podman")?)?;
    let spec = pm.cdi_dir.join("gpuslice.yaml");
    let out = run_ok(
        Command::new(paths::product("gpuslice"))
            .args(["cdi", "generate", "--output"])
            .arg(&spec)
            .arg("--driver-root")
            .arg(&driver_root)
            .arg("--dev-root")
            .arg(&dev_root)
            .arg("--preload-file")
            .arg(node.scratch.join("ld.so.preload"))
            .envs(arbiter.client_env())
            .envs(node.sim.host_env()),
        Duration::from_secs(60),
    )?;
    println!("{out}");
    let text = std::fs::read_to_string(&spec)?;
    println!("{text}");
    anyhow::ensure!(text.contains("kind: gpuslice.io/gpu") && text.contains("cdiVersion: 0.5.0"));
    pm.import(&node.image.layer, IMAGE)?;
    let sim_state = node.sim.state_file();
    let run = pm.run(
        &[
            "--device".into(),
            "gpuslice.io/gpu=0".into(),
            "-e".into(),
            "GPUSLICE_MEMORY=1Gi".into(),
            "-e".into(),
            format!("GPUSLICE_SIM_DEVICES={}", gpuslice_e2e::sim::DEVICES),
            "-e".into(),
            format!("GPUSLICE_SIM_STATE={CONTAINER_STATE_DIR}/state"),
            "-e".into(),
            format!("LD_LIBRARY_PATH={DRIVER_LIB_DIR}"),
            "-v".into(),
            format!(
                "{}:{CONTAINER_STATE_DIR}",
                sim_state.parent().unwrap_or(&sim_state).display()
            ),
            IMAGE.into(),
        ]
        .into_iter()
        .chain(command())
        .collect::<Vec<_>>(),
        T,
    );
    let result = (|| {
        let out = stdout_ok("podman run --device gpuslice.io/gpu=0", &run?)?;
        println!("{out}");
        assert_one_gib_slice(&out)?;
        // The hook mounted the arbiter's slice (not the interposer's standalone fallback).
        anyhow::ensure!(
            out.contains("slice=mounted"),
            "no arbiter slice at /run/gpuslice in the container:\n{out}"
        );
        Ok(())
    })();
    // poststop released the slice: no slice directory is left.
    let left: Vec<_> = std::fs::read_dir(&arbiter.state_dir)?
        .flatten()
        .filter(|e| e.path().is_dir())
        .map(|e| e.file_name())
        .collect();
    pm.cleanup();
    result.map_err(|e| anyhow::anyhow!("{e:#}\narbiter log:\n{}", arbiter.log()))?;
    anyhow::ensure!(left.is_empty(), "slices left after poststop: {left:?}");
    Ok(())
}
