//! End to end on the simulated GPU: the real `gpuslice-arbiter` binary, `gpuslice run` with the
//! real interposer, workloads from `gpuslice-workloads`. Checks what only the whole chain shows:
//! `status` reads the memory a tenant holds, the metrics endpoint reports achieved shares for
//! `run` slices, the arbiter reclaims a SIGKILLed tenant's memory, and slices go away with their
//! commands. Needs the simulated driver, the interposer and the workloads built in the same
//! profile (`cargo build -p gpuslice-sim-cuda -p gpuslice-sim-nvml -p gpuslice-interposer
//! -p gpuslice-workloads -p gpuslice-arbiter`).

mod common;

use common::Node;
use gpuslice_test_support::wait::wait_for;
use gpuslice_test_support::{profile_dir, NodeConfig};
use std::process::{Command, Stdio};
use std::time::Duration;

const GI: u64 = 1 << 30;

impl Node {
    fn start(tag: &str) -> Node {
        Node::with(
            &format!("h8e-{tag}"),
            NodeConfig {
                config: "[admission]\ncontext_reserve = \"16Mi\"\nmodule_allowance = \"0\"\n"
                    .into(),
                metrics: true,
                needs: vec!["gpuslice-workload"],
                ..NodeConfig::default()
            },
        )
    }
}

fn workload() -> String {
    profile_dir()
        .join("gpuslice-workload")
        .display()
        .to_string()
}

