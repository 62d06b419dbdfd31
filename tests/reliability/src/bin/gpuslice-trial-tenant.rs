//! `gpuslice-trial-tenant`: the tenants of the reliability trials (`docs/reliability.md`).
//!
//! * `churn`: random allocations, frees and `spin` launches until told to stop on stdin, then
//!   reports what it holds (`held=`) and either frees it (`free`) or exits holding it (`keep`,
//!   EOF) — the SIGKILL trials kill some of these at random moments and compare the survivors'
//!   reports with the slice's accounting.
//! * `progress`: launches and synchronises `spin` kernels (with an allocation/free beside each)
//!   for a time and reports every pause in its progress longer than `--gap-ms`, with
//!   CLOCK_MONOTONIC stamps the test compares with arbiter restarts.
//! * `scribble`: writes random bytes (or zeros over the device totals) into a slice's writable
//!   `usage` file for a time — the hostile tenant. Needs no driver.

use anyhow::{bail, Context, Result};
use clap::{Parser, Subcommand, ValueEnum};
use gpuslice_cuda_abi::result::{CUDA_ERROR_OUT_OF_MEMORY, CUDA_SUCCESS};
use gpuslice_reliability::{mono_ns, Rng};
use gpuslice_workloads::driver;
use gpuslice_workloads::session::Session;
use std::io::{BufRead, Write};
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

const MIB: u64 = 1 << 20;

#[derive(Parser)]
#[command(name = "gpuslice-trial-tenant")]
struct Args {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Random alloc / free / launch until a line on stdin; then `held=`; then `free` or `keep`.
    Churn {
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// Largest allocation, in units of 2 MiB.
        #[arg(long, default_value_t = 16)]
        max_units: u64,
        #[arg(long, default_value_t = 100)]
        kernel_us: u64,
    },
    /// Synchronised spin kernels for `seconds`; prints pauses longer than `gap_ms`.
    Progress {
        #[arg(long, default_value_t = 5.0)]
        seconds: f64,
        #[arg(long, default_value_t = 1000)]
        kernel_us: u64,
        /// Held for the whole run.
        #[arg(long, default_value_t = 64)]
        hold_mib: u64,
        /// Allocated and freed beside every kernel.
        #[arg(long, default_value_t = 32)]
        churn_mib: u64,
        #[arg(long, default_value_t = 50)]
        gap_ms: u64,
    },
    /// Hostile writes into `<dir>/usage` for `seconds`.
    Scribble {
        #[arg(long)]
        dir: PathBuf,
        #[arg(long, default_value_t = 10.0)]
        seconds: f64,
        #[arg(long, value_enum, default_value = "random")]
        mode: Mode,
        #[arg(long, default_value_t = 7)]
        seed: u64,
    },
}

#[derive(Clone, Copy, ValueEnum)]
enum Mode {
    /// Random bytes at random offsets and lengths, sometimes the whole file.
    Random,
    /// Zeros over every device total (the targeted attack: "nothing is in use").
    ZeroTotals,
    /// Shrinks the file to a random size and restores it (readers' mappings past the end fault).
    Truncate,
    /// Like `truncate`, always cutting into the per-device words the scheduler reads.
    TruncateHead,
}

fn main() -> Result<()> {
    match Args::parse().cmd {
        Cmd::Churn {
            seed,
            max_units,
            kernel_us,
        } => churn(seed, max_units.max(1), kernel_us),
        Cmd::Progress {
            seconds,
            kernel_us,
            hold_mib,
            churn_mib,
            gap_ms,
        } => progress(seconds, kernel_us, hold_mib, churn_mib, gap_ms),
        Cmd::Scribble {
            dir,
            seconds,
            mode,
            seed,
        } => scribble(&dir, seconds, mode, seed),
    }
}

fn say(line: &str) {
    let mut o = std::io::stdout().lock();
    let _ = writeln!(o, "{line}");
    let _ = o.flush();
}

fn session() -> Result<Session> {
    Session::open(driver::load_dlsym()?, 0)
}

/// Lines from stdin on a channel (EOF closes it).
fn stdin_lines() -> mpsc::Receiver<String> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::stdin().lock().lines() {
            let Ok(l) = line else { break };
            if tx.send(l.trim().to_string()).is_err() {
                break;
            }
        }
    });
    rx
}

