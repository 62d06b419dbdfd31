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
//! * `rounds`: the honest tenant of the fork-wave trial: allocates until refused, reports how
//!   much it got (`round=`), frees everything, again, until a line on stdin; then `done` and
//!   it exits when its stdin closes.
//! * `forker`: the forking tenant of that trial: waves of up to `--max-procs` `hog` children
//!   (fork/exec of this binary), some SIGKILLed at random moments mid-wave; one `wave=` line
//!   per wave, a `waves=` summary, then it waits for a line on stdin. Makes no driver call.
//! * `hog`: one child of a wave: creates its context (reports `ctx=refused` if that is refused
//!   with `CUDA_ERROR_OUT_OF_MEMORY`), allocates random chunks up to a random amount or a
//!   refusal, reports, holds it until its stdin closes, then exits without freeing (the driver
//!   frees at exit) or after freeing.

use anyhow::{bail, Context, Result};
use clap::{Parser, Subcommand, ValueEnum};
use gpuslice_cuda_abi::result::{CUDA_ERROR_OUT_OF_MEMORY, CUDA_SUCCESS};
use gpuslice_reliability::{field, mono_ns, Rng};
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
    /// Allocate to a refusal, report, free, again — until a line on stdin.
    Rounds {
        /// First chunk size; halved at each refusal down to 1 MiB.
        #[arg(long, default_value_t = 256)]
        chunk_mib: u64,
        /// Time holding the full amount before freeing it.
        #[arg(long, default_value_t = 2)]
        hold_ms: u64,
    },
    /// Waves of `hog` children for `seconds`.
    Forker {
        #[arg(long, default_value_t = 60.0)]
        seconds: f64,
        #[arg(long, default_value_t = 32)]
        max_procs: u64,
        /// Largest amount one child tries to hold.
        #[arg(long, default_value_t = 2048)]
        max_mib: u64,
        /// Children SIGKILLed per wave, in percent (each at a random 0–40 ms after the spawns).
        #[arg(long, default_value_t = 25)]
        kill_pct: u64,
        /// Passed to every child (see `hog`).
        #[arg(long, default_value_t = 0)]
        linger_ms: u64,
        /// Passed to every child (see `hog`).
        #[arg(long, default_value_t = 0)]
        leader_first_ms: u64,
        #[arg(long, default_value_t = 1)]
        seed: u64,
    },
    /// One child of a wave (see the module comment).
    Hog {
        #[arg(long, default_value_t = 1)]
        seed: u64,
        #[arg(long, default_value_t = 2048)]
        max_mib: u64,
        /// Lingers this long in an exit handler that runs after the interposer's own (a slow
        /// destructor, a flush): the process and its context live on.
        #[arg(long, default_value_t = 0)]
        linger_ms: u64,
        /// Ends with the main thread exiting alone while another thread lives on this long
        /// before ending the process (what a SIGKILL of a many-threaded process looks like
        /// when its other threads are slow to die): meanwhile `/proc` shows the leader as a
        /// zombie, but the process still holds its context and memory.
        #[arg(long, default_value_t = 0)]
        leader_first_ms: u64,
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
        Cmd::Rounds { chunk_mib, hold_ms } => rounds(chunk_mib.max(1), hold_ms),
        Cmd::Forker {
            seconds,
            max_procs,
            max_mib,
            kill_pct,
            linger_ms,
            leader_first_ms,
            seed,
        } => forker(
            seconds,
            max_procs.max(1),
            max_mib,
            kill_pct,
            [linger_ms, leader_first_ms],
            seed,
        ),
        Cmd::Hog {
            seed,
            max_mib,
            linger_ms,
            leader_first_ms,
        } => hog(seed, max_mib, linger_ms, leader_first_ms),
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

fn rounds(chunk_mib: u64, hold_ms: u64) -> Result<()> {
    let s = session()?;
    let lines = stdin_lines();
    say(&format!("ready pid={}", std::process::id()));
    let mut round = 0u64;
    while let Err(mpsc::TryRecvError::Empty) = lines.try_recv() {
        let (mut held, mut bytes, mut chunk) = (Vec::new(), 0u64, chunk_mib * MIB);
        let t0 = mono_ns();
        let last = loop {
            let (r, p) = s.try_alloc(chunk);
            match r {
                CUDA_SUCCESS => {
                    held.push(p);
                    bytes += chunk;
                }
                CUDA_ERROR_OUT_OF_MEMORY if chunk > MIB => chunk /= 2,
                r => break r,
            }
        };
        say(&format!(
            "round={round} bytes={bytes} err={} t_ns={t0}",
            s.drv.error_name(last)
        ));
        std::thread::sleep(Duration::from_millis(hold_ms));
        for p in held {
            s.free(p)?;
        }
        round += 1;
    }
    say(&format!("done rounds={round}"));
    // Holding only its context until its stdin closes (the trial reads the slice's usage).
    let _ = lines.recv();
    Ok(())
}

/// One child of a wave, as the forker sees it.
struct Child {
    proc: std::process::Child,
    out: std::io::BufReader<std::process::ChildStdout>,
    killed: bool,
}

/// Waits for the children of a wave; returns how many were killed by someone else than the
/// forker (the backstop).
fn reap(kids: Vec<Child>) -> Result<u64> {
    let mut lost = 0;
    for mut c in kids {
        let st = c.proc.wait()?;
        if !c.killed && !st.success() {
            if std::os::unix::process::ExitStatusExt::signal(&st).is_none() {
                bail!("hog {} failed: {st}", c.proc.id());
            }
            lost += 1;
        }
    }
    Ok(lost)
}

fn forker(
    seconds: f64,
    max_procs: u64,
    max_mib: u64,
    kill_pct: u64,
    [linger_ms, leader_first_ms]: [u64; 2],
    seed: u64,
) -> Result<()> {
    use std::io::BufRead as _;
    let exe = std::env::current_exe()?;
    let mut rng = Rng::new(seed);
    let deadline = Instant::now() + Duration::from_secs_f64(seconds);
    say(&format!("ready pid={}", std::process::id()));
    let mut totals = [0u64; 6];
    let (mut wave, mut prev) = (0u64, Vec::new());
    while Instant::now() < deadline {
        // Every fourth wave (the first included) is a full one.
        let k = if wave.is_multiple_of(4) {
            max_procs
        } else {
            1 + rng.below(max_procs)
        };
        let t0 = Instant::now();
        let mut kids = Vec::new();
        for _ in 0..k {
            let mut proc = std::process::Command::new(&exe)
                .args(["hog", "--seed", &rng.next().to_string()])
                .args(["--max-mib", &max_mib.to_string()])
                .args(["--linger-ms", &linger_ms.to_string()])
                .args(["--leader-first-ms", &leader_first_ms.to_string()])
                .stdin(std::process::Stdio::piped())
                .stdout(std::process::Stdio::piped())
                .spawn()
                .context("spawning a hog")?;
            let out = std::io::BufReader::new(proc.stdout.take().context("hog stdout")?);
            kids.push(Child {
                proc,
                out,
                killed: false,
            });
        }
        // SIGKILLs at random moments: during start-up, context creation, allocation or holding.
        let mut plan: Vec<(u64, usize)> = (0..kids.len())
            .map(|i| (rng.below(100) < kill_pct, rng.below(40_000), i))
            .filter(|k| k.0)
            .map(|(_, at, i)| (at, i))
            .collect();
        plan.sort();
        for (at_us, i) in plan {
            let at = Duration::from_micros(at_us);
            if let Some(d) = at.checked_sub(t0.elapsed()) {
                std::thread::sleep(d);
            }
            kids[i].proc.kill()?;
            kids[i].killed = true;
        }
        // The others report; then all hold together until their stdin closes.
        let (mut ok, mut refused, mut ooms, mut held) = (0u64, 0u64, 0u64, 0u64);
        for c in kids.iter_mut().filter(|c| !c.killed) {
            let mut line = String::new();
            c.out.read_line(&mut line)?;
            if line.is_empty() {
                // Killed by someone else before it reported: counted below.
            } else if line.starts_with("ctx=refused") {
                refused += 1;
            } else if line.starts_with("ctx=ok") {
                ok += 1;
                held += field(&line, "held").unwrap_or(0);
                ooms += field(&line, "ooms").unwrap_or(0);
            } else {
                bail!("hog {} reported {line:?}", c.proc.id());
            }
        }
        let killed = kids.iter().filter(|c| c.killed).count() as u64;
        // This wave's children exit while the next one starts (waves overlap, as restarting
        // workers do); the previous wave's are reaped now.
        for c in kids.iter_mut() {
            drop(c.proc.stdin.take());
        }
        let lost = reap(std::mem::replace(&mut prev, kids))?;
        say(&format!(
            "wave={wave} procs={k} ctx_ok={ok} ctx_refused={refused} alloc_ooms={ooms} \
             killed={killed} lost={lost} held={held} ms={}",
            t0.elapsed().as_millis()
        ));
        for (t, v) in totals.iter_mut().zip([k, ok, refused, ooms, killed, lost]) {
            *t += v;
        }
        wave += 1;
    }
    totals[5] += reap(prev)?;
    let [procs, ok, refused, ooms, killed, lost] = totals;
    say(&format!(
        "waves={wave} procs={procs} ctx_ok={ok} ctx_refused={refused} alloc_ooms={ooms} \
         killed={killed} lost={lost}"
    ));
    // Its slice lives as long as it does: the trial checks what is left, then lets it go.
    let mut line = String::new();
    let _ = std::io::stdin().lock().read_line(&mut line);
    Ok(())
}

static LINGER_MS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

extern "C" fn linger() {
    std::thread::sleep(Duration::from_millis(LINGER_MS.load(Ordering::Relaxed)));
}

fn hog(seed: u64, max_mib: u64, linger_ms: u64, leader_first_ms: u64) -> Result<()> {
    if linger_ms > 0 {
        LINGER_MS.store(linger_ms, Ordering::Relaxed);
        // Registered before the interposer's handler (at its first driver call), so it runs
        // after it: exit handlers run in reverse order.
        // SAFETY: registering a plain extern "C" handler that only sleeps.
        unsafe { libc::atexit(linger) };
    }
    let drv = driver::load_dlsym()?;
    let mut rng = Rng::new(seed);
    // SAFETY: cuInit takes flags by value.
    drv.check("cuInit", unsafe { (drv.init)(0) })?;
    let mut dev = 0;
    // SAFETY: valid out-pointer to a local.
    drv.check("cuDeviceGet", unsafe { (drv.device_get)(&mut dev, 0) })?;
    let mut ctx = std::ptr::null_mut();
    // SAFETY: valid out-pointer; `dev` came from cuDeviceGet.
    match unsafe { (drv.primary_ctx_retain)(&mut ctx, dev) } {
        CUDA_SUCCESS => {}
        CUDA_ERROR_OUT_OF_MEMORY => {
            say("ctx=refused");
            return Ok(());
        }
        r => bail!("cuDevicePrimaryCtxRetain: {}", drv.error_name(r)),
    }
    // SAFETY: `ctx` is the primary context just retained.
    drv.check("cuCtxSetCurrent", unsafe { (drv.ctx_set_current)(ctx) })?;
    let target = rng.below(max_mib + 1) * MIB;
    let (mut held, mut bytes, mut ooms) = (Vec::new(), 0u64, 0u64);
    while bytes < target {
        let chunk = (MIB * (1 + rng.below(128))).min(target - bytes);
        let mut p = 0;
        // SAFETY: valid out-pointer to a local.
        match unsafe { (drv.mem_alloc)(&mut p, chunk as usize) } {
            CUDA_SUCCESS => {
                held.push(p);
                bytes += chunk;
            }
            CUDA_ERROR_OUT_OF_MEMORY => {
                ooms += 1;
                break;
            }
            r => bail!("cuMemAlloc({chunk}): {}", drv.error_name(r)),
        }
    }
    say(&format!("ctx=ok held={bytes} ooms={ooms}"));
    let mut line = String::new();
    let _ = std::io::stdin().lock().read_line(&mut line);
    // Half exit holding their memory and context (the driver frees them at exit), half free
    // their allocations first.
    if seed.is_multiple_of(2) {
        for p in held {
            // SAFETY: `p` came from cuMemAlloc and is freed once.
            drv.check("cuMemFree", unsafe { (drv.mem_free)(p) })?;
        }
    }
    if leader_first_ms > 0 {
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(leader_first_ms));
            // SAFETY: ends the whole process at once, as a SIGKILL would (no exit handlers).
            unsafe { libc::_exit(0) };
        });
        // SAFETY: exit(2) of the calling thread alone (not exit_group): the process lives on
        // in its other threads. Nothing of Rust's runs after it on this thread.
        unsafe { libc::syscall(libc::SYS_exit, 0) };
    }
    Ok(())
}
