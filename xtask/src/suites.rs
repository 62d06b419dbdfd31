//! `cargo xtask test`: the named test suites, their order, and the closing summary.
//!
//! Each suite is a list of steps (cargo invocations or checks written here). The summary names every
//! suite as passed, failed or skipped; with `CI=true` a skipped suite counts as a failure, so CI can
//! never go green by not running something. The last line is `suites: N passed, N failed, N skipped`.

use crate::dist;
use crate::shell::{cargo, exec, is_root};
use anyhow::{bail, Context, Result};
use std::process::Command;
use std::time::Instant;

/// One named suite.
struct Suite {
    name: &'static str,
    about: &'static str,
    needs_root: bool,
    run: fn() -> Result<()>,
}

/// The suites' names, in their order.
#[cfg(test)]
pub fn names() -> impl Iterator<Item = &'static str> {
    SUITES.iter().map(|s| s.name)
}

const SUITES: &[Suite] = &[
    Suite {
        name: "lint",
        about: "cargo fmt --check and clippy --all-targets -D warnings over the workspace",
        needs_root: false,
        run: lint,
    },
    Suite {
        name: "sim",
        about: "simulated GPU: ground truth, libcuda.so.1 (signatures, errors, streams, events, \
                memory, pools, VMM, cuGetProcAddress) and libnvidia-ml.so.1 (via nvml-wrapper)",
        needs_root: false,
        run: sim,
    },
    Suite {
        name: "region",
        about: "slice shared-memory ABI: accessors, reservation protocol model test, cross-process",
        needs_root: false,
        run: region,
    },
    Suite {
        name: "interposer",
        about:
            "libgpuslice.so on the simulated GPU: entry paths, memory caps, totals, races, kills",
        needs_root: false,
        run: interposer,
    },
    Suite {
        name: "arbiter",
        about: "requests, protocol and config (api); admission, placement, daemon, scheduler, \
                reclaim, metrics (arbiter); the gpuslice CLI; shares end to end on the simulator",
        needs_root: false,
        run: arbiter,
    },
    Suite {
        name: "runtime",
        about: "what every container entry point does (gpuslice-oci: selection, spec edits, \
                preload, devices, bundle, lifecycle), gpuslice-runtime and the shim v2 against \
                the real arbiter library with a fake low-level runtime, gpuslice-hook, CDI \
                generation; no root, no engine",
        needs_root: false,
        run: runtime,
    },
    Suite {
        name: "workloads",
        about: "workload clients (linked, dlsym, cuGetProcAddress_v2; threads; processes) and the \
                outside-client acceptance checks against the built simulator",
        needs_root: false,
        run: workloads,
    },
    Suite {
        name: "clients",
        about: "NVIDIA's driver-API clients from PyPI, pinned, in a scratch venv (cuda-python's \
                cuda.bindings.driver, numba-cuda, nvidia-ml-py), unmodified on the simulated GPU: \
                totals, cuMemAlloc / pool / VMM / numba caps, with and without libgpuslice.so",
        needs_root: false,
        run: clients,
    },
    Suite {
        name: "dist",
        about:
            "cargo xtask dist yields the whole design-brief tree, every ELF of it linked against \
             glibc 2.17 by zig (the tools installed first) and none needing a newer symbol \
             version; unbuilt binaries refuse to run",
        needs_root: false,
        run: dist_suite,
    },
    Suite {
        name: "gpu-kit",
        about: "the real-GPU validation kit (tests/gpu) in dry-run mode: its travelling tree \
                (cargo xtask gpu-kit --sim, at most 32 MiB) on the simulated GPU advertising CUDA \
                13.0, kernel fallbacks forced: memory caps, shares, overhead and latency all run",
        needs_root: false,
        run: gpu_kit,
    },
    Suite {
        name: "e2e",
        about:
            "real engines (runc; containerd 1.6, 1.7, 2.1; Docker 20.10, 26) running containers \
                through gpuslice-runtime on the simulated GPU; error paths leave nothing behind; \
                the .deb (cargo xtask package) installed on a clean debootstrap root. \
                Installs the engines first (scripts/install-engines.sh)",
        needs_root: true,
        run: e2e,
    },
    Suite {
        name: "reliability",
        about: "reliability trials on the simulated GPU: hostile bytes over a usage file, SIGKILL \
                at random moments of alloc/free/launch loops, the arbiter SIGKILLed and restarted \
                under load, read-only slice files and isolation in a runc container (as root). \
                Counts scaled by GPUSLICE_TRIALS_SCALE (default here 0.1; 1 = the full trials)",
        needs_root: false,
        run: reliability,
    },
    Suite {
        name: "deploy",
        about:
            "packaging/kubernetes rendered offline by kubectl kustomize (sid's kubectl, installed \
                first when root) and strictly checked against the Kubernetes API types",
        needs_root: false,
        run: deploy,
    },
    Suite {
        name: "dra",
        about: "gpuslice-kubelet-plugin (DRA driver and device plugin): a kubelet stand-in over \
                the real plugin gRPC APIs on unix sockets, an API stand-in (strict loopback HTTP; \
                no real API server, kubelet or scheduler runs), published capacities against the \
                arbiter's admission, claim CDI specs on mknod'ed device nodes (root)",
        needs_root: false,
        run: dra,
    },
    Suite {
        name: "fuzz",
        about: "cargo-fuzz targets (fuzz/): every target replays its committed corpus once \
                (installs nightly and cargo-fuzz when missing); long runs: cargo xtask fuzz",
        needs_root: false,
        run: fuzz_smoke,
    },
    Suite {
        name: "xtask",
        about: "xtask's own unit tests",
        needs_root: false,
        run: xtask_self,
    },
];

