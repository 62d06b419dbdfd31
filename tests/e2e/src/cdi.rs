//! CDI set-up shared by the suites of CDI-aware engines (Docker 26, containerd 1.7 CRI): a
//! scratch CDI spec directory holding the spec `gpuslice cdi generate` writes for a fake node
//! ([`crate::podman::fake_driver`]: the simulated libraries behind a real `ld.so.cache`,
//! mknod'd device nodes), and what a container on the simulated node needs besides the CDI
//! device (the simulator's environment and state directory; the driver libraries come from the
//! spec's mounts, at [`DRIVER_LIB_DIR`]).

use crate::containerd::{Containerd, Options};
use crate::paths::{self, ContainerdBins};
use crate::podman::{fake_driver, DRIVER_LIB_DIR};
use crate::procs::run_ok;
use crate::sim::{Bind, CONTAINER_STATE_DIR, DEVICES};
use crate::suite::Node;
use crate::Arbiter;
use anyhow::{ensure, Context, Result};
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

/// The device every CDI suite asks for.
pub const DEVICE: &str = "gpuslice.io/gpu=0";

/// A generated CDI spec in its own directory.
#[derive(Debug)]
pub struct CdiSpec {
    /// The directory to give the engine (`cdi-spec-dirs`, `cdi_spec_dirs`).
    pub dir: PathBuf,
    /// The spec file in it.
    pub file: PathBuf,
    /// The spec's text.
    pub text: String,
}

/// Runs `gpuslice cdi generate` for a fake node under the node's scratch directory, with the
/// arbiter's state directory and configuration (the hooks in the spec carry them), into a
/// fresh spec directory. Checks the kind and version.
pub fn generate(node: &Node, arbiter: &Arbiter) -> Result<CdiSpec> {
    let (driver_root, dev_root) = fake_driver(&node.scratch.dir("fake-node")?)?;
    let dir = node.scratch.dir("cdi")?;
    let file = dir.join("gpuslice.yaml");
    let out = run_ok(
        Command::new(paths::product("gpuslice"))
            .args(["cdi", "generate", "--output"])
            .arg(&file)
            .arg("--driver-root")
            .arg(&driver_root)
            .arg("--dev-root")
            .arg(&dev_root)
            .arg("--preload-file")
            .arg(node.scratch.join("ld.so.preload"))
            .envs(arbiter.client_env())
            .envs(node.sim.host_env()),
        Duration::from_secs(60),
    )
    .context("gpuslice cdi generate")?;
    println!("{out}");
    let text =
        std::fs::read_to_string(&file).with_context(|| format!("reading {}", file.display()))?;
    ensure!(
        text.contains("kind: gpuslice.io/gpu") && text.contains("cdiVersion: 0.5.0"),
        "unexpected CDI spec:\n{text}"
    );
    Ok(CdiSpec { dir, file, text })
}

/// Environment of a container on the simulated node whose driver libraries come from the CDI
/// spec (`KEY=VALUE`): the simulator's devices and state file, `LD_LIBRARY_PATH` at the spec's
/// library directory.
pub fn container_env() -> Vec<String> {
    vec![
        format!("GPUSLICE_SIM_DEVICES={DEVICES}"),
        format!("GPUSLICE_SIM_STATE={CONTAINER_STATE_DIR}/state"),
        format!("LD_LIBRARY_PATH={DRIVER_LIB_DIR}"),
    ]
}

/// The simulator's state directory, read-write (the one bind such a container needs).
pub fn container_binds(node: &Node) -> Vec<Bind> {
    let state = node.sim.state_file();
    vec![Bind {
        src: state.parent().map(PathBuf::from).unwrap_or(state),
        dst: CONTAINER_STATE_DIR.into(),
        ro: false,
    }]
}

/// The command run in each CDI container: whether the arbiter's slice is mounted at
/// `/run/gpuslice` (`slice=mounted`, the hook's work, not the interposer's standalone
/// fallback), then `info` and `fill`.
pub fn command() -> Vec<String> {
    let mut c = crate::suite::info_and_fill();
    if let Some(script) = c.last_mut() {
        *script = format!(
            "if test -f /run/gpuslice/limits; then echo slice=mounted; else echo slice=none; fi; {script}"
        );
    }
    c
}

/// Slice directories in the arbiter's state directory.
pub fn slices(arbiter: &Arbiter) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(&arbiter.state_dir)
        .map(|rd| {
            rd.flatten()
                .filter(|e| e.path().is_dir())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

/// `enable_cdi = true` and `cdi_spec_dirs = [spec_dir]` in the CRI table of containerd 1.x
/// (`io.containerd.grpc.v1.cri`) or 2.x (`io.containerd.cri.v1.runtime`).
pub fn with_cdi(text: String, major: u32, spec_dir: &std::path::Path) -> String {
    let table = if major >= 2 {
        "[plugins.'io.containerd.cri.v1.runtime']\n"
    } else {
        "[plugins.\"io.containerd.grpc.v1.cri\"]\n"
    };
    let keys = format!(
        "{table}  enable_cdi = true\n  cdi_spec_dirs = [\"{}\"]\n",
        spec_dir.display()
    );
    text.replacen(table, &keys, 1)
}

/// A private containerd of `bins` (no gpuslice runtime class) reaching `arbiter`, with CDI on
/// and `spec`'s directory as its only CDI spec directory.
pub fn containerd(
    bins: &ContainerdBins,
    node: &Node,
    arbiter: &Arbiter,
    spec: &CdiSpec,
) -> Result<Containerd> {
    let ctd = Containerd::start_with_config(
        bins,
        &node.scratch,
        &Options {
            gpuslice_runtime: None,
            env: arbiter.client_env(),
        },
        &|text, _| with_cdi(text, bins.major(), &spec.dir),
    )?;
    let cfg = std::fs::read_to_string(ctd.dir.join("config.toml"))?;
    ensure!(
        cfg.contains("enable_cdi = true"),
        "CDI not enabled in:\n{cfg}"
    );
    Ok(ctd)
}
