//! The test image: a minimal root filesystem with `gpuslice-workload`, the shared libraries it
//! and the (host-mounted) driver libraries need, busybox as `/bin/sh`, and a minimal `/etc`.
//! Packed as a single-layer OCI archive for `ctr images import` and as a plain tarball for
//! `docker import`, both named [`IMAGE`] (no registry is reachable: names must be local).

use crate::paths;
use crate::procs::run_ok;
use anyhow::{bail, Context, Result};
use serde_json::json;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

/// The image name in every engine.
pub const IMAGE: &str = "localhost/gpuslice-test:latest";
/// The workload's path inside the image.
pub const WORKLOAD: &str = "/usr/bin/gpuslice-workload";

const T: Duration = Duration::from_secs(60);

/// Build the root filesystem in `root` (created).
pub fn build_rootfs(root: &Path) -> Result<()> {
    for d in [
        "bin",
        "etc",
        "dev",
        "proc",
        "sys",
        "tmp",
        "run",
        "root",
        "usr/bin",
        "usr/lib",
        "var/lib/gpuslice-sim",
        "usr/lib/gpuslice-sim",
    ] {
        std::fs::create_dir_all(root.join(d))?;
    }
    copy_file(
        &paths::workload(),
        &root.join(WORKLOAD.trim_start_matches('/')),
    )?;
    // Libraries: the workload's, the simulated driver's and the interposer's (mounted from the
    // host at run time, but they load inside the container with the image's libc).
    let mut objs = vec![
        paths::workload(),
        paths::sim_lib_dir().join("libcuda.so.1"),
        paths::sim_lib_dir().join("libnvidia-ml.so.1"),
    ];
    if paths::interposer().exists() {
        objs.push(paths::interposer());
    }
    add_libraries(root, &objs)?;
    // busybox as /bin/sh and a few applets for debugging.
    copy_file(&busybox()?, &root.join("bin/busybox"))?;
    for a in [
        "sh", "ls", "cat", "env", "sleep", "echo", "mount", "ps", "true", "false",
    ] {
        let l = root.join("bin").join(a);
        if !l.exists() {
            std::os::unix::fs::symlink("busybox", &l)?;
        }
    }
    std::fs::write(
        root.join("etc/passwd"),
        "root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n",
    )?;
    std::fs::write(root.join("etc/group"), "root:x:0:\nnogroup:x:65534:\n")?;
    std::fs::write(root.join("etc/hostname"), "gpuslice-test\n")?;
    Ok(())
}

/// The host's static busybox.
pub fn busybox() -> Result<PathBuf> {
    ["/bin/busybox", "/usr/bin/busybox"]
        .into_iter()
        .map(PathBuf::from)
        .find(|p| p.exists())
        .context("busybox not found (scripts/install-engines.sh installs busybox-static)")
}

/// Copies into `root` the shared libraries the objects `objs` load (the dynamic loader
/// included), at their host paths.
pub fn add_libraries(root: &Path, objs: &[PathBuf]) -> Result<()> {
    let mut libs = BTreeSet::new();
    for o in objs {
        libs.extend(ldd(o)?);
    }
    for l in &libs {
        copy_file(l, &root.join(l.strip_prefix("/").unwrap_or(l)))?;
    }
    Ok(())
}

/// Shared libraries `obj` loads (resolved paths, the dynamic loader included).
fn ldd(obj: &Path) -> Result<BTreeSet<PathBuf>> {
    let out = run_ok(Command::new("ldd").arg(obj), T)?;
    let mut v = BTreeSet::new();
    for line in out.lines() {
        let line = line.trim();
        let path = match line.split_once("=>") {
            Some((_, r)) => r.split_whitespace().next(),
            None => line.split_whitespace().next(),
        };
        if let Some(p) = path.filter(|p| p.starts_with('/')) {
            v.insert(PathBuf::from(p));
        }
    }
    if v.is_empty() {
        bail!("ldd {} found no libraries:\n{out}", obj.display());
    }
    Ok(v)
}

/// Copy a file's content (symlinks followed), keeping its mode.
pub fn copy_file(from: &Path, to: &Path) -> Result<()> {
    if let Some(d) = to.parent() {
        std::fs::create_dir_all(d)?;
    }
    std::fs::copy(from, to)
        .with_context(|| format!("copying {} to {}", from.display(), to.display()))?;
    Ok(())
}

/// Pack `root` as an uncompressed tarball (the image's single layer and `docker import` input).
pub fn layer_tar(root: &Path, out: &Path) -> Result<()> {
    run_ok(
        Command::new("tar")
            .args([
                "--numeric-owner",
                "--owner=0",
                "--group=0",
                "--sort=name",
                "--mtime=@0",
            ])
            .arg("-C")
            .arg(root)
            .arg("-cf")
            .arg(out)
            .arg("."),
        T,
    )?;
    Ok(())
}

