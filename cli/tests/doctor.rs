//! `gpuslice doctor`: on a fake, broken layout every check that can fail does, each with the
//! command that fixes it, and the exit status is 1; on the simulated GPU (the simulated NVML
//! library, a running arbiter, the real interposer, a containerd config written by
//! `gpuslice configure`) those checks are OK and the exit status is 0. The second test needs
//! the simulated NVML and the interposer built in the same profile
//! (`cargo build -p gpuslice-sim-nvml -p gpuslice-interposer`).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::{Arc, Mutex};

use gpuslice_arbiter::server::{bind, serve, State};
use gpuslice_arbiter::store::Store;
use gpuslice_arbiter::{DeviceInventory, Policy, StaticInventory};
use gpuslice_test_support::Scratch;

fn doctor(dir: &Path, extra: &[(&str, &Path)], env: &[(&str, &Path)]) -> Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_gpuslice"));
    c.arg("doctor")
        .arg("--state-dir")
        .arg(dir.join("state"))
        .env_remove("GPUSLICE_CONFIG")
        .env_remove("GPUSLICE_NVML_LIBRARY");
    for (flag, p) in extra {
        c.arg(flag).arg(p);
    }
    for (k, v) in env {
        c.env(k, v);
    }
    c.output().unwrap()
}

/// The report's row for `name`: (status, detail, fix).
fn row(out: &str, name: &str) -> (String, String, Option<String>) {
    let lines: Vec<&str> = out.lines().collect();
    let i = lines
        .iter()
        .position(|l| l.split_whitespace().next() == Some(name))
        .unwrap_or_else(|| panic!("no row {name}:\n{out}"));
    let mut parts = lines[i].split_whitespace();
    parts.next();
    let status = parts.next().unwrap_or("").to_string();
    let detail = parts.collect::<Vec<_>>().join(" ");
    let fix = lines
        .get(i + 1)
        .and_then(|l| l.trim_start().strip_prefix("fix: "))
        .map(str::to_string);
    (status, detail, fix)
}

#[test]
fn broken_layout_fails_with_fix_commands() {
    let dir = Scratch::new("broken");
    std::fs::write(dir.join("libgpuslice.so"), "not an ELF file").unwrap();
    std::fs::write(dir.join("gpuslice.yaml"), "cdiVersion: [unclosed\n").unwrap();
    std::fs::write(dir.join("containerd.toml"), "version = 2\n").unwrap();
    std::fs::write(dir.join("daemon.json"), "{\"runtimes\": {,}\n").unwrap();
    std::fs::create_dir_all(dir.join("crio")).unwrap();
    let o = doctor(
        &dir,
        &[
            ("--nvml-library", &dir.join("missing-libnvidia-ml.so.1")),
            ("--interposer", &dir.join("libgpuslice.so")),
            ("--cdi-spec", &dir.join("gpuslice.yaml")),
            ("--containerd-config", &dir.join("containerd.toml")),
            ("--docker-config", &dir.join("daemon.json")),
            ("--crio-dir", &dir.join("crio")),
        ],
        &[],
    );
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    assert_eq!(o.status.code(), Some(1), "{out}");
    for (name, status, fix) in [
        ("nvml", "FAIL", "GPUSLICE_NVML_LIBRARY"),
        ("arbiter", "FAIL", "gpuslice-arbiter"),
        ("interposer", "FAIL", "libgpuslice.so"),
        ("cdi-spec", "FAIL", "gpuslice cdi generate --output"),
        ("containerd", "WARN", "gpuslice configure containerd --file"),
        ("docker", "FAIL", "gpuslice configure docker --file"),
        ("crio", "WARN", "gpuslice configure crio --file"),
        ("engines", "FAIL", "gpuslice configure containerd"),
    ] {
        let (s, detail, f) = row(&out, name);
        assert_eq!(s, status, "{name}: {detail}\n{out}");
        let f = f.unwrap_or_else(|| panic!("{name} has no fix line:\n{out}"));
        assert!(f.contains(fix), "{name}: fix {f:?} lacks {fix:?}");
    }
    assert!(
        row(&out, "interposer").1.contains("not an ELF file"),
        "{out}"
    );
    assert!(row(&out, "docker").1.contains("cannot parse"), "{out}");
    assert!(out.contains("failed,"), "{out}");
}

