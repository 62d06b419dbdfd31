//! Trial 3: a tenant image with an older glibc (needs root, runc and the dist tree: the
//! `gpuslice-e2e` harness; debootstrap is installed with apt when missing). The image is a
//! Debian 11 "bullseye" minimal root (glibc 2.31, the release of Ubuntu 20.04 and many CUDA 11
//! images) from `debootstrap`, with the dist tree's workload; the simulated driver is bound in
//! from the dist tree. Both are linked against glibc 2.17 (`cargo xtask dist`,
//! `xtask/src/zig.rs`), as is the interposer.
//!
//! * Through `gpuslice-runtime` and runc with `gpuslice.io/memory: 1Gi`, the dist interposer is
//!   preloaded by bullseye's own loader and holds the cap: every query reports 1 GiB and
//!   allocation stops at 1 GiB; and two such containers guaranteed 30 % and 70 %, saturating
//!   the device together, split its kernels 30/70 ± 3 points (the launch gate holds the share).
//! * An interposer linked on this host (`target/debug`, glibc 2.34+ symbol versions: what every
//!   build shipped before the floor), preloaded with plain runc and `LD_PRELOAD`, does not take
//!   effect: the loader either skips it (the device is whole) or, as measured with bullseye,
//!   stops the program ("version `GLIBC_2.34' not found"). Through `gpuslice-runtime` that
//!   container is now refused at create time, naming the image's glibc and what it lacks.
//!
//! The root is cached at `$GPUSLICE_E2E_PREFIX/`[`KEY`], built from the host's own Debian archive
//! (read from `/etc/apt` at run time; no host name is written here) with the suite name
//! replaced.

use anyhow::{ensure, Context, Result};
use gpuslice_e2e::gate::{require, Need};
use gpuslice_e2e::package::debootstrap_root;
use gpuslice_e2e::runc::{make_bundle, run_bundle, Spec};
use gpuslice_e2e::sim::{Bind, CONTAINER_STATE_DIR};
use gpuslice_e2e::suite::{assert_one_gib_slice, assert_whole_device, info_and_fill, Node};
use gpuslice_e2e::{image::WORKLOAD, paths};
use gpuslice_oci::elf_versions::{version_needs, GlibcVersion};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Cache key of the old root: suite, variant, recipe version.
const KEY: &str = "rootfs-bullseye-minbase-v1";
/// The old suite and its glibc.
const SUITE: &str = "bullseye";
const GLIBC: GlibcVersion = GlibcVersion(2, 31);

/// The cached bullseye root, built when missing.
fn old_root() -> Result<PathBuf> {
    debootstrap_root(KEY, SUITE, "old_glibc", |root| {
        // Only what a container run needs: no documentation, locales or package caches.
        for d in [
            "usr/share/doc",
            "usr/share/locale",
            "usr/share/man",
            "var/cache/apt",
        ] {
            let _ = std::fs::remove_dir_all(root.join(d));
        }
        Ok(())
    })
}

/// A bundle of the old root plus the dist workload and the simulator's mount points.
fn bundle(node: &Node, root: &Path, name: &str, spec: &Spec) -> Result<PathBuf> {
    let b = make_bundle(&node.scratch.join(name), root, spec)?;
    let rootfs = b.join("rootfs");
    let _ = std::fs::remove_file(rootfs.join(".complete"));
    std::fs::copy(
        paths::workload(),
        rootfs.join(WORKLOAD.trim_start_matches('/')),
    )?;
    for d in ["var/lib/gpuslice-sim", "usr/lib/gpuslice-sim"] {
        std::fs::create_dir_all(rootfs.join(d))?;
    }
    Ok(b)
}

/// Newest glibc version `file` needs.
fn newest_need(file: &Path) -> Result<Option<GlibcVersion>> {
    let needs = version_needs(&std::fs::read(file)?)?;
    Ok(needs
        .iter()
        .filter_map(|n| GlibcVersion::parse(&n.version))
        .max())
}

