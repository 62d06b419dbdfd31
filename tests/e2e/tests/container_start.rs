//! Benchmark (ignored by default; `cargo xtask bench container-start` runs it): the start
//! latency gpuslice adds to a container under containerd. One private containerd and arbiter;
//! each round runs `ctr run --rm <test image> /bin/true` five ways, in an order rotated every
//! round so drift and caching hit every variant alike:
//!
//! - `runc`: the runc v2 shim with the distribution's runc (the plain runtime class);
//! - `gpuslice, no request`: `gpuslice-runtime` as the runc binary, nothing asked (pass-through);
//! - `gpuslice, memory=1Gi`: `gpuslice-runtime` with `gpuslice.io/memory=1Gi` (admission, spec
//!   edit, mounts, the bind after `create` and the release at `delete`);
//! - `gpuslice shim v2, no request` and `gpuslice shim v2, memory=1Gi`: the shim v2 runtime
//!   `io.containerd.gpuslice.v2` (`ctr run --runtime io.containerd.gpuslice.v2`, found through
//!   the daemon's `PATH` with the dist tree's `usr/bin` first, as in `tests/shimv2.rs`), which
//!   edits the spec at `Task.Create` and fronts the engine's `containerd-shim-runc-v2`, so runc is
//!   called directly, without an extra exec per runc call. Without runtime options the runc-v2
//!   shim behind it uses `runc` from that `PATH` (the same distribution runc) and its default
//!   root `/run/containerd/runc`;
//! - with `GPUSLICE_BENCH_BASELINE=<another gpuslice-runtime>` (e.g. an older build, which
//!   finds its own `gpuslice-hook` and interposer beside it): `baseline, memory=1Gi`, the same
//!   request through that binary, so two builds are compared alternately in one run; and when
//!   a `containerd-shim-gpuslice-v2` lies beside it, `baseline shim v2, memory=1Gi` through that
//!   shim, as the runtime type `io.containerd.gpuslicebaseline.v2` (a link of that name in a
//!   directory on the daemon's `PATH`: containerd finds a shim by its runtime type's name).
//!   Each is also compared with this build's same variant round by round ("this build against
//!   the baseline": the median and p90 of the per-round differences).
//!
//! Each sample is the wall time of the whole `ctr run --rm` (create, start, wait, delete). Two
//! goal lines: the `BinaryName` path (`gpuslice, memory=1Gi`) and the shim v2 path
//! (`gpuslice shim v2, memory=1Gi`), each as the paired median against `runc`.
//!
//! On a node `/run` is a tmpfs, and with it the arbiter's state directory (`/run/gpuslice`) and
//! containerd's state (`/run/containerd`, where the bundles and their `config.json` live), so the
//! `fsync`s of slice records and spec rewrites cost nothing there. The harness's scratch
//! directories are on disk, so the benchmark mounts a tmpfs on both (`GPUSLICE_BENCH_TMPFS=0`:
//! leave them on disk, where each `fsync` costs milliseconds).
//!
//! Environment: `GPUSLICE_BENCH_ROUNDS` (default 20), `GPUSLICE_BENCH_SERIES` (containerd series,
//! comma-separated, default `1.6`), `GPUSLICE_BENCH_TMPFS` (default 1), `GPUSLICE_BENCH_BASELINE`
//! (optional). The load average is printed before and after (the machine may be shared).

use anyhow::{ensure, Result};
use gpuslice_e2e::containerd::{Containerd, Options};
use gpuslice_e2e::gate::require;
use gpuslice_e2e::image::IMAGE;
use gpuslice_e2e::paths;
use gpuslice_e2e::procs::{describe, run_ok, run_timeout};
use gpuslice_e2e::shimv2::{daemon_path, RUNTIME};
use gpuslice_e2e::suite::Node;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

const GOAL_MS: f64 = 10.0;

/// How a variant's container is run.
#[derive(Clone, Copy)]
enum Runtime<'a> {
    /// The runc v2 shim with this binary as its runc (`--runc-binary`).
    RuncV2(&'a Path),
    /// A shim v2 runtime type (`--runtime io.containerd.gpuslice.v2`: ours; or the
    /// baseline's).
    ShimV2(&'a str),
}

/// (name, runtime, annotations)
type Variant<'a> = (&'a str, Runtime<'a>, &'a [(&'a str, &'a str)]);

