//! A whole-GPU tenant never shares its GPU with a new slice, per GPU (issue 35): on a
//! simulated two-GPU node with the real arbiter, a CUDA process started outside gpuslice (no
//! slice, no interposer — what a Pod given `nvidia.com/gpu` by NVIDIA's device plugin is)
//! holds memory on GPU 0. The arbiter's backstop sees it through NVML, marks GPU 0
//! foreign-owned, refuses a slice listing GPU 0 naming the device and the pid, places a count
//! request on GPU 1, and reports the device in `status`, `gpuslice status`, its metrics and
//! its log. The slice that was on GPU 0 first stays (never killed). Once the process exits,
//! GPU 0 takes slices again.
//!
//! Needs `cargo build -p gpuslice-sim-cuda -p gpuslice-sim-nvml -p gpuslice-interposer
//! -p gpuslice-workloads -p gpuslice-arbiter -p gpuslice-cli` (the arbiter suite builds them).

use gpuslice_test_support::{profile_dir, NodeConfig, SimNode};
use std::io::{BufRead, BufReader};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

const GPU: &str = "name=Test GPU 8G,mem=8Gi,sms=16,cc=9.0";

struct Holder(Child);
impl Drop for Holder {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn admit(node: &SimNode, id: &str, request: &str) -> serde_json::Value {
    node.call(&format!(
        "{{\"version\":1,\"op\":\"admit\",\"slice_id\":\"{id}\",\"request\":{{{request}}}}}"
    ))
}

fn status(node: &SimNode) -> serde_json::Value {
    node.call("{\"version\":1,\"op\":\"status\"}")
}

/// Polls the arbiter's `status` until `f` holds (10 s).
fn wait_status(node: &SimNode, what: &str, f: impl Fn(&serde_json::Value) -> bool) {
    let t0 = Instant::now();
    loop {
        let s = status(node);
        if f(&s) {
            return;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "{what} within 10 s; status {s}; log:\n{}",
            node.log()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Value of the metric line starting with `series` (labels included), or `None`.
fn metric(page: &str, series: &str) -> Option<f64> {
    page.lines()
        .find(|l| l.starts_with(series))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

#[test]
fn a_whole_gpu_tenant_keeps_its_gpu_to_itself() {
    let node = SimNode::start(
        "foreign",
        NodeConfig {
            devices: format!("{GPU};{GPU}"),
            config: "[admission]\ncontext_reserve = \"16Mi\"\nmodule_allowance = \"0\"\n".into(),
            metrics: true,
            log_level: "info".into(),
            needs: vec!["gpuslice-workload", "gpuslice"],
            ..NodeConfig::default()
        },
    );
    let prof = profile_dir();
    // A slice on GPU 0 before anyone else.
    let r = admit(
        &node,
        "first",
        "\"memory\":\"1Gi\",\"devices\":{\"list\":[{\"index\":0}]}",
    );
    assert_eq!(r["result"], "admitted", "{r}");

    // The whole-GPU tenant: CUDA on GPU 0 without the interposer, holding 1 GiB.
    let mut c = node.command(prof.join("gpuslice-workload"));
    c.args([
        "--device",
        "0",
        "fill",
        "--chunk",
        "1Gi",
        "--hold-ms",
        "60000",
    ])
    .stdout(Stdio::piped());
    let mut holder = Holder(c.spawn().expect("workload"));
    let pid = holder.0.id();
    let mut line = String::new();
    BufReader::new(holder.0.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert!(line.contains("allocations="), "it holds memory: {line}");
    wait_status(&node, "GPU 0 foreign-owned", |s| {
        s["foreign"]
            .as_array()
            .is_some_and(|l| l.iter().any(|f| f["pid"] == pid && f["device"] == 0))
    });
    let s = status(&node);
    let foreign = s["foreign"].as_array().unwrap();
    assert_eq!(foreign.len(), 1, "only the outsider, on GPU 0: {s}");
    assert_eq!(foreign[0]["comm"], "gpuslice-worklo", "{s}");

    // A slice asking for GPU 0 by index: refused, naming the device and the pid.
    let r = admit(
        &node,
        "listed",
        "\"memory\":\"1Gi\",\"devices\":{\"list\":[{\"index\":0}]}",
    );
    assert_eq!(r["code"], "refused", "{r}");
    let msg = r["message"].as_str().unwrap();
    assert!(
        msg.contains("device 0 (")
            && msg.contains("foreign-owned")
            && msg.contains(&format!("pid {pid} ")),
        "{msg}"
    );
    // Any GPU: placed on GPU 1 (bin-pack would have put it beside "first" on GPU 0).
    let r = admit(&node, "placed", "\"memory\":\"1Gi\"");
    assert_eq!(r["result"], "admitted", "{r}");
    assert_eq!(r["devices"][0]["index"], 1, "{r}");

    // `gpuslice status`, text and JSON.
    let out = node
        .command(prof.join("gpuslice"))
        .arg("status")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains(&format!("FOREIGN-OWNED by pid {pid} (gpuslice-worklo, "))
            && text.contains("share the GPU with it"),
        "{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = node
        .command(prof.join("gpuslice"))
        .args(["status", "--json"])
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["devices"][0]["foreign"][0]["pid"], pid, "{v}");
    assert!(v["devices"][1].get("foreign").is_none(), "{v}");

    // Metrics: GPU 0 has one foreign process, "first" shares it, "placed" does not.
    let page = node.scrape();
    let dev = |d: u32| format!("gpuslice_device_foreign_processes{{device=\"{d}\",");
    assert_eq!(metric(&page, &dev(0)), Some(1.0), "{page}");
    assert_eq!(metric(&page, &dev(1)), Some(0.0), "{page}");
    let beside = |s: &str| format!("gpuslice_slice_beside_foreign{{slice=\"{s}\",");
    assert_eq!(metric(&page, &beside("first")), Some(1.0), "{page}");
    assert_eq!(metric(&page, &beside("placed")), Some(0.0), "{page}");
    // Said loudly, naming the slice that was there first.
    let log = node.log();
    assert!(
        log.lines().any(|l| l.contains("device 0 is foreign-owned")
            && l.contains(&format!("pid {pid} (gpuslice-worklo)"))
            && l.contains("slice(s) first")),
        "{log}"
    );

    // The outsider exits: GPU 0 takes slices again; "first" was never touched.
    drop(holder);
    wait_status(&node, "GPU 0 free again", |s| s.get("foreign").is_none());
    let r = admit(
        &node,
        "listed",
        "\"memory\":\"1Gi\",\"devices\":{\"list\":[{\"index\":0}]}",
    );
    assert_eq!(r["result"], "admitted", "{r}");
    let s = status(&node);
    let ids: Vec<&str> = s["slices"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|x| x["slice_id"].as_str())
        .collect();
    assert_eq!(ids, ["first", "listed", "placed"], "{s}");
    assert!(node.log().contains("device 0 is no longer foreign-owned"));
}
