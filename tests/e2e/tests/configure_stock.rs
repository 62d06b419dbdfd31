//! `gpuslice configure containerd` on the configurations nodes really have, each loaded by the
//! real containerd of its series: Debian 12's packaged file (containerd 1.6; fixture copied
//! from the package), Debian 13's and sid's packaged files (read from the 1.7 and 2.1 packages
//! themselves), `containerd config default` of 1.6, 1.7 and 2.1 (2.1's is a `version = 3`
//! file), and k3s-style generated files (version 2 on 1.7, version 3 on 2.1).
//!
//! For each: the stock file, made private to the test (root, state, sockets, the opt plugin's
//! path, NRI off, `restrict_oom_score_adj` and the local sandbox image, which this machine
//! needs for any CRI Pod — see `shared/engine-notes.md`), is loaded once as it is; then the
//! dist tree's `gpuslice configure containerd --file` edits it (drop-in + `imports`), containerd
//! is restarted on the result, and
//! - `ctr plugins ls` lists exactly the plugins, with the same statuses, as before (CRI `ok`),
//! - a Pod through the default handler runs a container to exit 0 (the class containerd had
//!   before is still there),
//! - a Pod through the `gpuslice` handler with `gpuslice.io/memory: 1Gi` runs a container that
//!   sees and is held to a 1 GiB slice.
//!
//! And `gpuslice doctor` against the running containerd (1.6, Debian 12's file): OK once
//! configured and restarted, WARN when a file changed after the daemon started, FAIL naming the
//! CRI plugin's own error when the class table lost the built-in `runc` (what the drop-in was
//! before the fix), FAIL "not running" once the daemon is stopped.

use anyhow::{ensure, Context, Result};
use gpuslice_e2e::containerd::Containerd;
use gpuslice_e2e::cri;
use gpuslice_e2e::gate::{containerd_needs, require};
use gpuslice_e2e::paths::{self, ContainerdBins};
use gpuslice_e2e::procs::run_ok;
use gpuslice_e2e::stock::{
    echo_container, localise, pod, run_pod, run_sliced_pod, stock_text, Stock,
};
use gpuslice_e2e::suite::{self, assert_one_gib_slice, Node};
use gpuslice_e2e::Arbiter;
use std::path::Path;
use std::process::Command;
use std::time::Duration;
use toml_edit::DocumentMut;

fn stock_case(tag: &str, series: &str, stock: Stock) -> Result<()> {
    let bins = paths::containerd(series);
    let suite = format!("configure-stock/{tag}");
    if !require(&suite, &containerd_needs(&bins)) {
        return Ok(());
    }
    let node = Node::new(&format!("stock-{tag}"))?;
    let arbiter = node.start_arbiter()?;
    let dir = node.scratch.dir("ctd")?;
    let cfg = dir.join("config.toml");
    let stock_text = stock_text(&bins, &stock)?;
    std::fs::write(&cfg, localise(&stock_text, &dir)?)?;

    // As the node was: the plugins it loads.
    let before = {
        let ctd = Containerd::start_from_file(&bins, &dir, &cfg, &arbiter.client_env())?;
        ctd.plugins()?
    };
    let cri_status = |p: &[(String, String)]| {
        p.iter()
            .find(|(id, _)| id == "io.containerd.grpc.v1 cri")
            .map(|(_, s)| s.clone())
    };
    ensure!(
        cri_status(&before).as_deref() == Some("ok"),
        "the stock config's CRI plugin does not load even before gpuslice: {before:?}"
    );

    let out = run_ok(
        Command::new(paths::product("gpuslice"))
            .args(["configure", "containerd", "--file"])
            .arg(&cfg),
        Duration::from_secs(30),
    )?;
    ensure!(out.contains("created:"), "configure:\n{out}");
    let drop_in = std::fs::read_to_string(dir.join("conf.d/gpuslice.toml"))?;
    println!("{tag}: the drop-in\n{drop_in}");

    let ctd = Containerd::start_from_file(&bins, &dir, &cfg, &arbiter.client_env())?;
    let after = ctd.plugins()?;
    ensure!(
        after == before,
        "plugins differ after configure (CRI {:?}):\nbefore {before:?}\nafter  {after:?}\n{}",
        cri_status(&after),
        ctd.log_tail(30)
    );
    let client = cri::client_with_image(&ctd, &node)?;

    let logs = node.scratch.dir("pod-logs")?;
    let plain = echo_container("default-handler");
    let out = run_pod(&client, &ctd, &pod("default", "", &logs, vec![]), &plain)?;
    ensure!(
        out.contains("default-handler-ok"),
        "default handler:\n{out}"
    );

    let out = run_sliced_pod(&client, &ctd, &node, &logs)?;
    println!("{tag}: gpuslice handler\n{out}");
    assert_one_gib_slice(&out)?;
    Ok(())
}

#[test]
fn configure_stock_debian12_packaged_on_containerd_1_6() -> Result<()> {
    stock_case("debian12", "1.6", Stock::Fixture("containerd-debian.toml"))
}

