//! `cargo xtask test clients`: NVIDIA's own driver-API clients from PyPI (`cuda-python`'s
//! `cuda.bindings.driver`, `numba-cuda`, `nvidia-ml-py`), unmodified, against the simulated GPU,
//! with and without the interposer (`docs/clients.md`).
//!
//! The suite builds the debug simulator and interposer, keeps a scratch virtual environment under
//! `<target>/clients/venv` (reused while it matches `tests/clients/requirements.txt` and the
//! Python it was made with; rebuilt otherwise), and runs each script of `tests/clients/` three
//! times, each in a fresh simulated node: bare, under the interposer without a request
//! (pass-through), and under the interposer with `GPUSLICE_MEMORY`. The pass-through run's
//! results must equal the bare run's line for line. Nothing is skipped: a missing Python, a
//! failed install or a skipped test fails the suite.

use crate::shell::{exec, is_root, root, target_dir};
use anyhow::{bail, ensure, Context, Result};
use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// The scripts, one job each.
const SCRIPTS: [&str; 6] = [
    "test_totals.py",
    "test_alloc.py",
    "test_pool.py",
    "test_vmm.py",
    "test_numba.py",
    "test_pynvml.py",
];

/// The simulated device every run gets (a private node, so the defaults of the machine's
/// environment do not matter).
const DEVICES: &str = "name=NVIDIA H100 80GB HBM3,mem=80Gi,sms=132,cc=9.0";
const DEVICE_BYTES: u64 = 80 << 30;
/// The cap of the capped runs, as `GPUSLICE_MEMORY` and in bytes.
const CAP: &str = "1Gi";
const CAP_BYTES: u64 = 1 << 30;

/// Longest one script may run before it is killed (they take about a second).
const SCRIPT_TIMEOUT: Duration = Duration::from_secs(300);

#[derive(Clone, Copy, PartialEq)]
enum Mode {
    Bare,
    Passthrough,
    Capped,
}

impl Mode {
    fn name(self) -> &'static str {
        match self {
            Mode::Bare => "bare",
            Mode::Passthrough => "passthrough",
            Mode::Capped => "capped",
        }
    }
}

/// Entry point of the suite, once the debug simulator and interposer are built.
pub fn run() -> Result<()> {
    let started = Instant::now();
    let debug = target_dir().join("debug");
    let work = target_dir().join("clients");
    let lib = sim_lib_dir(&debug, &work.join("lib"))?;
    let interposer = debug.join("libgpuslice.so");
    ensure!(
        interposer.is_file(),
        "{} missing after the build",
        interposer.display()
    );
    let requirements = root().join("tests/clients/requirements.txt");
    let venv = work.join("venv");
    let pins = ensure_venv(&venv, &requirements)?;

    // Per run of the suite: state files and result files of this run only.
    let scratch = work.join(format!("run-{}", std::process::id()));
    let _ = fs::remove_dir_all(&scratch);
    fs::create_dir_all(&scratch).with_context(|| format!("creating {}", scratch.display()))?;
    // A host running the arbiter (or a container of a slice) may have slice files at the
    // interposer's default directory; the standalone cap is what is tested here.
    let slice_dir = Path::new(gpuslice_region::layout::CONTAINER_SLICE_DIR)
        .join(gpuslice_region::layout::LIMITS_FILE)
        .exists()
        .then(|| scratch.join("no-slice"));

    let mut failures = Vec::new();
    let mut rows = Vec::new();
    for script in SCRIPTS {
        let mut checks = Vec::new();
        let mut results = Vec::new();
        for mode in [Mode::Bare, Mode::Passthrough, Mode::Capped] {
            let tag = format!("{} [{}]", script, mode.name());
            eprintln!("\n--- clients: {tag}");
            match run_script(
                &venv,
                &lib,
                &interposer,
                &scratch,
                slice_dir.as_deref(),
                script,
                mode,
            ) {
                Ok(lines) if lines.is_empty() => {
                    failures.push(format!("{tag}: no check reported a result"));
                    results.push(lines);
                }
                Ok(lines) => {
                    checks.push(format!("{} {}", mode.name(), lines.len()));
                    results.push(lines);
                }
                Err(e) => {
                    failures.push(format!("{tag}: {e:#}"));
                    results.push(Vec::new());
                }
            }
        }
        if !results[0].is_empty() && results[0] != results[1] {
            failures.push(format!(
                "{script}: without a request the interposer changed what the client saw:\n  \
                 bare:        {:?}\n  passthrough: {:?}",
                results[0], results[1]
            ));
        }
        rows.push((script, checks.join(", "), results));
    }

    println!("\nclients: {}", pins.join(", "));
    println!(
        "clients: each script in a fresh simulated node ({DEVICES}): bare, under \
         libgpuslice.so without a request (must equal bare), and with GPUSLICE_MEMORY={CAP}"
    );
    for (script, checks, results) in &rows {
        println!("clients: {script:<15} checks passed: {checks}");
        for line in &results[0] {
            println!("clients:   bare = passthrough: {line}");
        }
        for line in &results[2] {
            println!("clients:   capped {CAP}: {line}");
        }
    }
    let _ = fs::remove_dir_all(&scratch);
    println!(
        "clients: {} script runs in {:.1} s",
        SCRIPTS.len() * 3,
        started.elapsed().as_secs_f64()
    );
    if !failures.is_empty() {
        bail!(
            "{} clients run(s) failed:\n{}",
            failures.len(),
            failures.join("\n")
        );
    }
    Ok(())
}

