//! The `gpuslice-workload` command line: subcommands that drive the driver API like real programs
//! (info, fill, saturate, bursty, threads, contend, check, capture) and print `key=value` results that tests,
//! benchmarks and the demo parse.

use crate::driver::{self, Driver, Via};
use crate::nvml_view;
use crate::quantity::parse_bytes;
use crate::session::Session;
use anyhow::{bail, Context, Result};
use clap::{Parser, Subcommand};
use gpuslice_cuda_abi::result::{CUDA_ERROR_OUT_OF_MEMORY, CUDA_SUCCESS};
use std::process::Command;
use std::time::{Duration, Instant};

#[derive(Parser)]
#[command(
    name = "gpuslice-workload",
    about = "CUDA driver API workloads for gpuslice tests"
)]
pub struct Args {
    /// How to reach the driver.
    #[arg(long, value_enum, default_value = "procaddr")]
    pub via: Via,
    /// cudaVersion passed to cuGetProcAddress_v2 (with --via procaddr).
    #[arg(long, default_value_t = 12080)]
    pub cuda_version: i32,
    /// Device ordinal.
    #[arg(long, default_value_t = 0)]
    pub device: i32,
    /// Device memory to hold (one allocation, a quantity: `512Mi`, `6Gi`) while the command
    /// runs, as a program holding its weights does; freed when it ends.
    #[arg(long)]
    pub hold: Option<String>,
    #[command(subcommand)]
    pub cmd: Cmd,
}

#[derive(Subcommand, Clone)]
pub enum Cmd {
    /// Devices and memory totals as CUDA and NVML report them.
    Info,
    /// Allocate `chunk`-sized blocks until the driver refuses; exit 0 only if it refused with OOM.
    Fill {
        #[arg(long, default_value = "1Gi")]
        chunk: String,
        /// Keep the memory this long before freeing it.
        #[arg(long, default_value_t = 0)]
        hold_ms: u64,
    },
    /// Keep the device busy with back-to-back spin kernels.
    Saturate {
        #[arg(long, default_value_t = 5000)]
        kernel_us: u64,
        #[arg(long, default_value_t = 3.0)]
        seconds: f64,
        /// Kernels kept in flight on the stream.
        #[arg(long, default_value_t = 2)]
        depth: usize,
        /// Launch CUDA graphs of this many `kernel-us` kernel nodes (one `cuGraphLaunch`
        /// each) instead of single kernels (0: kernels).
        #[arg(long, default_value_t = 0)]
        graph_nodes: usize,
    },
    /// Fixed-rate requests (one kernel each, synchronised); prints latency percentiles.
    Bursty {
        #[arg(long, default_value_t = 1000)]
        kernel_us: u64,
        #[arg(long, default_value_t = 50.0)]
        rate: f64,
        #[arg(long, default_value_t = 3.0)]
        seconds: f64,
    },
    /// Several threads, each with its own stream, launching and allocating at once.
    Threads {
        #[arg(long, default_value_t = 4)]
        threads: usize,
        #[arg(long, default_value_t = 1000)]
        kernel_us: u64,
        #[arg(long, default_value_t = 2.0)]
        seconds: f64,
    },
    /// Start `procs` saturating processes at once and report each one's share of the device.
    Contend {
        #[arg(long, default_value_t = 2)]
        procs: usize,
        #[arg(long, default_value_t = 5000)]
        kernel_us: u64,
        #[arg(long, default_value_t = 3.0)]
        seconds: f64,
    },
    /// The simulated-GPU acceptance checks; exit 1 if any fails.
    Check,
    /// An LLM server's shape: Poisson requests, a prefill kernel each, then decode steps of one
    /// graph replay (`nodes` kernels of `kernel-us`) for every active request; prints time to
    /// first token, inter-token latency percentiles and tokens/s.
    Serve(crate::serve::Shape),
    /// Capture a graph the way PyTorch does (side stream forked and joined through events,
    /// `kernels` spin kernels over both, a memset, a `cuMemAllocAsync` / `cuMemFreeAsync` in
    /// the graph's pool) in each capture `mode`, then replay the graphs for `seconds`.
    Capture {
        /// global, thread_local, relaxed, or all (one graph each).
        #[arg(long, default_value = "all")]
        mode: String,
        #[arg(long, default_value_t = 500)]
        kernel_us: u64,
        #[arg(long, default_value_t = 8)]
        kernels: usize,
        #[arg(long, default_value_t = 3.0)]
        seconds: f64,
        /// Graphs kept in flight during the replays.
        #[arg(long, default_value_t = 2)]
        depth: usize,
    },
}