/// Entry point of `cargo xtask test`.
pub fn run(list: bool, wanted: &[String]) -> Result<()> {
    if list {
        for s in SUITES {
            let root = if s.needs_root { " (needs root)" } else { "" };
            println!("{:<12} {}{}", s.name, s.about, root);
        }
        return Ok(());
    }
    let selected = select(wanted)?;
    let ci = std::env::var("CI")
        .map(|v| v == "true" || v == "1")
        .unwrap_or(false);
    let mut rows = Vec::new();
    for s in selected {
        if s.needs_root && !is_root() {
            rows.push((s.name, Outcome::Skipped("needs root".into()), 0.0));
            continue;
        }
        eprintln!("\n=== suite {} ===", s.name);
        let t = Instant::now();
        let outcome = match (s.run)() {
            Ok(()) => Outcome::Passed,
            Err(e) => Outcome::Failed(format!("{e:#}")),
        };
        rows.push((s.name, outcome, t.elapsed().as_secs_f64()));
    }
    summarise(&rows, ci)
}

enum Outcome {
    Passed,
    Failed(String),
    Skipped(String),
}

fn select(wanted: &[String]) -> Result<Vec<&'static Suite>> {
    if wanted.is_empty() {
        return Ok(SUITES.iter().collect());
    }
    wanted
        .iter()
        .map(|w| {
            SUITES.iter().find(|s| s.name == w).with_context(|| {
                let names: Vec<_> = SUITES.iter().map(|s| s.name).collect();
                format!("unknown suite {w:?}; suites are: {}", names.join(", "))
            })
        })
        .collect()
}

fn summarise(rows: &[(&str, Outcome, f64)], ci: bool) -> Result<()> {
    let (mut passed, mut failed, mut skipped) = (0, 0, 0);
    println!("\n=== summary ===");
    for (name, outcome, secs) in rows {
        match outcome {
            Outcome::Passed => {
                passed += 1;
                println!("PASS    {name:<12} {secs:>7.1}s");
            }
            Outcome::Failed(why) => {
                failed += 1;
                println!("FAIL    {name:<12} {secs:>7.1}s  {why}");
            }
            Outcome::Skipped(why) => {
                skipped += 1;
                println!("SKIPPED {name:<12}  *** NOT RUN: {why} ***");
            }
        }
    }
    if skipped > 0 {
        println!(
            "!!! {skipped} suite(s) were SKIPPED and prove nothing; run as root to include them"
        );
    }
    println!("suites: {passed} passed, {failed} failed, {skipped} skipped");
    if failed > 0 {
        bail!("{failed} suite(s) failed");
    }
    if ci && skipped > 0 {
        bail!("CI=true: {skipped} suite(s) skipped, which CI does not allow");
    }
    Ok(())
}