/// A directory holding the built simulator under the driver's sonames.
fn sim_lib_dir(debug: &Path, dir: &Path) -> Result<PathBuf> {
    fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    for (built, soname) in [
        ("libcuda.so", "libcuda.so.1"),
        ("libnvidia_ml.so", "libnvidia-ml.so.1"),
    ] {
        let from = debug.join(built);
        ensure!(from.is_file(), "{} missing after the build", from.display());
        let to = dir.join(soname);
        let _ = fs::remove_file(&to);
        std::os::unix::fs::symlink(&from, &to)
            .with_context(|| format!("linking {} to {}", to.display(), from.display()))?;
    }
    Ok(dir.to_path_buf())
}

/// `name==version` pins of a requirements file, names normalised as pip does.
fn pins(requirements: &str) -> Result<BTreeSet<String>> {
    let mut set = BTreeSet::new();
    for line in requirements.lines() {
        let line = line.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        let Some((name, version)) = line.split_once("==") else {
            bail!("requirements line {line:?} is not pinned with ==");
        };
        set.insert(format!("{}=={}", normalise(name), version.trim()));
    }
    Ok(set)
}

fn normalise(name: &str) -> String {
    name.trim().to_ascii_lowercase().replace(['_', '.'], "-")
}

/// A Python with `venv` and `ensurepip` (`GPUSLICE_CLIENTS_PYTHON`, else `python3`, which is
/// installed with apt-get when missing and root on Debian).
fn python() -> Result<String> {
    let chosen = std::env::var("GPUSLICE_CLIENTS_PYTHON").ok();
    let python = chosen.clone().unwrap_or_else(|| "python3".into());
    let probe = |py: &str| {
        Command::new(py)
            .args([
                "-c",
                "import sys, venv, ensurepip; assert sys.version_info >= (3, 10); \
                 print(sys.version.split()[0])",
            ])
            .output()
            .ok()
            .filter(|o| o.status.success())
    };
    if probe(&python).is_none()
        && chosen.is_none()
        && is_root()
        && Path::new("/usr/bin/apt-get").exists()
    {
        eprintln!("venv: {python} lacks venv/ensurepip: installing python3-venv");
        exec(Command::new("apt-get").args(["-q", "update"]))?;
        exec(
            Command::new("apt-get")
                .args(["-q", "-y", "install", "python3", "python3-venv"])
                .env("DEBIAN_FRONTEND", "noninteractive"),
        )?;
    }
    let Some(out) = probe(&python) else {
        bail!(
            "{python}: no Python >= 3.10 with the venv and ensurepip modules \
             (Debian: apt-get install python3-venv; or set GPUSLICE_CLIENTS_PYTHON)"
        );
    };
    eprintln!(
        "venv: Python {} ({python})",
        String::from_utf8_lossy(&out.stdout).trim()
    );
    Ok(python)
}