/// Runs the command with a driver table from `load`.
pub fn run(args: Args, drv: Driver) -> Result<()> {
    let s = Session::open(drv, args.device)?;
    let held = match &args.hold {
        Some(q) => {
            let bytes = parse_bytes(q).with_context(|| format!("--hold {q:?}"))?;
            let (r, p) = s.try_alloc(bytes);
            s.drv.check(&format!("cuMemAlloc(--hold {q})"), r)?;
            Some(p)
        }
        None => None,
    };
    let result = run_cmd(&args, &s);
    if let Some(p) = held {
        s.free(p)?;
    }
    result
}

fn run_cmd(args: &Args, s: &Session) -> Result<()> {
    match args.cmd.clone() {
        Cmd::Info => info(s),
        Cmd::Fill { chunk, hold_ms } => fill(s, parse_bytes(&chunk)?, hold_ms).map(|_| ()),
        Cmd::Saturate {
            kernel_us,
            seconds,
            depth,
            graph_nodes,
        } => {
            let r = saturate(s, kernel_us, seconds, depth, graph_nodes)?;
            println!(
                "kernels={} elapsed_s={:.3} share={:.4}",
                r.kernels, r.elapsed_s, r.share
            );
            Ok(())
        }
        Cmd::Bursty {
            kernel_us,
            rate,
            seconds,
        } => bursty(s, kernel_us, rate, seconds),
        Cmd::Threads {
            threads,
            kernel_us,
            seconds,
        } => threads_run(s, threads, kernel_us, seconds),
        Cmd::Contend {
            procs,
            kernel_us,
            seconds,
        } => {
            let shares = contend(args, procs, kernel_us, seconds)?;
            for (i, sh) in shares.iter().enumerate() {
                println!("proc={i} share={sh:.4}");
            }
            println!("total_share={:.4}", shares.iter().sum::<f64>());
            Ok(())
        }
        Cmd::Check => check(args, s),
        Cmd::Capture {
            mode,
            kernel_us,
            kernels,
            seconds,
            depth,
        } => crate::capture::run(s, &mode, kernel_us, kernels, seconds, depth),
        Cmd::Serve(shape) => crate::serve::run(s, shape),
    }
}

/// Loads the driver table the requested way (`Via::Link` only exists in the linked binary).
pub fn load(args: &Args) -> Result<Driver> {
    match args.via {
        Via::Dlsym => driver::load_dlsym(),
        Via::Procaddr => driver::load_procaddr(args.cuda_version),
        Via::Link => bail!("--via link needs the gpuslice-workload-linked binary"),
    }
}

fn info(s: &Session) -> Result<()> {
    let (free, total) = s.mem_info()?;
    println!(
        "device={} name={:?} total_mem={} meminfo_free={free} meminfo_total={total}",
        s.device,
        s.device_name()?,
        s.total_mem()?
    );
    match nvml_view::open().and_then(|n| nvml_view::devices(&n)) {
        Ok(devs) => {
            for d in devs {
                println!(
                    "nvml_device={} name={:?} uuid={} total={} used={} free={} util={} processes={:?}",
                    d.index, d.name, d.uuid, d.total, d.used, d.free, d.utilization, d.processes
                );
            }
        }
        Err(e) => println!("nvml_error={e:#}"),
    }
    Ok(())
}

/// Allocates until refusal; returns the number of bytes obtained. Frees everything before returning.
fn fill(s: &Session, chunk: u64, hold_ms: u64) -> Result<u64> {
    let mut ptrs = Vec::new();
    let mut got = 0u64;
    let refusal = loop {
        let (r, p) = s.try_alloc(chunk);
        if r != CUDA_SUCCESS {
            break r;
        }
        ptrs.push(p);
        got += chunk;
    };
    let (free, total) = s.mem_info()?;
    println!(
        "allocations={} bytes={got} refusal={} free_after={free} total={total}",
        ptrs.len(),
        s.drv.error_name(refusal)
    );
    std::thread::sleep(Duration::from_millis(hold_ms));
    for p in ptrs {
        s.free(p)?;
    }
    if refusal != CUDA_ERROR_OUT_OF_MEMORY {
        bail!(
            "allocation stopped with {} instead of CUDA_ERROR_OUT_OF_MEMORY",
            s.drv.error_name(refusal)
        );
    }
    Ok(got)
}

/// Result of a saturating run.
pub struct Saturation {
    pub kernels: u64,
    pub elapsed_s: f64,
    /// kernels × kernel time / elapsed: the fraction of the device this process obtained.
    pub share: f64,
}

