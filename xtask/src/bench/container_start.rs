//! `cargo xtask bench container-start [rounds=N] [series=1.6,1.7,2.1] [baseline=PATH]`: the start latency
//! gpuslice adds to a container under containerd, versus the plain runc runtime class, measured
//! alternately in one run. Root only (real engines). Provisions the engines
//! (`scripts/install-engines.sh`, cached), builds the dist tree, then runs the ignored benchmark
//! test `tests/e2e/tests/container_start.rs`, which starts its own containerd and arbiter and
//! prints the table (median, p90, paired differences, ratio, the ≤ 10 ms goal). `baseline=` names
//! another `gpuslice-runtime` (an older build, its `gpuslice-hook`, interposer and, if there,
//! `containerd-shim-gpuslice-v2` beside it as in a dist tree) measured alternately as one or two
//! more variants: the older runtime, and the older shim v2.
//! Variants: plain runc, `gpuslice-runtime` as `BinaryName` (no request, `memory=1Gi`), and the
//! shim v2 runtime `io.containerd.gpuslice.v2` (no request, `memory=1Gi`); one goal line each
//! for the two `memory=1Gi` paths.

use crate::dist;
use crate::shell::{cargo, exec, is_root, root};
use anyhow::{bail, Context, Result};
use std::process::Command;

pub fn run(args: &[String]) -> Result<()> {
    if !is_root() {
        bail!("bench container-start runs real containerd and runc: run it as root");
    }
    let mut rounds = None;
    let mut series = None;
    let mut baseline = None;
    let mut it = args.iter();
    // `--rounds N` / `rounds=N` (the `k=v` form needs no `--` before it on the xtask command line).
    while let Some(a) = it.next() {
        let (key, inline) = match a.split_once('=') {
            Some((k, v)) => (k.trim_start_matches('-'), Some(v.to_string())),
            None => (a.trim_start_matches('-'), None),
        };
        let mut value = || match &inline {
            Some(v) => Ok(v.clone()),
            None => it
                .next()
                .cloned()
                .with_context(|| format!("{a} needs a value")),
        };
        match key {
            "rounds" => rounds = Some(value()?),
            "series" => series = Some(value()?),
            "baseline" => baseline = Some(value()?),
            _ => bail!("unknown argument {a:?} (use rounds=N, series=1.6,1.7,2.1, baseline=PATH)"),
        }
    }
    exec(Command::new("bash").arg(root().join("scripts/install-engines.sh")))?;
    let dist = dist::run()?;
    let mut c = cargo();
    c.env("GPUSLICE_DIST", &dist);
    if let Some(r) = rounds {
        c.env("GPUSLICE_BENCH_ROUNDS", r);
    }
    if let Some(s) = series {
        c.env("GPUSLICE_BENCH_SERIES", s);
    }
    if let Some(b) = baseline {
        let b = std::fs::canonicalize(&b).with_context(|| format!("baseline={b}"))?;
        c.env("GPUSLICE_BENCH_BASELINE", b);
    }
    c.args([
        "test",
        "-p",
        "gpuslice-e2e",
        "--test",
        "container_start",
        "--",
        "--ignored",
        "--nocapture",
        "--test-threads=1",
    ]);
    exec(&mut c)
}
