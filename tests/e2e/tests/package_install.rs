//! The `.deb` on a clean root: `cargo xtask package`'s `gpuslice` package is
//! installed with apt into a copy of a minimal Debian 12 tree (so its Recommends, runc, resolve),
//! the arbiter is started from its unit file's `ExecStart=` line (no systemd runs there), a runc
//! bundle asking for `gpuslice.io/memory: 1Gi` runs through the installed
//! `/usr/bin/gpuslice-runtime` and its workload sees and is held to 1 GiB of the simulated GPU.
//! Then `apt-get remove` (binaries, units, hooks gone; configuration and state kept) and
//! `apt-get purge` (nothing of gpuslice left).

use gpuslice_e2e::daemon::Daemon;
use gpuslice_e2e::gate::{require, unavailable, Need};
use gpuslice_e2e::package::{self, Root};
use gpuslice_e2e::paths;
use gpuslice_e2e::runc::{make_bundle, Spec};
use gpuslice_e2e::sim::{Bind, CONTAINER_LIB_DIR, CONTAINER_STATE_DIR, DEVICES};
use gpuslice_e2e::suite::{assert_one_gib_slice, info_and_fill, stdout_ok, Node};
use std::time::{Duration, Instant};

const T: Duration = Duration::from_secs(300);
/// Where the test puts the simulated driver inside the root (not part of the package).
const SIM: &str = "/opt/gpuslice-sim";

/// What the package installs (checked present after install, absent after remove).
const INSTALLED: &[&str] = &[
    "/usr/bin/gpuslice",
    "/usr/bin/gpuslice-arbiter",
    "/usr/bin/gpuslice-hook",
    "/usr/bin/gpuslice-runtime",
    "/usr/bin/containerd-shim-gpuslice-v2",
    "/usr/lib/gpuslice/libgpuslice.so",
    "/usr/lib/systemd/system/gpuslice-arbiter.service",
    "/usr/lib/systemd/system/gpuslice-cdi-refresh.service",
    "/usr/lib/systemd/system/gpuslice-cdi-refresh.path",
    "/usr/share/containers/oci/hooks.d/gpuslice-prestart.json",
    "/usr/share/containers/oci/hooks.d/gpuslice-poststop.json",
    "/usr/share/doc/gpuslice/copyright",
    "/usr/share/doc/gpuslice/install.md",
];

