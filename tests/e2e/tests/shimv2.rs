//! `containerd-shim-gpuslice-v2` on containerd 1.6, 1.7 and 2.1: `ctr run --runtime
//! io.containerd.gpuslice.v2` with the dist tree's `usr/bin` first in the daemon's `PATH` (where
//! containerd finds shims; the engine's own `containerd-shim-runc-v2` comes next and is the one
//! the proxy starts). A container with `--annotation gpuslice.io/memory=1Gi` sees and is held to
//! a 1 GiB slice, one that asks for nothing sees the whole device, a malformed request fails the
//! task creation with a message naming key and value, and afterwards the state directory, mount
//! table and process list (runc-v2 shims and our proxies included) are as before.

use gpuslice_e2e::arbiter::Arbiter;
use gpuslice_e2e::containerd::{Containerd, CtrRun, Options};
use gpuslice_e2e::gate::{require, Need};
use gpuslice_e2e::image::IMAGE;
use gpuslice_e2e::paths;
use gpuslice_e2e::procs::run_timeout;
use gpuslice_e2e::snapshot::Snapshot;
use gpuslice_e2e::suite::{
    assert_one_gib_slice, assert_whole_device, info_and_fill, stdout_ok, Node,
};
use std::process::Output;
use std::time::Duration;

const T: Duration = Duration::from_secs(120);
const RUNTIME: &str = "io.containerd.gpuslice.v2";

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

/// `ctr run --rm --runtime io.containerd.gpuslice.v2` of the test image; removes what is left.
fn ctr_run(ctd: &Containerd, id: &str, run: &CtrRun) -> anyhow::Result<Output> {
    let mut c = ctd.ctr();
    c.args(["run", "--rm", "--net-host", "--runtime", RUNTIME]);
    for (k, v) in &run.annotations {
        c.arg("--annotation").arg(format!("{k}={v}"));
    }
    for e in &run.env {
        c.arg("--env").arg(e);
    }
    for b in &run.binds {
        let mode = if b.ro { "rbind:ro" } else { "rbind:rw" };
        c.arg("--mount").arg(format!(
            "type=bind,src={},dst={},options={mode}",
            b.src.display(),
            b.dst
        ));
    }
    c.arg(IMAGE).arg(id).args(&run.args);
    let out = run_timeout(&mut c, run.timeout);
    ctd.remove(id);
    out
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
    let arbiter = Arbiter::start(&node.scratch, &node.sim)?;
    let mut env = arbiter.client_env();
    // The harness puts the engine's bin first; ours goes before it (later entries win).
    let dist_bin = shim
        .parent()
        .map(|p| p.display().to_string())
        .unwrap_or_default();
    env.push((
        "PATH".into(),
        format!(
            "{dist_bin}:{}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            bins.bin.display()
        ),
    ));
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

    anyhow::ensure!(
        ctd.containers()?.is_empty(),
        "containers left in containerd"
    );
    if let Some(d) = Snapshot::settle(&before, Some(&arbiter.state_dir), Duration::from_secs(15)) {
        anyhow::bail!("containerd {series} + {RUNTIME} left something behind:\n{d}");
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