#[test]
fn run_status_metrics_and_reclaim_on_the_simulated_gpu() {
    let n = Node::start("all");
    let w = workload();

    // Two saturating tenants, 30/70: the metrics endpoint reports their achieved shares.
    let sat = |compute: &str| {
        n.gpuslice(&[
            "run",
            "--memory",
            "1Gi",
            "--compute",
            compute,
            "--",
            &w,
            "--via",
            "dlsym",
            "saturate",
            "--kernel-us",
            "1000",
            "--seconds",
            "3",
        ])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap()
    };
    let (a, b) = (sat("30"), sat("70"));
    std::thread::sleep(Duration::from_millis(2200));
    let text = n.scrape();
    let status = n.status_json();
    let slices = status["devices"][0]["slices"].as_array().unwrap().clone();
    assert_eq!(slices.len(), 2, "{status}");
    let share = |guar: u64| -> f64 {
        let id = slices
            .iter()
            .find(|s| s["compute_guaranteed"] == guar)
            .unwrap()["slice_id"]
            .as_str()
            .unwrap()
            .to_string();
        let key = format!(
            "gpuslice_slice_achieved_share_ratio{{slice=\"{id}\",device=\"0\",window=\"1s\",\
             namespace=\"\",pod=\"\",container=\"\"}} "
        );
        let line = text
            .lines()
            .find(|l| l.starts_with(&key))
            .unwrap_or_else(|| panic!("{key} in {text}"));
        line[key.len()..].parse().unwrap()
    };
    let (s30, s70) = (share(30), share(70));
    assert!(s30 > 0.05 && s70 > s30, "achieved 1s: {s30} / {s70}");
    for c in [a, b] {
        let o = c.wait_with_output().unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stdout));
    }
    wait_for("run slices released", Duration::from_secs(5), || {
        n.status_json()["devices"][0]["slices"]
            .as_array()
            .unwrap()
            .is_empty()
    });

    // A tenant holding its whole 1Gi cap; status reads it; SIGKILL it and the arbiter gives the
    // memory back while the slice (its gpuslice run) lives on.
    let script = format!(
        "{w} --via dlsym fill --chunk 256Mi --hold-ms 60000 & echo $! > victim; wait; sleep 30"
    );
    let mut holder = n
        .gpuslice(&["run", "--memory", "1Gi", "--", "sh", "-c", &script])
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let used = |n: &Node| n.status_json()["devices"][0]["slices"][0]["memory_used"].as_u64();
    wait_for("1Gi in use", Duration::from_secs(20), || {
        used(&n) == Some(GI)
    });
    let procs = n.status_json()["devices"][0]["slices"][0]["processes"].clone();
    assert_eq!(procs.as_array().map(Vec::len), Some(1), "{procs}");
    let victim: i32 = std::fs::read_to_string(n.dir.join("victim"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    // SAFETY: kill on a pid our test's own process tree just started and recorded.
    unsafe { libc::kill(victim, libc::SIGKILL) };
    // The promise is 1 s; loaded test machines get slack.
    wait_for("reclaimed memory", Duration::from_secs(5), || {
        used(&n) == Some(0)
    });
    assert!(n.scrape().contains("gpuslice_reclaimed_processes_total 1"));
    // SAFETY: kill on our own unreaped child.
    unsafe { libc::kill(holder.id() as i32, libc::SIGTERM) };
    let st = holder.wait().unwrap();
    assert_eq!(st.code(), Some(128 + libc::SIGTERM));
}

/// The command of a `gpuslice run` sees only its own slice, where the state directory was: no
/// socket, no other slice, `limits` and `lease` read-only, `usage` writable; another local
/// user cannot even enter the state directory. Needs root (a mount namespace; CI runs as root).
#[test]
fn the_command_sees_only_its_slice_and_other_users_nothing() {
    let n = Node::start("view");
    let state = n.dir.join("state");
    let other = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", "ls"])
        .arg(&state)
        .output()
        .unwrap();
    assert!(!other.status.success(), "another user listed the state dir");
    assert!(
        String::from_utf8_lossy(&other.stderr).contains("Permission denied"),
        "{}",
        String::from_utf8_lossy(&other.stderr)
    );
    let script = r#"d="$GPUSLICE_SLICE_DIR"
echo "dir=$d"
ls -A "$d" | tr '\n' ' '; echo
if true > "$d/limits" 2>/dev/null; then echo limits=writable; else echo limits=read-only; fi
if true >> "$d/lease" 2>/dev/null; then echo lease=writable; else echo lease=read-only; fi
if true >> "$d/usage"; then echo usage=writable; fi
"#;
    let o = n
        .gpuslice(&["run", "--memory", "1Gi", "--", "sh", "-c", script])
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(
        o.status.success(),
        "{out}{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let dir = state.canonicalize().unwrap();
    assert!(out.contains(&format!("dir={}\n", dir.display())), "{out}");
    assert!(
        !out.contains("arbiter.sock"),
        "the socket is visible: {out}"
    );
    assert!(out.contains("limits ") && out.contains("usage "), "{out}");
    assert!(out.contains("limits=read-only"), "{out}");
    assert!(out.contains("lease=read-only"), "{out}");
    assert!(out.contains("usage=writable"), "{out}");
    // The host's view is unchanged.
    assert!(state.join("arbiter.sock").exists());
}

/// Issue 14 item 3: two compute-only `gpuslice run --compute N` slices run beside a capped one
/// on one 8 GiB device. Each is told (`cuMemGetInfo` total) and held to its share of what the
/// capped slice was not promised, and the capped neighbour still gets its whole cap while both
/// hold all of theirs.
#[test]
fn compute_only_slices_share_what_no_capped_slice_was_promised() {
    let n = Node::start("be");
    let w = workload();
    const MI: u64 = 1 << 20;
    let reserve = 16 * MI; // config: context_reserve 16Mi × 1 process
    let share = (8 * GI - (2 * GI + reserve) - 2 * reserve) / 2;

    // The capped slice is admitted first and waits for `go` before filling its cap.
    let capped = n
        .gpuslice(&[
            "run",
            "--memory",
            "2Gi",
            "--",
            "sh",
            "-c",
            &format!(
                "while [ ! -e go ]; do sleep 0.05; done; exec {w} --via dlsym fill --chunk 256Mi"
            ),
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let slices = |n: &Node| {
        n.status_json()["devices"][0]["slices"]
            .as_array()
            .unwrap()
            .clone()
    };
    wait_for("the capped slice", Duration::from_secs(20), || {
        slices(&n).len() == 1
    });
    // Both compute-only slices are admitted before either asks what it has.
    let be = |name: &str, compute: &str| {
        let script = format!(
            "while [ ! -e go-be ]; do sleep 0.05; done; {w} --via dlsym info > {name}.info && \
             exec {w} --via dlsym fill --chunk 8Mi --hold-ms 5000 > {name}.fill"
        );
        n.gpuslice(&["run", "--compute", compute, "--", "sh", "-c", &script])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    };
    let (b30, b70) = (be("c30", "30"), be("c70", "70"));
    wait_for("three slices", Duration::from_secs(20), || {
        slices(&n).len() == 3
    });
    let st = slices(&n);
    let mut caps: Vec<(Option<u64>, Option<u64>, Option<u64>)> = st
        .iter()
        .map(|s| {
            (
                s["compute_guaranteed"].as_u64(),
                s["memory_cap"].as_u64(),
                s["memory_best_effort"].as_u64(),
            )
        })
        .collect();
    caps.sort();
    assert_eq!(
        caps,
        vec![
            (None, Some(2 * GI), None),
            (Some(30), None, Some(share)),
            (Some(70), None, Some(share)),
        ],
        "{st:?}"
    );
    std::fs::write(n.dir.join("go-be"), "").unwrap();
    let read = |f: &str| std::fs::read_to_string(n.dir.join(f)).unwrap_or_default();
    wait_for(
        "both best-effort slices full",
        Duration::from_secs(30),
        || read("c30.fill").contains("allocations=") && read("c70.fill").contains("allocations="),
    );
    // While both hold their whole share, the capped one fills its cap.
    std::fs::write(n.dir.join("go"), "").unwrap();
    let o = capped.wait_with_output().unwrap();
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(
        o.status.success(),
        "{out}{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(
        out.contains(&format!(
            "bytes={} refusal=CUDA_ERROR_OUT_OF_MEMORY",
            2 * GI
        )),
        "capped: {out}"
    );
    for (c, name) in [(b30, "c30"), (b70, "c70")] {
        let o = c.wait_with_output().unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let info = read(&format!("{name}.info"));
        assert!(
            info.contains(&format!("meminfo_total={share}\n")),
            "{name}: {info}"
        );
        let fill = read(&format!("{name}.fill"));
        assert!(
            fill.contains(&format!(
                "bytes={share} refusal=CUDA_ERROR_OUT_OF_MEMORY free_after=0 total={share}"
            )),
            "{name}: {fill}"
        );
    }
}
