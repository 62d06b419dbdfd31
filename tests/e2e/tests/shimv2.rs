//! `containerd-shim-gpuslice-v2` on containerd 1.6, 1.7 and 2.1: `ctr run --runtime
//! io.containerd.gpuslice.v2` with the dist tree's `usr/bin` first in the daemon's `PATH` (where
//! containerd finds shims; the engine's own `containerd-shim-runc-v2` comes next and is the one
//! the proxy starts). A container with `--annotation gpuslice.io/memory=1Gi` sees and is held to
//! a 1 GiB slice, one that asks for nothing sees the whole device, a malformed request fails the
//! task creation with a message naming key and value, and afterwards the state directory, mount
//! table and process list (runc-v2 shims and our proxies included) are as before.
//!
//! The proxy binds the slice to the container's pid and cgroup itself at `Create` (no hook
//! processes on this path): the container reads both in its slice's `owner.json`.
//!
//! Further, on the shim path: an image with its own `/etc/ld.so.preload` keeps its entries after
//! the interposer (read from the root filesystem runc-v2 mounted during `Create`), and with the
//! arbiter down the creation fails closed naming the arbiter, leaving no container, slice,
//! mount or process (no runc-v2 shim, no proxy) behind.

use gpuslice_e2e::containerd::{Containerd, CtrRun, Options};
use gpuslice_e2e::gate::{require, Need};
use gpuslice_e2e::image;
use gpuslice_e2e::paths;
use gpuslice_e2e::shimv2::{
    check_merged_preload, ctr_run, daemon_path, image_library, image_preload_text,
    preload_info_and_fill, RUNTIME,
};
use gpuslice_e2e::snapshot::Snapshot;
use gpuslice_e2e::suite::{
    assert_one_gib_slice, assert_whole_device, info_and_fill, stdout_ok, Node,
};
use std::time::Duration;

const T: Duration = Duration::from_secs(120);

fn spec(node: &Node, annotations: &[(&str, &str)]) -> CtrRun {
    CtrRun {
        args: info_and_fill(),
        env: node.sim.container_env(),
        annotations: annotations
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        binds: node.sim.container_binds(),
        timeout: T,
    }
}