/// Runs bundle `name` (a fresh copy of the old root) with `runtime`; returns stdout, stderr
/// and whether it exited 0.
fn run(
    node: &Node,
    root: &Path,
    runtime: &Path,
    name: &str,
    spec: &Spec,
    env: &[(String, String)],
) -> Result<(String, String, bool)> {
    let b = bundle(node, root, name, spec)?;
    let out = run_bundle(
        runtime,
        &node.scratch.dir("runc-root")?,
        &b,
        &format!("old-glibc-{name}"),
        env,
        Duration::from_secs(120),
    )?;
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    println!("--- {name} ({}):\n{stdout}{stderr}", out.status);
    Ok((stdout, stderr, out.status.success()))
}

/// The share in the old image: two containers through `gpuslice-runtime`, guaranteed 30 % and
/// 70 %, saturating the device together (released at once through a file in the simulator's
/// shared directory, as `tests/e2e/tests/shares.rs` does): the interposer's launch gate, loaded
/// by bullseye's loader, holds each to its share, 30/70 ± [`SHARE_TOLERANCE`] of the kernels.
fn share_30_70(
    node: &Node,
    root: &Path,
    runtime: &Path,
    spec: &Spec,
    arbiter: &gpuslice_e2e::Arbiter,
) -> Result<()> {
    let d = CONTAINER_STATE_DIR;
    let of = |name: &str, compute: &str| Spec {
        args: vec![
            "/bin/sh".into(),
            "-c".into(),
            format!(
                "touch {d}/ready-{name}; while [ ! -e {d}/go ]; do sleep 0.02; done; \
                 exec {WORKLOAD} saturate --kernel-us 1000 --seconds 5 --depth 8"
            ),
        ],
        annotations: vec![
            ("gpuslice.io/compute".into(), compute.into()),
            ("gpuslice.io/memory".into(), "1Gi".into()),
        ],
        ..spec.clone()
    };
    let env = arbiter.client_env();
    let (sa, sb) = (of("a", "30"), of("b", "70"));
    let (a, b) = std::thread::scope(|s| -> Result<_> {
        let ha = s.spawn(|| run(node, root, runtime, "share-30", &sa, &env));
        let hb = s.spawn(|| run(node, root, runtime, "share-70", &sb, &env));
        node.sim
            .release_together(&["a", "b"], Duration::from_secs(90))?;
        let a = ha.join().map_err(|_| anyhow::anyhow!("thread a"))??;
        let b = hb.join().map_err(|_| anyhow::anyhow!("thread b"))??;
        Ok((a, b))
    })?;
    ensure!(a.2 && b.2, "a share container failed:\n{}\n{}", a.1, b.1);
    let ka = gpuslice_e2e::workload::get_u64(&a.0, "kernels").context("no kernels= from A")?;
    let kb = gpuslice_e2e::workload::get_u64(&b.0, "kernels").context("no kernels= from B")?;
    let share_a = ka as f64 / (ka + kb) as f64;
    println!(
        "old_glibc: in {SUITE}, kernels A (compute 30) {ka}, B (compute 70) {kb}: {:.1}/{:.1}",
        share_a * 100.0,
        (1.0 - share_a) * 100.0
    );
    ensure!(ka + kb >= 4000, "only {} kernels of 1 ms in 5 s", ka + kb);
    ensure!(
        (share_a - 0.30).abs() <= SHARE_TOLERANCE,
        "A ran {ka} kernels, B {kb}: shares {:.1}/{:.1}, wanted 30/70 ± {:.0} points\narbiter log:\n{}",
        share_a * 100.0,
        (1.0 - share_a) * 100.0,
        SHARE_TOLERANCE * 100.0,
        arbiter.log()
    );
    Ok(())
}

/// How far (fraction of the kernels) the 30 % slice's share may be from 30 %.
const SHARE_TOLERANCE: f64 = 0.03;

