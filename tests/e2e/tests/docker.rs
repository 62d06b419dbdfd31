//! Docker suites: dockerd 20.10 (distribution) and 26 (private prefix), each on a private
//! containerd of its own distribution (1.6 / 1.7), the test image made with `docker import`. Plain runs (harness proof: the
//! whole device) and runs through `--runtime gpuslice` (daemon.json `runtimes.gpuslice.path` =
//! `gpuslice-runtime`) with `-e GPUSLICE_MEMORY=1Gi` and, on 26, `--annotation`.

use gpuslice_e2e::containerd::{Containerd, Options};
use gpuslice_e2e::docker::{self, Dockerd};
use gpuslice_e2e::gate::{require, Need};
use gpuslice_e2e::image::IMAGE;
use gpuslice_e2e::paths;
use gpuslice_e2e::snapshot::Snapshot;
use gpuslice_e2e::suite::{
    assert_one_gib_slice, assert_whole_device, info_and_fill, stdout_ok, Node,
};
use serde_json::json;
use std::time::Duration;

const T: Duration = Duration::from_secs(180);

fn docker_args(node: &Node, extra: &[&str]) -> Vec<String> {
    docker::run_args(
        node.sim.container_env(),
        node.sim.container_binds(),
        extra,
        IMAGE,
        info_and_fill(),
    )
}

/// The containerd each Docker runs on: its own distribution's (20.10: bookworm's 1.6, 26: trixie's 1.7).
fn ctd_series(major: &str) -> &'static str {
    if major == "20" {
        "1.6"
    } else {
        "1.7"
    }
}

fn needs(major: &str, product: bool) -> Vec<Need> {
    let d = paths::docker(major);
    let mut n = vec![
        Need::Root,
        Need::Binary(paths::containerd(ctd_series(major)).containerd()),
        Need::Binary(paths::runc()),
        Need::Binary(d.dockerd),
        Need::Binary(d.docker),
        Need::Dist,
    ];
    if product {
        n.push(Need::Product);
    }
    n
}

fn plain(major: &str) -> anyhow::Result<()> {
    if !require(&format!("docker-{major}/plain"), &needs(major, false)) {
        return Ok(());
    }
    let node = Node::new(&format!("d{major}"))?;
    let ctd = Containerd::start(
        &paths::containerd(ctd_series(major)),
        &node.scratch,
        &Options::default(),
    )?;
    let dk = Dockerd::start(&paths::docker(major), &ctd, &node.scratch, &json!({}), &[])?;
    dk.import(&node.image.layer)?;
    let before = Snapshot::take(None);
    let out = dk.run(&docker_args(&node, &[]), T)?;
    let out = stdout_ok(&format!("docker {major} run"), &out)?;
    println!("docker {major}, default runtime:\n{out}");
    assert_whole_device(&out)?;
    anyhow::ensure!(dk.containers()?.is_empty(), "containers left in dockerd");
    if let Some(d) = Snapshot::settle(&before, None, Duration::from_secs(10)) {
        anyhow::bail!("docker {major} left something behind:\n{d}");
    }
    Ok(())
}

fn sliced(major: &str) -> anyhow::Result<()> {
    if !require(
        &format!("docker-{major}/gpuslice-runtime"),
        &needs(major, true),
    ) {
        return Ok(());
    }
    let node = Node::new(&format!("e{major}"))?;
    let arbiter = node.start_arbiter()?;
    let env = arbiter.client_env();
    let ctd = Containerd::start(
        &paths::containerd(ctd_series(major)),
        &node.scratch,
        &Options {
            gpuslice_runtime: None,
            env: env.clone(),
        },
    )?;
    let rt = paths::product("gpuslice-runtime");
    let cfg = json!({ "runtimes": { "gpuslice": { "path": rt } } });
    let dk = Dockerd::start(&paths::docker(major), &ctd, &node.scratch, &cfg, &env)?;
    dk.import(&node.image.layer)?;
    let before = Snapshot::take(Some(&arbiter.state_dir));
    let mut cases = vec![(
        "env",
        vec!["--runtime", "gpuslice", "-e", "GPUSLICE_MEMORY=1Gi"],
    )];
    if major != "20" {
        cases.push((
            "annotation",
            vec![
                "--runtime",
                "gpuslice",
                "--annotation",
                "gpuslice.io/memory=1Gi",
            ],
        ));
    }
    for (how, extra) in cases {
        let out = dk.run(&docker_args(&node, &extra), T)?;
        let out = stdout_ok(&format!("docker {major} run ({how})"), &out)?;
        println!("docker {major}, --runtime gpuslice, request by {how}:\n{out}");
        assert_one_gib_slice(&out)?;
    }
    anyhow::ensure!(dk.containers()?.is_empty(), "containers left in dockerd");
    if let Some(d) = Snapshot::settle(&before, Some(&arbiter.state_dir), Duration::from_secs(10)) {
        anyhow::bail!("docker {major} + gpuslice left something behind:\n{d}");
    }
    Ok(())
}

#[test]
fn docker_20_plain() -> anyhow::Result<()> {
    plain("20")
}

#[test]
fn docker_26_plain() -> anyhow::Result<()> {
    plain("26")
}

#[test]
fn docker_20_gpuslice_runtime() -> anyhow::Result<()> {
    sliced("20")
}

#[test]
fn docker_26_gpuslice_runtime() -> anyhow::Result<()> {
    sliced("26")
}