fn shimv2(series: &str) -> anyhow::Result<()> {
    let bins = paths::containerd(series);
    let suite = format!("containerd-{series}/shim-v2");
    let shim = paths::product("containerd-shim-gpuslice-v2");
    if !require(
        &suite,
        &[
            Need::Root,
            Need::Binary(bins.containerd()),
            Need::Binary(paths::runc()),
            Need::Binary(shim.clone()),
            Need::Dist,
            Need::Product,
        ],
    ) {
        return Ok(());
    }
    let node = Node::new(&format!("s{series}"))?;
    let mut arbiter = node.start_arbiter()?;
    let mut env = arbiter.client_env();
    // The harness puts the engine's bin first; ours goes before it (later entries win).
    env.push(daemon_path(&bins));
    let ctd = Containerd::start(
        &bins,
        &node.scratch,
        &Options {
            gpuslice_runtime: None,
            env,
        },
    )?;
    ctd.import(&node.image.oci)?;
    let before = Snapshot::take(Some(&arbiter.state_dir));

    let out = ctr_run(
        &ctd,
        "e2e-v2-slice",
        &spec(&node, &[("gpuslice.io/memory", "1Gi")]),
    )?;
    let out = stdout_ok(&format!("ctr run --runtime {RUNTIME} ({series})"), &out)
        .map_err(|e| e.context(ctd.log_tail(40)))?;
    println!("containerd {series}, {RUNTIME}, gpuslice.io/memory=1Gi:\n{out}");
    assert_one_gib_slice(&out)?;

    // Bound at Create by the proxy itself (no createRuntime hook process on this path): the
    // slice's owner record names the container's host pid and cgroup before it starts.
    let mut run = spec(&node, &[("gpuslice.io/memory", "1Gi")]);
    run.args = ["/bin/cat", "/run/gpuslice/owner.json"]
        .map(String::from)
        .to_vec();
    let out = ctr_run(&ctd, "e2e-v2-bound", &run)?;
    let out = stdout_ok(
        &format!("ctr run --runtime {RUNTIME} ({series}, owner)"),
        &out,
    )
    .map_err(|e| e.context(ctd.log_tail(40)))?;
    let owner: serde_json::Value =
        serde_json::from_str(out.trim()).map_err(|e| anyhow::anyhow!("owner.json {out:?}: {e}"))?;
    anyhow::ensure!(
        owner["pid"].as_u64().is_some_and(|p| p > 1) && owner["cgroup"].is_string(),
        "the slice is not bound to the container at start: {owner}"
    );

    let out = ctr_run(&ctd, "e2e-v2-plain", &spec(&node, &[]))?;
    let out = stdout_ok(
        &format!("ctr run --runtime {RUNTIME} ({series}, no request)"),
        &out,
    )?;
    assert_whole_device(&out)?;

    let bad = ctr_run(
        &ctd,
        "e2e-v2-bad",
        &spec(&node, &[("gpuslice.io/memory", "12Q")]),
    )?;
    let err = String::from_utf8_lossy(&bad.stderr).into_owned();
    println!("containerd {series}, {RUNTIME}, gpuslice.io/memory=12Q: {err}");
    anyhow::ensure!(!bad.status.success(), "a malformed request started: {err}");
    anyhow::ensure!(
        err.contains("gpuslice.io/memory") && err.contains("12Q"),
        "the failure does not name the key and value: {err}"
    );
    anyhow::ensure!(
        !String::from_utf8_lossy(&bad.stdout).contains("total"),
        "the workload ran despite the refusal"
    );

    // The image's own /etc/ld.so.preload is kept after the interposer.
    let entry = image_library(&node.image.rootfs)?;
    let pimg = image::build_with_preload(
        &node.scratch.dir("preload-image")?,
        &image_preload_text(&entry),
    )?;
    ctd.import(&pimg.oci)?;
    let mut run = spec(&node, &[("gpuslice.io/memory", "1Gi")]);
    run.args = preload_info_and_fill();
    let o = ctr_run(&ctd, "e2e-v2-preload", &run)?;
    let out = stdout_ok(
        &format!("ctr run --runtime {RUNTIME} ({series}, image with ld.so.preload)"),
        &o,
    )?;
    println!("containerd {series}, {RUNTIME}, image with its own ld.so.preload:\n{out}");
    let rest = check_merged_preload(&out, &String::from_utf8_lossy(&o.stderr), &entry)
        .map_err(|e| e.context(ctd.log_tail(20)))?;
    assert_one_gib_slice(&rest)?;

    anyhow::ensure!(
        ctd.containers()?.is_empty(),
        "containers left in containerd"
    );
    if let Some(d) = Snapshot::settle(&before, Some(&arbiter.state_dir), Duration::from_secs(30)) {
        anyhow::bail!("containerd {series} + {RUNTIME} left something behind:\n{d}");
    }

    // The arbiter down: fail closed at Task.Create, naming the arbiter; nothing left behind.
    arbiter.stop();
    let before = Snapshot::take(Some(&arbiter.state_dir));
    let down = ctr_run(
        &ctd,
        "e2e-v2-down",
        &spec(&node, &[("gpuslice.io/memory", "1Gi")]),
    )?;
    let err = String::from_utf8_lossy(&down.stderr).into_owned();
    println!("containerd {series}, {RUNTIME}, arbiter down: {err}");
    anyhow::ensure!(
        !down.status.success(),
        "started with the arbiter down: {err}"
    );
    anyhow::ensure!(
        err.contains("gpuslice") && err.contains("arbiter"),
        "the failure does not name the arbiter: {err}"
    );
    anyhow::ensure!(
        ctd.containers()?.is_empty(),
        "containers left in containerd (arbiter down)"
    );
    if let Some(d) = Snapshot::settle(&before, Some(&arbiter.state_dir), Duration::from_secs(30)) {
        anyhow::bail!("containerd {series} + {RUNTIME}, arbiter down, left something behind:\n{d}");
    }
    Ok(())
}

#[test]
fn containerd_1_6_shim_v2() -> anyhow::Result<()> {
    shimv2("1.6")
}

#[test]
fn containerd_1_7_shim_v2() -> anyhow::Result<()> {
    shimv2("1.7")
}

#[test]
fn containerd_2_1_shim_v2() -> anyhow::Result<()> {
    shimv2("2.1")
}
