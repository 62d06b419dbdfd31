//! The `serve` workload: an LLM server's shape on the driver API (issue #36), the simulated
//! counterpart of the real-GPU kit's `serving.py`.
//!
//! Requests arrive at random (Poisson, `rate` per second, a fixed seed so every scenario sees the
//! same trace) with a prompt of 32–256 tokens and an output of 32–128 tokens (uniform). A request
//! is admitted into one of `slots` decode slots: its prefill is one kernel of `prefill_us_per_token`
//! per prompt token, synchronised (its first token reaches the host). While any request is
//! active the server runs decode steps back to back: each step is one `cuGraphLaunch` of a graph
//! of `nodes` kernels of `kernel_us` (a captured decode step), synchronised, and gives one token to
//! every active request. Prints the same keys as the kit's PyTorch server: time to first token
//! (arrival to first token, queueing included) and inter-token latency percentiles, tokens/s, and
//! the fraction of the device the server's kernels took (`busy_frac`) and of the wall time with a
//! request in prefill or decode (`active_frac`: a neighbour that must not run beside a step can
//! use at most the rest). `--host-us` spins the host between a step's synchronisation and the
//! next step's launch, as a Python server's bookkeeping does.

use crate::session::Session;
use crate::stats::percentile;
use anyhow::{bail, Result};
use std::collections::VecDeque;
use std::time::{Duration, Instant};

const PROMPT: (u64, u64) = (32, 256);
const OUTPUT: (u64, u64) = (32, 128);
const SEED: u64 = 36;
/// How long after the window a request still running may finish before it is cut.
const DRAIN_S: f64 = 2.0;

/// The server's shape (the `serve` command's options).
#[derive(Clone, Copy, Debug, clap::Args)]
pub struct Shape {
    /// Requests per second.
    #[arg(long, default_value_t = 10.0)]
    pub rate: f64,
    #[arg(long, default_value_t = 3.0)]
    pub seconds: f64,
    /// Requests decoded together.
    #[arg(long, default_value_t = 8)]
    pub slots: usize,
    /// Kernels in the decode step's graph.
    #[arg(long, default_value_t = 8)]
    pub nodes: usize,
    #[arg(long, default_value_t = 30)]
    pub kernel_us: u64,
    /// Device time of the prefill per prompt token.
    #[arg(long, default_value_t = 2)]
    pub prefill_us_per_token: u64,
    /// Host work between decode steps, µs (spun, not slept): a Python server's sampling and
    /// bookkeeping between one step's synchronisation and the next step's launch, ~50–100 µs.
    #[arg(long, default_value_t = 0)]
    pub host_us: u64,
}

/// One request of the trace.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Request {
    pub arrival_s: f64,
    pub prompt: u64,
    pub output: u64,
}

/// The request trace for `rate` over `seconds`: the same for the same arguments.
pub fn trace(rate: f64, seconds: f64) -> Vec<Request> {
    let mut rng = fastrand::Rng::with_seed(SEED);
    let mut out = Vec::new();
    let mut t = 0.0;
    loop {
        // Exponential inter-arrival times; 1 - f64() is in (0, 1], so ln is finite.
        t += -(1.0 - rng.f64()).ln() / rate;
        if t >= seconds {
            return out;
        }
        out.push(Request {
            arrival_s: t,
            prompt: rng.u64(PROMPT.0..=PROMPT.1),
            output: rng.u64(OUTPUT.0..=OUTPUT.1),
        });
    }
}

/// Latencies and counts of one run.
#[derive(Default, Debug)]
struct Tally {
    ttft_ms: Vec<f64>,
    itl_ms: Vec<f64>,
    tokens: u64,
    served: u64,
    steps: u64,
    prefill_tokens: u64,
    /// Wall time with at least one request in prefill or decode: what a neighbour could not use
    /// without running beside a step (the host gaps between steps included).
    active: Duration,
}

