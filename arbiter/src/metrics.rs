//! Prometheus metrics: the rendering of a scrape ([`render`]) from the admission state, the
//! slices' `usage` files and the scheduler's figures (gauges and counters built per scrape, so
//! slices that are gone disappear), followed by the state's event counters (registered once, in
//! [`crate::state::Events`]), and a tiny HTTP server on a std `TcpListener` that answers only
//! `GET /metrics` and `GET /healthz` ([`serve`]). A scrape is rare (every 15–60 s) and small, so a
//! thread per connection with short timeouts is all it needs; no async runtime or HTTP crate.
//!
//! Encoding is the `prometheus-client` crate's Prometheus text format 0.0.4. Metric names and
//! labels: `docs/metrics.md`.

use std::io::{self, BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use gpuslice_api::{NodeStatus, ProcessFootprint};
use gpuslice_region::liveness::ProcessTable;
use prometheus_client::encoding::prometheus_text;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use crate::contexts::Footprint;
use crate::fit::Policy;
use crate::sched::SchedulerStatus;
use crate::state::State;

type Labels = Vec<(String, String)>;

/// Where scrapes get scheduler figures from (`None`: no scheduler, nothing exported).
pub type SchedSource = Arc<dyn Fn() -> SchedulerStatus + Send + Sync>;

/// What a scrape reads.
#[derive(Clone)]
pub struct Sources {
    /// The arbiter state (admission).
    pub state: Arc<Mutex<State>>,
    /// The state directory (slice `usage` files).
    pub state_dir: PathBuf,
    /// Scheduler figures, when a scheduler runs.
    pub sched: Option<SchedSource>,
}

impl std::fmt::Debug for Sources {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sources")
            .field("state_dir", &self.state_dir)
            .field("sched", &self.sched.is_some())
            .finish()
    }
}