fn cargo_test(packages: &[&str], extra: &[&str]) -> Result<()> {
    let mut c = cargo();
    // Run every test binary even when one fails, so one run reports every failure.
    c.args(["test", "--no-fail-fast"]);
    for p in packages {
        c.args(["-p", p]);
    }
    c.args(extra);
    // cargo's last stderr line names a failing test target, which the summary then shows.
    crate::shell::exec_quoting_last_error(&mut c)
}

/// Builds the simulated driver libraries so tests that load them find current copies.
fn build_sim() -> Result<()> {
    exec(cargo().args([
        "build",
        "-p",
        "gpuslice-sim-cuda",
        "-p",
        "gpuslice-sim-nvml",
    ]))
}

/// Builds everything end-to-end tests start as separate processes: the simulator, the
/// interposer, the workload clients, the arbiter and the CLI (`cargo test` builds only the
/// binaries of the package under test).
fn build_processes() -> Result<()> {
    build_sim()?;
    let mut c = cargo();
    c.arg("build");
    for p in [
        "gpuslice-interposer",
        "gpuslice-workloads",
        "gpuslice-arbiter",
        "gpuslice-cli",
    ] {
        c.args(["-p", p]);
    }
    exec(&mut c)
}

fn lint() -> Result<()> {
    // Run both checks so one run reports every problem.
    let fmt = exec(cargo().args(["fmt", "--all", "--", "--check"]));
    let clippy = exec(cargo().args([
        "clippy",
        "--workspace",
        "--all-targets",
        "--",
        "-D",
        "warnings",
    ]));
    fmt.and(clippy)
}

fn sim() -> Result<()> {
    // The integration tests dlopen the built cdylibs, which `cargo test` does not rebuild.
    build_sim()?;
    cargo_test(
        &[
            "gpuslice-sim-core",
            "gpuslice-sim-cuda",
            "gpuslice-sim-nvml",
            "gpuslice-cuda-abi",
        ],
        &[],
    )
}

fn runtime() -> Result<()> {
    cargo_test(
        &[
            "gpuslice-oci",
            "gpuslice-shim",
            "gpuslice-hook",
            "gpuslice-cdi",
        ],
        &[],
    )
}

fn region() -> Result<()> {
    cargo_test(&["gpuslice-region"], &[])
}

fn interposer() -> Result<()> {
    build_processes()?;
    cargo_test(&["gpuslice-interposer"], &[])
}

fn arbiter() -> Result<()> {
    build_processes()?;
    cargo_test(
        &[
            "gpuslice-api",
            "gpuslice-admission",
            "gpuslice-arbiter",
            "gpuslice-cli",
        ],
        &[],
    )
}

fn workloads() -> Result<()> {
    build_sim()?;
    cargo_test(&["gpuslice-workloads"], &[])
}

fn clients() -> Result<()> {
    // Debug builds of the simulator and the interposer: a release dist tree is not needed.
    build_sim()?;
    exec(cargo().args(["build", "-p", "gpuslice-interposer"]))?;
    crate::clients::run()
}

fn gpu_kit() -> Result<()> {
    // The travelling tree itself (over 32 MiB fails here), with the simulator for the dry run,
    // which runs with every kernel fallback forced (docs/kernels.md) on a simulated CUDA 13.0.
    let kit = crate::gpu_kit::prepare(true)?;
    crate::elf_floor::check(&kit, "gpu-kit")?;
    crate::shell::exec_quoting_last_error(
        Command::new("bash")
            .arg(crate::shell::root().join("tests/gpu/test_dry_run.sh"))
            .arg(&kit)
            .env("GPUSLICE_FORCE_SYSCALL_FALLBACKS", "1"),
    )
}

fn e2e() -> Result<()> {
    exec(Command::new("bash").arg(crate::shell::root().join("scripts/install-engines.sh")))?;
    let dist = dist::run()?;
    // The package install test (tests/package_install.rs) installs this .deb on a clean root.
    crate::package::build(&dist, &crate::package::out_dir())?;
    let mut c = cargo();
    c.env("GPUSLICE_DIST", &dist);
    c.env("GPUSLICE_PACKAGES", crate::package::out_dir());
    // tests/node_image_cri.rs runs `xtask image` (this binary) on a base it builds itself.
    c.env("GPUSLICE_XTASK", std::env::current_exe()?);
    c.args([
        "test",
        "-p",
        "gpuslice-e2e",
        "--no-fail-fast",
        "--",
        "--test-threads=1",
    ]);
    exec(&mut c)
}

