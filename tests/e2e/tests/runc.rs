//! runc suite: a bundle run directly by runc (harness proof: the whole simulated device) and
//! through `gpuslice-runtime` with `gpuslice.io/memory: 1Gi` (the slice is seen and enforced).

use gpuslice_e2e::gate::{require, Need};
use gpuslice_e2e::paths;
use gpuslice_e2e::runc::{make_bundle, run_bundle, Spec};
use gpuslice_e2e::snapshot::Snapshot;
use gpuslice_e2e::suite::{
    assert_one_gib_slice, assert_whole_device, info_and_fill, stdout_ok, Node,
};
use std::time::Duration;

const T: Duration = Duration::from_secs(120);

fn spec(node: &Node, annotations: &[(&str, &str)]) -> Spec {
    Spec {
        args: info_and_fill(),
        env: node.sim.container_env(),
        binds: node.sim.container_binds(),
        annotations: annotations
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
    }
}

#[test]
fn runc_plain_bundle_sees_whole_device_and_leaves_nothing() -> anyhow::Result<()> {
    if !require(
        "runc/plain",
        &[Need::Root, Need::Binary(paths::runc()), Need::Dist],
    ) {
        return Ok(());
    }
    let node = Node::new("runc")?;
    let root = node.scratch.dir("runc-root")?;
    let bundle = make_bundle(
        &node.scratch.join("bundle"),
        &node.image.rootfs,
        &spec(&node, &[]),
    )?;
    let before = Snapshot::take(None);
    let out = run_bundle(&paths::runc(), &root, &bundle, "e2e-plain", &[], T)?;
    let out = stdout_ok("runc run", &out)?;
    println!("{out}");
    assert_whole_device(&out)?;
    if let Some(d) = Snapshot::settle(&before, None, Duration::from_secs(10)) {
        anyhow::bail!("runc left something behind:\n{d}");
    }
    Ok(())
}

#[test]
fn gpuslice_runtime_bundle_gets_a_1gib_slice() -> anyhow::Result<()> {
    if !require(
        "runc/gpuslice-runtime",
        &[
            Need::Root,
            Need::Binary(paths::runc()),
            Need::Dist,
            Need::Product,
        ],
    ) {
        return Ok(());
    }
    let node = Node::new("grt")?;
    let arbiter = node.start_arbiter()?;
    let root = node.scratch.dir("runc-root")?;
    let bundle = make_bundle(
        &node.scratch.join("bundle"),
        &node.image.rootfs,
        &spec(&node, &[("gpuslice.io/memory", "1Gi")]),
    )?;
    let before = Snapshot::take(Some(&arbiter.state_dir));
    let out = run_bundle(
        &paths::product("gpuslice-runtime"),
        &root,
        &bundle,
        "e2e-slice",
        &arbiter.client_env(),
        T,
    )?;
    let out = stdout_ok("gpuslice-runtime run", &out)?;
    println!("{out}");
    assert_one_gib_slice(&out)?;
    if let Some(d) = Snapshot::settle(&before, Some(&arbiter.state_dir), Duration::from_secs(10)) {
        anyhow::bail!(
            "gpuslice-runtime left something behind:\n{d}\narbiter log:\n{}",
            arbiter.log()
        );
    }
    Ok(())
}
