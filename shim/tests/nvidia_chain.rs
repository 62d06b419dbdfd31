//! `gpuslice-runtime` chained to NVIDIA's toolkit (`runtime.low_level =
//! "nvidia-container-runtime"`, looked up in `PATH`), without root: a stand-in
//! `nvidia-container-runtime` records its argv, working directory and the bundle's config.json
//! as it receives them. Checks that gpuslice's edit arrives together with everything NVIDIA's
//! pieces put in the spec (CDI devices, `cdi.k8s.io/*` annotations, NVIDIA's hooks, mounts and
//! environment), that every argument reaches it unchanged, and that a container asking for
//! nothing reaches it byte for byte (docs/nvidia-toolkit.md).

use gpuslice_oci::elf_versions::minimal_elf;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::{Arc, Mutex};

use gpuslice_arbiter::server::{bind, serve, State};
use gpuslice_arbiter::store::Store;
use gpuslice_arbiter::{DeviceInventory, Policy, StaticInventory};
use serde_json::{json, Value};

const GI: u64 = 1 << 30;
const BIN: &str = env!("CARGO_BIN_EXE_gpuslice-runtime");

/// A temporary node: state directory with a served arbiter, fake interposer and hook, and a
/// directory holding the stand-in `nvidia-container-runtime`.
struct Node {
    dir: PathBuf,
    state: Arc<Mutex<State>>,
}

