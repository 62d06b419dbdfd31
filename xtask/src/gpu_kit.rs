//! `cargo xtask gpu-kit [--sim]`: the real-GPU kit's travelling tree, `target/gpu-kit/tree/`.
//!
//! The GPU test machine receives the working tree plus at most 64 MiB of named extra paths, so
//! `target/dist` (265 MB with line tables) cannot go. This takes only what the kit runs — the
//! CLI, the arbiter and the interposer — from the dist build itself (the same cargo invocation
//! as `cargo xtask dist`: release code, glibc 2.17 floor; after a `dist` it compiles nothing),
//! strips the copies (`strip --strip-all`: line tables and symbol tables go, the dynamic
//! symbols and their versions stay) and lays them out as in the dist tree, plus the kit's
//! scripts under `kit/`; the simulator (`sim/`) only with `--sim` (the dry run). The tree must
//! stay under [`LIMIT`]; `tests/gpu/README.md` gives the device command that carries it.
//!
//! It used to build with a `gpu-kit` cargo profile (release with `strip = true`): a second cold
//! release build in CI after the dist suite's.

use crate::dist;
use crate::shell::root;
use anyhow::{bail, Context, Result};
use std::fs;
use std::path::{Path, PathBuf};

/// The directory under the target directory (ignored by git: `/target`).
pub const DIR: &str = "gpu-kit";

/// The most the tree may weigh: half of what a device run may carry.
pub const LIMIT: u64 = 32 << 20;

/// What the real-GPU run needs, as paths of the dist tree.
const PRODUCT: [&str; 3] = [
    "usr/bin/gpuslice",
    "usr/bin/gpuslice-arbiter",
    "usr/lib/gpuslice/libgpuslice.so",
];

/// The simulated GPU and its workload, for the dry run only.
const SIM: [&str; 3] = [
    "sim/libcuda.so.1",
    "sim/libnvidia-ml.so.1",
    "sim/bin/gpuslice-workload",
];

/// The kit's own files, copied from `tests/gpu/` to `kit/`.
const SCRIPTS: [&str; 5] = [
    "run.sh",
    "kit.py",
    "kit_serving.py",
    "torch_workloads.py",
    "serving.py",
];

/// Builds and lays out the tree; returns its root. Fails if it is over [`LIMIT`].
pub fn prepare(sim: bool) -> Result<PathBuf> {
    let paths: Vec<&str> = PRODUCT
        .iter()
        .chain(if sim { &SIM[..] } else { &[] })
        .copied()
        .collect();
    let tree = dist::release_part(&format!("{DIR}/tree"), &paths)?;
    for p in &paths {
        strip(&tree.join(p))?;
    }
    for s in SCRIPTS {
        copy(&root().join("tests/gpu").join(s), &tree.join("kit").join(s))?;
    }
    let size = tree_size(&tree)?;
    check_size(size)?;
    eprintln!(
        "gpu-kit: {} ({:.1} MiB{})",
        tree.display(),
        size as f64 / f64::from(1u32 << 20),
        if sim { ", with the simulator" } else { "" }
    );
    Ok(tree)
}

/// `strip --strip-all FILE` in place (binutils'; the file is a copy in the tree).
fn strip(file: &Path) -> Result<()> {
    let out = std::process::Command::new("strip")
        .arg("--strip-all")
        .arg(file)
        .output()
        .context("running strip (binutils) on the gpu-kit tree")?;
    if !out.status.success() {
        bail!(
            "strip --strip-all {}: {}",
            file.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
}

fn copy(from: &Path, to: &Path) -> Result<()> {
    if let Some(d) = to.parent() {
        fs::create_dir_all(d).with_context(|| format!("creating {}", d.display()))?;
    }
    fs::copy(from, to)
        .with_context(|| format!("copying {} to {}", from.display(), to.display()))?;
    Ok(())
}

/// Bytes of every regular file under `dir`.
pub fn tree_size(dir: &Path) -> Result<u64> {
    let mut total = 0;
    for e in fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))? {
        let e = e?;
        let t = e.file_type()?;
        if t.is_dir() {
            total += tree_size(&e.path())?;
        } else if t.is_file() {
            total += e.metadata()?.len();
        }
    }
    Ok(total)
}

/// Refuses a tree over [`LIMIT`].
pub fn check_size(size: u64) -> Result<()> {
    if size > LIMIT {
        bail!(
            "the gpu-kit tree is {:.1} MiB, over its {} MiB limit (a device run carries 64 MiB)",
            size as f64 / f64::from(1u32 << 20),
            LIMIT >> 20
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn size_is_summed_and_limited() {
        let d = std::env::temp_dir().join(format!("gpu-kit-size-{}", std::process::id()));
        fs::create_dir_all(d.join("a/b")).unwrap();
        fs::write(d.join("x"), vec![0u8; 1000]).unwrap();
        fs::write(d.join("a/b/y"), vec![0u8; 24]).unwrap();
        assert_eq!(tree_size(&d).unwrap(), 1024);
        fs::remove_dir_all(&d).unwrap();
        assert!(tree_size(&d).is_err());
        check_size(LIMIT).unwrap();
        let e = check_size(LIMIT + 1).unwrap_err().to_string();
        assert!(e.contains("over its 32 MiB limit"), "{e}");
    }

    #[test]
    fn the_tree_holds_what_the_kit_checks_for() {
        // kit.py refuses a --dist without these three; the simulator is only for --sim.
        assert_eq!(
            PRODUCT,
            [
                "usr/bin/gpuslice",
                "usr/bin/gpuslice-arbiter",
                "usr/lib/gpuslice/libgpuslice.so"
            ]
        );
        assert!(SIM.iter().all(|f| f.starts_with("sim/")));
        for s in SCRIPTS {
            assert!(root().join("tests/gpu").join(s).exists(), "{s}");
        }
    }
}