/// Makes (or reuses) the clients' virtual environment; returns the pins it holds.
fn ensure_venv(venv: &Path, requirements: &Path) -> Result<Vec<String>> {
    let pinned = pinned_venv(venv, requirements)?;
    Ok(["cuda-bindings", "numba-cuda", "nvidia-ml-py", "pytest"]
        .iter()
        .filter_map(|n| pinned.iter().find(|p| p.starts_with(&format!("{n}=="))))
        .cloned()
        .collect())
}

/// Makes (or reuses) a virtual environment holding exactly the pins of `requirements` (binary
/// wheels only); returns them. Used by the clients suite and by the zig linker tools
/// ([`crate::zig`]).
pub fn pinned_venv(venv: &Path, requirements: &Path) -> Result<BTreeSet<String>> {
    let wanted = fs::read_to_string(requirements)
        .with_context(|| format!("reading {}", requirements.display()))?;
    let pinned = pins(&wanted)?;
    let python = python()?;
    let version = Command::new(&python)
        .args(["-c", "import sys; print(sys.executable, sys.version)"])
        .output()
        .context("asking python3 its version")?;
    let stamp_text = format!("{}\n{wanted}", String::from_utf8_lossy(&version.stdout));
    let stamp = venv.join(".gpuslice-complete");
    let py = venv.join("bin/python");
    let mut reuse =
        py.is_file() && fs::read_to_string(&stamp).ok().as_deref() == Some(stamp_text.as_str());
    loop {
        if reuse {
            eprintln!("venv: reusing {}", venv.display());
        } else {
            eprintln!(
                "venv: creating {} from {}",
                venv.display(),
                requirements.display()
            );
            let _ = fs::remove_dir_all(venv);
            exec(Command::new(&python).args(["-m", "venv"]).arg(venv))?;
            exec(
                Command::new(&py)
                    .args([
                        "-m",
                        "pip",
                        "install",
                        "--disable-pip-version-check",
                        "--no-input",
                        "--only-binary=:all:",
                        "-r",
                    ])
                    .arg(requirements),
            )
            .with_context(|| {
                format!(
                    "installing the pins of {} (pip's default index must be reachable)",
                    requirements.display()
                )
            })?;
        }
        // What is installed is exactly what is pinned: no unpinned dependency slipped in, and
        // a reused environment was not changed by hand.
        let installed = frozen(&py)?;
        if installed == pinned {
            break;
        }
        let _ = fs::remove_file(&stamp);
        if reuse {
            eprintln!("venv: {} differs from its pins: rebuilding", venv.display());
            reuse = false;
            continue;
        }
        bail!(
            "{} does not hold exactly the pins of {}: not installed {:?}, not pinned {:?}",
            venv.display(),
            requirements.display(),
            pinned.difference(&installed).collect::<Vec<_>>(),
            installed.difference(&pinned).collect::<Vec<_>>()
        );
    }
    fs::write(&stamp, &stamp_text).with_context(|| format!("writing {}", stamp.display()))?;
    Ok(pinned)
}

/// The `name==version` lines of `pip freeze`, normalised.
fn frozen(py: &Path) -> Result<BTreeSet<String>> {
    let out = Command::new(py)
        .args(["-m", "pip", "freeze", "--disable-pip-version-check"])
        .output()
        .context("pip freeze")?;
    ensure!(out.status.success(), "pip freeze failed: {}", out.status);
    Ok(String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_once("=="))
        .map(|(n, v)| format!("{}=={}", normalise(n), v.trim()))
        .collect())
}

