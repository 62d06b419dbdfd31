//! `cargo xtask fuzz`: builds the cargo-fuzz targets in `fuzz/` (its own workspace) and runs each
//! for a set time on its committed corpus plus a scratch corpus, then reports per target the
//! executions, speed, corpus size and outcome; any crash, hang (libFuzzer `-timeout=10`) or
//! out-of-memory fails the command. `smoke` (the CI suite `fuzz`) only replays the committed
//! corpus (`-runs=0`). Installs what it needs when missing: the nightly toolchain
//! (`rustup toolchain install nightly --profile minimal`) and cargo-fuzz (`cargo install
//! cargo-fuzz --locked`). Reference: `docs/fuzzing.md`.

use crate::shell::{exec, root, target_dir};
use anyhow::{bail, Context, Result};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

/// Every target, in the order they run (one file each under `fuzz/fuzz_targets/`).
pub const TARGETS: [&str; 8] = [
    "quantity",
    "request",
    "hook_state",
    "spec_edit",
    "cdi_spec",
    "ldcache",
    "engine_config",
    "region_usage",
];

/// Seconds per target when `--time` is not given.
pub const DEFAULT_SECS: u64 = 600;

/// What one run of one target did.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Report {
    /// Total executions (`stat::number_of_executed_units`).
    pub execs: u64,
    /// Executions per second (`stat::average_exec_per_sec`).
    pub execs_per_sec: u64,
    /// New corpus entries found (`stat::new_units_added`).
    pub new_units: u64,
    /// Peak resident memory, MiB (`stat::peak_rss_mb`).
    pub peak_rss_mb: u64,
    /// A crash, hang or out-of-memory: libFuzzer's own words.
    pub failure: Option<String>,
}

impl Report {
    /// Takes one line of libFuzzer's output into account.
    pub fn feed(&mut self, line: &str) {
        let stat = |name: &str| {
            line.strip_prefix(name)
                .and_then(|r| r.trim().trim_start_matches(':').trim().parse::<u64>().ok())
        };
        if let Some(v) = stat("stat::number_of_executed_units") {
            self.execs = v;
        } else if let Some(v) = stat("stat::average_exec_per_sec") {
            self.execs_per_sec = v;
        } else if let Some(v) = stat("stat::new_units_added") {
            self.new_units = v;
        } else if let Some(v) = stat("stat::peak_rss_mb") {
            self.peak_rss_mb = v;
        }
        if self.failure.is_none() {
            for (needle, what) in [
                ("ERROR: libFuzzer: timeout", "timeout (hang)"),
                ("ERROR: libFuzzer: out-of-memory", "out of memory"),
                ("ERROR: libFuzzer: deadly signal", "crash"),
                ("ERROR: libFuzzer: fuzz target exited", "fuzz target exited"),
                ("ERROR: AddressSanitizer", "crash (AddressSanitizer)"),
                ("panicked at", "crash (panic)"),
            ] {
                if line.contains(needle) {
                    self.failure = Some(format!("{what}: {}", line.trim()));
                    break;
                }
            }
        }
    }
}

/// Options of `cargo xtask fuzz`.
#[derive(Debug, Clone)]
pub struct Options {
    /// Seconds per target.
    pub secs: u64,
    /// Targets (all when empty).
    pub targets: Vec<String>,
    /// cargo-fuzz sanitizer (`address` or `none`).
    pub sanitizer: String,
}

fn fuzz_dir() -> PathBuf {
    root().join("fuzz")
}

/// `cargo +nightly`, from the fuzz directory.
fn cargo_nightly() -> Command {
    let mut c = Command::new("cargo");
    c.arg("+nightly").current_dir(fuzz_dir());
    // The workspace's `cargo xtask` exports CARGO; the nightly cargo must be found by rustup.
    c.env_remove("CARGO")
        .env_remove("RUSTC")
        .env_remove("RUSTUP_TOOLCHAIN");
    c
}

