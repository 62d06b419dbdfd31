//! `cargo xtask dist`: build release artefacts and lay out `target/dist/` as the design brief fixes it:
//! `usr/bin/{gpuslice,gpuslice-arbiter,gpuslice-hook,gpuslice-runtime,containerd-shim-gpuslice-v2,
//! gpuslice-kubelet-plugin}`,
//! `usr/lib/gpuslice/libgpuslice.so`, `sim/libcuda.so.1`, `sim/libnvidia-ml.so.1`.
//! Every ELF of it is linked against glibc 2.17 ([`crate::zig`]).

use crate::shell::{cargo, exec, target_dir};
use crate::zig;
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

/// Every file of the tree: (package that builds it, file in `target/<profile>`, path under the
/// tree's root). The `usr/bin` rows are [`BINARIES`].
const FILES: [(&str, &str, &str); 10] = [
    ("gpuslice-cli", "gpuslice", "usr/bin/gpuslice"),
    (
        "gpuslice-arbiter",
        "gpuslice-arbiter",
        "usr/bin/gpuslice-arbiter",
    ),
    ("gpuslice-hook", "gpuslice-hook", "usr/bin/gpuslice-hook"),
    (
        "gpuslice-shim",
        "gpuslice-runtime",
        "usr/bin/gpuslice-runtime",
    ),
    (
        "gpuslice-shim",
        "containerd-shim-gpuslice-v2",
        "usr/bin/containerd-shim-gpuslice-v2",
    ),
    (
        "gpuslice-kubelet-plugin",
        "gpuslice-kubelet-plugin",
        "usr/bin/gpuslice-kubelet-plugin",
    ),
    (
        "gpuslice-interposer",
        "libgpuslice.so",
        "usr/lib/gpuslice/libgpuslice.so",
    ),
    ("gpuslice-sim-cuda", "libcuda.so", "sim/libcuda.so.1"),
    (
        "gpuslice-sim-nvml",
        "libnvidia_ml.so",
        "sim/libnvidia-ml.so.1",
    ),
    (
        "gpuslice-workloads",
        "gpuslice-workload",
        "sim/bin/gpuslice-workload",
    ),
];

/// How a tree is linked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Link {
    /// Against glibc 2.17 by zig: what ships (and travels to other machines).
    Floor,
    /// By the host's toolchain against the host's glibc: runs here only (`cargo xtask demo`).
    Host,
}

/// Build everything in release mode and copy it into `target/dist`. Returns the dist root.
pub fn run() -> Result<PathBuf> {
    build("release", "dist", &FILES, Link::Floor, &packages_of(&FILES))
}

/// The files at `paths` of the dist tree as `cargo xtask dist` builds them — the same cargo
/// invocation (profile `release`, every package of the tree, glibc 2.17 floor), so after a
/// `dist` it compiles nothing — laid out in a fresh `target/<dir>` (`cargo xtask gpu-kit`).
pub fn release_part(dir: &str, paths: &[&str]) -> Result<PathBuf> {
    let files = files_at(paths)?;
    clear(dir)?;
    build("release", dir, &files, Link::Floor, &packages_of(&FILES))
}

/// The rows of [`FILES`] at `paths`.
fn files_at(paths: &[&str]) -> Result<Vec<(&'static str, &'static str, &'static str)>> {
    paths
        .iter()
        .map(|p| {
            FILES
                .into_iter()
                .find(|f| f.2 == *p)
                .with_context(|| format!("{p} is not a path of the dist tree"))
        })
        .collect()
}

/// Removes `target/<dir>` when it exists.
fn clear(dir: &str) -> Result<()> {
    let root = target_dir().join(dir);
    if root.exists() {
        fs::remove_dir_all(&root).with_context(|| format!("clearing {}", root.display()))?;
    }
    Ok(())
}

/// The packages that build `files`, each once.
fn packages_of(files: &[(&'static str, &'static str, &'static str)]) -> Vec<&'static str> {
    let mut packages: Vec<&str> = files.iter().map(|f| f.0).collect();
    packages.sort_unstable();
    packages.dedup();
    packages
}

/// Build only the files at `paths` (paths under the dist root) with cargo profile `profile`,
/// laid out as in the dist tree in a fresh `target/<dir>`: a partial tree for a command that
/// runs a few of the binaries (`cargo xtask demo`, `cargo xtask gpu-kit`). Returns its root.
pub fn build_part(profile: &str, dir: &str, paths: &[&str], link: Link) -> Result<PathBuf> {
    let files = files_at(paths)?;
    clear(dir)?;
    build(profile, dir, &files, link, &packages_of(&files))
}

/// Builds `packages` with `profile` and lays `files` out in `target/<dir>`.
fn build(
    profile: &str,
    dir: &str,
    files: &[(&str, &str, &str)],
    link: Link,
    packages: &[&str],
) -> Result<PathBuf> {
    let (mut cmd, built) = match link {
        Link::Floor => (zig::build(profile)?, zig::out_dir(profile)),
        Link::Host => {
            let mut c = cargo();
            c.args(["build", "--profile", profile]);
            (c, target_dir().join(profile))
        }
    };
    for p in packages {
        cmd.args(["-p", *p]);
    }
    exec(&mut cmd)?;
    let root = target_dir().join(dir);
    for (_, from, to) in files {
        copy(&built.join(from), &root.join(to))?;
    }
    eprintln!("{profile} build laid out at {}", root.display());
    Ok(root)
}

/// Every path the dist tree must contain (used by the `dist` suite).
pub fn expected_paths() -> Vec<String> {
    FILES.iter().map(|f| f.2.to_string()).collect()
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn usr_bin_rows_are_the_binaries() {
        let in_usr_bin: Vec<&str> = FILES
            .iter()
            .filter_map(|f| f.2.strip_prefix("usr/bin/"))
            .collect();
        assert_eq!(in_usr_bin, BINARIES);
    }

    /// The node image is the tree's `usr/bin` (`cargo xtask image`): every program its install
    /// script installs is one of the tree's.
    #[test]
    fn the_tree_has_every_program_the_node_installer_installs() {
        for b in gpuslice_test_support::packaging::node_binaries() {
            assert!(BINARIES.contains(&b.as_str()), "{b} is not in {BINARIES:?}");
        }
    }

    /// The suites' node harness finds each file of a dist tree where this tree puts it.
    #[test]
    fn the_node_harness_reads_the_tree_as_laid_out() {
        let root = Path::new("/dist");
        let tree = gpuslice_test_support::Build::Dist(root.to_path_buf());
        for (_, file, at) in FILES {
            assert_eq!(tree.file(file), root.join(at), "{file}");
        }
        for (_, from, to) in FILES.iter().filter(|f| f.2.starts_with("usr/bin/")) {
            assert_eq!(Some(*from), to.strip_prefix("usr/bin/"));
        }
    }
}
