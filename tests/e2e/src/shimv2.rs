//! Set-up shared by the suites of `containerd-shim-gpuslice-v2` (`runtime_type =
//! "io.containerd.gpuslice.v2"`): the daemon `PATH` that lets containerd find our shim (the dist
//! tree's `usr/bin` first, then the engine's own bin with its `containerd-shim-runc-v2`, which
//! our proxy fronts), a CRI runtime class fragment, `ctr run --runtime`, and the shim processes
//! (our proxies, the runc-v2 shims) among the test's descendants.

use crate::containerd::{Containerd, CtrRun, Options};
use crate::gate::{containerd_needs, Need};
use crate::paths::{self, ContainerdBins};
use crate::procs;
use anyhow::Result;
use std::process::Output;

/// The runtime type.
pub const RUNTIME: &str = "io.containerd.gpuslice.v2";
/// Our shim binary's name.
pub const SHIM: &str = "containerd-shim-gpuslice-v2";

/// `PATH` for a containerd of `bins` that runs our shim: the dist tree's `usr/bin`, the engine's
/// bin, then the system directories (the distribution's runc).
pub fn daemon_path(bins: &ContainerdBins) -> (String, String) {
    let dist_bin = paths::product(SHIM)
        .parent()
        .map(|p| p.display().to_string())
        .unwrap_or_default();
    (
        "PATH".into(),
        format!(
            "{dist_bin}:{}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            bins.bin.display()
        ),
    )
}

/// A CRI runtime class `handler` with our runtime type and `pod_annotations = ["gpuslice.io/*"]`,
/// in the configuration version of `bins`' series (appended after the harness's own tables).
pub fn cri_runtime_class(bins: &ContainerdBins, handler: &str) -> String {
    if bins.major() >= 2 {
        format!(
            "\n[plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.{handler}]\n  \
             runtime_type = \"{RUNTIME}\"\n  pod_annotations = [\"gpuslice.io/*\"]\n"
        )
    } else {
        format!(
            "\n[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.{handler}]\n  \
             runtime_type = \"{RUNTIME}\"\n  pod_annotations = [\"gpuslice.io/*\"]\n"
        )
    }
}

/// What a suite running containers through the shim v2 on containerd of `bins` needs:
/// [`containerd_needs`] and the shim.
pub fn shim_needs(bins: &ContainerdBins) -> Vec<Need> {
    let mut v = containerd_needs(bins);
    v.push(Need::Binary(paths::product(SHIM)));
    v
}

/// containerd of `bins` on `node` serving the CRI runtime class `gpuslice` through the shim v2
/// (no runc options), its shims asking `arbiter`.
pub fn start_cri_shim(
    bins: &ContainerdBins,
    node: &crate::suite::Node,
    arbiter: &crate::Arbiter,
) -> Result<Containerd> {
    let mut env = arbiter.client_env();
    env.push(daemon_path(bins));
    Containerd::start_with_extra(
        bins,
        &node.scratch,
        &Options {
            gpuslice_runtime: None,
            env,
        },
        &cri_runtime_class(bins, "gpuslice"),
    )
}

/// `ctr run --rm --runtime io.containerd.gpuslice.v2` of [`crate::image::IMAGE`]; removes what
/// is left.
pub fn ctr_run(ctd: &Containerd, id: &str, run: &CtrRun) -> Result<Output> {
    let mut c = ctd.ctr();
    c.args(["run", "--rm", "--net-host", "--runtime", RUNTIME]);
    ctd.finish_run(c, id, run)
}

/// Our proxy processes among the test's descendants (`containerd-shim-gpuslice-v2 … -socket …`).
pub fn proxies() -> Vec<i32> {
    shims(|c| c.contains(SHIM) && c.contains(" -socket "))
}

/// Running runc v2 shims among the test's descendants (not their `start` / `delete` runs).
pub fn runc_v2_shims() -> Vec<i32> {
    shims(|c| {
        c.contains("containerd-shim-runc-v2") && !c.ends_with(" start") && !c.ends_with(" delete")
    })
}

fn shims(pred: impl Fn(&str) -> bool) -> Vec<i32> {
    procs::descendants()
        .into_iter()
        .filter(|p| p.state != 'Z' && pred(procs::cmdline(p.pid).trim_end()))
        .map(|p| p.pid)
        .collect()
}

/// A library of the test image (a dependency of the workload, so preloading it changes
/// nothing) to list in an image's own `/etc/ld.so.preload`; its path inside the image.
pub fn image_library(rootfs: &std::path::Path) -> Result<String> {
    for dir in [
        "lib/x86_64-linux-gnu",
        "usr/lib/x86_64-linux-gnu",
        "lib64",
        "lib",
    ] {
        for name in ["libgcc_s.so.1", "libm.so.6", "libc.so.6"] {
            let p = rootfs.join(dir).join(name);
            if p.is_file() {
                return Ok(format!("/{dir}/{name}"));
            }
        }
    }
    anyhow::bail!("no libgcc_s / libm / libc in {}", rootfs.display())
}

/// The image's own preload file for [`image_library`]'s `entry`.
pub fn image_preload_text(entry: &str) -> String {
    format!("# the image's own preload list\n{entry}\n")
}

/// `cat /etc/ld.so.preload`, then the workload's `info` and `fill` (as [`crate::suite::info_and_fill`]).
pub fn preload_info_and_fill() -> Vec<String> {
    let w = crate::image::WORKLOAD;
    vec![
        "/bin/sh".into(),
        "-c".into(),
        format!(
            "cat /etc/ld.so.preload && echo === && {w} info && echo --- && {w} fill --chunk 256Mi"
        ),
    ]
}

/// Checks the container's `/etc/ld.so.preload` (before `===` in `out`): the interposer first,
/// then the image's `entry`; no loader complaint. Returns the rest of the output.
pub fn check_merged_preload(out: &str, stderr: &str, entry: &str) -> Result<String> {
    let (preload, rest) = out
        .split_once("===")
        .ok_or_else(|| anyhow::anyhow!("no === separator in output:\n{out}"))?;
    let lines: Vec<&str> = preload
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    anyhow::ensure!(
        lines == ["/usr/lib/gpuslice/libgpuslice.so", entry],
        "the container's /etc/ld.so.preload is {lines:?}, expected the interposer then the \
         image's {entry}"
    );
    anyhow::ensure!(
        !stderr.contains("cannot be preloaded"),
        "the loader refused a preload entry:\n{stderr}"
    );
    Ok(rest.to_string())
}
