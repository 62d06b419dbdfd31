//! `only=shapes,util`: workload shapes on a 30 % slice, and device utilisation gated and bare.

use super::harness::*;
use crate::bench::{loadavg, HostCpu};
use anyhow::{Context, Result};
use std::process::Stdio;
use std::time::Duration;
/// Workload shapes on the 30 % slice beside a 70 % slice launching 1 ms kernels (depth 4):
/// CUDA graphs of 100 × 1 ms kernel nodes (one `cuGraphLaunch` each), 50 ms kernels, a deep
/// asynchronous queue (1 ms kernels, 1000 in flight) and 50 µs kernels (depth 64). Goal: 30/70
/// within 2 points over 10 s, every 1 s window within 5.
pub(super) fn shapes(ctxs: &[Ctx]) -> Result<()> {
    println!(
        "\n== workload shapes: the 30 % slice A launches SHAPE, the 70 % slice B 1 ms kernels \
         (depth 4); 10 s and 1 s windows min..max"
    );
    println!(
        "{:<30} {:<9} {:>7} {:>15} {:>7} {:>15} {:>6} {:>7} {:>11}",
        "shape of A", "engine", "A 10s", "A 1s", "B 10s", "B 1s", "device", "verdict", "load steal"
    );
    let graph = |nodes: usize, us: u64, depth: usize| {
        let mut v = saturate(us, 10.8, depth);
        v.extend(["--graph-nodes".to_string(), nodes.to_string()]);
        v
    };
    let cases: [(&str, Vec<String>); 4] = [
        ("graphs of 100 × 1 ms, depth 2", graph(100, 1000, 2)),
        ("50 ms kernels, depth 8", saturate(50_000, 10.8, 8)),
        ("deep queue: 1 ms, depth 1000", saturate(1000, 10.8, 1000)),
        ("50 µs kernels, depth 64", saturate(50, 10.8, 64)),
    ];
    for (name, args) in cases {
        for c in ctxs {
            let cpu = HostCpu::now();
            let (w1, w10, _) = shares_run(
                c,
                &[
                    ("a", "\"compute\":30,\"memory\":\"1Gi\"", args.clone()),
                    (
                        "b",
                        "\"compute\":70,\"memory\":\"1Gi\"",
                        saturate(1000, 10.8, 4),
                    ),
                ],
            )?;
            std::thread::sleep(Duration::from_millis(300));
            let (a_lo, a_hi) = range_of(&w1, 0);
            let (b_lo, b_hi) = range_of(&w1, 1);
            let ok10 = (w10[0] - 0.3).abs() <= 0.02 && (w10[1] - 0.7).abs() <= 0.02;
            let ok1 = a_lo >= 0.25 && a_hi <= 0.35 && b_lo >= 0.65 && b_hi <= 0.75;
            println!(
                "{:<30} {:<9} {:>7} {:>7}..{:<7} {:>7} {:>7}..{:<7} {:>6} {:>7} {:>5} {:>5}",
                name,
                c.engine,
                pct(w10[0]),
                pct(a_lo),
                pct(a_hi),
                pct(w10[1]),
                pct(b_lo),
                pct(b_hi),
                pct(w10[0] + w10[1]),
                if ok10 && ok1 { "ok" } else { "MISS" },
                loadavg(),
                cpu.steal_since()
            );
            if !ok1 {
                let list = |i: usize| {
                    w1.iter()
                        .map(|w| format!("{:.0}", w[i] * 100.0))
                        .collect::<Vec<_>>()
                        .join(" ")
                };
                println!("{:<40} 1 s windows: A {} | B {}", "", list(0), list(1));
            }
        }
    }
    Ok(())
}

/// The same processes without the interposer (the bare simulated engine): 10 s shares.
pub(super) fn bare_run(c: &Ctx, tenants: &[Vec<String>]) -> Result<Vec<f64>> {
    let mut children = Vec::new();
    for args in tenants {
        let ch = c
            .node
            .workload()
            .args(["--via", "dlsym"])
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .context("starting a bare tenant")?;
        children.push(ch);
    }
    let samples = sample_run(c, &children);
    wait_all(children);
    Ok(windows(&samples, 0.5, 10.0)
        .into_iter()
        .next()
        .unwrap_or_default())
}

/// Device utilisation (the sum of every tenant's ground-truth share over 10 s) while demand
/// exceeds the device, gated by the arbiter and on the bare engine, in the same run: two
/// saturating tenants, saturating + bursty normal, saturating + bursty high priority (a 1 ms
/// request every 20 ms). Goal: ≥ 95 % gated.
pub(super) fn utilisation(ctxs: &[Ctx]) -> Result<()> {
    println!(
        "\n== device utilisation while demand exceeds the device: S = saturating 1 ms depth 64 \
         (50 %), R = one 1 ms request every 20 ms (20 %); gated vs the same processes bare"
    );
    println!(
        "{:<34} {:<9} {:>7} {:>15} {:>7} {:>15} {:>7} {:>5} {:>5}",
        "mix", "engine", "gated", "(shares)", "bare", "(shares)", "verdict", "load", "steal"
    );
    let bursty: Vec<String> = "bursty --kernel-us 1000 --rate 50 --seconds 10.8"
        .split(' ')
        .map(String::from)
        .collect();
    let sat = saturate(1000, 10.8, 64);
    let mixes: [(&str, &str, Vec<String>); 3] = [
        (
            "two saturating (S + S at 50)",
            "\"compute\":50,\"memory\":\"1Gi\"",
            sat.clone(),
        ),
        (
            "S + bursty normal",
            "\"compute\":20,\"memory\":\"1Gi\"",
            bursty.clone(),
        ),
        (
            "S + bursty priority high",
            "\"compute\":20,\"priority\":\"high\",\"memory\":\"1Gi\"",
            bursty.clone(),
        ),
    ];
    for (name, req, other) in mixes {
        for c in ctxs {
            let cpu = HostCpu::now();
            let (_, w10, _) = shares_run(
                c,
                &[
                    ("s", "\"compute\":50,\"memory\":\"1Gi\"", sat.clone()),
                    ("r", req, other.clone()),
                ],
            )?;
            std::thread::sleep(Duration::from_millis(300));
            let bare = bare_run(c, &[sat.clone(), other.clone()])?;
            let g: f64 = w10.iter().sum();
            let b: f64 = bare.iter().sum();
            let shares = |v: &[f64]| {
                v.iter()
                    .map(|x| format!("{:.1}", x * 100.0))
                    .collect::<Vec<_>>()
                    .join("/")
            };
            println!(
                "{:<34} {:<9} {:>7} {:>15} {:>7} {:>15} {:>7} {:>5} {:>5}",
                name,
                c.engine,
                pct(g),
                shares(&w10),
                pct(b),
                shares(&bare),
                if g >= 0.95 { "ok" } else { "MISS" },
                loadavg(),
                cpu.steal_since()
            );
        }
    }
    Ok(())
}