/// Runs one script in one mode on a fresh simulated node; returns its result lines.
fn run_script(
    venv: &Path,
    lib: &Path,
    interposer: &Path,
    scratch: &Path,
    slice_dir: Option<&Path>,
    script: &str,
    mode: Mode,
) -> Result<Vec<String>> {
    let stem = format!("{}-{}", script.trim_end_matches(".py"), mode.name());
    let state = scratch.join(format!("{stem}.state"));
    let results = scratch.join(format!("{stem}.results"));
    let _ = fs::remove_file(&state);
    let _ = fs::remove_file(&results);
    let mut c = Command::new(venv.join("bin/python"));
    c.current_dir(root().join("tests/clients"));
    // Nothing of this process's environment decides what the clients see.
    for (k, _) in std::env::vars_os() {
        let k = k.to_string_lossy();
        if ["GPUSLICE_", "CUDA_", "NUMBA_", "HAMI_"]
            .iter()
            .any(|p| k.starts_with(p))
            || ["LD_PRELOAD", "LD_LIBRARY_PATH", "PYTHONPATH", "PYTHONHOME"].contains(&&*k)
        {
            c.env_remove(&*k);
        }
    }
    c.env("LD_LIBRARY_PATH", lib)
        .env("GPUSLICE_SIM_STATE", &state)
        .env("GPUSLICE_SIM_DEVICES", DEVICES)
        .env("GPUSLICE_CLIENTS_MODE", mode.name())
        .env("GPUSLICE_CLIENTS_DEVICE_BYTES", DEVICE_BYTES.to_string())
        .env("GPUSLICE_CLIENTS_RESULTS", &results)
        // Keep tests/clients free of __pycache__ and .pytest_cache.
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .env("PYTHONUNBUFFERED", "1");
    if mode != Mode::Bare {
        c.env("LD_PRELOAD", interposer);
        if let Some(dir) = slice_dir {
            c.env("GPUSLICE_SLICE_DIR", dir);
        }
    }
    if mode == Mode::Capped {
        c.env("GPUSLICE_MEMORY", CAP)
            .env("GPUSLICE_CLIENTS_CAP_BYTES", CAP_BYTES.to_string());
    }
    c.args(["-m", "pytest", "-p", "no:cacheprovider", "-v", "-s", script]);
    let mut child = c
        .spawn()
        .with_context(|| format!("starting pytest for {script}"))?;
    let deadline = Instant::now() + SCRIPT_TIMEOUT;
    let status = loop {
        if let Some(s) = child.try_wait().context("waiting for pytest")? {
            break s;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            bail!("still running after {} s: killed", SCRIPT_TIMEOUT.as_secs());
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    ensure!(status.success(), "pytest failed: {status}");
    Ok(fs::read_to_string(&results)
        .unwrap_or_default()
        .lines()
        .map(str::to_string)
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_committed_requirements_pin_everything() {
        let text = fs::read_to_string(root().join("tests/clients/requirements.txt")).unwrap();
        let pins = pins(&text).unwrap();
        for name in ["cuda-bindings", "numba-cuda", "nvidia-ml-py", "pytest"] {
            assert!(
                pins.iter().any(|p| p.starts_with(&format!("{name}=="))),
                "{name} not pinned"
            );
        }
    }

    #[test]
    fn unpinned_lines_are_refused() {
        assert!(pins("numba>=0.60\n").is_err());
        assert_eq!(
            pins("# c\nCuda_Bindings==12.9.4  # x\n").unwrap(),
            BTreeSet::from(["cuda-bindings==12.9.4".to_string()])
        );
    }

    #[test]
    fn every_script_is_committed() {
        for s in SCRIPTS {
            assert!(root().join("tests/clients").join(s).is_file(), "{s}");
        }
    }
}