fn sha256(p: &Path) -> Result<String> {
    let out = run_ok(Command::new("sha256sum").arg(p), T)?;
    out.split_whitespace()
        .next()
        .map(str::to_string)
        .context("sha256sum printed nothing")
}

fn put_blob(blobs: &Path, bytes: &[u8]) -> Result<(String, u64)> {
    let tmp = blobs.join("tmp");
    std::fs::write(&tmp, bytes)?;
    let d = sha256(&tmp)?;
    std::fs::rename(&tmp, blobs.join(&d))?;
    Ok((format!("sha256:{d}"), bytes.len() as u64))
}

/// Build an OCI image archive (`oci-layout`, `index.json`, `blobs/sha256/…`) at `out` with the
/// layer `layer`, named [`IMAGE`] through the index annotations containerd's import reads.
pub fn oci_archive(layer: &Path, work: &Path, out: &Path) -> Result<()> {
    oci_archive_with_cmd(layer, &work.join("oci"), out, &["/bin/sh"])
}

/// [`oci_archive`] with the image config's `Cmd` set to `cmd`, staged in `dir`.
pub fn oci_archive_with_cmd(layer: &Path, dir: &Path, out: &Path, cmd: &[&str]) -> Result<()> {
    oci_archive_named(layer, dir, out, cmd, IMAGE)
}

/// [`oci_archive_with_cmd`] for an image named `name`.
pub fn oci_archive_named(
    layer: &Path,
    dir: &Path,
    out: &Path,
    cmd: &[&str],
    name: &str,
) -> Result<()> {
    let blobs = dir.join("blobs/sha256");
    std::fs::create_dir_all(&blobs)?;
    let ld = sha256(layer)?;
    let lsize = std::fs::metadata(layer)?.len();
    std::fs::copy(layer, blobs.join(&ld))?;
    let config = json!({
        "architecture": "amd64",
        "os": "linux",
        "config": {
            "Env": ["PATH=/usr/local/bin:/usr/bin:/bin"],
            "Cmd": cmd,
            "WorkingDir": "/"
        },
        "rootfs": { "type": "layers", "diff_ids": [format!("sha256:{ld}")] }
    });
    let (cd, cs) = put_blob(&blobs, &serde_json::to_vec(&config)?)?;
    let manifest = json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": { "mediaType": "application/vnd.oci.image.config.v1+json", "digest": cd, "size": cs },
        "layers": [{ "mediaType": "application/vnd.oci.image.layer.v1.tar", "digest": format!("sha256:{ld}"), "size": lsize }]
    });
    let (md, ms) = put_blob(&blobs, &serde_json::to_vec(&manifest)?)?;
    let index = json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.index.v1+json",
        "manifests": [{
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "digest": md, "size": ms,
            "platform": { "architecture": "amd64", "os": "linux" },
            "annotations": {
                "io.containerd.image.name": name,
                "org.opencontainers.image.ref.name": "latest"
            }
        }]
    });
    std::fs::write(dir.join("index.json"), serde_json::to_vec(&index)?)?;
    std::fs::write(dir.join("oci-layout"), br#"{"imageLayoutVersion":"1.0.0"}"#)?;
    run_ok(
        Command::new("tar")
            .args(["--numeric-owner", "--owner=0", "--group=0", "-C"])
            .arg(dir)
            .arg("-cf")
            .arg(out)
            .args(["oci-layout", "index.json", "blobs"]),
        T,
    )?;
    Ok(())
}

/// Everything built once per test: rootfs dir, layer tarball, OCI archive.
#[derive(Debug)]
pub struct TestImage {
    /// The root filesystem directory.
    pub rootfs: PathBuf,
    /// The rootfs tarball (`docker import`).
    pub layer: PathBuf,
    /// The OCI archive (`ctr images import`).
    pub oci: PathBuf,
}

/// Build the image under `work`.
pub fn build(work: &Path) -> Result<TestImage> {
    let rootfs = work.join("rootfs");
    build_rootfs(&rootfs)?;
    let layer = work.join("layer.tar");
    layer_tar(&rootfs, &layer)?;
    let oci = work.join("image.oci.tar");
    oci_archive(&layer, work, &oci)?;
    Ok(TestImage { rootfs, layer, oci })
}

/// [`build`] with the image's own `/etc/ld.so.preload` holding `text` (gpuslice must keep its
/// entries after the interposer).
pub fn build_with_preload(work: &Path, text: &str) -> Result<TestImage> {
    let rootfs = work.join("rootfs");
    build_rootfs(&rootfs)?;
    std::fs::write(rootfs.join("etc/ld.so.preload"), text)?;
    let layer = work.join("layer.tar");
    layer_tar(&rootfs, &layer)?;
    let oci = work.join("image.oci.tar");
    oci_archive(&layer, work, &oci)?;
    Ok(TestImage { rootfs, layer, oci })
}