impl Node {
    fn new(tag: &str) -> Node {
        let dir = std::env::temp_dir().join(format!("gs-nvchain-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("state")).unwrap();
        std::fs::create_dir_all(dir.join("nvbin")).unwrap();
        // A header-only x86-64 ELF: the create-time check reads what the interposer needs.
        std::fs::write(dir.join("libgpuslice.so"), minimal_elf(62)).unwrap();
        std::fs::write(dir.join("gpuslice-hook"), b"fake").unwrap();
        let standin = dir.join("nvbin/nvidia-container-runtime");
        std::fs::write(
            &standin,
            format!(
                r#"#!/bin/sh
# stand-in for NVIDIA's nvidia-container-runtime: records what it is given
printf '%s\n' "$@" > {d}/nv-argv
pwd > {d}/nv-cwd
b=.
prev=
for a in "$@"; do
    case "$prev" in --bundle|-b|-bundle) b=$a ;; --pid-file) pidfile=$a ;; esac
    case "$a" in --bundle=*) b=${{a#--bundle=}} ;; esac
    prev=$a
done
if [ -f "$b/config.json" ]; then cp "$b/config.json" {d}/nv-config.json; fi
# like runc: the container's pid (here a live process, the caller) into --pid-file
if [ -n "${{pidfile:-}}" ]; then echo $PPID > "$pidfile"; fi
exit 0
"#,
                d = dir.display()
            ),
        )
        .unwrap();
        std::fs::set_permissions(&standin, std::fs::Permissions::from_mode(0o755)).unwrap();
        std::fs::write(
            dir.join("config.toml"),
            format!(
                "state_dir = \"{d}/state\"\ninterposer = \"{d}/libgpuslice.so\"\n\
                 [runtime]\nlow_level = \"nvidia-container-runtime\"\ninject_devices = false\n\
                 hook = \"{d}/gpuslice-hook\"\n",
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
        let listener = bind(&dir.join("state/arbiter.sock")).unwrap();
        let s = Arc::clone(&state);
        std::thread::spawn(move || serve(listener, s));
        Node { dir, state }
    }

    /// A bundle whose config.json carries what containerd and NVIDIA's device plugin / CDI put
    /// there for a GPU container, plus `extra` annotations.
    fn bundle(&self, name: &str, extra: &[(&str, &str)]) -> PathBuf {
        let b = self.dir.join(name);
        std::fs::create_dir_all(b.join("rootfs/etc")).unwrap();
        // A glibc image: the interposer can be preloaded in it.
        std::fs::create_dir_all(b.join("rootfs/lib64")).unwrap();
        std::fs::write(b.join("rootfs/lib64/libc.so.6"), minimal_elf(62)).unwrap();
        let mut spec = nvidia_spec();
        for (k, v) in extra {
            spec["annotations"][*k] = json!(v);
        }
        std::fs::write(
            b.join("config.json"),
            serde_json::to_vec_pretty(&spec).unwrap(),
        )
        .unwrap();
        b
    }

    /// Runs gpuslice-runtime with the stand-in first in `PATH` (or, with `standin` false,
    /// a `PATH` without it).
    fn run(&self, cwd: &Path, args: &[&str], standin: bool) -> Output {
        let path = std::env::var("PATH").unwrap_or_default();
        let path = if standin {
            format!("{}:{path}", self.dir.join("nvbin").display())
        } else {
            path
        };
        Command::new(BIN)
            .args(args)
            .current_dir(cwd)
            .env("PATH", path)
            .env("GPUSLICE_CONFIG", self.dir.join("config.toml"))
            .env_remove("GPUSLICE_STATE_DIR")
            .output()
            .unwrap()
    }

    fn recorded(&self, what: &str) -> Option<String> {
        std::fs::read_to_string(self.dir.join(what)).ok()
    }

    fn seen_spec(&self) -> Value {
        serde_json::from_str(&self.recorded("nv-config.json").expect("stand-in ran")).unwrap()
    }

    fn slices(&self) -> usize {
        self.state.lock().unwrap().admission().status().slices.len()
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// What a GPU container's spec holds before gpuslice sees it on a node with NVIDIA's toolkit:
/// a device injected by CDI (node, cgroup rule, library mount, NVIDIA's CDI hook), the
/// device plugin's CDI annotation, the legacy prestart hook and NVIDIA's environment.
fn nvidia_spec() -> Value {
    json!({
        "ociVersion": "1.1.0",
        "process": {
            "args": ["python", "serve.py"],
            "cwd": "/",
            "env": [
                "PATH=/usr/local/bin:/usr/bin:/bin",
                "NVIDIA_VISIBLE_DEVICES=all",
                "NVIDIA_DRIVER_CAPABILITIES=compute,utility",
                "LD_PRELOAD=/opt/app/libtrace.so"
            ]
        },
        "root": {"path": "rootfs"},
        "annotations": {
            "io.kubernetes.cri.container-type": "container",
            "io.kubernetes.cri.container-name": "server",
            "cdi.k8s.io/nvidia-device-plugin_GPU-1234": "nvidia.com/gpu=0",
            "nvidia.com/extra": "kept"
        },
        "mounts": [
            {"destination": "/proc", "type": "proc", "source": "proc"},
            {"destination": "/usr/lib/x86_64-linux-gnu/libcuda.so.550.54.15",
             "type": "bind", "source": "/usr/lib/x86_64-linux-gnu/libcuda.so.550.54.15",
             "options": ["ro", "nosuid", "nodev", "bind"]}
        ],
        "hooks": {
            "prestart": [
                {"path": "/usr/bin/nvidia-container-runtime-hook",
                 "args": ["nvidia-container-runtime-hook", "prestart"]}
            ],
            "createContainer": [
                {"path": "/usr/bin/nvidia-cdi-hook",
                 "args": ["nvidia-cdi-hook", "update-ldcache", "--folder", "/usr/lib/x86_64-linux-gnu"]}
            ]
        },
        "linux": {
            "devices": [
                {"path": "/dev/nvidia0", "type": "c", "major": 195, "minor": 0, "fileMode": 438},
                {"path": "/dev/nvidiactl", "type": "c", "major": 195, "minor": 255, "fileMode": 438}
            ],
            "resources": {
                "devices": [
                    {"allow": false, "access": "rwm"},
                    {"allow": true, "type": "c", "major": 195, "minor": 0, "access": "rwm"},
                    {"allow": true, "type": "c", "major": 195, "minor": 255, "access": "rwm"}
                ]
            },
            "namespaces": [{"type": "mount"}, {"type": "pid"}]
        },
        "x-engine-extension": {"kept": true}
    })
}

fn env_map(spec: &Value) -> Vec<(String, String)> {
    spec["process"]["env"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| {
            let (k, v) = v.as_str().unwrap().split_once('=').unwrap();
            (k.to_string(), v.to_string())
        })
        .collect()
}

fn env_get<'a>(env: &'a [(String, String)], key: &str) -> Option<&'a str> {
    env.iter()
        .rev()
        .find(|(k, _)| k == key)
        .map(|(_, v)| v.as_str())
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn the_edited_spec_reaches_nvidia_with_nvidias_own_pieces_kept() {
    let n = Node::new("edit");
    let b = n.bundle("b", &[("gpuslice.io/memory", "1Gi")]);
    let original = nvidia_spec();
    let pid_file = n.dir.join("init.pid");
    let args = [
        "--root",
        "/run/containerd/runc/k8s.io",
        "--log",
        "/nonexistent/log.json",
        "--log-format",
        "json",
        "--systemd-cgroup",
        "create",
        "--bundle",
        b.to_str().unwrap(),
        "--pid-file",
        pid_file.to_str().unwrap(),
        "--console-socket",
        "/tmp/pty.sock",
        "c1",
    ];
    let o = n.run(&n.dir, &args, true);
    assert!(o.status.success(), "{}", stderr(&o));
    // Every argument reaches NVIDIA's runtime unchanged and in order, from the same directory.
    let argv: Vec<String> = n
        .recorded("nv-argv")
        .unwrap()
        .lines()
        .map(String::from)
        .collect();
    assert_eq!(argv, args);
    assert_eq!(
        n.recorded("nv-cwd").unwrap().trim_end(),
        n.dir.canonicalize().unwrap().to_str().unwrap()
    );
    assert_eq!(n.slices(), 1);

    let seen = n.seen_spec();
    // gpuslice's edit is there.
    let env = env_map(&seen);
    let uuid = env_get(&env, "CUDA_VISIBLE_DEVICES").expect("CUDA_VISIBLE_DEVICES set");
    assert!(uuid.starts_with("GPU-"), "{uuid}");
    assert_eq!(env_get(&env, "GPUSLICE_SLICE_DIR"), Some("/run/gpuslice"));
    assert_eq!(
        env_get(&env, "LD_PRELOAD"),
        Some("/usr/lib/gpuslice/libgpuslice.so:/opt/app/libtrace.so"),
        "interposer first, the image's preload kept"
    );
    let dests: Vec<&str> = seen["mounts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["destination"].as_str().unwrap())
        .collect();
    for d in [
        "/usr/lib/gpuslice/libgpuslice.so",
        "/run/gpuslice",
        "/run/gpuslice/usage",
        "/etc/ld.so.preload",
    ] {
        assert!(dests.contains(&d), "mount {d} missing: {dests:?}");
    }
    // gpuslice's own hooks, where it adds any (docs/runtime.md), go to stages of their own
    // or after existing entries; NVIDIA's stages are compared below.

    // NVIDIA's pieces are kept: the legacy hook reads NVIDIA_VISIBLE_DEVICES, narrowed to the
    // GPU the arbiter assigned; its capabilities are untouched.
    assert_eq!(env_get(&env, "NVIDIA_VISIBLE_DEVICES"), Some(uuid));
    assert_eq!(
        env_get(&env, "NVIDIA_DRIVER_CAPABILITIES"),
        Some("compute,utility")
    );
    assert_eq!(env_get(&env, "PATH"), Some("/usr/local/bin:/usr/bin:/bin"));
    // Annotations (CDI's included) all there, unchanged.
    for (k, v) in original["annotations"].as_object().unwrap() {
        assert_eq!(&seen["annotations"][k], v, "annotation {k}");
    }
    assert_eq!(seen["annotations"]["gpuslice.io/memory"], "1Gi");
    // CDI-injected device nodes and cgroup rules: exactly as they were (gpuslice injects
    // nothing when runtime.inject_devices is false).
    assert_eq!(seen["linux"]["devices"], original["linux"]["devices"]);
    assert_eq!(seen["linux"]["resources"], original["linux"]["resources"]);
    assert_eq!(seen["linux"]["namespaces"], original["linux"]["namespaces"]);
    // NVIDIA's hooks: still there, first, unchanged.
    assert_eq!(seen["hooks"]["prestart"], original["hooks"]["prestart"]);
    assert_eq!(
        seen["hooks"]["createContainer"],
        original["hooks"]["createContainer"]
    );
    // NVIDIA's mounts: kept, in their order, ahead of gpuslice's.
    let orig_mounts = original["mounts"].as_array().unwrap();
    assert_eq!(
        &seen["mounts"].as_array().unwrap()[..orig_mounts.len()],
        &orig_mounts[..]
    );
    // Everything else untouched.
    assert_eq!(seen["process"]["args"], original["process"]["args"]);
    assert_eq!(seen["root"], original["root"]);
    assert_eq!(seen["x-engine-extension"], original["x-engine-extension"]);
}

#[test]
fn a_container_asking_for_nothing_reaches_nvidia_byte_for_byte() {
    let n = Node::new("plain");
    let b = n.bundle("b", &[]);
    let before = std::fs::read(b.join("config.json")).unwrap();
    let args = [
        "--root",
        "/run/containerd/runc/k8s.io",
        "create",
        "--bundle",
        b.to_str().unwrap(),
        "c2",
    ];
    let o = n.run(&b, &args, true);
    assert!(o.status.success(), "{}", stderr(&o));
    let argv: Vec<String> = n
        .recorded("nv-argv")
        .unwrap()
        .lines()
        .map(String::from)
        .collect();
    assert_eq!(argv, args);
    assert_eq!(
        std::fs::read(n.dir.join("nv-config.json")).unwrap(),
        before,
        "the stand-in saw the spec byte for byte"
    );
    assert_eq!(std::fs::read(b.join("config.json")).unwrap(), before);
    assert_eq!(n.slices(), 0);
}

#[test]
fn other_subcommands_reach_nvidia_unchanged() {
    let n = Node::new("other");
    for args in [
        &["--root", "/run/r", "state", "c1"][..],
        &["delete", "--force", "c1"],
        &["features"],
    ] {
        let o = n.run(&n.dir, args, true);
        assert!(o.status.success(), "{args:?}: {}", stderr(&o));
        let argv: Vec<String> = n
            .recorded("nv-argv")
            .unwrap()
            .lines()
            .map(String::from)
            .collect();
        assert_eq!(argv, args);
    }
}

#[test]
fn a_missing_nvidia_runtime_is_named_and_nothing_is_admitted() {
    let n = Node::new("missing");
    let b = n.bundle("b", &[("gpuslice.io/memory", "1Gi")]);
    let before = std::fs::read(b.join("config.json")).unwrap();
    let o = n.run(
        &n.dir,
        &["create", "--bundle", b.to_str().unwrap(), "c3"],
        false,
    );
    assert_eq!(o.status.code(), Some(1));
    let err = stderr(&o);
    assert!(
        err.contains("\"nvidia-container-runtime\" not found in PATH")
            && err.contains("runtime.low_level"),
        "{err}"
    );
    assert_eq!(std::fs::read(b.join("config.json")).unwrap(), before);
    assert_eq!(n.slices(), 0);
    assert!(n.recorded("nv-argv").is_none());
}
