//! Error paths: a bad request or a down arbiter makes container creation fail with a message
//! that names the cause, and afterwards the arbiter's state directory, the mount table and the
//! process list are as before. Through `gpuslice-runtime` directly (runc bundles) and through
//! containerd 1.6 (`ctr run`), so the message is shown to survive the engine's error path.

use gpuslice_e2e::containerd::CtrRun;
use gpuslice_e2e::gate::{require, Need};
use gpuslice_e2e::paths;
use gpuslice_e2e::procs::{describe, run_ok};
use gpuslice_e2e::runc::{make_bundle, run_bundle, Spec};
use gpuslice_e2e::snapshot::Snapshot;
use gpuslice_e2e::suite::{info_and_fill, Node, RuntimeNode};
use std::process::{Command, Output};
use std::time::Duration;

const T: Duration = Duration::from_secs(60);

/// A device UUID the simulated node does not have.
const UNKNOWN_GPU: &str = "GPU-deadbeef-0000-4000-8000-000000000007";

/// (case, annotation key, value, words the message must contain)
const BAD: &[(&str, &str, &str, &[&str])] = &[
    (
        "malformed quantity",
        "gpuslice.io/memory",
        "12Qi",
        &["gpuslice.io/memory", "12Qi"],
    ),
    (
        "share over 100",
        "gpuslice.io/compute",
        "150",
        &["gpuslice.io/compute", "150"],
    ),
    (
        "unknown device",
        "gpuslice.io/devices",
        UNKNOWN_GPU,
        &["gpuslice.io/devices", UNKNOWN_GPU],
    ),
    (
        "cap larger than the device",
        "gpuslice.io/memory",
        "100Gi",
        &["gpuslice.io/memory", "100Gi"],
    ),
];

fn text(o: &Output) -> String {
    format!(
        "{}\n{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

fn check_failed(case: &str, o: &Output, words: &[&str]) -> anyhow::Result<()> {
    anyhow::ensure!(
        !o.status.success(),
        "{case}: the container started:\n{}",
        describe(o)
    );
    let t = text(o);
    for w in words {
        anyhow::ensure!(
            t.contains(w),
            "{case}: message does not name {w:?}:\n{}",
            describe(o)
        );
    }
    println!(
        "{case}: failed as expected: {}",
        t.trim().lines().last().unwrap_or("")
    );
    Ok(())
}

/// Every case runs; the test fails at the end naming every problem.
fn all_ok(problems: Vec<String>) -> anyhow::Result<()> {
    if problems.is_empty() {
        return Ok(());
    }
    anyhow::bail!("{} problem(s):\n{}", problems.len(), problems.join("\n\n"))
}

fn runc_list_empty(root: &std::path::Path) -> anyhow::Result<()> {
    let out = run_ok(
        Command::new(paths::runc())
            .arg("--root")
            .arg(root)
            .args(["list", "-q"]),
        T,
    )?;
    anyhow::ensure!(out.trim().is_empty(), "runc still lists containers: {out}");
    Ok(())
}

#[test]
fn gpuslice_runtime_refuses_bad_requests_and_leaves_nothing() -> anyhow::Result<()> {
    if !require(
        "errors/gpuslice-runtime",
        &[
            Need::Root,
            Need::Binary(paths::runc()),
            Need::Dist,
            Need::Product,
        ],
    ) {
        return Ok(());
    }
    let node = Node::new("err")?;
    let mut arbiter = node.start_arbiter()?;
    let root = node.scratch.dir("runc-root")?;
    let mut cases: Vec<(&str, &str, &str, Vec<&str>)> = BAD
        .iter()
        .map(|(c, k, v, w)| (*c, *k, *v, w.to_vec()))
        .collect();
    cases.push(("arbiter down", "gpuslice.io/memory", "1Gi", vec!["arbiter"]));
    let mut problems: Vec<String> = Vec::new();
    for (i, (case, key, value, words)) in cases.into_iter().enumerate() {
        if case == "arbiter down" {
            arbiter.stop();
        }
        let spec = Spec {
            args: info_and_fill(),
            env: node.sim.container_env(),
            binds: node.sim.container_binds(),
            annotations: vec![(key.to_string(), value.to_string())],
        };
        let bundle = make_bundle(
            &node.scratch.join(&format!("b{i}")),
            &node.image.rootfs,
            &spec,
        )?;
        let before = Snapshot::take(Some(&arbiter.state_dir));
        let o = run_bundle(
            &paths::product("gpuslice-runtime"),
            &root,
            &bundle,
            &format!("e2e-err{i}"),
            &arbiter.client_env(),
            T,
        )?;
        if let Err(e) = check_failed(case, &o, &words) {
            problems.push(format!("{e:#}"));
        }
        if let Some(d) =
            Snapshot::settle(&before, Some(&arbiter.state_dir), Duration::from_secs(10))
        {
            problems.push(format!("{case}: left something behind:\n{d}"));
        }
        if let Err(e) = runc_list_empty(&root) {
            problems.push(format!("{case}: {e:#}"));
        }
    }
    all_ok(problems)
}

#[test]
fn containerd_1_6_reports_gpuslice_refusals() -> anyhow::Result<()> {
    let Some(RuntimeNode {
        ctd,
        arbiter,
        node,
        rt,
    }) = RuntimeNode::start("1.6", "errors/containerd-1.6", "cer")?
    else {
        return Ok(());
    };
    let mut problems: Vec<String> = Vec::new();
    for (i, (case, key, value, words)) in BAD.iter().enumerate() {
        let before = Snapshot::take(Some(&arbiter.state_dir));
        let o = ctd.run(
            &format!("e2e-err{i}"),
            &rt,
            &CtrRun {
                args: info_and_fill(),
                env: node.sim.container_env(),
                annotations: vec![(key.to_string(), value.to_string())],
                binds: node.sim.container_binds(),
                timeout: T,
            },
        )?;
        if let Err(e) = check_failed(case, &o, words) {
            problems.push(format!("{e:#}"));
        }
        if !ctd.containers()?.is_empty() {
            problems.push(format!("{case}: containers left in containerd"));
        }
        if let Some(d) =
            Snapshot::settle(&before, Some(&arbiter.state_dir), Duration::from_secs(10))
        {
            problems.push(format!("{case}: left something behind:\n{d}"));
        }
    }
    all_ok(problems)
}