#[test]
fn simulated_node_with_arbiter_and_configured_containerd_is_ok() {
    let exe = PathBuf::from(env!("CARGO_BIN_EXE_gpuslice"));
    let prof = exe.parent().unwrap().to_path_buf();
    let (nvml, interposer) = (prof.join("libnvidia_ml.so"), prof.join("libgpuslice.so"));
    for f in [&nvml, &interposer] {
        assert!(
            f.exists(),
            "{} missing: cargo build -p gpuslice-sim-nvml -p gpuslice-interposer",
            f.display()
        );
    }
    let dir = Scratch::new("sim");
    let state = dir.join("state");
    std::fs::create_dir_all(&state).unwrap();
    // The arbiter (library, on the test's own socket).
    let devs = StaticInventory::fake(&[("Test GPU 8G", 8 << 30)])
        .devices()
        .unwrap();
    let (st, _) = State::open(devs, Policy::default(), Store::open(&state).unwrap()).unwrap();
    let listener = bind(&state.join("arbiter.sock")).unwrap();
    std::thread::spawn(move || serve(listener, Arc::new(Mutex::new(st))));
    // containerd configured by `gpuslice configure` (BinaryName: an existing file).
    let ctd = dir.join("containerd/config.toml");
    std::fs::create_dir_all(ctd.parent().unwrap()).unwrap();
    std::fs::write(&ctd, "version = 2\n").unwrap();
    let o = Command::new(&exe)
        .args(["configure", "containerd", "--file"])
        .arg(&ctd)
        .arg("--runtime-path")
        .arg(&exe)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let o = doctor(
        &dir,
        &[
            ("--interposer", &interposer),
            ("--cdi-spec", &dir.join("absent.yaml")),
            ("--containerd-config", &ctd),
            ("--containerd-address", &dir.join("no-containerd.sock")),
            ("--docker-config", &dir.join("absent.json")),
            ("--crio-dir", &dir.join("absent")),
        ],
        &[
            ("GPUSLICE_NVML_LIBRARY", &nvml),
            ("GPUSLICE_SIM_STATE", &dir.join("sim.state")),
        ],
    );
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    for name in ["nvml", "gpu-owners", "arbiter", "interposer", "containerd"] {
        let (s, detail, _) = row(&out, name);
        assert_eq!(s, "OK", "{name}: {detail}\n{out}");
    }
    assert!(row(&out, "nvml").1.contains("GPU(s)"), "{out}");
    assert!(row(&out, "arbiter").1.contains("1 device(s)"), "{out}");
    assert!(
        row(&out, "containerd").1.contains("conf.d/gpuslice.toml"),
        "{out}"
    );
    assert_eq!(row(&out, "cdi-spec").0, "WARN", "{out}");
    // The configured containerd is not running here (the e2e suite checks a running one).
    let (s, detail, fix) = row(&out, "containerd-daemon");
    assert_eq!(s, "FAIL", "{out}");
    assert!(detail.contains("not running: no socket at"), "{out}");
    assert!(fix
        .unwrap_or_default()
        .contains("systemctl start containerd"));
    let fails: Vec<&str> = out
        .lines()
        .filter(|l| l.split_whitespace().nth(1) == Some("FAIL"))
        .collect();
    assert_eq!(fails.len(), 1, "only the stopped daemon fails:\n{out}");
    assert_eq!(o.status.code(), Some(1), "{out}");
}

