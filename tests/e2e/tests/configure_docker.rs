//! `gpuslice configure docker` on a `daemon.json` with keys of its own, loaded by the real
//! dockerd 20.10 and 26 (each on its distribution's containerd): every key the user had is kept
//! as it was, dockerd starts from the result and shows it (`docker info`: the user's logging
//! driver and runtime beside `gpuslice`), a container through `--runtime gpuslice` sees and is
//! held to a 1 GiB slice. `gpuslice doctor`'s `docker-daemon` row: FAIL while the dockerd
//! started before `configure` runs (it has not loaded the runtime), OK after the restart, FAIL
//! "not running" once it is stopped.

use anyhow::{ensure, Context, Result};
use gpuslice_e2e::containerd::{Containerd, Options};
use gpuslice_e2e::docker::{self, Dockerd};
use gpuslice_e2e::gate::{require, Need};
use gpuslice_e2e::image::IMAGE;
use gpuslice_e2e::paths::{self, DockerBins};
use gpuslice_e2e::procs::run_ok;
use gpuslice_e2e::suite::{self, assert_one_gib_slice, info_and_fill, stdout_ok, Node};
use serde_json::{json, Value};
use std::path::Path;
use std::process::Command;
use std::time::Duration;

const T: Duration = Duration::from_secs(180);

/// A node's daemon.json before gpuslice (no key dockerd's command line sets in the harness).
fn users_daemon_json() -> Value {
    json!({
        "log-driver": "local",
        "log-opts": { "max-size": "10m", "max-file": "3" },
        "shutdown-timeout": 20,
        "runtimes": { "plain-runc": { "path": paths::runc() } },
        "max-concurrent-downloads": 4
    })
}

fn configured(major: &str, ctd_series: &str) -> Result<()> {
    let d = paths::docker(major);
    let bins = paths::containerd(ctd_series);
    if !require(
        &format!("configure-docker/{major}"),
        &[
            Need::Root,
            Need::Binary(bins.containerd()),
            Need::Binary(paths::runc()),
            Need::Binary(d.dockerd.clone()),
            Need::Binary(d.docker.clone()),
            Need::Dist,
            Need::Product,
        ],
    ) {
        return Ok(());
    }
    let node = Node::new(&format!("cfgdk{major}"))?;
    let arbiter = node.start_arbiter()?;
    let env = arbiter.client_env();
    let ctd = Containerd::start(
        &bins,
        &node.scratch,
        &Options {
            gpuslice_runtime: None,
            env: env.clone(),
        },
    )?;
    let dir = node.scratch.dir("dkr")?;
    let cfg = dir.join("daemon.json");
    let before = users_daemon_json();
    std::fs::write(&cfg, serde_json::to_vec_pretty(&before)?)?;
    // dockerd as it ran before gpuslice; configured afterwards but not restarted.
    let stale = Dockerd::start_from_file(&d, &ctd, &dir, &cfg, &env)?;
    let out = run_ok(
        Command::new(paths::product("gpuslice"))
            .args(["configure", "docker", "--file"])
            .arg(&cfg),
        Duration::from_secs(30),
    )?;
    ensure!(out.contains("updated:"), "configure docker:\n{out}");
    let after: Value = serde_json::from_str(&std::fs::read_to_string(&cfg)?)?;
    for (k, v) in before.as_object().context("an object")? {
        if k == "runtimes" {
            ensure!(
                after["runtimes"]["plain-runc"] == v["plain-runc"],
                "the user's runtime changed: {after}"
            );
        } else {
            ensure!(&after[k] == v, "key {k} changed: {} -> {}", v, after[k]);
        }
    }
    ensure!(
        after["runtimes"]["gpuslice"]["path"]
            == paths::product("gpuslice-runtime").display().to_string(),
        "no gpuslice runtime: {after}"
    );

    let (status, row) = doctor_row(&d, &cfg, &stale.sock, &env)?;
    ensure!(
        status == "FAIL" && row.contains("not `gpuslice`"),
        "dockerd not restarted since configure: {row}"
    );
    drop(stale);
    let dk = Dockerd::start_from_file(&d, &ctd, &dir, &cfg, &env)?;
    let info = |f: &str| -> Result<String> {
        run_ok(
            dk.docker().args(["info", "--format", f]),
            Duration::from_secs(30),
        )
        .map(|s| s.trim().to_string())
    };
    ensure!(
        info("{{.LoggingDriver}}")? == "local",
        "the user's log-driver is not in effect"
    );
    let runtimes: Value = serde_json::from_str(&info("{{json .Runtimes}}")?)?;
    ensure!(
        runtimes.get("gpuslice").is_some() && runtimes.get("plain-runc").is_some(),
        "docker info runtimes: {runtimes}"
    );

    dk.import(&node.image.layer)?;
    let args = docker::run_args(
        node.sim.container_env(),
        node.sim.container_binds(),
        &["--runtime", "gpuslice", "-e", "GPUSLICE_MEMORY=1Gi"],
        IMAGE,
        info_and_fill(),
    );
    let out = dk.run(&args, T)?;
    let out = stdout_ok(&format!("docker {major} run (configured)"), &out)?;
    println!("docker {major} configured by gpuslice:\n{out}");
    assert_one_gib_slice(&out)?;

    let (status, row) = doctor_row(&d, &cfg, &dk.sock, &env)?;
    ensure!(
        status == "OK" && row.contains("lists the `gpuslice` runtime"),
        "{row}"
    );
    let sock = dk.sock.clone();
    drop(dk);
    let (status, row) = doctor_row(&d, &cfg, &sock, &env)?;
    ensure!(
        status == "FAIL" && row.contains("not running"),
        "dockerd stopped: {row}"
    );
    Ok(())
}

#[test]
fn configure_docker_20_keeps_the_users_keys() -> Result<()> {
    configured("20", "1.6")
}

#[test]
fn configure_docker_26_keeps_the_users_keys() -> Result<()> {
    configured("26", "1.7")
}

/// `gpuslice doctor`'s `docker-daemon` row for this dockerd: (status, detail).
fn doctor_row(
    d: &DockerBins,
    cfg: &Path,
    sock: &Path,
    env: &[(String, String)],
) -> Result<(String, String)> {
    let dir = cfg.parent().context("daemon.json's directory")?;
    let (containerd, crio) = (dir.join("absent-containerd.toml"), dir.join("absent-crio"));
    let args = [
        "--docker-config".as_ref(),
        cfg.as_os_str(),
        "--docker-socket".as_ref(),
        sock.as_os_str(),
        "--containerd-config".as_ref(),
        containerd.as_os_str(),
        "--crio-dir".as_ref(),
        crio.as_os_str(),
    ];
    let bin_dir = d.docker.parent().context("docker's directory")?;
    suite::doctor_row(&args, env, bin_dir, "docker-daemon")
}