fn churn(seed: u64, max_units: u64, kernel_us: u64) -> Result<()> {
    let s = session()?;
    let stream = s.stream()?;
    let lines = stdin_lines();
    let stop = Arc::new(AtomicBool::new(false));
    let mut rng = Rng::new(seed ^ u64::from(std::process::id()));
    let mut held: Vec<(u64, u64)> = Vec::new();
    let (mut allocs, mut frees, mut ooms, mut launches) = (0u64, 0u64, 0u64, 0u64);
    say(&format!("ready pid={}", std::process::id()));
    while !stop.load(Ordering::Relaxed) {
        match lines.try_recv() {
            Ok(_) | Err(mpsc::TryRecvError::Disconnected) => stop.store(true, Ordering::Relaxed),
            Err(mpsc::TryRecvError::Empty) => {}
        }
        match rng.below(10) {
            0..=3 => {
                let bytes = 2 * MIB * (1 + rng.below(max_units));
                let (r, p) = s.try_alloc(bytes);
                match r {
                    CUDA_SUCCESS => {
                        held.push((p, bytes));
                        allocs += 1;
                    }
                    CUDA_ERROR_OUT_OF_MEMORY => ooms += 1,
                    r => bail!("cuMemAlloc({bytes}) failed: {}", s.drv.error_name(r)),
                }
            }
            4..=6 if !held.is_empty() => {
                let i = rng.below(held.len() as u64) as usize;
                let (p, _) = held.swap_remove(i);
                s.free(p)?;
                frees += 1;
            }
            _ => {
                s.launch_spin(stream, kernel_us)?;
                launches += 1;
                if launches % 4 == 0 {
                    s.sync(stream)?;
                }
            }
        }
    }
    s.sync(stream)?;
    let total: u64 = held.iter().map(|h| h.1).sum();
    say(&format!(
        "held={total} allocs={allocs} frees={frees} ooms={ooms} launches={launches}"
    ));
    match lines.recv_timeout(Duration::from_secs(60)) {
        Ok(cmd) if cmd == "free" => {
            for (p, _) in held {
                s.free(p)?;
            }
            say("freed");
        }
        _ => say("kept"),
    }
    Ok(())
}

fn progress(
    seconds: f64,
    kernel_us: u64,
    hold_mib: u64,
    churn_mib: u64,
    gap_ms: u64,
) -> Result<()> {
    let s = session()?;
    let stream = s.stream()?;
    let hold = if hold_mib > 0 {
        let (r, p) = s.try_alloc(hold_mib * MIB);
        s.drv.check("cuMemAlloc(hold)", r)?;
        Some(p)
    } else {
        None
    };
    say(&format!("ready pid={}", std::process::id()));
    let deadline = Instant::now() + Duration::from_secs_f64(seconds);
    let gap_ns = gap_ms * 1_000_000;
    let (mut kernels, mut ooms, mut max_gap) = (0u64, 0u64, 0u64);
    let mut last = mono_ns();
    let mut gaps = Vec::new();
    while Instant::now() < deadline {
        s.launch_spin(stream, kernel_us)?;
        s.sync(stream)?;
        if churn_mib > 0 {
            let (r, p) = s.try_alloc(churn_mib * MIB);
            match r {
                CUDA_SUCCESS => s.free(p)?,
                CUDA_ERROR_OUT_OF_MEMORY => ooms += 1,
                r => bail!("cuMemAlloc(churn) failed: {}", s.drv.error_name(r)),
            }
        }
        kernels += 1;
        let now = mono_ns();
        let gap = now - last;
        max_gap = max_gap.max(gap);
        if gap > gap_ns {
            gaps.push((last, now));
        }
        last = now;
    }
    if let Some(p) = hold {
        s.free(p)?;
    }
    for (a, b) in &gaps {
        say(&format!("gap start_ns={a} end_ns={b}"));
    }
    say(&format!(
        "kernels={kernels} ooms={ooms} max_gap_ms={:.3}",
        max_gap as f64 / 1e6
    ));
    Ok(())
}

fn scribble(dir: &std::path::Path, seconds: f64, mode: Mode, seed: u64) -> Result<()> {
    let path = dir.join(gpuslice_region::layout::USAGE_FILE);
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&path)
        .with_context(|| format!("opening {}", path.display()))?;
    let len = f.metadata()?.len();
    let mut rng = Rng::new(seed);
    let deadline = Instant::now() + Duration::from_secs_f64(seconds);
    let (mut writes, mut bytes) = (0u64, 0u64);
    let mut buf = vec![0u8; len as usize];
    while Instant::now() < deadline {
        let (off, n) = match mode {
            Mode::Random => {
                let whole = rng.below(1000) == 0;
                let (off, n) = if whole {
                    (0, len)
                } else {
                    let n = 1 + rng.below(4096);
                    (rng.below(len), n)
                };
                let n = n.min(len - off) as usize;
                for b in buf[..n].iter_mut() {
                    *b = rng.next() as u8;
                }
                (off, n)
            }
            // DeviceUsage entries: 16 × 64 bytes after the 64-byte header; total is word 0.
            Mode::Truncate | Mode::TruncateHead => (0, 0),
            Mode::ZeroTotals => {
                let dev = rng.below(16);
                buf[..8].fill(0);
                (64 + dev * 64, 8)
            }
        };
        if let Mode::Truncate | Mode::TruncateHead = mode {
            let cut = match mode {
                Mode::TruncateHead => rng.below(64 + 16 * 64),
                _ => rng.below(len),
            };
            f.set_len(cut)?;
            std::thread::sleep(Duration::from_micros(rng.below(20_000)));
            f.set_len(len)?;
            writes += 1;
            continue;
        }
        f.write_all_at(&buf[..n], off)?;
        writes += 1;
        bytes += n as u64;
    }
    say(&format!("writes={writes} bytes={bytes}"));
    Ok(())
}