fn saturate(
    s: &Session,
    kernel_us: u64,
    seconds: f64,
    depth: usize,
    graph_nodes: usize,
) -> Result<Saturation> {
    let stream = s.stream()?;
    let graph = if graph_nodes > 0 {
        Some(s.spin_graph(graph_nodes, kernel_us)?)
    } else {
        None
    };
    let per_launch = kernel_us * graph_nodes.max(1) as u64;
    keep_busy(s, stream, depth, seconds, per_launch, || match graph {
        Some(g) => s.launch_graph(g, stream),
        None => s.launch_spin(stream, kernel_us),
    })
}

/// Calls `launch` (one launch of `per_launch_us` of device time on `stream`) for `seconds`,
/// keeping `depth` launches in flight.
pub(crate) fn keep_busy(
    s: &Session,
    stream: crate::session::Stream,
    depth: usize,
    seconds: f64,
    per_launch_us: u64,
    mut launch: impl FnMut() -> Result<()>,
) -> Result<Saturation> {
    let depth = depth.max(1);
    let events: Vec<_> = (0..depth).map(|_| s.event()).collect::<Result<_>>()?;
    let start = Instant::now();
    let deadline = start + Duration::from_secs_f64(seconds);
    let mut launched = 0u64;
    while Instant::now() < deadline {
        let slot = (launched as usize) % depth;
        if launched >= depth as u64 {
            // Wait for the kernel launched `depth` ago before queueing another.
            s.wait(events[slot])?;
        }
        launch()?;
        s.record(events[slot], stream)?;
        launched += 1;
    }
    s.sync(stream)?;
    let elapsed = start.elapsed().as_secs_f64();
    let share = launched as f64 * per_launch_us as f64 / 1e6 / elapsed;
    Ok(Saturation {
        kernels: launched,
        elapsed_s: elapsed,
        share,
    })
}

fn bursty(s: &Session, kernel_us: u64, rate: f64, seconds: f64) -> Result<()> {
    let stream = s.stream()?;
    let period = Duration::from_secs_f64(1.0 / rate);
    let start = Instant::now();
    let mut next = start;
    let mut lat = Vec::new();
    while start.elapsed().as_secs_f64() < seconds {
        let now = Instant::now();
        if now < next {
            std::thread::sleep(next - now);
        }
        let t = Instant::now();
        s.launch_spin(stream, kernel_us)?;
        s.sync(stream)?;
        lat.push(t.elapsed().as_secs_f64() * 1e3);
        next += period;
    }
    lat.sort_by(f64::total_cmp);
    println!(
        "requests={} p50_ms={:.3} p99_ms={:.3} max_ms={:.3}",
        lat.len(),
        crate::stats::percentile(&lat, 0.5),
        crate::stats::percentile(&lat, 0.99),
        lat[lat.len() - 1]
    );
    Ok(())
}

fn threads_run(s: &Session, threads: usize, kernel_us: u64, seconds: f64) -> Result<()> {
    let results: Vec<Result<(u64, u64)>> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..threads)
            .map(|_| {
                scope.spawn(|| -> Result<(u64, u64)> {
                    s.bind_thread()?;
                    let stream = s.stream()?;
                    let deadline = Instant::now() + Duration::from_secs_f64(seconds);
                    let (mut launches, mut allocs) = (0u64, 0u64);
                    while Instant::now() < deadline {
                        s.launch_spin(stream, kernel_us)?;
                        launches += 1;
                        let (r, p) = s.try_alloc(4 << 20);
                        if r == CUDA_SUCCESS {
                            allocs += 1;
                            s.free(p)?;
                        }
                        s.sync(stream)?;
                    }
                    Ok((launches, allocs))
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(anyhow::anyhow!("thread panicked")))
            })
            .collect()
    });
    let mut total = (0, 0);
    for r in results {
        let (l, a) = r?;
        total.0 += l;
        total.1 += a;
    }
    println!(
        "threads={threads} launches={} alloc_free_pairs={}",
        total.0, total.1
    );
    Ok(())
}

/// Runs `procs` saturating children of this binary and returns each one's share.
pub fn contend(args: &Args, procs: usize, kernel_us: u64, seconds: f64) -> Result<Vec<f64>> {
    let exe = std::env::current_exe().context("locating own executable")?;
    let via = match args.via {
        Via::Link => "link",
        Via::Dlsym => "dlsym",
        Via::Procaddr => "procaddr",
    };
    let children: Vec<_> = (0..procs)
        .map(|_| {
            let mut c = Command::new(&exe);
            c.args(["--device", &args.device.to_string()]);
            if args.via != Via::Link {
                c.args(["--via", via]);
            }
            c.args(["saturate", "--kernel-us", &kernel_us.to_string()]);
            c.args(["--seconds", &seconds.to_string()]);
            c.stdout(std::process::Stdio::piped());
            c.spawn().context("spawning a saturating child")
        })
        .collect::<Result<_>>()?;
    let mut shares = Vec::new();
    for c in children {
        let out = c.wait_with_output()?;
        let text = String::from_utf8_lossy(&out.stdout);
        if !out.status.success() {
            bail!("saturating child failed ({}): {text}", out.status);
        }
        shares.push(field(&text, "share")?);
    }
    Ok(shares)
}