/// Engines the node does not have (no binary on PATH, no configuration file) get no rows; the
/// one FAIL is that no engine is configured. The header's columns are apart.
#[test]
fn absent_engines_are_not_reported() {
    let dir = Scratch::new("absent");
    let empty_path = dir.join("empty-bin");
    std::fs::create_dir_all(&empty_path).unwrap();
    let o = doctor(
        &dir,
        &[
            ("--containerd-config", &dir.join("no-containerd.toml")),
            ("--docker-config", &dir.join("no-daemon.json")),
            ("--crio-dir", &dir.join("no-crio")),
        ],
        &[("PATH", &empty_path)],
    );
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(out.starts_with("CHECK"), "{out}");
    assert!(
        out.lines().next().unwrap().contains("STATUS DETAIL"),
        "{out}"
    );
    for name in [
        "containerd",
        "containerd-daemon",
        "docker",
        "docker-daemon",
        "crio",
    ] {
        assert!(
            !out.lines()
                .any(|l| l.split_whitespace().next() == Some(name)),
            "row {name} for an engine this node lacks:\n{out}"
        );
    }
    assert_eq!(row(&out, "engines").0, "FAIL", "{out}");
}

/// A CUDA process started outside gpuslice (no interposer) holding memory on the simulated GPU:
/// the `gpu-owners` row warns, naming its pid, command and memory, with the partition's fix;
/// once it has exited the row is OK. Needs the simulated driver and the workload built in the
/// same profile (`cargo build -p gpuslice-sim-cuda -p gpuslice-sim-nvml -p gpuslice-workloads`).
#[test]
fn a_cuda_process_without_the_interposer_is_reported() {
    use std::io::BufRead;
    let exe = PathBuf::from(env!("CARGO_BIN_EXE_gpuslice"));
    let prof = exe.parent().unwrap().to_path_buf();
    let (nvml, cuda, workload) = (
        prof.join("libnvidia_ml.so"),
        prof.join("libcuda.so"),
        prof.join("gpuslice-workload"),
    );
    for f in [&nvml, &cuda, &workload] {
        assert!(f.exists(), "{} missing: cargo build -p gpuslice-sim-cuda -p gpuslice-sim-nvml -p gpuslice-workloads", f.display());
    }
    let dir = Scratch::new("owners");
    std::os::unix::fs::symlink(&cuda, dir.join("libcuda.so.1")).unwrap();
    let state = dir.join("sim.state");
    let mut child = Command::new(&workload)
        .args(["fill", "--chunk", "1Gi", "--hold-ms", "30000"])
        .env("LD_LIBRARY_PATH", &dir)
        .env("GPUSLICE_SIM_STATE", &state)
        .env_remove("LD_PRELOAD")
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert!(
        line.contains("allocations="),
        "the workload holds memory: {line}"
    );
    let absent = [
        ("--containerd-config", dir.join("absent.toml")),
        ("--docker-config", dir.join("absent.json")),
        ("--crio-dir", dir.join("absent")),
    ];
    let extra: Vec<(&str, &Path)> = absent.iter().map(|(f, p)| (*f, p.as_path())).collect();
    let env = [
        ("GPUSLICE_NVML_LIBRARY", &nvml),
        ("GPUSLICE_SIM_STATE", &state),
    ];
    let env: Vec<(&str, &Path)> = env.iter().map(|(k, p)| (*k, p.as_path())).collect();
    let out = String::from_utf8_lossy(&doctor(&dir, &extra, &env).stdout).into_owned();
    let (s, detail, fix) = row(&out, "gpu-owners");
    let _ = child.kill();
    let _ = child.wait();
    assert_eq!(s, "WARN", "{out}");
    assert!(
        detail.contains(&format!("GPU 0: pid {} (gpuslice-worklo,", child.id())),
        "{detail}"
    );
    assert!(detail.contains("MiB)"), "{detail}");
    // No arbiter on this scratch node: the row says it cannot tell what the arbiter does.
    assert!(detail.contains("the arbiter did not answer"), "{detail}");
    assert!(
        fix.unwrap_or_default()
            .contains("nvidia.com/gpu.deploy.device-plugin=false"),
        "{out}"
    );
    let out = String::from_utf8_lossy(&doctor(&dir, &extra, &env).stdout).into_owned();
    assert_eq!(row(&out, "gpu-owners").0, "OK", "after exit:\n{out}");
}
