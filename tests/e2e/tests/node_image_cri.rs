//! The node image (`cargo xtask image`) in a CRI Pod, on containerd 2.1: a base layout built
//! here (the test image's root — busybox `sh`, glibc — plus the libraries the dist's binaries
//! load; no registry is reachable), `xtask image --base … --dist …` (the xtask binary that runs
//! this suite, `$GPUSLICE_XTASK`), the archive imported with `ctr -n k8s.io images import` as
//! kubelet's containerd would have pulled it, then a Pod of the default handler runs a
//! container from it whose command runs the image's own binaries: `gpuslice --version`,
//! `gpuslice-arbiter --help`, and the installer's file checks (every binary and the interposer
//! at the paths `install.sh` copies from). Checked: `ctr images ls` lists the image under its
//! name, the container (created from that image by name: containerd refuses an image it does not
//! have, and the test image has none of these files) exits 0, and its log shows this
//! workspace's version and each file present.

use anyhow::{ensure, Context, Result};
use gpuslice_e2e::containerd::{Containerd, Options};
use gpuslice_e2e::cri::{self, ctr_ns, PodGuard};
use gpuslice_e2e::gate::{containerd_needs, require, unavailable};
use gpuslice_e2e::image;
use gpuslice_e2e::paths;
use gpuslice_e2e::procs::run_ok;
use gpuslice_e2e::stock::{echo_container, pod};
use gpuslice_e2e::suite::Node;
use gpuslice_test_support::packaging::node_binaries;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

const T: Duration = Duration::from_secs(120);
/// The name the archive gets in containerd (`--base-name` + the archive's ref name).
const NODE_IMAGE: &str = "localhost/gpuslice:e2e";

/// The xtask binary: `$GPUSLICE_XTASK` (set by `cargo xtask test e2e`), else the workspace's.
fn xtask() -> Option<PathBuf> {
    std::env::var_os("GPUSLICE_XTASK")
        .map(PathBuf::from)
        .or_else(|| Some(paths::workspace().join("target/debug/xtask")))
        .filter(|p| p.is_file())
}

/// A base image layout (as `skopeo copy … oci:DIR` writes one) under `work/base`.
fn base_layout(work: &Path) -> Result<PathBuf> {
    let root = work.join("base-root");
    image::build_rootfs(&root)?;
    let bins: Vec<PathBuf> = node_binaries().iter().map(|b| paths::product(b)).collect();
    image::add_libraries(&root, &bins)?;
    let layer = work.join("base-layer.tar");
    image::layer_tar(&root, &layer)?;
    let layout = work.join("base");
    image::oci_archive_with_cmd(&layer, &layout, &work.join("base.oci.tar"), &["/bin/sh"])?;
    Ok(layout)
}

fn node_image_runs_in_a_pod(series: &str) -> Result<()> {
    let bins = paths::containerd(series);
    let suite = format!("node-image/{series}");
    if !require(&suite, &containerd_needs(&bins)) {
        return Ok(());
    }
    let Some(xtask) = xtask() else {
        unavailable(
            &suite,
            "no xtask binary ($GPUSLICE_XTASK, or target/debug/xtask)",
        );
        return Ok(());
    };
    let node = Node::new(&format!("nimg{series}"))?;
    let work = node.scratch.dir("node-image")?;
    let archive = work.join("gpuslice-image.tar");
    run_ok(
        Command::new(&xtask)
            .arg("image")
            .arg("--base")
            .arg(base_layout(&work)?)
            .arg("--dist")
            .arg(paths::dist())
            .arg("--out")
            .arg(&archive)
            .args(["--tag", "e2e"]),
        T,
    )?;
    let ctd = Containerd::start(
        &bins,
        &node.scratch,
        &Options {
            gpuslice_runtime: None,
            env: vec![],
        },
    )?;
    let client = cri::client_with_image(&ctd, &node)?;
    run_ok(
        ctr_ns(&ctd, "k8s.io")
            .args(["images", "import", "--base-name", "localhost/gpuslice"])
            .arg(&archive),
        T,
    )?;
    let listed = run_ok(ctr_ns(&ctd, "k8s.io").args(["images", "ls", "-q"]), T)?;
    ensure!(listed.contains(NODE_IMAGE), "imported images:\n{listed}");

    let logs = node.scratch.dir("pod-logs")?;
    let spec = pod("node-image", "", &logs, vec![]);
    let sandbox = client.run_pod(&spec)?;
    let guard = PodGuard {
        cri: &client,
        id: sandbox.clone(),
    };
    let files: Vec<String> = node_binaries()
        .iter()
        .map(|b| format!("/usr/bin/{b}"))
        .chain(["/usr/lib/gpuslice/libgpuslice.so".to_string()])
        .collect();
    let script = format!(
        "set -e; /usr/bin/gpuslice --version; /usr/bin/gpuslice-arbiter --help >/dev/null; \
         echo arbiter-help-ok; for f in {}; do test -f $f; echo present $f; done",
        files.join(" ")
    );
    let mut c = echo_container("node-image");
    c.command = vec!["/bin/sh".into(), "-c".into(), script];
    let id = client
        .create_container_from(&sandbox, &spec, &c, NODE_IMAGE)
        .with_context(|| format!("CreateContainer from {NODE_IMAGE}:\n{}", ctd.log_tail(30)))?;
    client.start_container(&id)?;
    let st = client.wait_exited(&id, T)?;
    let out = cri::read_log(&logs.join(c.log_path()))?;
    ensure!(
        st.exit_code == 0,
        "container from {NODE_IMAGE} exited {} ({}):\n{out}",
        st.exit_code,
        st.reason
    );
    ensure!(
        out.contains(env!("CARGO_PKG_VERSION")) && out.contains("arbiter-help-ok"),
        "{out}"
    );
    for f in &files {
        ensure!(out.contains(&format!("present {f}")), "{f} missing:\n{out}");
    }
    println!("{out}");
    guard.remove()
}

#[test]
fn node_image_archive_runs_in_a_cri_pod_on_containerd_2_1() -> Result<()> {
    node_image_runs_in_a_pod("2.1")
}
