//! `cargo xtask bench share only=serving`: an LLM server's shape beside a saturating trainer on
//! the simulated GPU (issue #36), the simulator's counterpart of the real-GPU kit's section 6.
//!
//! The server is `gpuslice-workload serve`: Poisson requests at 20/s (prompts 32–256 tokens,
//! outputs 32–128, a fixed seed), a prefill kernel of 2 µs per prompt token, then decode steps
//! of one graph replay of 8 × 30 µs kernels for every active request, 80 µs of host work
//! between steps (`--host-us`, a Python server's bookkeeping). The trainer (and the batch
//! tenant) saturate the device with 1.4 ms kernels, 8 queued (the H200's 8192² bf16 GEMM). Every
//! run of the server on device 0 has a twin: the same server alone on device 1 in the same span,
//! so a stall of the shared host hits both and the latency is judged against the twin.

use super::harness::{saturate, tenant, wait_all, Ctx};
use crate::bench::{loadavg, HostCpu};
use anyhow::Result;
use std::time::Duration;

/// Seconds of requests per run: 20/s × 10 s = 200 requests, ~16 000 inter-token gaps.
const SECS: f64 = 10.0;
/// Issue #36's goal for the high-priority server: p99 inter-token latency within alone + 0.5 ms.
const GOAL_MS: f64 = 0.5;

/// `key=` of a workload's output line, or NaN (printed as such in the table).
fn field(out: &str, key: &str) -> f64 {
    crate::bench::gpuslice_field(out, key).unwrap_or(f64::NAN)
}

fn server(device: u32) -> Vec<String> {
    let secs = SECS.to_string();
    let d = device.to_string();
    [
        "--device",
        &d,
        "serve",
        "--rate",
        "20",
        "--seconds",
        &secs,
        "--nodes",
        "8",
        "--kernel-us",
        "30",
        // A Python server's host work between decode steps (issue 36).
        "--host-us",
        "80",
    ]
    .map(String::from)
    .to_vec()
}

/// One scenario: the server in `request` on device 0 beside saturating tenants in `others`
/// (their slice requests), its twin alone on device 1; returns (server, twin, others' outputs).
fn run_one(c: &Ctx, request: &str, others: &[&str]) -> Result<(String, String, Vec<String>)> {
    let mut admitted = Vec::new();
    let mut kids = Vec::new();
    for (i, req) in others.iter().enumerate() {
        let id = format!("neighbour-{i}");
        let dir = c.arb.admit(&id, &format!("{req},\"memory\":\"1Gi\""))?;
        admitted.push(id);
        kids.push(tenant(c.node, &dir, &saturate(1400, SECS + 2.5, 8))?);
    }
    std::thread::sleep(Duration::from_millis(300));
    let ds = c
        .arb
        .admit("server", &format!("{request},\"memory\":\"1Gi\""))?;
    let dt = c.arb.admit(
        "twin",
        &format!("{request},\"memory\":\"1Gi\",\"devices\":{{\"list\":[{{\"index\":1}}]}}"),
    )?;
    let s = tenant(c.node, &ds, &server(0))?;
    let t = tenant(c.node, &dt, &server(1))?;
    let mut outs = wait_all(vec![s, t]).into_iter();
    let (so, to) = (
        outs.next().unwrap_or_default(),
        outs.next().unwrap_or_default(),
    );
    let rest = wait_all(kids);
    for id in admitted
        .iter()
        .map(String::as_str)
        .chain(["server", "twin"])
    {
        c.arb.release(id);
    }
    Ok((so, to, rest))
}

/// The serving scenario on one engine.
/// The serving rows on `c`'s engine; `trainer`: the guarantee of the trainer in the two-tenant
/// rows (the three-tenant row is the 20/50/30).
pub(crate) fn serving(c: &Ctx, trainer: u32) -> Result<()> {
    let cpu = HostCpu::now();
    println!(
        "\n== serving, {} engine: Poisson 20 req/s, decode = graph of 8 × 30 µs per token, beside \
         1.4 ms kernels (depth 8) guaranteed {trainer} %, {SECS} s per run",
        c.engine
    );
    println!(
        "{:<44} {:>15} {:>22} {:>10} {:>9} {:>8} {:>16}",
        "scenario",
        "TTFT p50/p99",
        "ITL p50/p99/max ms",
        "twin p99",
        "tok/s",
        "goal",
        "neighbour shares"
    );
    let train = format!("\"compute\":{trainer}");
    let plans: [(&str, &str, Vec<&str>); 4] = [
        ("alone", "\"priority\":\"normal\"", vec![]),
        (
            "beside the trainer, normal",
            "\"priority\":\"normal\"",
            vec![&train],
        ),
        (
            "beside the trainer, priority high",
            "\"priority\":\"high\"",
            vec![&train],
        ),
        (
            "server high 20 %, trainer 50 %, batch 30 %",
            "\"priority\":\"high\",\"compute\":20",
            vec!["\"compute\":50", "\"compute\":30"],
        ),
    ];
    for (name, request, others) in plans {
        let (so, to, rest) = run_one(c, request, &others)?;
        let p99 = field(&so, "itl_p99_ms");
        let twin = field(&to, "itl_p99_ms");
        let goal = if others.is_empty() {
            "-"
        } else if p99 <= twin + GOAL_MS {
            "ok"
        } else {
            "MISS"
        };
        let shares: Vec<String> = rest
            .iter()
            .map(|o| format!("{:.1}", field(o, "share") * 100.0))
            .collect();
        println!(
            "{name:<44} {:>15} {:>22} {twin:>10.2} {:>9.0} {goal:>8} {:>16}",
            format!(
                "{:.2}/{:.2}",
                field(&so, "ttft_p50_ms"),
                field(&so, "ttft_p99_ms")
            ),
            format!(
                "{:.2}/{p99:.2}/{:.2}",
                field(&so, "itl_p50_ms"),
                field(&so, "itl_max_ms")
            ),
            field(&so, "tokens_per_s"),
            if shares.is_empty() {
                "-".into()
            } else {
                shares.join(" / ")
            }
        );
    }
    println!(
        "   (goal: p99 ITL <= twin p99 + {GOAL_MS} ms; load {}, steal {} %)",
        loadavg(),
        cpu.steal_since()
    );
    Ok(())
}