fn text(o: &std::process::Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

fn ok(what: &str, o: std::process::Output) -> anyhow::Result<String> {
    anyhow::ensure!(
        o.status.success(),
        "{what} failed ({}):\n{}",
        o.status,
        text(&o)
    );
    Ok(text(&o))
}

fn dpkg_status(root: &Root) -> anyhow::Result<String> {
    let o = root.run(
        false,
        &[],
        &["dpkg-query", "-W", "-f=${Status}", "gpuslice"],
        T,
    )?;
    Ok(String::from_utf8_lossy(&o.stdout).trim().to_string())
}

#[test]
fn deb_installs_on_a_clean_root_runs_a_slice_and_purges_clean() -> anyhow::Result<()> {
    if !require(
        "package/install",
        &[
            Need::Root,
            Need::Binary(paths::runc()),
            Need::Dist,
            Need::Product,
        ],
    ) {
        return Ok(());
    }
    let Some(deb) = package::find_deb() else {
        unavailable(
            "package/install",
            &format!(
                "no gpuslice_*.deb in {} (run `cargo xtask package`)",
                package::packages_dir().display()
            ),
        );
        return Ok(());
    };
    let t0 = Instant::now();
    let cache = package::ensure_chroot()?;
    let t_cache = t0.elapsed();
    let node = Node::new("pkg")?;
    let t_node = t0.elapsed();
    let root = Root::copy_of(&cache, &node.scratch.join("root"))?;
    let t_copy = t0.elapsed();

    // Test-owned staging (before the "before" listing): the package file, the simulated driver
    // and its state directory, the bundle.
    let deb_name = deb.file_name().unwrap().to_string_lossy().into_owned();
    std::fs::copy(&deb, root.path(&format!("/tmp/{deb_name}")))?;
    std::fs::create_dir_all(root.path(&format!("{SIM}/state")))?;
    for lib in ["libcuda.so.1", "libnvidia-ml.so.1"] {
        std::fs::create_dir_all(root.path(&format!("{SIM}/lib")))?;
        std::fs::copy(
            paths::sim_lib_dir().join(lib),
            root.path(&format!("{SIM}/lib/{lib}")),
        )?;
    }
    let spec = Spec {
        args: info_and_fill(),
        env: node.sim.container_env(),
        binds: vec![
            Bind {
                src: format!("{SIM}/lib").into(),
                dst: CONTAINER_LIB_DIR.into(),
                ro: true,
            },
            Bind {
                src: format!("{SIM}/state").into(),
                dst: CONTAINER_STATE_DIR.into(),
                ro: false,
            },
        ],
        annotations: vec![("gpuslice.io/memory".into(), "1Gi".into())],
    };
    make_bundle(&root.path("/root/bundle"), &node.image.rootfs, &spec)?;
    let before = root.tree();

    // 1. Install with apt (dependencies resolve from the cached lists and archives).
    let out = ok(
        "apt-get install ./gpuslice.deb",
        root.run(
            false,
            &[("DEBIAN_FRONTEND".into(), "noninteractive".into())],
            &["apt-get", "install", "-y", &format!("/tmp/{deb_name}")],
            T,
        )?,
    )?;
    println!("{out}");
    assert_eq!(dpkg_status(&root)?, "install ok installed");
    // Everything came from the cache: the install needs no archive at run time.
    assert!(
        out.contains("Need to get 0 B/"),
        "apt downloaded something (is the clean-root cache stale?):\n{out}"
    );
    assert!(
        out.contains("No container engine was reconfigured")
            && out.contains("gpuslice configure containerd --dry-run"),
        "postinst prints the configure commands:\n{out}"
    );
    // No systemd runs in the root: the script says the arbiter was not started, and how to.
    assert!(
        out.contains("the arbiter was NOT started") && out.contains("gpuslice-arbiter >"),
        "postinst does not say the arbiter is not running without systemd:\n{out}"
    );
    for p in INSTALLED
        .iter()
        .chain(&["/etc/gpuslice/config.toml", "/usr/sbin/runc"])
    {
        assert!(root.path(p).exists(), "{p} not installed:\n{out}");
    }
    // No engine configuration was written.
    for p in ["/etc/containerd", "/etc/docker", "/etc/crio"] {
        assert!(!root.path(p).exists(), "{p} appeared on install");
    }
    // Units enabled the debhelper way when init-system-helpers is there (minbase has it), but
    // nothing started: no systemd runs in the root.
    let wants = "/etc/systemd/system/multi-user.target.wants/gpuslice-arbiter.service";
    let helper = root.path("/usr/bin/deb-systemd-helper").exists();
    assert_eq!(
        root.path(wants).symlink_metadata().is_ok(),
        helper,
        "{wants} (deb-systemd-helper present: {helper})"
    );
    let t_install = t0.elapsed();

    // 2. The arbiter from the unit's ExecStart line, with the simulated driver's environment
    //    (on a real node NVML is the system's; here a drop-in's Environment= would do this).
    let unit =
        std::fs::read_to_string(root.path("/usr/lib/systemd/system/gpuslice-arbiter.service"))?;
    let (argv, mut env) = package::unit_exec_start(&unit)?;
    assert_eq!(argv[0], "/usr/bin/gpuslice-arbiter");
    env.extend([
        ("GPUSLICE_SIM_DEVICES".to_string(), DEVICES.to_string()),
        ("GPUSLICE_SIM_STATE".into(), format!("{SIM}/state/state")),
        (
            "GPUSLICE_NVML_LIBRARY".into(),
            format!("{SIM}/lib/libnvidia-ml.so.1"),
        ),
    ]);
    let argv_ref: Vec<&str> = argv.iter().map(String::as_str).collect();
    let mut arbiter = Daemon::spawn(
        "gpuslice-arbiter (ExecStart)",
        root.command(true, &env, &argv_ref),
        &node.scratch.join("arbiter.log"),
        &root.dir,
    )?;
    arbiter.wait_socket(
        &root.path("/run/gpuslice/arbiter.sock"),
        Duration::from_secs(30),
    )?;

    // 3. A container through the installed runtime (runc from the package's Recommends), with
    //    the installed default configuration (/etc/gpuslice/config.toml, /run/gpuslice).
    let run = root.run(
        false,
        &[],
        &[
            "/usr/bin/gpuslice-runtime",
            "run",
            "-b",
            "/root/bundle",
            "pkg-e2e",
        ],
        Duration::from_secs(120),
    )?;
    let _ = root.run(false, &[], &["runc", "delete", "--force", "pkg-e2e"], T);
    let out = stdout_ok("installed gpuslice-runtime run", &run)
        .map_err(|e| anyhow::anyhow!("{e}\narbiter log:\n{}", arbiter.log_tail(30)))?;
    println!("{out}");
    assert_one_gib_slice(&out)?;
    // The `gpuslice` CLI of the package talks to this arbiter.
    let status = ok(
        "gpuslice status",
        root.run(false, &[], &["/usr/bin/gpuslice", "status"], T)?,
    )?;
    println!("{status}");
    arbiter.stop();
    let t_run = t0.elapsed();

    // 4. Remove: the package's files go; configuration and state stay; no engine file appears.
    let out = ok(
        "apt-get remove gpuslice",
        root.run(
            false,
            &[("DEBIAN_FRONTEND".into(), "noninteractive".into())],
            &["apt-get", "remove", "-y", "gpuslice"],
            T,
        )?,
    )?;
    assert_eq!(dpkg_status(&root)?, "deinstall ok config-files");
    for p in INSTALLED {
        assert!(!root.path(p).exists(), "{p} left after remove:\n{out}");
    }
    assert!(
        !root.path("/usr/lib/gpuslice").exists(),
        "/usr/lib/gpuslice left after remove"
    );
    assert!(
        root.path("/etc/gpuslice/config.toml").is_file(),
        "the conffile must be kept on remove"
    );
    assert!(
        root.path("/run/gpuslice").is_dir(),
        "the state directory must be kept on remove"
    );
    assert!(root.path("/usr/sbin/runc").exists(), "runc must stay");

    // 5. Purge: nothing named gpuslice is left that was not there before (test staging only).
    ok(
        "apt-get purge gpuslice",
        root.run(
            false,
            &[("DEBIAN_FRONTEND".into(), "noninteractive".into())],
            &["apt-get", "purge", "-y", "gpuslice"],
            T,
        )?,
    )?;
    assert_eq!(dpkg_status(&root)?, "");
    let after = root.tree();
    // Test staging is not the package's: the simulator's state file, the bundle (runc made mount
    // points for the slice and the interposer in its rootfs).
    let staging = [SIM, "/root/bundle", "/tmp"];
    let left: Vec<&String> = after
        .difference(&before)
        .filter(|p| p.contains("gpuslice"))
        .filter(|p| !staging.iter().any(|s| p.starts_with(&format!("{s}/"))))
        .collect();
    assert!(left.is_empty(), "left after purge: {left:?}");
    for p in ["/etc/gpuslice", "/run/gpuslice", wants] {
        assert!(
            root.path(p).symlink_metadata().is_err(),
            "{p} left after purge"
        );
    }
    let t_all = t0.elapsed();
    println!(
        "package install test: clean root {:.1}s (cache), test image {:.1}s, copy {:.1}s, \
         install {:.1}s, arbiter + container {:.1}s, remove + purge {:.1}s, total {:.1}s",
        t_cache.as_secs_f64(),
        (t_node - t_cache).as_secs_f64(),
        (t_copy - t_node).as_secs_f64(),
        (t_install - t_copy).as_secs_f64(),
        (t_run - t_install).as_secs_f64(),
        (t_all - t_run).as_secs_f64(),
        t_all.as_secs_f64()
    );
    Ok(())
}

/// Build (or find) the clean-root cache alone: `GPUSLICE_E2E_PREFIX=/tmp/x cargo test -p
/// gpuslice-e2e --test package_install -- --ignored` measures a cold build.
#[test]
#[ignore]
fn clean_root_cache_builds() -> anyhow::Result<()> {
    if !require("package/cache", &[Need::Root]) {
        return Ok(());
    }
    let t = Instant::now();
    let cache = package::ensure_chroot()?;
    println!(
        "clean root at {} ({:.0}s)",
        cache.display(),
        t.elapsed().as_secs_f64()
    );
    for p in ["usr/bin/apt-get", "usr/bin/deb-systemd-helper", ".complete"] {
        assert!(cache.join(p).exists(), "{p} missing in the clean root");
    }
    let archives: Vec<String> = std::fs::read_dir(cache.join("var/cache/apt/archives"))?
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    assert!(
        archives.iter().any(|a| a.starts_with("runc_")),
        "runc not downloaded into the cache: {archives:?}"
    );
    Ok(())
}