#[test]
fn an_old_glibc_image_is_capped_or_refused_never_unenforced() -> Result<()> {
    if !require(
        "reliability/old_glibc",
        &[
            Need::Root,
            Need::Binary(paths::runc()),
            Need::Dist,
            Need::Product,
        ],
    ) {
        return Ok(());
    }
    let root = old_root()?;
    let node = Node::new("oldglibc")?;
    let arbiter = node.start_arbiter()?;
    let spec = Spec {
        args: info_and_fill(),
        env: node.sim.container_env(),
        binds: node.sim.container_binds(),
        annotations: vec![("gpuslice.io/memory".into(), "1Gi".into())],
    };
    let runtime = paths::product("gpuslice-runtime");

    // The dist interposer (glibc 2.17) in the bullseye image: the cap holds.
    let need = newest_need(&paths::interposer())?;
    ensure!(
        need.is_some_and(|v| v <= GLIBC),
        "the dist interposer needs glibc {need:?}"
    );
    let (stdout, stderr, ok) = run(&node, &root, &runtime, "dist", &spec, &arbiter.client_env())?;
    ensure!(
        ok,
        "container failed: {stderr}\narbiter log:\n{}",
        arbiter.log()
    );
    ensure!(!stderr.contains("ld.so"), "the loader complained: {stderr}");
    assert_one_gib_slice(&stdout)?;
    share_30_70(&node, &root, &runtime, &spec, &arbiter)?;

    // An interposer linked on this host, as every build was before the floor.
    let host_built = gpuslice_test_support::profile_dir().join("libgpuslice.so");
    let host_need = newest_need(&host_built).with_context(|| {
        format!(
            "{} (cargo build -p gpuslice-interposer)",
            host_built.display()
        )
    })?;
    let Some(v) = host_need.filter(|v| *v > GLIBC) else {
        println!(
            "old_glibc: {} needs only glibc {host_need:?}: the refusal is not exercised here",
            host_built.display()
        );
        return Ok(());
    };
    // What happened before the floor: preloaded (here by LD_PRELOAD and its standalone
    // 1 GiB cap, with plain runc), bullseye's loader skips it and the device is whole.
    let mut before = spec.clone();
    before.annotations.clear();
    before.binds.push(Bind {
        src: host_built.clone(),
        dst: "/opt/gpuslice/libgpuslice.so".into(),
        ro: true,
    });
    before.env.extend([
        "LD_PRELOAD=/opt/gpuslice/libgpuslice.so".to_string(),
        "GPUSLICE_MEMORY=1Gi".to_string(),
    ]);
    let (stdout, stderr, ok) = run(&node, &root, &paths::runc(), "before", &before, &[])?;
    // glibc skips a preload it cannot map ("cannot be preloaded … ignored") and runs the
    // program without it; a version it lacks may instead stop the program. Either way the
    // interposer is not in effect.
    if stderr.contains("cannot be preloaded") {
        ensure!(ok, "{stderr}");
        assert_whole_device(&stdout)?;
        println!("old_glibc: before the floor the preload was skipped and the device whole");
    } else {
        ensure!(
            !ok && stderr.contains("version `GLIBC_2.") && !stdout.contains("total_mem="),
            "the host-built interposer loaded in glibc {GLIBC}: {stderr}"
        );
        println!("old_glibc: before the floor the program did not start (version not found)");
    }

    // Now: gpuslice-runtime refuses the container, naming the image's glibc.
    let config = node.scratch.join("host-built.toml");
    let arbiter_config = std::fs::read_to_string(&arbiter.config)?;
    std::fs::write(
        &config,
        format!(
            "interposer = \"{}\"\n{arbiter_config}",
            host_built.display()
        ),
    )?;
    let mut env = arbiter.client_env();
    env.retain(|(k, _)| k != "GPUSLICE_CONFIG");
    env.push(("GPUSLICE_CONFIG".into(), config.display().to_string()));
    let (stdout, stderr, ok) = run(&node, &root, &runtime, "refused", &spec, &env)?;
    ensure!(
        !ok,
        "the container ran (host interposer needs glibc {v}): {stderr}"
    );
    ensure!(
        stderr.contains("the interposer cannot be preloaded, refusing the container")
            // 2.31 added no symbol version: its newest is GLIBC_2.30.
            && stderr.contains("symbol versions up to GLIBC_2.30) lacks GLIBC_2.3")
            && stderr.contains("gpuslice's floor is glibc 2.17"),
        "{stderr}"
    );
    ensure!(!stdout.contains("total_mem="), "the workload ran: {stdout}");
    Ok(())
}
