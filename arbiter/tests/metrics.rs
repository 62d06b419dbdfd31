//! The metrics endpoint: a real HTTP scrape of `/metrics` on an ephemeral loopback port, parsed
//! line by line as Prometheus text; `/healthz`, 404 and 405; refusal counters bumped by the
//! control path; scheduler figures exported only when a scheduler source is given.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::sync::{Arc, Mutex};

use gpuslice_api::{Owner, Request, Response, SliceRequest};
use gpuslice_arbiter::metrics::{self, Sources};
use gpuslice_arbiter::sched::{DeviceSched, SchedulerStatus, SliceShare};
use gpuslice_arbiter::server::State;
use gpuslice_arbiter::store::Store;
use gpuslice_arbiter::{DeviceInventory, Policy, StaticInventory};
use gpuslice_region::{create_slice, DeviceSpec, SliceSpec, Usage};
use gpuslice_test_support::Scratch as TempDir;

const GI: u64 = 1 << 30;

fn state(dir: &Path) -> Arc<Mutex<State>> {
    let devs =
        StaticInventory::fake(&[("NVIDIA H100 80GB", 80 * GI), ("NVIDIA A100 40GB", 40 * GI)])
            .devices()
            .unwrap();
    let (st, _) = State::open(devs, Policy::default(), Store::open(dir).unwrap()).unwrap();
    Arc::new(Mutex::new(st))
}

fn get(addr: std::net::SocketAddr, line: &str) -> (String, String) {
    let mut s = TcpStream::connect(addr).unwrap();
    write!(s, "{line}\r\nHost: x\r\n\r\n").unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    let (head, body) = out.split_once("\r\n\r\n").unwrap();
    (head.to_string(), body.to_string())
}

/// `name{labels} value` lines → map from `name{labels}` to value; checks every line parses.
fn parse(text: &str) -> BTreeMap<String, f64> {
    let mut out = BTreeMap::new();
    for line in text.lines() {
        if line.starts_with("# HELP ") || line.starts_with("# TYPE ") || line.is_empty() {
            continue;
        }
        assert!(!line.starts_with('#'), "unexpected comment {line:?}");
        let (key, value) = line.rsplit_once(' ').unwrap();
        let v: f64 = value
            .parse()
            .unwrap_or_else(|_| panic!("bad value in {line:?}"));
        let name = key.split('{').next().unwrap();
        assert!(
            name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'),
            "bad name {name:?}"
        );
        out.insert(key.to_string(), v);
    }
    out
}

