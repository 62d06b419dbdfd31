//! `cargo xtask dist`: build release artefacts and lay out `target/dist/` as the design brief fixes it:
//! `usr/bin/{gpuslice,gpuslice-arbiter,gpuslice-hook,gpuslice-runtime,containerd-shim-gpuslice-v2,
//! gpuslice-kubelet-plugin}`,
//! `usr/lib/gpuslice/libgpuslice.so`, `sim/libcuda.so.1`, `sim/libnvidia-ml.so.1`.

use crate::shell::{cargo, exec, target_dir};
use anyhow::{Context, Result};
use std::fs;
use std::path::{Path, PathBuf};

/// Product binaries installed under `usr/bin`.
pub const BINARIES: [&str; 6] = [
    "gpuslice",
    "gpuslice-arbiter",
    "gpuslice-hook",
    "gpuslice-runtime",
    "containerd-shim-gpuslice-v2",
    "gpuslice-kubelet-plugin",
];

/// Packages built for the dist tree.
const PACKAGES: [&str; 9] = [
    "gpuslice-cli",
    "gpuslice-kubelet-plugin",
    "gpuslice-arbiter",
    "gpuslice-hook",
    "gpuslice-shim",
    "gpuslice-interposer",
    "gpuslice-sim-cuda",
    "gpuslice-sim-nvml",
    "gpuslice-workloads",
];

/// (built file in target/release, path under target/dist)
fn layout() -> Vec<(String, String)> {
    let mut v: Vec<(String, String)> = BINARIES
        .iter()
        .map(|b| (b.to_string(), format!("usr/bin/{b}")))
        .collect();
    v.push((
        "libgpuslice.so".into(),
        "usr/lib/gpuslice/libgpuslice.so".into(),
    ));
    v.push(("libcuda.so".into(), "sim/libcuda.so.1".into()));
    v.push(("libnvidia_ml.so".into(), "sim/libnvidia-ml.so.1".into()));
    v.push((
        "gpuslice-workload".into(),
        "sim/bin/gpuslice-workload".into(),
    ));
    v
}

/// Build everything in release mode and copy it into `target/dist`. Returns the dist root.
pub fn run() -> Result<PathBuf> {
    let mut cmd = cargo();
    cmd.args(["build", "--release"]);
    for p in PACKAGES {
        cmd.args(["-p", p]);
    }
    exec(&mut cmd)?;
    let release = target_dir().join("release");
    let dist = target_dir().join("dist");
    for (from, to) in layout() {
        copy(&release.join(&from), &dist.join(&to))?;
    }
    eprintln!("dist tree ready at {}", dist.display());
    Ok(dist)
}

/// Every path the dist tree must contain (used by the `dist` suite).
pub fn expected_paths() -> Vec<String> {
    layout().into_iter().map(|(_, to)| to).collect()
}

fn copy(from: &Path, to: &Path) -> Result<()> {
    let dir = to.parent().context("dist path has a parent")?;
    fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    // Copy to a temporary name and rename, so a running process never sees a half-written file.
    let tmp = to.with_extension("partial");
    fs::copy(from, &tmp)
        .with_context(|| format!("copying {} to {}", from.display(), tmp.display()))?;
    fs::rename(&tmp, to).with_context(|| format!("renaming into {}", to.display()))?;
    Ok(())
}
