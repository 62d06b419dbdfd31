//! `gpuslice configure containerd` against a real containerd 1.6: a minimal config version 2
//! (what a node has before gpuslice: CRI with `restrict_oom_score_adj`, the local sandbox image,
//! a runc class) is configured by the dist tree's `gpuslice` (drop-in + `imports`); a second
//! run changes nothing; containerd starts from the result, `containerd config dump` shows the
//! merged `gpuslice` class (BinaryName, `pod_annotations`, runc's options) beside the kept CRI
//! settings, the CRI plugin loads, and a container run with the class's runtime binary and
//! `gpuslice.io/memory=1Gi` sees and is held to a 1 GiB slice. (The Pod through CRI
//! `RunPodSandbox` with the `gpuslice` handler belongs to the CRI suite.)

use gpuslice_e2e::containerd::CtrRun;
use gpuslice_e2e::daemon::Daemon;
use gpuslice_e2e::gate::{require, Need};
use gpuslice_e2e::image::IMAGE;
use gpuslice_e2e::paths;
use gpuslice_e2e::procs::{run_ok, run_timeout};
use gpuslice_e2e::suite::{assert_one_gib_slice, info_and_fill, stdout_ok, Node};
use std::path::Path;
use std::process::Command;
use std::time::Duration;

const T: Duration = Duration::from_secs(120);

/// The node's config before gpuslice (containerd 1.6, config version 2).
fn minimal_config(d: &Path) -> String {
    let d = d.display();
    format!(
        r#"# a node's containerd, before gpuslice
version = 2
root = "{d}/root"
state = "{d}/state"
disabled_plugins = ["io.containerd.nri.v1.nri"]

[grpc]
  address = "{d}/c.sock"
[ttrpc]
  address = "{d}/c.sock.ttrpc"

[plugins."io.containerd.internal.v1.opt"]
  path = "{d}/opt"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{IMAGE}"
  restrict_oom_score_adj = true # this machine refuses lower oom_score_adj
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "{d}/cni/bin"
    conf_dir = "{d}/cni/conf"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        BinaryName = "{runc}"
        Root = "{d}/runc"
"#,
        runc = paths::runc().display()
    )
}