#[test]
fn scrape_parses_and_carries_the_numbers() {
    let tmp = TempDir::new("scrape");
    let st = state(&tmp.0);
    let req = SliceRequest {
        memory: Some("4Gi".parse().unwrap()),
        compute: Some(30),
        compute_limit: Some(60),
        ..SliceRequest::default()
    };
    // Its container is a Kubernetes Pod's (the CRI runtime's annotations, as gpuslice-oci
    // reads them): every per-slice series carries its namespace, Pod and container.
    let pod = gpuslice_api::PodRef {
        namespace: "ml".into(),
        name: "trainer-7f9c".into(),
        container: "train".into(),
    };
    let owner = Owner {
        pod: Some(pod),
        ..Owner::default()
    };
    let dir = match st.lock().unwrap().handle(Request::Admit {
        slice_id: "job1".into(),
        request: req,
        owner,
    }) {
        Response::Admitted { slice_dir, .. } => slice_dir,
        other => panic!("{other:?}"),
    };
    // A refusal: 100 GiB fits nowhere.
    let big = SliceRequest {
        memory: Some("100Gi".parse().unwrap()),
        ..SliceRequest::default()
    };
    let r = st.lock().unwrap().handle(Request::Admit {
        slice_id: "big".into(),
        request: big,
        owner: Owner::default(),
    });
    assert!(matches!(r, Response::Error { .. }));
    // Usage: this process holds 1 GiB in the slice.
    let dev = st
        .lock()
        .unwrap()
        .admission()
        .slice("job1")
        .unwrap()
        .devices[0]
        .clone();
    let spec = SliceSpec {
        devices: vec![DeviceSpec {
            host_index: dev.index,
            uuid: dev.uuid.clone(),
            memory_cap: 4 * GI,
            device_total: dev.memory_total,
            ..DeviceSpec::default()
        }],
        flags: 0,
    };
    let _ = create_slice(&dir, &spec, false).unwrap();
    let usage = Usage::open(&dir, 1).unwrap();
    let start = gpuslice_region::liveness::self_start_time().unwrap();
    let rec = usage.claim(std::process::id(), start).unwrap();
    usage.reserve(rec, 0, GI, 4 * GI).unwrap();

    let sched: metrics::SchedSource = Arc::new(move || SchedulerStatus {
        devices: vec![DeviceSched {
            index: dev.index,
            quantum_ns: 5_000_000,
            handoffs: 42,
            handoff_p99_ns: 40_000,
            realtime_priority: 10,
            wakeups: 0,
            slices: vec![SliceShare {
                slice_id: "job1".into(),
                guarantee: 0.3,
                limit: 0.6,
                achieved_1s: 0.25,
                achieved_10s: 0.3,
                grants: 21,
                wait_ns: 1_500_000_000,
                charged_ns: 2_000_000_000,
                ..SliceShare::default()
            }],
        }],
    });
    let src = Sources {
        state: Arc::clone(&st),
        state_dir: tmp.0.clone(),
        sched: Some(sched),
    };
    let addr = metrics::spawn("127.0.0.1:0".parse().unwrap(), src).unwrap();
    let (head, body) = get(addr, "GET /metrics HTTP/1.1");
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    assert!(head.contains("text/plain; version=0.0.4"), "{head}");
    let m = parse(&body);
    let idx = st
        .lock()
        .unwrap()
        .admission()
        .slice("job1")
        .unwrap()
        .devices[0]
        .index;
    let uuid = st
        .lock()
        .unwrap()
        .admission()
        .slice("job1")
        .unwrap()
        .devices[0]
        .uuid
        .clone();
    let pod = "namespace=\"ml\",pod=\"trainer-7f9c\",container=\"train\"";
    let sl = format!("slice=\"job1\",device=\"{idx}\",uuid=\"{uuid}\",{pod}");
    assert_eq!(
        m[&format!("gpuslice_slice_memory_cap_bytes{{{sl}}}")],
        (4 * GI) as f64
    );
    assert_eq!(
        m[&format!("gpuslice_slice_memory_used_bytes{{{sl}}}")],
        GI as f64
    );
    assert_eq!(
        m[&format!("gpuslice_slice_compute_guarantee_ratio{{{sl}}}")],
        0.3
    );
    assert_eq!(
        m[&format!("gpuslice_slice_compute_limit_ratio{{{sl}}}")],
        0.6
    );
    assert_eq!(
        m[&format!("gpuslice_slice_processes{{slice=\"job1\",{pod}}}")],
        1.0
    );
    assert_eq!(m["gpuslice_slices"], 1.0);
    assert!(m["gpuslice_admission_refusals_total{code=\"refused\"}"] >= 1.0);
    assert_eq!(
        m[&format!(
            "gpuslice_slice_achieved_share_ratio{{slice=\"job1\",device=\"{idx}\",window=\"1s\",{pod}}}"
        )],
        0.25
    );
    assert_eq!(
        m[&format!("gpuslice_slice_lease_grants_total{{slice=\"job1\",device=\"{idx}\",{pod}}}")],
        21.0
    );
    assert_eq!(
        m[&format!(
            "gpuslice_slice_lease_wait_seconds_total{{slice=\"job1\",device=\"{idx}\",{pod}}}"
        )],
        1.5
    );
    assert_eq!(
        m[&format!("gpuslice_device_lease_handoffs_total{{device=\"{idx}\"}}")],
        42.0
    );
    assert_eq!(
        m[&format!(
            "gpuslice_slice_charged_seconds_total{{slice=\"job1\",device=\"{idx}\",{pod}}}"
        )],
        2.0
    );
    assert_eq!(
        m[&format!("gpuslice_device_lease_handoff_p99_seconds{{device=\"{idx}\"}}")],
        4e-5
    );
    assert_eq!(
        m[&format!("gpuslice_device_lease_quantum_seconds{{device=\"{idx}\"}}")],
        0.005
    );
    assert_eq!(
        m[&format!("gpuslice_device_scheduler_realtime_priority{{device=\"{idx}\"}}")],
        10.0
    );
    assert!(m.contains_key("gpuslice_reclaimed_processes_total"));
    assert!(m.contains_key("gpuslice_reclaim_released_slices_total"));
    let committed: f64 = m
        .iter()
        .filter(|(k, _)| k.starts_with("gpuslice_device_memory_committed_bytes"))
        .map(|(_, v)| v)
        .sum();
    assert_eq!(committed, (4 * GI + (512 << 20)) as f64);

    let (head, body) = get(addr, "GET /healthz HTTP/1.1");
    assert!(head.starts_with("HTTP/1.1 200") && body == "ok\n");
    let (head, _) = get(addr, "GET /other HTTP/1.1");
    assert!(head.starts_with("HTTP/1.1 404"), "{head}");
    let (head, _) = get(addr, "POST /metrics HTTP/1.1");
    assert!(head.starts_with("HTTP/1.1 405"), "{head}");
}

