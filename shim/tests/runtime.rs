//! `gpuslice-runtime` end to end without root: a fake low-level runtime (a script recording its
//! argv and working directory), the real arbiter library serving a temporary state directory,
//! and bundles on disk. Covers pass-through (argv identical, config.json byte-for-byte
//! unchanged), edits, and every failure path leaving nothing behind.

use gpuslice_oci::elf_versions::minimal_elf;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::{Arc, Mutex};

use gpuslice_arbiter::server::{bind, serve, State};
use gpuslice_arbiter::store::Store;
use gpuslice_arbiter::{DeviceInventory, Policy, StaticInventory};
use serde_json::{json, Value};

const GI: u64 = 1 << 30;
const BIN: &str = env!("CARGO_BIN_EXE_gpuslice-runtime");

struct Node {
    dir: PathBuf,
    state: Arc<Mutex<State>>,
}

impl Node {
    fn new(tag: &str, arbiter: bool, extra_config: &str) -> Node {
        let dir = std::env::temp_dir().join(format!("gs-h9-rt-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("state")).unwrap();
        // A header-only x86-64 ELF: the create-time check reads what the interposer needs.
        std::fs::write(dir.join("libgpuslice.so"), minimal_elf(62)).unwrap();
        std::fs::write(dir.join("gpuslice-hook"), b"fake").unwrap();
        let fake = dir.join("fake-runc");
        std::fs::write(
            &fake,
            format!(
                "#!/bin/sh\nprintf '%s\\n' \"$@\" > {d}/argv\npwd > {d}/cwd\nexit $(cat {d}/exit 2>/dev/null || echo 0)\n",
                d = dir.display()
            ),
        )
        .unwrap();
        std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).unwrap();
        std::fs::write(
            dir.join("config.toml"),
            format!(
                "state_dir = \"{d}/state\"\ninterposer = \"{d}/libgpuslice.so\"\n{extra_config}\n[runtime]\nlow_level = \"{d}/fake-runc\"\nhook = \"{d}/gpuslice-hook\"\n",
                d = dir.display()
            ),
        )
        .unwrap();
        let devs = StaticInventory::fake(&[("NVIDIA H100 80GB", 80 * GI)])
            .devices()
            .unwrap();
        let store = Store::open(&dir.join("state")).unwrap();
        let (st, _) = State::open(devs, Policy::default(), store).unwrap();
        let state = Arc::new(Mutex::new(st));
        if arbiter {
            let listener = bind(&dir.join("state/arbiter.sock")).unwrap();
            let s = Arc::clone(&state);
            std::thread::spawn(move || serve(listener, s));
        }
        Node { dir, state }
    }

    /// A bundle with `rootfs/` and a config.json built from annotations and env.
    fn bundle(&self, name: &str, annotations: Value, env: &[&str]) -> PathBuf {
        let b = self.dir.join(name);
        std::fs::create_dir_all(b.join("rootfs/etc")).unwrap();
        // A glibc image: the interposer can be preloaded in it.
        std::fs::create_dir_all(b.join("rootfs/lib64")).unwrap();
        std::fs::write(b.join("rootfs/lib64/libc.so.6"), minimal_elf(62)).unwrap();
        let spec = json!({
            "ociVersion": "1.0.2",
            "process": {"args": ["sh"], "cwd": "/", "env": env},
            "root": {"path": "rootfs"},
            "annotations": annotations,
            "mounts": [{"destination": "/proc", "type": "proc", "source": "proc"}],
            "x-engine-extension": {"kept": true}
        });
        std::fs::write(
            b.join("config.json"),
            serde_json::to_vec_pretty(&spec).unwrap(),
        )
        .unwrap();
        std::fs::set_permissions(
            b.join("config.json"),
            std::fs::Permissions::from_mode(0o640),
        )
        .unwrap();
        b
    }

    fn run(&self, cwd: &Path, args: &[&str]) -> Output {
        Command::new(BIN)
            .args(args)
            .current_dir(cwd)
            .env("GPUSLICE_CONFIG", self.dir.join("config.toml"))
            .env_remove("GPUSLICE_STATE_DIR")
            .output()
            .unwrap()
    }

    fn argv(&self) -> Option<Vec<String>> {
        std::fs::read_to_string(self.dir.join("argv"))
            .ok()
            .map(|s| s.lines().map(String::from).collect())
    }

    fn slices(&self) -> usize {
        self.state.lock().unwrap().admission().status().slices.len()
    }

    /// Slice directories left in the state directory.
    fn slice_dirs(&self) -> usize {
        std::fs::read_dir(self.dir.join("state"))
            .unwrap()
            .filter(|e| e.as_ref().unwrap().path().is_dir())
            .count()
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

fn read_spec(b: &Path) -> Value {
    serde_json::from_slice(&std::fs::read(b.join("config.json")).unwrap()).unwrap()
}

fn env_of(spec: &Value) -> Vec<String> {
    spec["process"]["env"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap().to_string())
        .collect()
}

#[test]
fn nothing_asked_passes_through_with_config_untouched() {
    let n = Node::new("plain", true, "");
    let b = n.bundle("b", json!({"org.example/x": "y"}), &["PATH=/bin"]);
    let before = std::fs::read(b.join("config.json")).unwrap();
    let ino = std::fs::metadata(b.join("config.json")).unwrap().ino();
    let args = [
        "--root",
        "/run/r",
        "--log",
        "/nonexistent/log",
        "--log-format",
        "json",
        "create",
        "--bundle",
        b.to_str().unwrap(),
        "--pid-file",
        "p",
        "c1",
    ];
    let o = n.run(&n.dir, &args);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(n.argv().unwrap(), args, "argv[1..] identical");
    assert_eq!(std::fs::read(b.join("config.json")).unwrap(), before);
    assert_eq!(
        std::fs::metadata(b.join("config.json")).unwrap().ino(),
        ino,
        "not rewritten"
    );
    assert_eq!(n.slices(), 0);
}

#[test]
fn other_subcommands_pass_through_and_exit_status_is_kept() {
    let n = Node::new("pass", true, "");
    for args in [
        &["state", "c1"][..],
        &["--debug", "delete", "--force", "c1"],
        &["--version"],
        &["kill", "c1", "KILL"],
    ] {
        std::fs::write(n.dir.join("exit"), "7").unwrap();
        let o = n.run(&n.dir, args);
        assert_eq!(o.status.code(), Some(7), "{args:?}");
        assert_eq!(n.argv().unwrap(), args);
    }
}

#[test]
fn own_leading_options_are_removed() {
    let n = Node::new("own", true, "");
    let cfg = n.dir.join("config.toml");
    let o = Command::new(BIN)
        .args(["--config", cfg.to_str().unwrap(), "--state-dir"])
        .arg(n.dir.join("state"))
        .args(["state", "c1"])
        .env_remove("GPUSLICE_CONFIG")
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(n.argv().unwrap(), ["state", "c1"]);
}

#[test]
fn sandbox_is_never_edited() {
    let n = Node::new("sandbox", true, "");
    let b = n.bundle(
        "b",
        json!({"io.kubernetes.cri.container-type": "sandbox", "gpuslice.io/memory": "1Gi"}),
        &[],
    );
    let before = std::fs::read(b.join("config.json")).unwrap();
    let o = n.run(&b, &["create", "sb"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(std::fs::read(b.join("config.json")).unwrap(), before);
    assert_eq!(n.slices(), 0);
}

#[test]
fn slice_request_is_admitted_and_spec_edited() {
    let n = Node::new("edit", true, "");
    let b = n.bundle(
        "b",
        json!({"gpuslice.io/memory": "1Gi", "gpuslice.io/compute": "30"}),
        &["PATH=/bin", "LD_PRELOAD=/lib/mine.so"],
    );
    std::fs::write(b.join("rootfs/etc/ld.so.preload"), "/lib/image.so\n").unwrap();
    // Bundle found from the working directory (no --bundle).
    let o = n.run(&b, &["--log", "l", "create", "c-edit"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(n.argv().unwrap(), ["--log", "l", "create", "c-edit"]);
    assert_eq!(
        std::fs::read_to_string(n.dir.join("cwd")).unwrap().trim(),
        b.canonicalize().unwrap().to_str().unwrap()
    );
    assert_eq!(n.slices(), 1);
    let slice_dir = n.dir.join("state/c-edit");
    let spec = read_spec(&b);
    assert_eq!(
        spec["x-engine-extension"]["kept"], true,
        "unknown fields kept"
    );
    let mode = std::fs::metadata(b.join("config.json")).unwrap().mode() & 0o777;
    assert_eq!(mode, 0o640, "file mode kept");
    let mounts = spec["mounts"].as_array().unwrap();
    let find = |d: &str| {
        mounts
            .iter()
            .find(|m| m["destination"] == d)
            .unwrap_or_else(|| panic!("no mount at {d}: {mounts:?}"))
            .clone()
    };
    let has = |m: &Value, o: &str| m["options"].as_array().unwrap().iter().any(|x| x == o);
    let lib = find("/usr/lib/gpuslice/libgpuslice.so");
    assert!(has(&lib, "ro") && has(&lib, "bind"));
    assert_eq!(
        lib["source"],
        n.dir.join("libgpuslice.so").to_str().unwrap()
    );
    let dir = find("/run/gpuslice");
    assert!(has(&dir, "ro"));
    assert_eq!(dir["source"], slice_dir.to_str().unwrap());
    let usage = find("/run/gpuslice/usage");
    assert!(has(&usage, "rw"));
    let pos = |d: &str| mounts.iter().position(|m| m["destination"] == d).unwrap();
    assert!(
        pos("/run/gpuslice/usage") > pos("/run/gpuslice"),
        "usage on top"
    );
    let pre = find("/etc/ld.so.preload");
    assert!(has(&pre, "ro"));
    assert_eq!(
        std::fs::read_to_string(pre["source"].as_str().unwrap()).unwrap(),
        "/usr/lib/gpuslice/libgpuslice.so\n/lib/image.so\n"
    );
    let env = env_of(&spec);
    assert!(env.contains(&"GPUSLICE_SLICE_DIR=/run/gpuslice".to_string()));
    assert!(env.contains(&"LD_PRELOAD=/usr/lib/gpuslice/libgpuslice.so:/lib/mine.so".to_string()));
    assert!(env
        .iter()
        .any(|e| e.starts_with("CUDA_VISIBLE_DEVICES=GPU-")));
    for (stage, sub) in [
        ("createRuntime", "create-runtime"),
        ("poststop", "poststop"),
    ] {
        let h = &spec["hooks"][stage][0];
        assert_eq!(h["path"], n.dir.join("gpuslice-hook").to_str().unwrap());
        let args: Vec<&str> = h["args"]
            .as_array()
            .unwrap()
            .iter()
            .map(|a| a.as_str().unwrap())
            .collect();
        assert_eq!(args.last(), Some(&sub));
        assert!(args.windows(2).any(|w| w == ["--slice-id", "c-edit"]));
        assert!(args
            .windows(2)
            .any(|w| w[0] == "--state-dir" && w[1] == n.dir.join("state").to_str().unwrap()));
    }
}

#[test]
fn bad_request_fails_with_the_cause_and_leaves_nothing() {
    let n = Node::new("bad", true, "");
    let b = n.bundle("b", json!({"gpuslice.io/memory": "12Q"}), &[]);
    let before = std::fs::read(b.join("config.json")).unwrap();
    let log = n.dir.join("log.json");
    let o = n.run(
        &n.dir,
        &[
            "--log",
            log.to_str().unwrap(),
            "--log-format",
            "json",
            "create",
            "-b",
            b.to_str().unwrap(),
            "c-bad",
        ],
    );
    assert_eq!(o.status.code(), Some(1));
    let err = stderr(&o);
    assert!(
        err.contains("gpuslice-runtime: gpuslice.io/memory=\"12Q\": unknown unit"),
        "{err}"
    );
    let line: Value = serde_json::from_str(
        std::fs::read_to_string(&log)
            .unwrap()
            .lines()
            .last()
            .unwrap(),
    )
    .unwrap();
    assert_eq!(line["level"], "error");
    assert!(line["msg"]
        .as_str()
        .unwrap()
        .contains("gpuslice.io/memory=\"12Q\""));
    assert!(line["time"].as_str().unwrap().ends_with('Z'));
    assert!(n.argv().is_none(), "low-level runtime never ran");
    assert_eq!(std::fs::read(b.join("config.json")).unwrap(), before);
    assert_eq!((n.slices(), n.slice_dirs()), (0, 0));
}

#[test]
fn refused_admission_names_the_cause() {
    let n = Node::new("refused", true, "");
    for (k, v) in [
        ("gpuslice.io/memory", "100Gi"),
        ("gpuslice.io/devices", "GPU-nope"),
    ] {
        let b = n.bundle("b", json!({k: v}), &[]);
        let o = n.run(&b, &["create", "c-ref"]);
        assert_eq!(o.status.code(), Some(1));
        let err = stderr(&o);
        assert!(err.contains("refused"), "{err}");
        // The brief: a bad request's message names the key, the value and the reason.
        assert!(
            err.contains(&format!("{k}=\"{v}\"")),
            "key and value named: {err}"
        );
        assert!(n.argv().is_none());
        assert_eq!((n.slices(), n.slice_dirs()), (0, 0));
    }
}

#[test]
fn arbiter_down_fails_closed_by_default() {
    let n = Node::new("down", false, "");
    let b = n.bundle("b", json!({"gpuslice.io/memory": "1Gi"}), &[]);
    let before = std::fs::read(b.join("config.json")).unwrap();
    let o = n.run(&b, &["create", "c-down"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("cannot reach the arbiter"),
        "{}",
        stderr(&o)
    );
    assert!(n.argv().is_none());
    assert_eq!(std::fs::read(b.join("config.json")).unwrap(), before);
}

#[test]
fn arbiter_down_with_fail_open_starts_with_a_warning() {
    let n = Node::new("open", false, "fail = \"open\"");
    let b = n.bundle("b", json!({"gpuslice.io/memory": "1Gi"}), &[]);
    let o = n.run(&b, &["create", "c-open"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stderr(&o).contains("warning") && stderr(&o).contains("fail = \"open\""));
    let env = env_of(&read_spec(&b));
    assert!(env.contains(&"GPUSLICE_MEMORY=1Gi".to_string()), "{env:?}");
    assert!(env.contains(&"LD_PRELOAD=/usr/lib/gpuslice/libgpuslice.so".to_string()));
    assert!(!env.iter().any(|e| e.starts_with("GPUSLICE_SLICE_DIR")));
    assert!(read_spec(&b).get("hooks").is_none());
}

#[test]
fn failed_create_releases_the_slice() {
    let n = Node::new("crash", true, "");
    let b = n.bundle("b", json!({"gpuslice.io/memory": "1Gi"}), &[]);
    std::fs::write(n.dir.join("exit"), "3").unwrap();
    let o = n.run(&b, &["create", "c-crash"]);
    assert_eq!(o.status.code(), Some(3), "the runtime's status");
    assert!(
        stderr(&o).contains("slice \"c-crash\" released"),
        "{}",
        stderr(&o)
    );
    assert_eq!((n.slices(), n.slice_dirs()), (0, 0));
}

#[test]
fn foreground_run_releases_when_the_container_ends() {
    let n = Node::new("run", true, "");
    let b = n.bundle("b", json!({"gpuslice.io/memory": "1Gi"}), &[]);
    let o = n.run(&b, &["run", "c-run"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!((n.slices(), n.slice_dirs()), (0, 0));
    let b2 = n.bundle("b2", json!({"gpuslice.io/memory": "1Gi"}), &[]);
    let o = n.run(&b2, &["run", "-d", "c-run-d"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(n.slices(), 1, "detached: kept until poststop");
}

#[test]
fn missing_low_level_runtime_fails_before_admission() {
    let n = Node::new("nolow", true, "");
    let cfg = n.dir.join("config.toml");
    let text = std::fs::read_to_string(&cfg)
        .unwrap()
        .replace("fake-runc", "no-such-runc");
    std::fs::write(&cfg, text).unwrap();
    let b = n.bundle("b", json!({"gpuslice.io/memory": "1Gi"}), &[]);
    let o = n.run(&b, &["create", "c-nolow"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("low-level runtime") && stderr(&o).contains("not found"),
        "{}",
        stderr(&o)
    );
    assert_eq!((n.slices(), n.slice_dirs()), (0, 0));
}

#[test]
fn missing_interposer_fails_before_admission() {
    let n = Node::new("nolib", true, "");
    std::fs::remove_file(n.dir.join("libgpuslice.so")).unwrap();
    let b = n.bundle("b", json!({"gpuslice.io/memory": "1Gi"}), &[]);
    let o = n.run(&b, &["create", "c-nolib"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("interposer"), "{}", stderr(&o));
    assert_eq!((n.slices(), n.slice_dirs()), (0, 0));
}

/// Fail closed: an image the interposer cannot be preloaded in (no glibc, another architecture)
/// is refused before admission, naming the image and the reason; the low-level runtime never
/// runs. `fail = "open"` does not open this: it is about the arbiter, not the image.
#[test]
fn an_image_the_interposer_cannot_load_in_is_refused() {
    for (tag, config) in [("noload", ""), ("noload-open", "fail = \"open\"")] {
        let n = Node::new(tag, tag == "noload", config);
        let asked = json!({
            "gpuslice.io/memory": "1Gi",
            "io.kubernetes.cri.image-name": "docker.io/library/alpine:3.20"
        });
        let b = n.bundle("b", asked, &[]);
        std::fs::remove_file(b.join("rootfs/lib64/libc.so.6")).unwrap();
        let o = n.run(&b, &["create", "c-noload"]);
        assert_eq!(o.status.code(), Some(1));
        let e = stderr(&o);
        assert!(
            e.contains("image \"docker.io/library/alpine:3.20\": the interposer cannot be preloaded, refusing the container: the image has no glibc"),
            "{e}"
        );
        assert!(!n.dir.join("argv").exists(), "the low-level runtime ran");
        assert_eq!((n.slices(), n.slice_dirs()), (0, 0));
        // Another architecture's libc; no image annotation: the root filesystem is named.
        let b = n.bundle("arm", json!({"gpuslice.io/memory": "1Gi"}), &[]);
        std::fs::write(b.join("rootfs/lib64/libc.so.6"), minimal_elf(183)).unwrap();
        let o = n.run(&b, &["create", "c-arm"]);
        assert_eq!(o.status.code(), Some(1));
        let e = stderr(&o);
        assert!(
            e.contains(&format!("image {}", b.join("rootfs").display())),
            "{e}"
        );
        assert!(
            e.contains("/lib64/libc.so.6 in the image is for ELF machine 183"),
            "{e}"
        );
        assert_eq!((n.slices(), n.slice_dirs()), (0, 0));
    }
}

/// The slice's owner as the arbiter holds it.
fn owner_of(n: &Node, id: &str) -> Option<gpuslice_api::Owner> {
    n.state
        .lock()
        .unwrap()
        .admission()
        .status()
        .slices
        .into_iter()
        .find(|s| s.slice_id == id)
        .map(|s| s.owner)
}

#[test]
fn create_with_pid_file_binds_itself_and_delete_releases() {
    let n = Node::new("pidfile", true, "");
    let b = n.bundle("b", json!({"gpuslice.io/memory": "1Gi"}), &[]);
    // runc would write the container's pid here; the fake runtime does not, so the test does.
    let pid_file = n.dir.join("init.pid");
    let me = std::process::id();
    std::fs::write(&pid_file, me.to_string()).unwrap();
    let pf = pid_file.to_str().unwrap();
    let o = n.run(&b, &["--root", "/r", "create", "--pid-file", pf, "c-pf"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(
        n.argv().unwrap(),
        ["--root", "/r", "create", "--pid-file", pf, "c-pf"]
    );
    let spec = read_spec(&b);
    assert!(
        spec.get("hooks")
            .is_none_or(|h| !h.to_string().contains("gpuslice-hook")),
        "no hook processes when the runtime binds and releases itself: {}",
        spec["hooks"]
    );
    assert!(
        env_of(&spec).contains(&"GPUSLICE_SLICE_DIR=/run/gpuslice".to_string()),
        "still edited"
    );
    let owner = owner_of(&n, "c-pf").expect("admitted");
    assert_eq!(owner.container_id.as_deref(), Some("c-pf"));
    assert_eq!(owner.pid, Some(me), "bound to runc's pid");
    assert!(owner.cgroup.is_some(), "bound to the pid's cgroup");

    // A delete that fails (container still running) keeps the slice.
    std::fs::write(n.dir.join("exit"), "1").unwrap();
    let o = n.run(&b, &["--root", "/r", "delete", "c-pf"]);
    assert_eq!(o.status.code(), Some(1));
    assert_eq!((n.slices(), n.slice_dirs()), (1, 1));
    // A successful delete releases it, with runc's argv unchanged.
    std::fs::remove_file(n.dir.join("exit")).unwrap();
    let o = n.run(&b, &["--root", "/r", "delete", "--force", "c-pf"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(
        n.argv().unwrap(),
        ["--root", "/r", "delete", "--force", "c-pf"]
    );
    assert_eq!((n.slices(), n.slice_dirs()), (0, 0));
    // Deleting it again (or any container without a slice) is a plain pass-through.
    let o = n.run(&b, &["delete", "c-pf"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(n.argv().unwrap(), ["delete", "c-pf"]);
}

#[test]
fn delete_never_releases_a_slice_the_container_does_not_own() {
    let n = Node::new("notown", true, "");
    let resp = n
        .state
        .lock()
        .unwrap()
        .handle(gpuslice_api::Request::Admit {
            slice_id: "c-bare".into(),
            request: gpuslice_api::SliceRequest::default(),
            owner: gpuslice_api::Owner {
                container_id: None,
                pid: Some(std::process::id()),
                cgroup: None,
                pod: None,
            },
        });
    assert!(
        matches!(resp, gpuslice_api::Response::Admitted { .. }),
        "{resp:?}"
    );
    let o = n.run(&n.dir, &["delete", "c-bare"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(
        n.slices(),
        1,
        "a bare process's slice of the same name stays"
    );
}

#[test]
fn failed_bind_after_create_deletes_the_container_and_releases() {
    let n = Node::new("badpid", true, "");
    let b = n.bundle("b", json!({"gpuslice.io/memory": "1Gi"}), &[]);
    let pid_file = n.dir.join("init.pid");
    std::fs::write(&pid_file, "not-a-pid").unwrap();
    let pf = pid_file.to_str().unwrap();
    let o = n.run(&b, &["--root", "/r", "create", "--pid-file", pf, "c-bad"]);
    assert_eq!(o.status.code(), Some(1));
    let err = stderr(&o);
    assert!(
        err.contains("pid file") && err.contains("not-a-pid") && err.contains("released"),
        "{err}"
    );
    // The container runc created was deleted again, with the same global options.
    assert_eq!(
        n.argv().unwrap(),
        ["--root", "/r", "delete", "--force", "c-bad"]
    );
    assert_eq!((n.slices(), n.slice_dirs()), (0, 0));
}

/// `--help` / `--version` say what gpuslice-runtime is and which low-level runtime it wraps,
/// then pass through to it; with the low-level runtime missing they still answer (exit 0) and
/// name what is missing, so a node without runc can tell what it lacks.
#[test]
fn help_and_version_answer_without_the_low_level_runtime() {
    let n = Node::new("help", false, "");
    for flag in ["--help", "--version", "-v"] {
        std::fs::write(n.dir.join("exit"), "0").unwrap();
        let o = n.run(&n.dir, &[flag]);
        assert!(o.status.success(), "{flag}: {}", stderr(&o));
        let out = String::from_utf8_lossy(&o.stdout);
        assert!(out.starts_with("gpuslice-runtime "), "{flag}: {out}");
        assert!(
            out.contains("low-level runtime: ") && out.contains("fake-runc"),
            "{out}"
        );
        assert_eq!(
            n.argv().unwrap(),
            [flag],
            "passed through to the low-level runtime"
        );
    }
    // The configured low-level runtime does not exist.
    let cfg = n.dir.join("config.toml");
    let text = std::fs::read_to_string(&cfg).unwrap();
    std::fs::write(&cfg, text.replace("fake-runc", "no-such-runc")).unwrap();
    let o = n.run(&n.dir, &["--help"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.contains("low-level runtime: missing:") && out.contains("no-such-runc"),
        "{out}"
    );
    // A real command still fails, naming it.
    let o = n.run(&n.dir, &["state", "c1"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("no-such-runc"), "{}", stderr(&o));
}

/// A container that containerd's CRI plugin creates carries its Pod in the spec's annotations:
/// the slice's owner holds namespace, Pod and container (the arbiter's metric labels), and a
/// later bind keeps them.
#[test]
fn a_cri_containers_pod_is_recorded_with_its_slice() {
    let n = Node::new("pod", true, "");
    let b = n.bundle(
        "b",
        json!({
            "gpuslice.io/memory": "1Gi",
            "io.kubernetes.cri.container-type": "container",
            "io.kubernetes.cri.sandbox-namespace": "ml",
            "io.kubernetes.cri.sandbox-name": "trainer-7f9c",
            "io.kubernetes.cri.container-name": "train",
        }),
        &[],
    );
    let pid_file = n.dir.join("init.pid");
    std::fs::write(&pid_file, std::process::id().to_string()).unwrap();
    let pf = pid_file.to_str().unwrap();
    let o = n.run(&b, &["create", "--pid-file", pf, "c-pod"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let owner = owner_of(&n, "c-pod").expect("admitted");
    assert_eq!(owner.pid, Some(std::process::id()), "bound");
    let pod = owner.pod.expect("the Pod");
    assert_eq!(
        (
            pod.namespace.as_str(),
            pod.name.as_str(),
            pod.container.as_str()
        ),
        ("ml", "trainer-7f9c", "train")
    );
    // Outside Kubernetes: none.
    let b = n.bundle("plain", json!({"gpuslice.io/memory": "1Gi"}), &[]);
    let o = n.run(&b, &["create", "c-plain"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(owner_of(&n, "c-plain").expect("admitted").pod, None);
}