#[test]
fn containerd_1_6_configured_by_gpuslice_runs_a_slice() -> anyhow::Result<()> {
    let bins = paths::containerd("1.6");
    let suite = "configure/containerd-1.6";
    if !require(
        suite,
        &[
            Need::Root,
            Need::Binary(bins.containerd()),
            Need::Binary(paths::runc()),
            Need::Dist,
            Need::Product,
            Need::Binary(paths::product("gpuslice")),
        ],
    ) {
        return Ok(());
    }
    let node = Node::new("cfgctd")?;
    let arbiter = node.start_arbiter()?;
    let dir = node.scratch.dir("ctd-configured")?;
    let cfg = dir.join("config.toml");
    std::fs::write(&cfg, minimal_config(&dir))?;
    let rt = paths::product("gpuslice-runtime");

    // Configure (the dist tree's gpuslice finds gpuslice-runtime beside itself), then again.
    let configure = || {
        let mut c = Command::new(paths::product("gpuslice"));
        c.args(["configure", "containerd", "--file"]).arg(&cfg);
        run_ok(&mut c, Duration::from_secs(30))
    };
    let first = configure()?;
    anyhow::ensure!(first.contains("created:"), "first run:\n{first}");
    let main_after = std::fs::read_to_string(&cfg)?;
    let drop_in = dir.join("conf.d/gpuslice.toml");
    let drop_after = std::fs::read_to_string(&drop_in)?;
    let second = configure()?;
    anyhow::ensure!(
        second.contains("already configured"),
        "second run:\n{second}"
    );
    anyhow::ensure!(
        std::fs::read_to_string(&cfg)? == main_after,
        "second run changed the main config"
    );
    anyhow::ensure!(
        std::fs::read_to_string(&drop_in)? == drop_after,
        "second run changed the drop-in"
    );

    // What containerd makes of it.
    let dump = run_ok(
        Command::new(bins.containerd())
            .arg("--config")
            .arg(&cfg)
            .args(["config", "dump"]),
        Duration::from_secs(30),
    )?;
    for want in [
        "[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.gpuslice]".to_string(),
        format!("BinaryName = \"{}\"", rt.display()),
        "pod_annotations = [\"gpuslice.io/*\"]".to_string(),
        format!("Root = \"{}/runc\"", dir.display()),
        "restrict_oom_score_adj = true".to_string(),
        format!("sandbox_image = \"{IMAGE}\""),
    ] {
        anyhow::ensure!(
            dump.contains(&want),
            "containerd config dump lacks {want}:\n{dump}"
        );
    }

    let mut c = Command::new(bins.containerd());
    c.arg("--config").arg(&cfg).args(["--log-level", "info"]);
    c.env(
        "PATH",
        format!(
            "{}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            bins.bin.display()
        ),
    )
    .envs(arbiter.client_env());
    let mut daemon = Daemon::spawn(
        "containerd 1.6 (configured)",
        c,
        &dir.join("containerd.log"),
        &dir,
    )?;
    let sock = dir.join("c.sock");
    daemon.wait_socket(&sock, Duration::from_secs(60))?;
    let ctr = || {
        let mut c = Command::new(bins.ctr());
        c.arg("--address")
            .arg(&sock)
            .args(["--namespace", "gpuslice-e2e"]);
        c
    };
    let plugins = run_ok(ctr().args(["plugins", "ls"]), Duration::from_secs(20))?;
    let cri = plugins
        .lines()
        .find(|l| l.contains("io.containerd.grpc.v1") && l.contains(" cri "))
        .unwrap_or("");
    anyhow::ensure!(
        cri.trim_end().ends_with("ok"),
        "CRI plugin not loaded:\n{plugins}\n{}",
        daemon.log_tail(40)
    );

    run_ok(
        ctr()
            .args(["images", "import", "--platform", "linux/amd64"])
            .arg(&node.image.oci),
        Duration::from_secs(120),
    )?;
    let spec = CtrRun {
        args: info_and_fill(),
        env: node.sim.container_env(),
        annotations: vec![("gpuslice.io/memory".into(), "1Gi".into())],
        binds: node.sim.container_binds(),
        timeout: T,
    };
    // The class's runtime binary, read back from the merged config, under runc's shim.
    let class_binary = class_binary_name(&dump)?;
    anyhow::ensure!(
        Path::new(&class_binary) == rt,
        "class BinaryName {class_binary}"
    );
    let mut c = ctr();
    c.args([
        "run",
        "--rm",
        "--net-host",
        "--runtime",
        "io.containerd.runc.v2",
        "--runc-binary",
    ])
    .arg(&class_binary)
    .arg("--runc-root")
    .arg(dir.join("runc"));
    for (k, v) in &spec.annotations {
        c.arg("--annotation").arg(format!("{k}={v}"));
    }
    for e in &spec.env {
        c.arg("--env").arg(e);
    }
    for b in &spec.binds {
        let mode = if b.ro { "rbind:ro" } else { "rbind:rw" };
        c.arg("--mount").arg(format!(
            "type=bind,src={},dst={},options={mode}",
            b.src.display(),
            b.dst
        ));
    }
    c.arg(IMAGE).arg("e2e-configured").args(&spec.args);
    let out = run_timeout(&mut c, T)?;
    let out = stdout_ok("ctr run (configured containerd 1.6)", &out)?;
    println!("configured containerd 1.6, gpuslice class runtime:\n{out}");
    assert_one_gib_slice(&out)?;
    daemon.stop();
    Ok(())
}

/// `BinaryName` of the `gpuslice` class's options in a `containerd config dump`.
fn class_binary_name(dump: &str) -> anyhow::Result<String> {
    let header = "[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.gpuslice.options]";
    let (_, rest) = dump
        .split_once(header)
        .ok_or_else(|| anyhow::anyhow!("no {header} in the dump"))?;
    rest.lines()
        .take_while(|l| !l.trim_start().starts_with('['))
        .find_map(|l| l.trim().strip_prefix("BinaryName = "))
        .map(|v| v.trim_matches('"').to_string())
        .ok_or_else(|| anyhow::anyhow!("no BinaryName under {header}"))
}