/// One `ctr run --rm … /bin/true`; returns its wall time in ms.
fn once(ctd: &Containerd, id: &str, runtime: Runtime, annotations: &[(&str, &str)]) -> Result<f64> {
    let mut c = ctd.ctr();
    c.args(["run", "--rm", "--net-host"]);
    match runtime {
        Runtime::RuncV2(runc_binary) => {
            c.args(["--runtime", "io.containerd.runc.v2", "--runc-binary"])
                .arg(runc_binary)
                .arg("--runc-root")
                .arg(ctd.dir.join("runc"));
        }
        Runtime::ShimV2(runtime) => {
            c.args(["--runtime", runtime]);
        }
    }
    for (k, v) in annotations {
        c.arg("--annotation").arg(format!("{k}={v}"));
    }
    c.arg(IMAGE).arg(id).arg("/bin/true");
    let t = Instant::now();
    let out = run_timeout(&mut c, Duration::from_secs(60))?;
    let ms = t.elapsed().as_secs_f64() * 1e3;
    ensure!(out.status.success(), "ctr run {id}: {}", describe(&out));
    Ok(ms)
}

/// `/proc/loadavg`'s first three fields.
fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "?".into())
}

fn pct(sorted: &[f64], p: f64) -> f64 {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

fn stats(v: &[f64]) -> (f64, f64, f64, f64) {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    let mean = s.iter().sum::<f64>() / s.len() as f64;
    (pct(&s, 0.5), pct(&s, 0.9), s[0], mean)
}

fn bench(series: &str, rounds: usize) -> Result<()> {
    let bins = paths::containerd(series);
    if !require(
        &format!("bench container-start ({series})"),
        &gpuslice_e2e::shimv2::shim_needs(&bins),
    ) {
        return Ok(());
    }
    let node = Node::new(&format!("bs{series}"))?;
    let tmpfs = std::env::var("GPUSLICE_BENCH_TMPFS").map_or(true, |v| v != "0");
    if tmpfs {
        for d in ["arbiter".to_string(), format!("ctd{series}/state")] {
            let p = node.scratch.dir(&d)?;
            run_ok(
                Command::new("mount")
                    .args(["-t", "tmpfs", "-o", "size=256m,mode=0711", "tmpfs"])
                    .arg(&p),
                Duration::from_secs(10),
            )?;
        }
    }
    let arbiter = node.start_arbiter()?;
    let rt = paths::product("gpuslice-runtime");
    let runc = paths::runc();
    let mut env = arbiter.client_env();
    let baseline = std::env::var_os("GPUSLICE_BENCH_BASELINE").map(PathBuf::from);
    let baseline_shim = match &baseline {
        Some(b) => baseline_shim_dir(&node, b)?,
        None => None,
    };
    // Our shim first in the daemon's PATH (then the engine's bin), as in tests/shimv2.rs, and
    // the baseline's shim under its own runtime type's name; the runc v2 variants name their
    // runc binary, so they are unaffected.
    let (key, mut path) = daemon_path(&bins);
    if let Some(d) = &baseline_shim {
        path = format!("{}:{path}", d.display());
    }
    env.push((key, path));
    let ctd = Containerd::start(
        &bins,
        &node.scratch,
        &Options {
            gpuslice_runtime: Some(rt.clone()),
            env,
        },
    )?;
    ctd.import(&node.image.oci)?;
    let mem: &[(&str, &str)] = &[("gpuslice.io/memory", "1Gi")];
    let mut variants: Vec<Variant> = vec![
        ("runc", Runtime::RuncV2(&runc), &[]),
        ("gpuslice, no request", Runtime::RuncV2(&rt), &[]),
        ("gpuslice, memory=1Gi", Runtime::RuncV2(&rt), mem),
        (
            "gpuslice shim v2, no request",
            Runtime::ShimV2(RUNTIME),
            &[],
        ),
        (
            "gpuslice shim v2, memory=1Gi",
            Runtime::ShimV2(RUNTIME),
            mem,
        ),
    ];
    // Index of the BinaryName and the shim v2 memory=1Gi variants (for the goal lines).
    const RT_MEM: usize = 2;
    const SHIM_MEM: usize = 4;
    // (this build's variant, the baseline's same variant): compared round by round.
    let mut against_baseline = Vec::new();
    if let Some(b) = &baseline {
        ensure!(
            b.is_file(),
            "GPUSLICE_BENCH_BASELINE={}: no such file",
            b.display()
        );
        against_baseline.push((RT_MEM, variants.len()));
        variants.push(("baseline, memory=1Gi", Runtime::RuncV2(b), mem));
    }
    if baseline_shim.is_some() {
        against_baseline.push((SHIM_MEM, variants.len()));
        variants.push((
            "baseline shim v2, memory=1Gi",
            Runtime::ShimV2(BASELINE_RUNTIME),
            mem,
        ));
    }
    let load_before = loadavg();
    // Warm-up: one of each (page cache, first snapshot, arbiter connection).
    for (i, (_, rt, ann)) in variants.iter().enumerate() {
        once(&ctd, &format!("warm-{i}"), *rt, ann)?;
    }
    let mut samples = vec![Vec::new(); variants.len()];
    for r in 0..rounds {
        for k in 0..variants.len() {
            let i = (r + k) % variants.len();
            let (_, rt, ann) = variants[i];
            samples[i].push(once(&ctd, &format!("b{r}-{i}"), rt, ann)?);
        }
    }
    let version = run_timeout(
        Command::new(bins.containerd()).arg("--version"),
        Duration::from_secs(10),
    )
    .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
    .unwrap_or_default();
    let where_ = if tmpfs {
        "tmpfs (as /run on a node)"
    } else {
        "disk"
    };
    println!("\ncontainer-start: {version}; {rounds} rounds, order rotated; each sample = `ctr run --rm {IMAGE} /bin/true`; arbiter and containerd state on {where_}");
    println!(
        "load average (1, 5, 15 min): {load_before} before, {} after",
        loadavg()
    );
    if let Some(b) = &baseline {
        println!("baseline: {}", b.display());
    }
    println!(
        "{:<30} {:>9} {:>9} {:>9} {:>9}",
        "variant", "median", "p90", "min", "mean"
    );
    for ((name, _, _), s) in variants.iter().zip(&samples) {
        let (med, p90, min, mean) = stats(s);
        println!("{name:<30} {med:>6.1} ms {p90:>6.1} ms {min:>6.1} ms {mean:>6.1} ms");
    }
    let (base, _, _, _) = stats(&samples[0]);
    for (i, (name, _, _)) in variants.iter().enumerate().skip(1) {
        // Per-round differences (same round, adjacent runs) and their median / p90.
        let d: Vec<f64> = samples[i]
            .iter()
            .zip(&samples[0])
            .map(|(g, p)| g - p)
            .collect();
        let (dmed, dp90, _, _) = stats(&d);
        let (med, _, _, _) = stats(&samples[i]);
        println!(
            "added by {name:<28} median {:+6.1} ms (paired: median {dmed:+6.1} ms, p90 {dp90:+6.1} ms), ratio {:.2}x",
            med - base,
            med / base
        );
    }
    let paired_median = |i: usize| {
        let d: Vec<f64> = samples[i]
            .iter()
            .zip(&samples[0])
            .map(|(g, p)| g - p)
            .collect();
        stats(&d).0
    };
    for &(this, base) in &against_baseline {
        // This build minus the baseline in the same round (adjacent runs).
        let d: Vec<f64> = samples[this]
            .iter()
            .zip(&samples[base])
            .map(|(t, b)| t - b)
            .collect();
        let (dmed, dp90, _, _) = stats(&d);
        println!(
            "this build against the baseline, {:<28} paired median {dmed:+6.1} ms, p90 {dp90:+6.1} ms",
            variants[this].0
        );
    }
    let dmed = paired_median(RT_MEM);
    println!(
        "goal: ≤ {GOAL_MS} ms added (paired median, gpuslice memory=1Gi vs runc): {dmed:.1} ms — {}",
        if dmed <= GOAL_MS { "met" } else { "MISSED" }
    );
    let dmed = paired_median(SHIM_MEM);
    println!(
        "goal: ≤ {GOAL_MS} ms added (paired median, gpuslice shim v2 memory=1Gi vs runc): {dmed:.1} ms — {}",
        if dmed <= GOAL_MS { "met" } else { "MISSED" }
    );
    if let Some(out) = std::env::var_os("GPUSLICE_BENCH_STRACE") {
        trace(&ctd, Path::new(&out), &variants)?;
    }
    ensure!(
        ctd.containers()?.is_empty(),
        "containers left in containerd"
    );
    Ok(())
}

/// The runtime type of the baseline's shim v2 (`GPUSLICE_BENCH_BASELINE`).
const BASELINE_RUNTIME: &str = "io.containerd.gpuslicebaseline.v2";

/// When a `containerd-shim-gpuslice-v2` lies beside the baseline runtime `b`: a directory for
/// the daemon's `PATH` holding a link to it named for [`BASELINE_RUNTIME`]. The shim re-executes
/// itself through `/proc/self/exe`, the file the link names, so it finds the baseline's own
/// `gpuslice-hook` and interposer beside it.
fn baseline_shim_dir(node: &Node, b: &Path) -> Result<Option<PathBuf>> {
    let Some(shim) = b
        .parent()
        .map(|d| d.join(gpuslice_e2e::shimv2::SHIM))
        .filter(|s| s.is_file())
    else {
        return Ok(None);
    };
    let dir = node.scratch.dir("baseline-shim")?;
    let link = dir.join("containerd-shim-gpuslicebaseline-v2");
    let _ = std::fs::remove_file(&link);
    std::os::unix::fs::symlink(&shim, &link)?;
    Ok(Some(dir))
}

/// The pid of the containerd whose configuration lives in `ctd.dir` (from `/proc`).
fn containerd_pid(ctd: &Containerd) -> Option<u32> {
    let cfg = ctd.dir.join("config.toml");
    let want = cfg.to_string_lossy().into_owned();
    std::fs::read_dir("/proc").ok()?.flatten().find_map(|e| {
        let pid: u32 = e.file_name().to_str()?.parse().ok()?;
        let cmd = std::fs::read(e.path().join("cmdline")).ok()?;
        let cmd = String::from_utf8_lossy(&cmd).replace('\0', " ");
        (cmd.contains("containerd") && cmd.contains(&want)).then_some(pid)
    })
}

/// `GPUSLICE_BENCH_STRACE=<file>`: one more run of each variant with `strace -f -tt` attached to
/// containerd (and so to shims, runtimes, hooks and runc), written to `<file>.<n>`, for the
/// "where the time goes" reading in docs/benchmarks.md. Not part of the figures above.
fn trace(ctd: &Containerd, out: &Path, variants: &[Variant]) -> Result<()> {
    let pid = containerd_pid(ctd).ok_or_else(|| anyhow::anyhow!("containerd's pid not found"))?;
    for (i, (name, rt, ann)) in variants.iter().enumerate() {
        let file = out.with_extension(i.to_string());
        let mut st = Command::new("strace")
            .args(["-f", "-tt", "-qq", "-s", "96"])
            .args([
                "-e",
                "trace=execve,connect,fsync,fdatasync,rename,wait4,exit_group",
            ])
            .arg("-o")
            .arg(&file)
            .args(["-p", &pid.to_string()])
            .spawn()?;
        std::thread::sleep(Duration::from_millis(500));
        let ms = once(ctd, &format!("trace-{i}"), *rt, ann);
        std::thread::sleep(Duration::from_millis(300));
        // SAFETY: kill(2) on the strace child this function spawned (its own pid).
        unsafe {
            libc::kill(st.id() as i32, libc::SIGINT);
        }
        let _ = st.wait();
        println!(
            "trace of {name}: {:.1} ms under strace -> {}",
            ms?,
            file.display()
        );
    }
    Ok(())
}

#[test]
#[ignore = "benchmark: cargo xtask bench container-start"]
fn bench_container_start() -> Result<()> {
    let rounds = std::env::var("GPUSLICE_BENCH_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20usize)
        .max(1);
    let series = std::env::var("GPUSLICE_BENCH_SERIES").unwrap_or_else(|_| "1.6".into());
    for s in series.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        bench(s, rounds)?;
    }
    Ok(())
}