fn labels(pairs: &[(&str, &str)]) -> Labels {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// The Kubernetes Pod of each slice (from its owner: the CRI runtime's annotations).
type Pods = std::collections::HashMap<String, gpuslice_api::PodRef>;

/// Labels of a per-slice series: `pairs` (the first is `slice`) and the slice's `namespace`,
/// `pod` and `container`, empty outside Kubernetes (`gpuslice_api::pod`).
fn slice_labels(pods: &Pods, pairs: &[(&str, &str)]) -> Labels {
    let mut l = labels(pairs);
    let pod = pairs
        .first()
        .and_then(|(_, id)| pods.get(*id))
        .cloned()
        .unwrap_or_default();
    l.push(("namespace".into(), pod.namespace));
    l.push(("pod".into(), pod.name));
    l.push(("container".into(), pod.container));
    l
}

fn gauge_family() -> Family<Labels, Gauge<f64, AtomicU64>> {
    Family::default()
}

/// Renders one scrape in the Prometheus text format.
pub fn render(src: &Sources) -> String {
    let snap = Snapshot::take(src);
    let pods: Pods = snap
        .status
        .slices
        .iter()
        .filter_map(|s| Some((s.slice_id.clone(), s.owner.pod.clone()?)))
        .collect();
    let mut reg = Registry::default();
    register_devices(&mut reg, &snap.status);
    register_contexts(&mut reg, &snap.contexts, &snap.policy);
    register_footprints(&mut reg, &pods, &snap.footprints);
    register_slices(&mut reg, src, &snap.status, &pods);
    if let Some(sched) = &src.sched {
        register_sched(&mut reg, &sched(), &pods);
    }
    let n_slices: Gauge = Gauge::default();
    n_slices.set(i64::try_from(snap.status.slices.len()).unwrap_or(i64::MAX));
    reg.register("gpuslice_slices", "Admitted slices", n_slices);

    let mut out = String::new();
    if prometheus_text::encode(&mut out, &reg).is_err() {
        out.clear();
    }
    out.push_str(&snap.counters);
    out
}

/// What a scrape reads from the state, under its lock once.
struct Snapshot {
    /// The state's event counters, already encoded.
    counters: String,
    status: NodeStatus,
    contexts: Vec<Footprint>,
    policy: Policy,
    footprints: Vec<ProcessFootprint>,
}

impl Snapshot {
    fn take(src: &Sources) -> Snapshot {
        let mut counters = String::new();
        let st = src.state.lock().unwrap_or_else(PoisonError::into_inner);
        if st.events().encode(&mut counters).is_err() {
            counters.clear();
        }
        let footprints = st
            .events()
            .footprints(|id| st.admission().slice(id).is_some());
        Snapshot {
            counters,
            status: st.admission().status(),
            contexts: st.contexts().to_vec(),
            policy: st.admission().policy().clone(),
            footprints,
        }
    }
}

/// Foreign processes on device `index` ([`NodeStatus::foreign`]).
fn foreign_on(status: &NodeStatus, index: u32) -> usize {
    status.foreign.iter().filter(|f| f.device == index).count()
}

/// Each device's memory, commitments, slices and foreign processes.
fn register_devices(reg: &mut Registry, status: &NodeStatus) {
    let dev_total = gauge_family();
    let dev_committed = gauge_family();
    let dev_guaranteed = gauge_family();
    let dev_slices = gauge_family();
    let dev_foreign = gauge_family();
    for d in &status.devices {
        let l = labels(&[
            ("device", &d.index.to_string()),
            ("uuid", &d.uuid),
            ("name", &d.name),
        ]);
        dev_total.get_or_create(&l).set(d.memory_total as f64);
        let l = labels(&[("device", &d.index.to_string()), ("uuid", &d.uuid)]);
        dev_committed
            .get_or_create(&l)
            .set(d.memory_committed as f64);
        dev_guaranteed
            .get_or_create(&l)
            .set(f64::from(d.compute_guaranteed) / 100.0);
        dev_slices.get_or_create(&l).set(d.slices.len() as f64);
        dev_foreign
            .get_or_create(&l)
            .set(foreign_on(status, d.index) as f64);
    }
    reg.register(
        "gpuslice_device_memory_total_bytes",
        "Device memory",
        dev_total,
    );
    reg.register(
        "gpuslice_device_memory_committed_bytes",
        "Memory promised to slices on the device: caps plus context reserves",
        dev_committed,
    );
    reg.register(
        "gpuslice_device_compute_guaranteed_ratio",
        "Sum of guaranteed compute shares on the device (0-1)",
        dev_guaranteed,
    );
    reg.register(
        "gpuslice_device_slices",
        "Slices placed on the device",
        dev_slices,
    );
    reg.register(
        "gpuslice_device_foreign_processes",
        "CUDA processes outside gpuslice (no slice, no interposer) on the device: while above 0 the device is foreign-owned and takes no new slice",
        dev_foreign,
    );
}

/// Each device's measured context footprint and the charge it implies.
fn register_contexts(reg: &mut Registry, contexts: &[Footprint], policy: &Policy) {
    let (ctx_footprint, ctx_charge) = (gauge_family(), gauge_family());
    for f in contexts {
        let device = f.index.to_string();
        let l = labels(&[
            ("device", &device),
            ("uuid", &f.uuid),
            ("source", &f.source),
        ]);
        ctx_footprint.get_or_create(&l).set(f.bytes as f64);
        let l = labels(&[("device", &device), ("uuid", &f.uuid)]);
        ctx_charge
            .get_or_create(&l)
            .set(policy.charge_on(f.index) as f64);
    }
    reg.register(
        "gpuslice_device_context_footprint_bytes",
        "Device memory a bare CUDA context holds outside any allocation (source: measured by the arbiter's probe context, saved from an earlier start, or assumed)",
        ctx_footprint,
    );
    reg.register(
        "gpuslice_device_context_charge_bytes",
        "What each process is charged on the device for its context and lazily loaded modules",
        ctx_charge,
    );
}

/// Each slice process's own footprint (the backstop's last check).
fn register_footprints(reg: &mut Registry, pods: &Pods, footprints: &[ProcessFootprint]) {
    let own = gauge_family();
    for p in footprints {
        if let Some(f) = p.footprint {
            let l = slice_labels(
                pods,
                &[
                    ("slice", &p.slice_id),
                    ("device", &p.device.to_string()),
                    ("pid", &p.pid.to_string()),
                ],
            );
            own.get_or_create(&l).set(f as f64);
        }
    }

    reg.register(
        "gpuslice_slice_process_footprint_bytes",
        "What NVML lists for a slice process beyond the allocations the interposer counted for it: its own context and lazily loaded modules (from the backstop's last check)",
        own,
    );
}

/// Each slice's caps, use, processes, shares, and whether it sits beside a foreign process.
fn register_slices(reg: &mut Registry, src: &Sources, status: &NodeStatus, pods: &Pods) {
    let cap = gauge_family();
    let used = gauge_family();
    let procs = gauge_family();
    let guarantee = gauge_family();
    let limit = gauge_family();
    let beside = gauge_family();
    let table = ProcessTable::scan(Path::new("/proc"));
    for s in &status.slices {
        let measured =
            crate::slices::slice_usage(&src.state_dir.join(&s.slice_id), s, Some(&table));
        if let Some((_, n)) = &measured {
            procs
                .get_or_create(&slice_labels(pods, &[("slice", &s.slice_id)]))
                .set(*n as f64);
        }
        for (i, d) in s.devices.iter().enumerate() {
            let l = slice_labels(
                pods,
                &[
                    ("slice", &s.slice_id),
                    ("device", &d.index.to_string()),
                    ("uuid", &d.uuid),
                ],
            );
            if let Some(c) = d.memory_cap {
                cap.get_or_create(&l).set(c as f64);
            }
            if let Some(u) = measured.as_ref().and_then(|(u, _)| u.get(i)) {
                used.get_or_create(&l).set(*u as f64);
            }
            guarantee
                .get_or_create(&l)
                .set(f64::from(s.request.compute.unwrap_or(0)) / 100.0);
            beside
                .get_or_create(&l)
                .set(if foreign_on(status, d.index) > 0 {
                    1.0
                } else {
                    0.0
                });
            limit
                .get_or_create(&l)
                .set(f64::from(s.request.compute_limit.unwrap_or(100)) / 100.0);
        }
    }

    reg.register(
        "gpuslice_slice_beside_foreign",
        "1 while the slice's device is foreign-owned: a whole-GPU tenant outside gpuslice shares it (the slice was there first and is not killed)",
        beside,
    );
    reg.register(
        "gpuslice_slice_memory_cap_bytes",
        "Memory cap of the slice on the device (absent: uncapped)",
        cap,
    );
    reg.register(
        "gpuslice_slice_memory_used_bytes",
        "Memory the slice's live processes hold on the device (from its usage file, clamped to the cap)",
        used,
    );
    reg.register(
        "gpuslice_slice_processes",
        "Live processes of the slice with a usage record",
        procs,
    );
    reg.register(
        "gpuslice_slice_compute_guarantee_ratio",
        "Guaranteed share of the device's time (0-1; 0 = best effort)",
        guarantee,
    );
    reg.register(
        "gpuslice_slice_compute_limit_ratio",
        "Ceiling on the share of the device's time (0-1)",
        limit,
    );
}

/// The scheduler's figures per slice on each device.
fn register_sched(reg: &mut Registry, sched: &SchedulerStatus, pods: &Pods) {
    register_sched_devices(reg, sched);
    let achieved = gauge_family();
    let grants: Family<Labels, Counter> = Family::default();
    let wait: Family<Labels, Counter<f64, AtomicU64>> = Family::default();
    let charged: Family<Labels, Counter<f64, AtomicU64>> = Family::default();
    let drain_timeouts: Family<Labels, Counter> = Family::default();
    let strikes_total: Family<Labels, Counter> = Family::default();
    let idle_handoffs: Family<Labels, Counter> = Family::default();
    let loop_wakes: Family<Labels, Counter> = Family::default();
    let strikes = gauge_family();
    let backed_off = gauge_family();
    for d in &sched.devices {
        let di = d.index.to_string();
        for s in &d.slices {
            for (w, v) in [("1s", s.achieved_1s), ("10s", s.achieved_10s)] {
                achieved
                    .get_or_create(&slice_labels(
                        pods,
                        &[("slice", &s.slice_id), ("device", &di), ("window", w)],
                    ))
                    .set(v);
            }
            let l = slice_labels(pods, &[("slice", &s.slice_id), ("device", &di)]);
            grants.get_or_create(&l).inc_by(s.grants);
            wait.get_or_create(&l).inc_by(s.wait_ns as f64 / 1e9);
            charged.get_or_create(&l).inc_by(s.charged_ns as f64 / 1e9);
            drain_timeouts.get_or_create(&l).inc_by(s.drain_timeouts);
            strikes_total.get_or_create(&l).inc_by(s.strikes_total);
            idle_handoffs.get_or_create(&l).inc_by(s.quiet_revokes);
            loop_wakes.get_or_create(&l).inc_by(s.loop_wakes);
            strikes.get_or_create(&l).set(f64::from(s.strikes));
            backed_off
                .get_or_create(&l)
                .set(if s.backoff_remaining_ns > 0 { 1.0 } else { 0.0 });
        }
    }
    reg.register(
        "gpuslice_slice_achieved_share_ratio",
        "Share of the device's time charged to the slice over the window (0-1)",
        achieved,
    );
    reg.register(
        "gpuslice_slice_lease_grants",
        "Times the slice was granted the device's lease",
        grants,
    );
    reg.register(
        "gpuslice_slice_lease_wait_seconds",
        "Time the slice had launches waiting at the gate without the lease",
        wait,
    );
    reg.register(
        "gpuslice_slice_charged_seconds",
        "Device time charged to the slice (lease time plus the overrun of its queued work)",
        charged,
    );
    reg.register(
        "gpuslice_slice_drain_timeouts",
        "Lease ends whose queued work did not report completion in time",
        drain_timeouts,
    );
    reg.register(
        "gpuslice_slice_lease_strikes",
        "Leases the slice lost for claiming demand at the gate without launching anything (hostile or broken gate)",
        strikes_total,
    );
    reg.register(
        "gpuslice_slice_lease_idle_handoffs",
        "Leases handed on early because every process of the slice was idle while others waited",
        idle_handoffs,
    );
    reg.register(
        "gpuslice_slice_scheduler_wakes",
        "Times a usage word of the slice (demand, busy, pending) woke the device's scheduler loop",
        loop_wakes,
    );
    reg.register(
        "gpuslice_slice_lease_strikes_consecutive",
        "Such leases in a row now (0 once the slice launches again; each doubles its back-off)",
        strikes,
    );
    reg.register(
        "gpuslice_slice_lease_backed_off",
        "1 while the slice's demand claims are ignored (back-off after a strike), else 0",
        backed_off,
    );
}

/// The scheduler's figures per device: hand-offs, their p99, the quantum, real-time priority.
fn register_sched_devices(reg: &mut Registry, sched: &SchedulerStatus) {
    let dev_handoffs: Family<Labels, Counter> = Family::default();
    let dev_p99 = gauge_family();
    let dev_quantum = gauge_family();
    let dev_rt = gauge_family();
    for d in &sched.devices {
        let dl = labels(&[("device", &d.index.to_string())]);
        dev_handoffs.get_or_create(&dl).inc_by(d.handoffs);
        dev_p99
            .get_or_create(&dl)
            .set(d.handoff_p99_ns as f64 / 1e9);
        dev_quantum
            .get_or_create(&dl)
            .set(d.quantum_ns as f64 / 1e9);
        dev_rt
            .get_or_create(&dl)
            .set(f64::from(d.realtime_priority));
    }
    reg.register(
        "gpuslice_device_lease_handoffs",
        "Lease grants on the device to a different slice than the previous holder",
        dev_handoffs,
    );
    reg.register(
        "gpuslice_device_lease_handoff_p99_seconds",
        "99th percentile of recent hand-off times (device free to next holder woken)",
        dev_p99,
    );
    reg.register(
        "gpuslice_device_lease_quantum_seconds",
        "Lease quantum",
        dev_quantum,
    );
    reg.register(
        "gpuslice_device_scheduler_realtime_priority",
        "SCHED_FIFO priority of the device's scheduler thread (0: normal scheduling)",
        dev_rt,
    );
}

fn respond(s: &mut TcpStream, status: &str, ctype: &str, body: &str) -> io::Result<()> {
    write!(
        s,
        "HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )?;
    s.flush()
}

/// Answers one HTTP request: `GET /metrics`, `GET /healthz`; anything else 404 / 405.
pub fn serve_connection(mut stream: TcpStream, src: &Sources) -> io::Result<()> {
    stream.set_read_timeout(Some(Duration::from_secs(5)))?;
    stream.set_write_timeout(Some(Duration::from_secs(5)))?;
    let mut reader = BufReader::new(stream.try_clone()?);
    let mut line = String::new();
    reader.by_ref().take(8192).read_line(&mut line)?;
    // Drain the headers (bounded) so the client sees a clean close.
    let mut budget = 64;
    loop {
        let mut h = String::new();
        let n = reader.by_ref().take(8192).read_line(&mut h)?;
        budget -= 1;
        if n == 0 || h == "\r\n" || h == "\n" || budget == 0 {
            break;
        }
    }
    let mut parts = line.split_ascii_whitespace();
    let (method, target) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    let path = target.split('?').next().unwrap_or("");
    let text = "text/plain; charset=utf-8";
    match (method, path) {
        ("GET", "/metrics") => respond(
            &mut stream,
            "200 OK",
            prometheus_text::CONTENT_TYPE,
            &render(src),
        ),
        ("GET", "/healthz") => respond(&mut stream, "200 OK", text, "ok\n"),
        ("GET", _) => respond(&mut stream, "404 Not Found", text, "not found\n"),
        _ => respond(
            &mut stream,
            "405 Method Not Allowed",
            text,
            "only GET /metrics and GET /healthz\n",
        ),
    }
}

use std::io::Read as _;

/// Serves metrics on `listener` forever, one thread per connection.
pub fn serve(listener: TcpListener, src: Sources) {
    for stream in listener.incoming() {
        match stream {
            Ok(s) => {
                let src = src.clone();
                std::thread::spawn(move || {
                    if let Err(e) = serve_connection(s, &src) {
                        tracing::debug!("metrics connection: {e}");
                    }
                });
            }
            Err(e) => tracing::warn!("metrics accept failed: {e}"),
        }
    }
}

/// Binds `addr` and serves metrics on a background thread. Returns the bound address.
pub fn spawn(addr: std::net::SocketAddr, src: Sources) -> io::Result<std::net::SocketAddr> {
    let listener = TcpListener::bind(addr)?;
    let bound = listener.local_addr()?;
    std::thread::Builder::new()
        .name("metrics".into())
        .spawn(move || serve(listener, src))?;
    Ok(bound)
}