#[test]
fn without_scheduler_no_share_metrics_are_invented() {
    let tmp = TempDir::new("nosched");
    let st = state(&tmp.0);
    let src = Sources {
        state: st,
        state_dir: tmp.0.clone(),
        sched: None,
    };
    let text = metrics::render(&src);
    let m = parse(&text);
    assert!(m
        .keys()
        .all(|k| !k.contains("achieved") && !k.contains("lease_")));
    assert_eq!(m["gpuslice_slices"], 0.0);
    assert_eq!(
        m.keys()
            .filter(|k| k.starts_with("gpuslice_device_memory_total_bytes"))
            .count(),
        2
    );
}

/// Each device's context footprint, as the arbiter measured it, and the charge that follows it
/// (issue 32): each device's own footprint plus the module allowance.
#[test]
fn the_measured_context_footprint_is_exported_per_device() {
    use gpuslice_arbiter::contexts::{policy_for, resolve};
    const MI: u64 = 1 << 20;
    let tmp = TempDir::new("contexts");
    let devs = StaticInventory::fake(&[("NVIDIA H200", 141 * GI), ("NVIDIA A100 40GB", 40 * GI)])
        .devices()
        .unwrap();
    let (list, _) = resolve(
        &devs,
        "580.159.04",
        Ok(vec![(0, 518 * MI), (1, 400 * MI)]),
        None,
    );
    let policy = policy_for(&gpuslice_api::config::AdmissionConfig::default(), &list);
    let (st, _) = State::open(devs, policy, Store::open(&tmp.0).unwrap()).unwrap();
    let src = Sources {
        state: Arc::new(Mutex::new(st.with_contexts(list))),
        state_dir: tmp.0.clone(),
        sched: None,
    };
    let m = parse(&metrics::render(&src));
    let key = |name: &str, dev: u32, extra: &str| {
        format!("{name}{{device=\"{dev}\",uuid=\"GPU-fake-{dev}\"{extra}}}")
    };
    let src_label = ",source=\"measured\"";
    let footprint = "gpuslice_device_context_footprint_bytes";
    assert_eq!(m[&key(footprint, 0, src_label)], (518 * MI) as f64, "{m:?}");
    assert_eq!(m[&key(footprint, 1, src_label)], (400 * MI) as f64);
    let charge = "gpuslice_device_context_charge_bytes";
    assert_eq!(m[&key(charge, 0, "")], (774 * MI) as f64, "{m:?}");
    // Each device its own: 400 MiB + 256 MiB on the A100 (a mixed node).
    assert_eq!(m[&key(charge, 1, "")], (656 * MI) as f64);
}

