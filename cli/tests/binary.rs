//! The `gpuslice` binary against the real arbiter library serving a temporary state directory:
//! `run` (environment of the command, exit codes, 128+signal, signal forwarding, release after
//! exit, refused admission starts nothing and leaves nothing, arbiter down), `status` (table and
//! JSON), `update`, and the declared-but-not-built subcommands.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use gpuslice_arbiter::server::{bind, serve, State};
use gpuslice_arbiter::store::Store;
use gpuslice_arbiter::{DeviceInventory, Policy, StaticInventory};
use gpuslice_region::{create_slice, DeviceSpec, SliceSpec, Usage};

const GI: u64 = 1 << 30;
const BIN: &str = env!("CARGO_BIN_EXE_gpuslice");

struct Node {
    dir: PathBuf,
    config: PathBuf,
    interposer: PathBuf,
    state: Arc<Mutex<State>>,
}

impl Node {
    /// A state directory, a config naming a (fake) interposer, and optionally an arbiter.
    fn new(tag: &str, arbiter: bool) -> Node {
        let dir = std::env::temp_dir().join(format!("gs-h8c-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let interposer = dir.join("libgpuslice-fake.so");
        std::fs::write(&interposer, b"not an ELF file").unwrap();
        let config = dir.join("config.toml");
        std::fs::write(
            &config,
            format!(
                "state_dir = \"{}\"\ninterposer = \"{}\"\n",
                dir.display(),
                interposer.display()
            ),
        )
        .unwrap();
        let devs = StaticInventory::fake(&[("NVIDIA H100 80GB", 80 * GI)])
            .devices()
            .unwrap();
        let (st, _) = State::open(devs, Policy::default(), Store::open(&dir).unwrap()).unwrap();
        let state = Arc::new(Mutex::new(st));
        if arbiter {
            let listener = bind(&dir.join("arbiter.sock")).unwrap();
            let s = Arc::clone(&state);
            std::thread::spawn(move || serve(listener, s));
        }
        Node {
            dir,
            config,
            interposer,
            state,
        }
    }

    fn cmd(&self, args: &[&str]) -> Command {
        let mut c = Command::new(BIN);
        c.arg("--config")
            .arg(&self.config)
            .arg("--state-dir")
            .arg(&self.dir)
            .args(args)
            .env_remove("GPUSLICE_STATE_DIR")
            .env_remove("GPUSLICE_CONFIG")
            .env("LD_PRELOAD", "")
            .current_dir(&self.dir);
        c
    }

    fn out(&self, args: &[&str]) -> Output {
        self.cmd(args).output().unwrap()
    }

    fn slices(&self) -> usize {
        self.state.lock().unwrap().admission().slices().count()
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn run_passes_environment_exit_code_and_releases() {
    let node = Node::new("env", true);
    let script = "printf '%s\\n%s\\n%s\\n' \"$LD_PRELOAD\" \"$GPUSLICE_SLICE_DIR\" \"$CUDA_VISIBLE_DEVICES\" > env.txt; exit 7";
    let mut c = node.cmd(&[
        "run",
        "--memory",
        "1Gi",
        "--compute",
        "20",
        "--",
        "sh",
        "-c",
        script,
    ]);
    c.env("LD_PRELOAD", "/opt/other.so");
    let o = c.output().unwrap();
    assert_eq!(o.status.code(), Some(7), "{}", stderr(&o));
    let env = std::fs::read_to_string(node.dir.join("env.txt")).unwrap();
    let lines: Vec<&str> = env.lines().collect();
    let ours = node.interposer.canonicalize().unwrap();
    assert_eq!(lines[0], format!("{}:/opt/other.so", ours.display()));
    // As root, the command sees its slice where the state directory was (its own mount
    // namespace); otherwise at the slice's own path.
    let dir = node.dir.canonicalize().unwrap();
    assert!(
        Path::new(lines[1]) == dir
            || (Path::new(lines[1]).starts_with(&node.dir) && lines[1].contains("run-")),
        "{env}"
    );
    assert!(lines[2].starts_with("GPU-"), "{env}");
    assert_eq!(node.slices(), 0, "released after the command exited");
    let left: Vec<_> = std::fs::read_dir(&node.dir)
        .unwrap()
        .filter_map(Result::ok)
        .filter(|e| e.file_name().to_string_lossy().starts_with("run-"))
        .collect();
    assert!(left.is_empty(), "slice directory removed: {left:?}");
}

#[test]
fn run_reports_signal_death_as_128_plus_n() {
    let node = Node::new("sig", true);
    let o = node.out(&["run", "--", "sh", "-c", "kill -9 $$"]);
    assert_eq!(o.status.code(), Some(137), "{}", stderr(&o));
    assert_eq!(node.slices(), 0);
}

#[test]
fn run_forwards_sigterm_to_the_command() {
    let node = Node::new("fwd", true);
    let script =
        "trap 'echo got > marker; exit 3' TERM; touch started; while :; do sleep 0.05; done";
    let mut child = node
        .cmd(&["run", "--", "sh", "-c", script])
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let t0 = Instant::now();
    while !node.dir.join("started").exists() {
        assert!(
            t0.elapsed() < Duration::from_secs(20),
            "command never started"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(node.slices(), 1);
    // SAFETY: kill on the pid of our own unreaped child.
    unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGTERM) };
    let status = child.wait().unwrap();
    assert_eq!(
        status.code(),
        Some(3),
        "the command's trap ran and its status came back"
    );
    assert_eq!(
        std::fs::read_to_string(node.dir.join("marker")).unwrap(),
        "got\n"
    );
    assert_eq!(node.slices(), 0);
}

#[test]
fn refused_admission_starts_nothing_and_leaves_nothing() {
    let node = Node::new("refuse", true);
    let o = node.out(&["run", "--memory", "100Gi", "--", "touch", "ran"]);
    assert_eq!(o.status.code(), Some(125));
    let err = stderr(&o);
    assert!(err.contains("refused") && err.contains("memory"), "{err}");
    assert!(!node.dir.join("ran").exists(), "the command must not start");
    assert_eq!(node.slices(), 0);
    let dirs: Vec<_> = std::fs::read_dir(&node.dir)
        .unwrap()
        .filter_map(Result::ok)
        .filter(|e| e.file_type().unwrap().is_dir())
        .collect();
    assert!(dirs.is_empty(), "no slice directory left: {dirs:?}");
}

#[test]
fn arbiter_down_names_the_socket() {
    let node = Node::new("down", false);
    let o = node.out(&["run", "--", "touch", "ran"]);
    assert_eq!(o.status.code(), Some(125));
    let err = stderr(&o);
    let sock = node.dir.join("arbiter.sock");
    assert!(err.contains(&sock.display().to_string()), "{err}");
    assert!(!node.dir.join("ran").exists());
    assert!(
        err.contains("the arbiter is not running: no socket at"),
        "{err}"
    );
    let o = node.out(&["status"]);
    assert_eq!(o.status.code(), Some(1));
    let err = stderr(&o);
    assert!(err.contains("arbiter.sock"));
    // The OS error is said once, not again as a source.
    assert_eq!(err.matches("no socket").count(), 1, "{err}");
    assert!(!err.contains("os error"), "{err}");
    // A socket file nobody listens on (a killed arbiter's): "refuses connections".
    drop(std::os::unix::net::UnixListener::bind(&sock).unwrap());
    let err = stderr(&node.out(&["status"]));
    assert!(
        err.contains("not running") && err.contains("refuses connections"),
        "{err}"
    );
}

#[test]
fn missing_command_and_bad_option() {
    let node = Node::new("nocmd", true);
    let o = node.out(&["run", "--", "/nonexistent/gpuslice-test-cmd"]);
    assert_eq!(o.status.code(), Some(127), "{}", stderr(&o));
    assert_eq!(node.slices(), 0, "released after the spawn failed");
    let o = node.out(&["run", "--memory", "12Q", "--", "touch", "ran"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("--memory=\"12Q\": unknown unit"),
        "{}",
        stderr(&o)
    );
    assert!(!node.dir.join("ran").exists());
    // A value that looks like an option still reaches our parser, which names the option.
    for (opt, val) in [
        ("--memory", "-1"),
        ("--compute", "-5"),
        ("--compute-limit", "-1"),
    ] {
        let o = node.out(&["run", opt, val, "--", "touch", "ran"]);
        assert_eq!(o.status.code(), Some(2), "{opt} {val}");
        let err = stderr(&o);
        assert!(
            err.contains(&format!("{opt}=\"{val}\"")),
            "{opt} {val}: {err}"
        );
        assert!(!err.contains("unexpected argument"), "{err}");
    }
    assert!(!node.dir.join("ran").exists());
}

/// What the command leaves running (a background child, a double fork) is killed when it exits,
/// before the slice is released: it would hold the GPU with no cap otherwise.
#[test]
fn leftover_descendants_are_killed_with_the_command() {
    let node = Node::new("leftover", true);
    let pids = node.dir.join("pids");
    // Relative: the working directory is the real state directory, which the command's mount
    // namespace covers with its (read-only) slice.
    let script = "sleep 300 & echo $! > pids; (sleep 300 & echo $! >> pids) ; exit 3";
    let o = node.out(&["run", "--", "sh", "-c", script]);
    assert_eq!(o.status.code(), Some(3), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("left 2 process(es) running; killed them"),
        "{}",
        stderr(&o)
    );
    let text = std::fs::read_to_string(&pids).unwrap();
    for pid in text.split_whitespace() {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        assert!(
            stat.is_empty() || stat.contains(") Z"),
            "descendant {pid} still runs: {stat}"
        );
    }
    assert_eq!(node.slices(), 0);
}

/// `--memory 100%` is all one slice can be promised on the device (the total less the context
/// reserve), not a cap that can never be admitted; a slice id that names the arbiter's socket
/// is a bad request, not an internal error.
#[test]
fn memory_100_percent_is_admitted_and_reserved_names_are_refused() {
    let node = Node::new("pct", true);
    let o = node.out(&["run", "--memory", "100%", "--", "touch", "ran"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(node.dir.join("ran").exists());
    let mut st = node.state.lock().unwrap();
    let r = st.handle_line(
        r#"{"version":1,"op":"admit","slice_id":"arbiter.sock","request":{"memory":"100%"}}"#,
    );
    match r.response {
        gpuslice_api::Response::Error { code, message } => {
            assert_eq!(code, gpuslice_api::ErrorCode::BadRequest, "{message}");
            assert!(
                message.contains("arbiter.sock") && message.contains(".sock"),
                "{message}"
            );
        }
        other => panic!("expected bad_request, got {other:?}"),
    }
    let r = st
        .handle_line(r#"{"version":1,"op":"admit","slice_id":"all","request":{"memory":"100%"}}"#);
    match r.response {
        gpuslice_api::Response::Admitted { devices, .. } => {
            let reserve = Policy::default().reserve_on(0);
            assert_eq!(devices[0].memory_cap, Some(80 * GI - reserve));
        }
        other => panic!("expected admitted, got {other:?}"),
    }
}

#[test]
fn missing_interposer_starts_nothing() {
    let node = Node::new("nolib", true);
    std::fs::remove_file(&node.interposer).unwrap();
    let o = node.out(&["run", "--", "touch", "ran"]);
    assert_eq!(o.status.code(), Some(125));
    assert!(
        stderr(&o).contains("interposer not found"),
        "{}",
        stderr(&o)
    );
    assert!(!node.dir.join("ran").exists());
    assert_eq!(node.slices(), 0);
}

#[test]
fn status_and_update_against_the_arbiter() {
    let node = Node::new("status", true);
    let mut child = node
        .cmd(&[
            "run",
            "--memory",
            "2Gi",
            "--compute",
            "25",
            "--priority",
            "high",
            "--",
            "sh",
            "-c",
            "touch started; sleep 30",
        ])
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let t0 = Instant::now();
    while !node.dir.join("started").exists() {
        assert!(t0.elapsed() < Duration::from_secs(20));
        std::thread::sleep(Duration::from_millis(20));
    }
    let id = node
        .state
        .lock()
        .unwrap()
        .admission()
        .slices()
        .next()
        .unwrap()
        .slice_id
        .clone();

    // This test process holds 1.5Gi in the slice (region files as the arbiter creates them).
    let slice_dir = node.dir.join(&id);
    let uuid = node
        .state
        .lock()
        .unwrap()
        .admission()
        .slice(&id)
        .unwrap()
        .devices[0]
        .uuid
        .clone();
    let spec = SliceSpec {
        devices: vec![DeviceSpec {
            uuid,
            memory_cap: 2 * GI,
            device_total: 80 * GI,
            ..DeviceSpec::default()
        }],
        flags: 0,
    };
    let _ = create_slice(&slice_dir, &spec, false).unwrap();
    let usage = Usage::open(&slice_dir, 1).unwrap();
    let start = gpuslice_region::liveness::self_start_time().unwrap();
    let rec = usage.claim(std::process::id(), start).unwrap();
    usage.reserve(rec, 0, 3 * GI / 2, 2 * GI).unwrap();

    let o = node.out(&["status"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let text = String::from_utf8(o.stdout).unwrap();
    assert!(text.contains("GPU 0  NVIDIA H100 80GB"), "{text}");
    let row = text.lines().find(|l| l.contains(&id)).unwrap();
    assert!(
        row.contains("2Gi") && row.contains("25%") && row.contains("high"),
        "{row}"
    );
    assert!(row.contains("1.5Gi"), "memory used: {row}");
    assert!(
        row.contains(&format!("1 ({})", std::process::id())),
        "processes: {row}"
    );

    let o = node.out(&["status", "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["devices"][0]["slices"][0]["slice_id"], id.as_str());
    assert_eq!(v["devices"][0]["slices"][0]["memory_cap"], 2 * GI);
    assert!(v["devices"][0]["slices"][0]["achieved_1s"].is_null());

    assert_eq!(v["devices"][0]["slices"][0]["memory_used"], 3 * GI / 2);

    let o = node.out(&["update", &id, "--memory", "1Gi"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let err = stderr(&o);
    assert!(
        err.contains("warning:") && err.contains("new memory cap 1Gi is below current use 1536Mi"),
        "{err}"
    );

    let o = node.out(&["update", &id, "--memory", "4Gi", "--compute", "0"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(String::from_utf8_lossy(&o.stdout).contains("memory cap 4Gi"));
    let st = node.state.lock().unwrap();
    let s = st.admission().slice(&id).unwrap();
    assert_eq!(s.devices[0].memory_cap, Some(4 * GI));
    assert_eq!(s.request.compute, None);
    drop(st);
    let o = node.out(&["update", "nope", "--priority", "low"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("nope"));

    // SAFETY: kill on the pid of our own unreaped child.
    unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGTERM) };
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(128 + libc::SIGTERM));
    assert_eq!(node.slices(), 0);
}

#[test]
fn cdi_generate_without_nvml_names_the_library_and_writes_nothing() {
    // Every subcommand is built now; none may answer "not implemented". Without a loadable NVML,
    // `cdi generate` fails with a message naming the library and leaves no output file.
    let node = Node::new("cdi", false);
    let out = node.dir.join("gpuslice.yaml");
    let o = node
        .cmd(&["cdi", "generate", "--output", out.to_str().unwrap()])
        .env("GPUSLICE_NVML_LIBRARY", "/nonexistent/libnvidia-ml.so.1")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1));
    let err = stderr(&o);
    assert!(!err.contains("not implemented"), "{err}");
    assert!(err.contains("/nonexistent/libnvidia-ml.so.1"), "{err}");
    assert!(!out.exists(), "no spec written on failure");
}