/// The `serve` command.
pub fn run(s: &Session, shape: Shape) -> Result<()> {
    if shape.rate <= 0.0 || shape.slots == 0 || shape.nodes == 0 {
        bail!("serve needs --rate > 0, --slots >= 1 and --nodes >= 1");
    }
    let stream = s.stream()?;
    let step = s.spin_graph(shape.nodes, shape.kernel_us)?;
    let mut reqs: VecDeque<Request> = trace(shape.rate, shape.seconds).into();
    let mut waiting = VecDeque::new();
    let mut free: Vec<usize> = (0..shape.slots).collect();
    let mut active: Vec<Option<(u64, Instant)>> = vec![None; shape.slots];
    let mut t = Tally::default();
    let start = Instant::now();
    // Since when at least one request has been in prefill or decode.
    let mut busy_since: Option<Instant> = None;
    let cut = Duration::from_secs_f64(shape.seconds + DRAIN_S);
    while !(reqs.is_empty() && waiting.is_empty() && free.len() == shape.slots) {
        let now = start.elapsed();
        if now >= cut {
            break;
        }
        while reqs
            .front()
            .is_some_and(|r| r.arrival_s <= now.as_secs_f64())
        {
            waiting.extend(reqs.pop_front());
        }
        while !free.is_empty() {
            let Some(r) = waiting.pop_front() else { break };
            let Some(slot) = free.pop() else { break };
            busy_since.get_or_insert_with(Instant::now);
            s.launch_spin(stream, r.prompt * shape.prefill_us_per_token)?;
            s.sync(stream)?;
            let at = Instant::now();
            t.ttft_ms
                .push(((at - start).as_secs_f64() - r.arrival_s) * 1e3);
            t.tokens += 1;
            t.prefill_tokens += r.prompt;
            active[slot] = Some((r.output - 1, at));
        }
        if free.len() == shape.slots {
            if let Some(r) = reqs.front() {
                let wait = (r.arrival_s - start.elapsed().as_secs_f64()).clamp(0.0, 0.05);
                std::thread::sleep(Duration::from_secs_f64(wait));
            }
            continue;
        }
        s.launch_graph(step, stream)?;
        s.sync(stream)?;
        t.steps += 1;
        let at = Instant::now();
        for (slot, a) in active.iter_mut().enumerate() {
            let Some((left, last)) = *a else { continue };
            t.itl_ms.push((at - last).as_secs_f64() * 1e3);
            t.tokens += 1;
            if left <= 1 {
                *a = None;
                free.push(slot);
                t.served += 1;
            } else {
                *a = Some((left - 1, at));
            }
        }
        if free.len() == shape.slots {
            if let Some(since) = busy_since.take() {
                t.active += at - since;
            }
        }
        host_work(shape.host_us);
    }
    if let Some(since) = busy_since {
        t.active += since.elapsed();
    }
    report(shape, &mut t, start.elapsed().as_secs_f64());
    Ok(())
}

/// Spins the calling thread for `us` µs (host work: it holds its core, as Python does).
fn host_work(us: u64) {
    if us == 0 {
        return;
    }
    let until = Instant::now() + Duration::from_micros(us);
    while Instant::now() < until {
        std::hint::spin_loop();
    }
}

/// Prints the run's one `key=value` line.
#[allow(clippy::cast_precision_loss)] // counts far below 2^52
fn report(shape: Shape, t: &mut Tally, elapsed: f64) {
    let step_ms = (shape.nodes as u64 * shape.kernel_us) as f64 / 1e3;
    let prefill_ms = (shape.prefill_us_per_token * (PROMPT.0 + PROMPT.1) / 2) as f64 / 1e3;
    let busy_s = (t.steps as f64 * step_ms
        + (t.prefill_tokens * shape.prefill_us_per_token) as f64 / 1e3)
        / 1e3;
    t.ttft_ms.sort_by(f64::total_cmp);
    t.itl_ms.sort_by(f64::total_cmp);
    let itl_max = t.itl_ms.last().copied().unwrap_or(0.0);
    println!(
        "requests={} tokens={} elapsed_s={elapsed:.3} tokens_per_s={:.1} ttft_p50_ms={:.3} \
         ttft_p99_ms={:.3} itl_p50_ms={:.3} itl_p99_ms={:.3} itl_max_ms={itl_max:.3} steps={} \
         step_ms={step_ms:.4} prefill_ms={prefill_ms:.4} busy_frac={:.4} active_frac={:.4} host_us={} graph=1",
        t.served,
        t.tokens,
        t.tokens as f64 / elapsed,
        percentile(&t.ttft_ms, 0.5),
        percentile(&t.ttft_ms, 0.99),
        percentile(&t.itl_ms, 0.5),
        percentile(&t.itl_ms, 0.99),
        t.steps,
        busy_s / elapsed,
        t.active.as_secs_f64() / elapsed,
        shape.host_us,
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_trace_is_poisson_at_the_rate_and_repeatable() {
        let a = trace(50.0, 200.0);
        assert_eq!(a, trace(50.0, 200.0), "same seed, same trace");
        let n = a.len() as f64;
        // 10 000 expected arrivals: the count's standard deviation is 100.
        assert!(
            (n - 10_000.0).abs() < 500.0,
            "{n} arrivals at 50/s over 200 s"
        );
        assert!(a.iter().all(|r| (PROMPT.0..=PROMPT.1).contains(&r.prompt)
            && (OUTPUT.0..=OUTPUT.1).contains(&r.output)));
        assert!(a.windows(2).all(|w| w[0].arrival_s < w[1].arrival_s));
    }
}
