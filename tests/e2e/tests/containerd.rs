//! containerd suites, one per series (1.6 from the distribution, 1.7 and 2.1 from the private
//! prefix of `scripts/install-engines.sh`): the test image imported as an OCI archive, then
//! `ctr run` with the runc v2 shim — plain runc (harness proof: the whole device), and
//! `gpuslice-runtime` as the runc binary with `--annotation gpuslice.io/memory=1Gi` and with
//! `--env GPUSLICE_MEMORY=1Gi` (the slice is seen and enforced).

use gpuslice_e2e::containerd::{Containerd, CtrRun, Options};
use gpuslice_e2e::gate::{require, Need};
use gpuslice_e2e::paths;
use gpuslice_e2e::snapshot::Snapshot;
use gpuslice_e2e::suite::{
    assert_one_gib_slice, assert_whole_device, info_and_fill, stdout_ok, Node, RuntimeNode,
};
use std::time::Duration;

const T: Duration = Duration::from_secs(120);

fn run_spec(node: &Node, env: &[&str], annotations: &[(&str, &str)]) -> CtrRun {
    let mut e = node.sim.container_env();
    e.extend(env.iter().map(|s| s.to_string()));
    CtrRun {
        args: info_and_fill(),
        env: e,
        annotations: annotations
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        binds: node.sim.container_binds(),
        timeout: T,
    }
}

fn plain(series: &str) -> anyhow::Result<()> {
    let bins = paths::containerd(series);
    let suite = format!("containerd-{series}/plain");
    if !require(
        &suite,
        &[
            Need::Root,
            Need::Binary(bins.containerd()),
            Need::Binary(paths::runc()),
            Need::Dist,
        ],
    ) {
        return Ok(());
    }
    let node = Node::new(&format!("c{series}"))?;
    let ctd = Containerd::start(&bins, &node.scratch, &Options::default())?;
    ctd.import(&node.image.oci)?;
    let before = Snapshot::take(None);
    let out = ctd.run("e2e-plain", &paths::runc(), &run_spec(&node, &[], &[]))?;
    let out = stdout_ok(&format!("ctr run ({series})"), &out)?;
    println!("containerd {series}, plain runc:\n{out}");
    assert_whole_device(&out)?;
    anyhow::ensure!(
        ctd.containers()?.is_empty(),
        "containers left in containerd"
    );
    if let Some(d) = Snapshot::settle(&before, None, Duration::from_secs(10)) {
        anyhow::bail!("containerd {series} left something behind:\n{d}");
    }
    Ok(())
}

fn sliced(series: &str) -> anyhow::Result<()> {
    let suite = format!("containerd-{series}/gpuslice-runtime");
    let Some(RuntimeNode {
        ctd,
        arbiter,
        node,
        rt,
    }) = RuntimeNode::start(series, &suite, &format!("g{series}"))?
    else {
        return Ok(());
    };
    let before = Snapshot::take(Some(&arbiter.state_dir));
    for (how, spec) in [
        (
            "annotation",
            run_spec(&node, &[], &[("gpuslice.io/memory", "1Gi")]),
        ),
        ("env", run_spec(&node, &["GPUSLICE_MEMORY=1Gi"], &[])),
    ] {
        let out = ctd.run(&format!("e2e-{how}"), &rt, &spec)?;
        let out = stdout_ok(&format!("ctr run ({series}, {how})"), &out)?;
        println!("containerd {series}, gpuslice-runtime, request by {how}:\n{out}");
        assert_one_gib_slice(&out)?;
    }
    anyhow::ensure!(
        ctd.containers()?.is_empty(),
        "containers left in containerd"
    );
    if let Some(d) = Snapshot::settle(&before, Some(&arbiter.state_dir), Duration::from_secs(10)) {
        anyhow::bail!("containerd {series} + gpuslice left something behind:\n{d}");
    }
    Ok(())
}

#[test]
fn containerd_1_6_plain() -> anyhow::Result<()> {
    plain("1.6")
}

#[test]
fn containerd_1_7_plain() -> anyhow::Result<()> {
    plain("1.7")
}

#[test]
fn containerd_2_1_plain() -> anyhow::Result<()> {
    plain("2.1")
}

#[test]
fn containerd_1_6_gpuslice_runtime() -> anyhow::Result<()> {
    sliced("1.6")
}

#[test]
fn containerd_1_7_gpuslice_runtime() -> anyhow::Result<()> {
    sliced("1.7")
}

#[test]
fn containerd_2_1_gpuslice_runtime() -> anyhow::Result<()> {
    sliced("2.1")
}