/// Extracts `key=value` from a line of workload output.
pub fn field(text: &str, key: &str) -> Result<f64> {
    let prefix = format!("{key}=");
    text.split_whitespace()
        .find_map(|w| w.strip_prefix(&prefix))
        .with_context(|| format!("no {key}= in {text:?}"))?
        .parse()
        .with_context(|| format!("bad {key} in {text:?}"))
}

fn check(args: &Args, s: &Session) -> Result<()> {
    let mut failures = 0;
    let mut report = |name: &str, ok: bool, measured: String| {
        println!("{} {name}: {measured}", if ok { "PASS" } else { "FAIL" });
        if !ok {
            failures += 1;
        }
    };
    // 1. Totals agree: cuDeviceTotalMem_v2, cuMemGetInfo_v2 and NVML.
    let total = s.total_mem()?;
    let (_, info_total) = s.mem_info()?;
    let nvml = nvml_view::open()?;
    let devs = nvml_view::devices(&nvml)?;
    let nv = devs
        .get(s.device as usize)
        .context("NVML lacks the device")?;
    report(
        "totals",
        total == info_total && total == nv.total,
        format!(
            "cuDeviceTotalMem={total} cuMemGetInfo.total={info_total} nvml.total={}",
            nv.total
        ),
    );
    // 2. Allocation up to OOM, at capacity.
    let chunk = 1u64 << 30;
    let mut ptrs = Vec::new();
    let refusal = loop {
        let (r, p) = s.try_alloc(chunk);
        if r != CUDA_SUCCESS {
            break r;
        }
        ptrs.push(p);
    };
    let (free_at_oom, _) = s.mem_info()?;
    report(
        "oom-at-capacity",
        refusal == CUDA_ERROR_OUT_OF_MEMORY && free_at_oom < chunk,
        format!(
            "{} x 1GiB then {} with {free_at_oom} bytes free",
            ptrs.len(),
            s.drv.error_name(refusal)
        ),
    );
    // 3. NVML lists this process with its memory.
    let pid = std::process::id();
    let listed = nvml_view::devices(&nvml)?
        .get(s.device as usize)
        .and_then(|d| d.processes.iter().find(|(p, _)| *p == pid).map(|(_, b)| *b));
    let held = ptrs.len() as u64 * chunk;
    report(
        "nvml-process-memory",
        listed.is_some_and(|b| b >= held),
        format!("pid {pid} listed with {listed:?} bytes, holds {held} in allocations"),
    );
    for p in ptrs {
        s.free(p)?;
    }
    // 4. Ten 10 ms kernels enqueue fast, the stream is busy, synchronize takes ~100 ms.
    let stream = s.stream()?;
    let t = Instant::now();
    for _ in 0..10 {
        s.launch_spin(stream, 10_000)?;
    }
    let enqueue_ms = t.elapsed().as_secs_f64() * 1e3;
    let busy = !s.stream_idle(stream)?;
    s.sync(stream)?;
    let sync_ms = t.elapsed().as_secs_f64() * 1e3;
    report(
        "async-enqueue",
        enqueue_ms < 20.0,
        format!("10 launches enqueued in {enqueue_ms:.3} ms"),
    );
    report(
        "stream-query-not-ready",
        busy,
        format!("cuStreamQuery busy={busy}"),
    );
    report(
        "synchronize-100ms",
        (95.0..=150.0).contains(&sync_ms),
        format!("synchronize returned after {sync_ms:.1} ms"),
    );
    // 5. An event pair around a 20 ms kernel.
    let (e0, e1) = (s.event()?, s.event()?);
    s.record(e0, stream)?;
    s.launch_spin(stream, 20_000)?;
    s.record(e1, stream)?;
    let ms = s.elapsed_ms(e0, e1)?;
    report(
        "event-timing-20ms",
        (19.0..=25.0).contains(&ms),
        format!("event pair measured {ms:.3} ms"),
    );
    // 6. Two processes saturating with 5 ms kernels each get about half.
    let shares = contend(args, 2, 5000, 3.0)?;
    let sum: f64 = shares.iter().sum();
    report(
        "two-process-contention",
        shares.iter().all(|s| (0.40..=0.60).contains(s)) && sum <= 1.0,
        format!("shares {shares:.3?}, sum {sum:.3}"),
    );
    println!("checks: {} failed", failures);
    if failures > 0 {
        bail!("{failures} acceptance check(s) failed");
    }
    Ok(())
}