fn quiet_ok(c: &mut Command) -> bool {
    c.stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Installs the nightly toolchain and cargo-fuzz when they are missing.
pub fn ensure_tools() -> Result<()> {
    if !quiet_ok(Command::new("rustup").args(["run", "nightly", "rustc", "--version"])) {
        eprintln!("fuzz: installing the nightly toolchain (cargo-fuzz's sanitizers need it)");
        exec(Command::new("rustup").args([
            "toolchain",
            "install",
            "nightly",
            "--profile",
            "minimal",
        ]))?;
    }
    if !quiet_ok(cargo_nightly().args(["fuzz", "--version"])) {
        let t = Instant::now();
        eprintln!("fuzz: installing cargo-fuzz (cargo install cargo-fuzz --locked)");
        let mut c = Command::new("cargo");
        c.args(["install", "cargo-fuzz", "--locked"])
            .env_remove("RUSTUP_TOOLCHAIN")
            .env("CARGO_TARGET_DIR", target_dir().join("cargo-fuzz-install"));
        exec(&mut c)?;
        eprintln!(
            "fuzz: cargo-fuzz installed in {:.0} s",
            t.elapsed().as_secs_f64()
        );
    }
    Ok(())
}

fn build(sanitizer: &str, targets: &[String]) -> Result<()> {
    for t in targets {
        let mut c = cargo_nightly();
        c.args(["fuzz", "build", "--sanitizer", sanitizer, t]);
        exec(&mut c)?;
    }
    Ok(())
}

fn selected(targets: &[String]) -> Result<Vec<String>> {
    if targets.is_empty() {
        return Ok(TARGETS.iter().map(|s| s.to_string()).collect());
    }
    for t in targets {
        if !TARGETS.contains(&t.as_str()) {
            bail!(
                "unknown fuzz target {t:?}; targets are: {}",
                TARGETS.join(", ")
            );
        }
    }
    Ok(targets.to_vec())
}

fn count_files(dir: &Path) -> usize {
    std::fs::read_dir(dir).map_or(0, |d| d.flatten().filter(|e| e.path().is_file()).count())
}

/// Removes scratch directories the targets left in `/dev/shm` or the temp dir
/// (`gpuslice-fuzz-<kind>-<pid>`) whose process is gone.
fn clean_scratch() {
    for base in [PathBuf::from("/dev/shm"), std::env::temp_dir()] {
        let Ok(entries) = std::fs::read_dir(&base) else {
            continue;
        };
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().to_string();
            let Some(rest) = name.strip_prefix("gpuslice-fuzz-") else {
                continue;
            };
            let pid = rest.rsplit('-').next().and_then(|p| p.parse::<u32>().ok());
            if let Some(pid) = pid {
                if !Path::new(&format!("/proc/{pid}")).exists() {
                    let _ = std::fs::remove_dir_all(e.path());
                }
            }
        }
    }
}

/// Runs one target; `secs = None` replays the committed corpus only.
fn run_target(sanitizer: &str, target: &str, secs: Option<u64>) -> Result<(Report, usize, f64)> {
    let committed = fuzz_dir().join("corpus").join(target);
    let work = target_dir().join("fuzz-work");
    let scratch = work.join("corpus").join(target);
    let artifacts = work.join("artifacts").join(target);
    std::fs::create_dir_all(&scratch).context("scratch corpus")?;
    std::fs::create_dir_all(&artifacts).context("artifacts dir")?;
    let mut c = cargo_nightly();
    c.args(["fuzz", "run", "--sanitizer", sanitizer, target]);
    if secs.is_some() {
        // New inputs go to the first directory: the scratch one, never the committed corpus.
        c.arg(&scratch);
    }
    c.arg(&committed).arg("--");
    match secs {
        Some(s) => c.arg(format!("-max_total_time={s}")),
        None => c.arg("-runs=0"),
    };
    c.args(["-timeout=10", "-rss_limit_mb=4096", "-print_final_stats=1"]);
    c.arg(format!("-artifact_prefix={}/", artifacts.display()));
    let dict = fuzz_dir().join("dicts").join(format!("{target}.dict"));
    if dict.is_file() {
        c.arg(format!("-dict={}", dict.display()));
    }
    eprintln!("$ {c:?}");
    let t = Instant::now();
    let mut child = c
        .stderr(Stdio::piped())
        .spawn()
        .context("starting cargo fuzz run")?;
    let mut report = Report::default();
    if let Some(err) = child.stderr.take() {
        for line in BufReader::new(err).lines().map_while(std::io::Result::ok) {
            report.feed(&line);
            // Progress lines (`#123 NEW …`) would drown the rest; keep pulses and everything else.
            let progress =
                line.starts_with('#') && !line.contains("pulse") && !line.contains("DONE");
            if !progress {
                eprintln!("{line}");
            }
        }
    }
    let status = child.wait().context("waiting for cargo fuzz run")?;
    let wall = t.elapsed().as_secs_f64();
    clean_scratch();
    if !status.success() && report.failure.is_none() {
        report.failure = Some(format!("cargo fuzz run failed: {status}"));
    }
    let corpus = count_files(&committed)
        + if secs.is_some() {
            count_files(&scratch)
        } else {
            0
        };
    Ok((report, corpus, wall))
}

