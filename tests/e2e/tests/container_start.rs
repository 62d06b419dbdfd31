//! Benchmark (ignored by default; `cargo xtask bench container-start` runs it): the start
//! latency gpuslice adds to a container under containerd. One private containerd and arbiter;
//! each round runs `ctr run --rm <test image> /bin/true` three ways, in an order rotated every
//! round so drift and caching hit every variant alike:
//!
//! - `runc`: the runc v2 shim with the distribution's runc (the plain runtime class);
//! - `gpuslice, no request`: `gpuslice-runtime` as the runc binary, nothing asked (pass-through);
//! - `gpuslice, memory=1Gi`: `gpuslice-runtime` with `gpuslice.io/memory=1Gi` (admission, spec
//!   edit, mounts, the bind after `create` and the release at `delete`);
//! - with `GPUSLICE_BENCH_BASELINE=<another gpuslice-runtime>` (e.g. an older build, which
//!   finds its own `gpuslice-hook` and interposer beside it): `baseline, memory=1Gi`, the same
//!   request through that binary, so two builds are compared alternately in one run.
//!
//! Each sample is the wall time of the whole `ctr run --rm` (create, start, wait, delete).
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
use gpuslice_e2e::arbiter::Arbiter;
use gpuslice_e2e::containerd::{Containerd, Options};
use gpuslice_e2e::gate::{require, Need};
use gpuslice_e2e::image::IMAGE;
use gpuslice_e2e::paths;
use gpuslice_e2e::procs::{describe, run_ok, run_timeout};
use gpuslice_e2e::suite::Node;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

const GOAL_MS: f64 = 10.0;

/// (name, runc binary of the shim, annotations)
type Variant<'a> = (&'a str, &'a Path, &'a [(&'a str, &'a str)]);

/// One `ctr run --rm … /bin/true`; returns its wall time in ms.
fn once(
    ctd: &Containerd,
    id: &str,
    runc_binary: &Path,
    annotations: &[(&str, &str)],
) -> Result<f64> {
    let mut c = ctd.ctr();
    c.args(["run", "--rm", "--net-host"])
        .args(["--runtime", "io.containerd.runc.v2", "--runc-binary"])
        .arg(runc_binary)
        .arg("--runc-root")
        .arg(ctd.dir.join("runc"));
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
        &[
            Need::Root,
            Need::Binary(bins.containerd()),
            Need::Binary(paths::runc()),
            Need::Dist,
            Need::Product,
        ],
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
    let arbiter = Arbiter::start(&node.scratch, &node.sim)?;
    let rt = paths::product("gpuslice-runtime");
    let runc = paths::runc();
    let ctd = Containerd::start(
        &bins,
        &node.scratch,
        &Options {
            gpuslice_runtime: Some(rt.clone()),
            env: arbiter.client_env(),
        },
    )?;
    ctd.import(&node.image.oci)?;
    let baseline = std::env::var_os("GPUSLICE_BENCH_BASELINE").map(PathBuf::from);
    let mem: &[(&str, &str)] = &[("gpuslice.io/memory", "1Gi")];
    let mut variants: Vec<Variant> = vec![
        ("runc", &runc, &[]),
        ("gpuslice, no request", &rt, &[]),
        ("gpuslice, memory=1Gi", &rt, mem),
    ];
    if let Some(b) = &baseline {
        ensure!(
            b.is_file(),
            "GPUSLICE_BENCH_BASELINE={}: no such file",
            b.display()
        );
        variants.push(("baseline, memory=1Gi", b, mem));
    }
    let load_before = loadavg();
    // Warm-up: one of each (page cache, first snapshot, arbiter connection).
    for (i, (_, bin, ann)) in variants.iter().enumerate() {
        once(&ctd, &format!("warm-{i}"), bin, ann)?;
    }
    let mut samples = vec![Vec::new(); variants.len()];
    for r in 0..rounds {
        for k in 0..variants.len() {
            let i = (r + k) % variants.len();
            let (_, bin, ann) = variants[i];
            samples[i].push(once(&ctd, &format!("b{r}-{i}"), bin, ann)?);
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
        "{:<24} {:>9} {:>9} {:>9} {:>9}",
        "variant", "median", "p90", "min", "mean"
    );
    for ((name, _, _), s) in variants.iter().zip(&samples) {
        let (med, p90, min, mean) = stats(s);
        println!("{name:<24} {med:>6.1} ms {p90:>6.1} ms {min:>6.1} ms {mean:>6.1} ms");
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
            "added by {name:<22} median {:+6.1} ms (paired: median {dmed:+6.1} ms, p90 {dp90:+6.1} ms), ratio {:.2}x",
            med - base,
            med / base
        );
    }
    let d: Vec<f64> = samples[2]
        .iter()
        .zip(&samples[0])
        .map(|(g, p)| g - p)
        .collect();
    let (dmed, _, _, _) = stats(&d);
    println!(
        "goal: ≤ {GOAL_MS} ms added (paired median, gpuslice memory=1Gi vs runc): {dmed:.1} ms — {}",
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
    for (i, (name, bin, ann)) in variants.iter().enumerate() {
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
        let ms = once(ctd, &format!("trace-{i}"), bin, ann);
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