#[test]
fn configure_stock_debian13_packaged_on_containerd_1_7() -> Result<()> {
    stock_case("debian13", "1.7", Stock::Packaged)
}

#[test]
fn configure_stock_sid_packaged_on_containerd_2_1() -> Result<()> {
    stock_case("sid", "2.1", Stock::Packaged)
}

#[test]
fn configure_stock_config_default_of_1_6() -> Result<()> {
    stock_case("default-1.6", "1.6", Stock::Default)
}

#[test]
fn configure_stock_config_default_of_1_7() -> Result<()> {
    stock_case("default-1.7", "1.7", Stock::Default)
}

#[test]
fn configure_stock_config_default_of_2_1_version_3() -> Result<()> {
    stock_case("default-2.1", "2.1", Stock::Default)
}

#[test]
fn configure_stock_k3s_style_version_2_on_1_7() -> Result<()> {
    stock_case("k3s-v2", "1.7", Stock::Fixture("containerd-k3s-v2.toml"))
}

#[test]
fn configure_stock_k3s_style_version_3_on_2_1() -> Result<()> {
    stock_case("k3s-v3", "2.1", Stock::Fixture("containerd-k3s-v3.toml"))
}

/// `gpuslice doctor`'s `containerd-daemon` row for the private containerd: (status, detail).
fn doctor_row(
    bins: &ContainerdBins,
    cfg: &Path,
    dir: &Path,
    arbiter: &Arbiter,
) -> Result<(String, String)> {
    let sock = dir.join("c.sock");
    let (docker, crio) = (dir.join("absent-daemon.json"), dir.join("absent-crio"));
    let args = [
        "--containerd-config".as_ref(),
        cfg.as_os_str(),
        "--containerd-address".as_ref(),
        sock.as_os_str(),
        "--docker-config".as_ref(),
        docker.as_os_str(),
        "--crio-dir".as_ref(),
        crio.as_os_str(),
    ];
    suite::doctor_row(&args, &arbiter.client_env(), &bins.bin, "containerd-daemon")
}

#[test]
fn doctor_sees_the_running_containerd_and_its_cri_plugin() -> Result<()> {
    let bins = paths::containerd("1.6");
    if !require("configure-stock/doctor", &containerd_needs(&bins)) {
        return Ok(());
    }
    let node = Node::new("stock-doctor")?;
    let arbiter = node.start_arbiter()?;
    let dir = node.scratch.dir("ctd")?;
    let cfg = dir.join("config.toml");
    let stock = stock_text(&bins, &Stock::Fixture("containerd-debian.toml"))?;
    std::fs::write(&cfg, localise(&stock, &dir)?)?;
    run_ok(
        Command::new(paths::product("gpuslice"))
            .args(["configure", "containerd", "--file"])
            .arg(&cfg),
        Duration::from_secs(30),
    )?;
    let drop_in = dir.join("conf.d/gpuslice.toml");
    let good = std::fs::read_to_string(&drop_in)?;

    let ctd = Containerd::start_from_file(&bins, &dir, &cfg, &arbiter.client_env())?;
    let (s, d) = doctor_row(&bins, &cfg, &dir, &arbiter)?;
    ensure!(s == "OK", "configured and running: {s} {d}");
    ensure!(
        d.contains("CRI loaded") && d.contains("class `gpuslice`"),
        "{d}"
    );
    // A file newer than the daemon: it has not been loaded.
    std::thread::sleep(Duration::from_millis(3100));
    std::fs::write(&drop_in, &good)?;
    let (s, d) = doctor_row(&bins, &cfg, &dir, &arbiter)?;
    ensure!(
        s == "WARN" && d.contains("changed after containerd started"),
        "{s} {d}"
    );
    drop(ctd);

    // The class table without the built-in runc class: containerd 1.6 fails its CRI plugin.
    let mut doc: DocumentMut = good.parse()?;
    doc["plugins"]["io.containerd.grpc.v1.cri"]["containerd"]["runtimes"]
        .as_table_mut()
        .context("runtimes table")?
        .remove("runc")
        .context("the drop-in names runc")?;
    std::fs::write(&drop_in, doc.to_string())?;
    let ctd = Containerd::start_from_file(&bins, &dir, &cfg, &arbiter.client_env())?;
    let (s, d) = doctor_row(&bins, &cfg, &dir, &arbiter)?;
    ensure!(s == "FAIL", "CRI broken: {s} {d}\n{}", ctd.log_tail(20));
    ensure!(
        d.contains("CRI plugin is in error") && d.contains("default_runtime_name"),
        "the row names the plugin's own error: {d}"
    );
    drop(ctd);

    let (s, d) = doctor_row(&bins, &cfg, &dir, &arbiter)?;
    ensure!(
        s == "FAIL" && d.contains("not running"),
        "daemon stopped: {s} {d}"
    );
    Ok(())
}