fn table(rows: &[(String, Report, usize, f64)]) -> String {
    let mut out =
        String::from("target          seconds   executions    exec/s   corpus   new  outcome\n");
    for (t, r, corpus, wall) in rows {
        out.push_str(&format!(
            "{t:<14} {wall:>8.0} {:>12} {:>9} {corpus:>8} {:>5}  {}\n",
            r.execs,
            r.execs_per_sec,
            r.new_units,
            r.failure.as_deref().unwrap_or("ok")
        ));
    }
    out
}

fn finish(rows: &[(String, Report, usize, f64)]) -> Result<()> {
    eprintln!("\n{}", table(rows));
    let bad: Vec<&str> = rows
        .iter()
        .filter(|r| r.1.failure.is_some())
        .map(|r| r.0.as_str())
        .collect();
    if !bad.is_empty() {
        bail!(
            "fuzz: {} failed; inputs under {}",
            bad.join(", "),
            target_dir().join("fuzz-work/artifacts").display()
        );
    }
    Ok(())
}

/// `cargo xtask fuzz`: every selected target for `secs` seconds.
pub fn run(opts: &Options) -> Result<()> {
    let targets = selected(&opts.targets)?;
    ensure_tools()?;
    build(&opts.sanitizer, &targets)?;
    let mut rows = Vec::new();
    for t in &targets {
        eprintln!("\n=== fuzz {t} ({} s) ===", opts.secs);
        let (r, corpus, wall) = run_target(&opts.sanitizer, t, Some(opts.secs))?;
        rows.push((t.clone(), r, corpus, wall));
    }
    finish(&rows)
}

/// The CI smoke: every target replays its committed corpus once (a regression check of every
/// kept input, with the same AddressSanitizer build `cargo xtask fuzz` uses, so the two share it).
pub fn smoke() -> Result<()> {
    exec(Command::new("cargo").args([
        "fmt",
        "--check",
        "--manifest-path",
        &fuzz_dir().join("Cargo.toml").display().to_string(),
    ]))?;
    ensure_tools()?;
    let targets = selected(&[])?;
    build("address", &targets)?;
    let mut rows = Vec::new();
    for t in &targets {
        let (r, corpus, wall) = run_target("address", t, None)?;
        rows.push((t.clone(), r, corpus, wall));
    }
    finish(&rows)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn report_reads_final_stats_and_failures() {
        let mut r = Report::default();
        for l in [
            "#1024\tpulse  cov: 10 ft: 12 corp: 3/30b exec/s: 512 rss: 40Mb",
            "stat::number_of_executed_units: 123456",
            "stat::average_exec_per_sec:     2057",
            "stat::new_units_added:          17",
            "stat::peak_rss_mb:              61",
        ] {
            r.feed(l);
        }
        assert_eq!(
            (
                r.execs,
                r.execs_per_sec,
                r.new_units,
                r.peak_rss_mb,
                r.failure.clone()
            ),
            (123456, 2057, 17, 61, None)
        );
        r.feed("==12== ERROR: libFuzzer: timeout after 11 seconds");
        r.feed("thread '<unnamed>' panicked at src/x.rs:1:1");
        assert!(r.failure.as_deref().unwrap().starts_with("timeout (hang)"));
    }

    #[test]
    fn unknown_target_is_refused_by_name() {
        let e = selected(&["nope".to_string()]).unwrap_err().to_string();
        assert!(e.contains("\"nope\"") && e.contains("region_usage"), "{e}");
        assert_eq!(selected(&[]).unwrap().len(), TARGETS.len());
    }

    #[test]
    fn every_target_has_a_file_and_a_corpus() {
        for t in TARGETS {
            assert!(
                fuzz_dir().join(format!("fuzz_targets/{t}.rs")).is_file(),
                "{t}"
            );
            assert!(
                count_files(&fuzz_dir().join("corpus").join(t)) > 0,
                "{t} corpus"
            );
        }
    }
}