fn reliability() -> Result<()> {
    // The trials start the arbiter, the CLI, the interposer, the simulator and the workloads.
    build_processes()?;
    let mut c = cargo();
    if std::env::var_os("GPUSLICE_TRIALS_SCALE").is_none() {
        c.env("GPUSLICE_TRIALS_SCALE", "0.1");
    }
    // The isolation trial runs a container through gpuslice-runtime: engines and the dist tree.
    if is_root() {
        exec(Command::new("bash").arg(crate::shell::root().join("scripts/install-engines.sh")))?;
        c.env("GPUSLICE_DIST", dist::run()?);
    }
    c.args([
        "test",
        "-p",
        "gpuslice-reliability",
        "--no-fail-fast",
        "--",
        "--test-threads=1",
        "--nocapture",
    ]);
    exec(&mut c)
}

fn fuzz_smoke() -> Result<()> {
    crate::fuzz::smoke()
}

fn xtask_self() -> Result<()> {
    cargo_test(&["xtask"], &[])
}

fn dist_suite() -> Result<()> {
    let root = dist::run()?;
    let mut missing = Vec::new();
    for p in dist::expected_paths() {
        if !root.join(&p).is_file() {
            missing.push(p);
        }
    }
    if !missing.is_empty() {
        bail!(
            "dist tree under {} lacks: {}",
            root.display(),
            missing.join(", ")
        );
    }
    println!(
        "dist: all {} design-brief paths present",
        dist::expected_paths().len()
    );
    // The glibc floor: nothing shipped needs a symbol version above glibc 2.17.
    crate::elf_floor::check(&root, "dist")?;
    // Nothing pretends to work: each product binary either answers --help or refuses to run.
    for b in dist::BINARIES {
        let path = root.join("usr/bin").join(b);
        // A containerd shim takes Go-style flags: `-v` prints its version, not `--help`.
        let probe = if b.starts_with("containerd-shim-") {
            "-v"
        } else {
            "--help"
        };
        // With no engine on PATH, as on a fresh machine before the e2e suite installs runc:
        // a built binary's help must not depend on one.
        let out = Command::new(&path)
            .arg(probe)
            .env("PATH", "/nonexistent/gpuslice-dist-probe")
            .output()
            .with_context(|| format!("running {}", path.display()))?;
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        let placeholder = stderr.contains("not implemented yet");
        // The shim's `-v` also asks the runc shim it fronts, which may not be installed yet;
        // its own version line is what shows it is built.
        let answered = out.status.success() || stdout.starts_with(&format!("{b}:\n  Version:"));
        match (answered, placeholder) {
            (true, false) => println!("dist: {b} is built ({probe} answers)"),
            (false, true) => println!(
                "dist: {b} is a placeholder and refuses to run: {}",
                stderr.trim()
            ),
            _ => bail!(
                "{b}: neither a working binary nor an honest placeholder ({})",
                out.status
            ),
        }
    }
    // The acceptance client from the dist tree, against the dist tree's simulator.
    crate::demo::acceptance(&root)
}

/// The kubelet plugin's tests (all of them: both modes share the crate). The binary's test
/// runs it on the simulated NVML.
fn dra() -> Result<()> {
    build_sim()?;
    cargo_test(&["gpuslice-kubelet-plugin"], &[])
}

/// The Kubernetes deployment: fetches kubectl (root only; a non-root run without it is told so
/// loudly, and the tests then print SKIPPED, or fail under CI) and runs the rendering tests.
fn deploy() -> Result<()> {
    if is_root() {
        exec(
            Command::new("bash")
                .arg(crate::shell::root().join("scripts/install-engines.sh"))
                .env("GPUSLICE_E2E_ONLY", "kubectl"),
        )?;
    } else {
        eprintln!(
            "!!! deploy: not root, kubectl not installed by this run \
             (GPUSLICE_E2E_ONLY=kubectl scripts/install-engines.sh as root)"
        );
    }
    cargo_test(&["gpuslice-deploy-tests"], &[])
}