/// Each slice process's own footprint from the backstop's last check (NVML's figure less what
/// the interposer counted), for admitted slices only; a process whose count is unknown has none.
#[test]
fn each_process_footprint_is_exported() {
    use gpuslice_api::ProcessFootprint;
    const MI: u64 = 1 << 20;
    let tmp = TempDir::new("footprints");
    let st = state(&tmp.0);
    let r = st.lock().unwrap().handle(Request::Admit {
        slice_id: "job1".into(),
        request: SliceRequest {
            memory: Some("1Gi".parse().unwrap()),
            ..SliceRequest::default()
        },
        owner: Owner::default(),
    });
    assert!(matches!(r, Response::Admitted { .. }), "{r:?}");
    let fp = |slice: &str, pid, footprint: Option<u64>| ProcessFootprint {
        slice_id: slice.into(),
        device: 0,
        pid,
        used: GI + 520 * MI,
        counted: footprint.map(|f| GI + 520 * MI - f),
        footprint,
    };
    st.lock().unwrap().events().set_footprints(vec![
        fp("job1", 4121, Some(520 * MI)),
        fp("job1", 4122, None),
        fp("gone", 9, Some(MI)),
    ]);
    let src = Sources {
        state: Arc::clone(&st),
        state_dir: tmp.0.clone(),
        sched: None,
    };
    let m = parse(&metrics::render(&src));
    let name = "gpuslice_slice_process_footprint_bytes";
    let got: Vec<(&String, &f64)> = m.iter().filter(|(k, _)| k.starts_with(name)).collect();
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!(
        m[&format!(
            "{name}{{slice=\"job1\",device=\"0\",pid=\"4121\",namespace=\"\",pod=\"\",container=\"\"}}"
        )],
        (520 * MI) as f64
    );
    // The status reply carries them too.
    let reply = st.lock().unwrap().handle(Request::Status {});
    match reply {
        Response::Status(s) => {
            assert_eq!(s.processes.len(), 2, "{:?}", s.processes);
            assert_eq!(s.processes[0].footprint, Some(520 * MI));
        }
        other => panic!("{other:?}"),
    }
}

/// A foreign-owned device: its foreign-process count, and each slice already there flagged as
/// sharing it; other devices and slices at 0; the status reply lists the process.
#[test]
fn foreign_processes_are_exported_per_device_and_slice() {
    let tmp = TempDir::new("foreign");
    let st = state(&tmp.0);
    let r = st.lock().unwrap().handle(Request::Admit {
        slice_id: "first".into(),
        request: SliceRequest {
            memory: Some("1Gi".parse().unwrap()),
            ..SliceRequest::default()
        },
        owner: Owner::default(),
    });
    assert!(matches!(r, Response::Admitted { .. }), "{r:?}");
    let src = Sources {
        state: Arc::clone(&st),
        state_dir: tmp.0.clone(),
        sched: None,
    };
    let dev = st
        .lock()
        .unwrap()
        .admission()
        .slice("first")
        .unwrap()
        .devices[0]
        .index;
    let other = 1 - dev;
    let dev_key = |d: u32| {
        format!("gpuslice_device_foreign_processes{{device=\"{d}\",uuid=\"GPU-fake-{d}\"}}")
    };
    let slice_key = format!(
        "gpuslice_slice_beside_foreign{{slice=\"first\",device=\"{dev}\",uuid=\"GPU-fake-{dev}\",\
         namespace=\"\",pod=\"\",container=\"\"}}"
    );
    let before = parse(&metrics::render(&src));
    assert_eq!(before[&dev_key(dev)], 0.0, "{before:?}");
    assert_eq!(before[&slice_key], 0.0);
    st.lock()
        .unwrap()
        .set_foreign(vec![gpuslice_api::ForeignProcess {
            device: dev,
            pid: 7001,
            comm: "python3".into(),
            used: Some(GI),
        }]);
    let m = parse(&metrics::render(&src));
    assert_eq!(m[&dev_key(dev)], 1.0, "{m:?}");
    assert_eq!(m[&dev_key(other)], 0.0);
    assert_eq!(m[&slice_key], 1.0);
    let reply = st.lock().unwrap().handle(Request::Status {});
    match reply {
        Response::Status(s) => assert_eq!(s.foreign[0].pid, 7001),
        other => panic!("{other:?}"),
    }
}
