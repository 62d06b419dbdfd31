//! `gpuslice status`: the view of the node ([`StatusView`]) built from the arbiter's `status`
//! reply plus each slice's `usage` file (memory in use, live processes — read through the region
//! crate's validated snapshot), and its rendering as a table per device or as JSON.
//!
//! Achieved shares come from the scheduler (the `shares` of each device in the `status` reply);
//! where the arbiter runs without a scheduler they are
//! `null` in JSON and `n/a` in the table — never an invented number.

use std::fmt::Write as _;
use std::path::Path;

use gpuslice_api::{BackstopEvent, NodeStatus, Priority, ProcessFootprint};
use gpuslice_region::liveness::ProcessTable;
use gpuslice_region::{Limits, Usage};
use serde::{Deserialize, Serialize};

/// One slice on one device.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SliceRow {
    /// Slice id.
    pub slice_id: String,
    /// Cap on this device, bytes (`None` = uncapped).
    pub memory_cap: Option<u64>,
    /// Without a cap: its best-effort share of the memory no capped slice was promised, bytes,
    /// as the arbiter wrote it into its limits (`None`: capped, or unbounded under
    /// `overcommit_memory`, or an older arbiter).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_best_effort: Option<u64>,
    /// Bytes its live processes hold on this device (`None` = no usage file readable).
    pub memory_used: Option<u64>,
    /// Guaranteed share, percent (`None` = best effort).
    pub compute_guaranteed: Option<u8>,
    /// Ceiling, percent.
    pub compute_limit: u8,
    /// Share achieved over the last 1 s, percent (`None` = not reported).
    pub achieved_1s: Option<f64>,
    /// Over the last 10 s.
    pub achieved_10s: Option<f64>,
    /// Priority.
    pub priority: Priority,
    /// Pids of live processes with a usage record (`None` = unknown).
    pub processes: Option<Vec<u32>>,
    /// Recent actions of the arbiter's backstop on this slice and device (oldest first).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub backstop: Vec<BackstopEvent>,
    /// Each of its processes on this device as the backstop last saw it: NVML's figure, what
    /// the interposer counted, and the difference, the process's own context and modules.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub footprints: Vec<ProcessFootprint>,
    /// The scheduler's hostile-usage count (leases lost for claiming demand without launching):
    /// `None` = not reported (no scheduler).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub strikes: Option<Strikes>,
}

/// Leases a slice lost for claiming demand at the gate without launching anything
/// (`docs/scheduling.md`, back-off).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Strikes {
    /// In a row now (0 once it launches again).
    pub consecutive: u32,
    /// Ever.
    pub total: u64,
    /// Its demand claims are ignored now.
    pub backed_off: bool,
}

/// One device.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DeviceView {
    /// NVML index.
    pub index: u32,
    /// UUID.
    pub uuid: String,
    /// Name.
    pub name: String,
    /// Total memory, bytes.
    pub memory_total: u64,
    /// Caps plus context reserves promised on it.
    pub memory_committed: u64,
    /// Sum of guarantees, percent.
    pub compute_guaranteed: u32,
    /// The CUDA context footprint the arbiter measured there and the per-process charge.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context: Option<gpuslice_api::ContextStatus>,
    /// CUDA processes outside gpuslice on it (the device is foreign-owned: no new slice is
    /// placed here; slices already here keep running beside them).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub foreign: Vec<gpuslice_api::ForeignProcess>,
    /// Its slices.
    pub slices: Vec<SliceRow>,
}

/// The whole node.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct StatusView {
    /// Every device.
    pub devices: Vec<DeviceView>,
}

/// Measured use of the slice in `dir`: per slice device (bytes, pids), or `None`.
fn measured(
    dir: &Path,
    devices: usize,
    owner: Option<u32>,
    procs: &ProcessTable,
) -> Option<(Vec<u64>, Vec<u32>)> {
    let limits = Limits::open(dir).ok()?;
    let n = limits.device_count().min(devices);
    let usage = Usage::open_read_only(dir, n).ok()?;
    let caps: Vec<u64> = (0..n).map(|d| limits.memory_cap(d)).collect();
    // Records carry pids of the tenant's pid namespace: judged in the owner's.
    let snap = usage.snapshot_for_owner(&caps, owner, procs);
    let pids = snap.processes.iter().map(|p| p.pid).collect();
    Some((snap.used, pids))
}

impl StatusView {
    /// Builds the view from the arbiter's reply; usage files are read under `state_dir`.
    pub fn build(status: &NodeStatus, state_dir: &Path) -> StatusView {
        let mut devices: Vec<DeviceView> = status
            .devices
            .iter()
            .map(|d| DeviceView {
                index: d.index,
                uuid: d.uuid.clone(),
                name: d.name.clone(),
                memory_total: d.memory_total,
                memory_committed: d.memory_committed,
                compute_guaranteed: d.compute_guaranteed,
                context: d.context.clone(),
                foreign: status
                    .foreign
                    .iter()
                    .filter(|f| f.device == d.index)
                    .cloned()
                    .collect(),
                slices: Vec::new(),
            })
            .collect();
        let procs = ProcessTable::scan(Path::new("/proc"));
        for s in &status.slices {
            let m = measured(
                &state_dir.join(&s.slice_id),
                s.devices.len(),
                s.owner.pid,
                &procs,
            );
            for (i, a) in s.devices.iter().enumerate() {
                let Some(dev) = devices.iter_mut().find(|d| d.uuid == a.uuid) else {
                    continue;
                };
                let pids = m.as_ref().map(|(_, p)| p.clone());
                let share = status
                    .devices
                    .iter()
                    .find(|d| d.uuid == a.uuid)
                    .and_then(|d| d.shares.iter().find(|x| x.slice_id == s.slice_id));
                dev.slices.push(SliceRow {
                    slice_id: s.slice_id.clone(),
                    memory_cap: a.memory_cap,
                    memory_best_effort: a.memory_best_effort,
                    memory_used: m.as_ref().and_then(|(u, _)| u.get(i).copied()),
                    compute_guaranteed: s.request.compute,
                    compute_limit: s.request.limit(),
                    achieved_1s: share.map(|x| f64::from(x.achieved_1s_bp) / 100.0),
                    achieved_10s: share.map(|x| f64::from(x.achieved_10s_bp) / 100.0),
                    priority: s.request.priority,
                    processes: pids,
                    backstop: status
                        .backstop
                        .iter()
                        .filter(|e| e.slice_id == s.slice_id && e.device == a.index)
                        .cloned()
                        .collect(),
                    footprints: status
                        .processes
                        .iter()
                        .filter(|p| p.slice_id == s.slice_id && p.device == a.index)
                        .cloned()
                        .collect(),
                    strikes: share.map(|x| Strikes {
                        consecutive: x.strikes,
                        total: x.strikes_total,
                        backed_off: x.backed_off,
                    }),
                });
            }
        }
        StatusView { devices }
    }

    /// JSON (pretty, one document).
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).unwrap_or_else(|_| "{}".into())
    }

    /// The table, one block per device.
    pub fn render(&self) -> String {
        let mut out = String::new();
        if self.devices.is_empty() {
            out.push_str("no GPU on this node\n");
        }
        for d in &self.devices {
            let _ = writeln!(
                out,
                "GPU {}  {}  {}  memory {}  committed {}  guaranteed {}%",
                d.index,
                d.name,
                d.uuid,
                bytes(d.memory_total),
                bytes(d.memory_committed),
                d.compute_guaranteed
            );
            if let Some(c) = &d.context {
                let _ = writeln!(
                    out,
                    "  context {} ({}, driver {}); each process charged {} for its context \
                     and modules",
                    bytes(c.footprint),
                    c.source,
                    c.driver,
                    bytes(c.charge)
                );
                if let Some(why) = &c.reason {
                    let _ = writeln!(
                        out,
                        "  context NOT MEASURED: {why}; charged the assumed size with a margin"
                    );
                }
            }
            if !d.foreign.is_empty() {
                let _ = writeln!(out, "  {}", foreign_line(&d.foreign, d.slices.len()));
            }
            if d.slices.is_empty() {
                out.push_str("  (no slices)\n");
                continue;
            }
            let header = [
                "SLICE", "MEM CAP", "MEM USED", "GUAR", "LIMIT", "ACH 1s", "ACH 10s", "PRIO",
                "PROCS",
            ];
            let mut rows: Vec<[String; 9]> = vec![header.map(String::from)];
            for s in &d.slices {
                rows.push([
                    short_id(&s.slice_id).to_string(),
                    match (s.memory_cap, s.memory_best_effort) {
                        (Some(c), _) => bytes(c),
                        (None, Some(b)) => format!("be {}", bytes(b)),
                        (None, None) => "none".into(),
                    },
                    s.memory_used.map_or("n/a".into(), bytes),
                    s.compute_guaranteed.map_or("-".into(), |g| format!("{g}%")),
                    format!("{}%", s.compute_limit),
                    pct(s.achieved_1s),
                    pct(s.achieved_10s),
                    s.priority.as_str().to_string(),
                    procs(s.processes.as_deref()),
                ]);
            }
            let mut widths = [0usize; 9];
            for r in &rows {
                for (w, c) in widths.iter_mut().zip(r) {
                    *w = (*w).max(c.chars().count());
                }
            }
            for r in &rows {
                let mut line = String::new();
                for (i, (w, c)) in widths.iter().zip(r).enumerate() {
                    line.push_str("  ");
                    if i == 8 {
                        line.push_str(c);
                    } else {
                        let _ = write!(line, "{c:<w$}");
                    }
                }
                out.push_str(line.trim_end());
                out.push('\n');
            }
            for s in &d.slices {
                for p in &s.footprints {
                    let _ = writeln!(out, "  {}: {}", short_id(&s.slice_id), footprint_line(p));
                }
                for e in &s.backstop {
                    let _ = writeln!(out, "  {}: backstop: {}", short_id(&s.slice_id), e.message);
                }
                if let Some(k) = s.strikes.filter(|k| k.total > 0) {
                    let _ = writeln!(
                        out,
                        "  {}: {} lease(s) lost claiming demand without launching ({} in a row{})",
                        short_id(&s.slice_id),
                        k.total,
                        k.consecutive,
                        if k.backed_off { ", backed off now" } else { "" }
                    );
                }
            }
        }
        out
    }
}

/// `FOREIGN-OWNED by pid 7001 (python3, 2Gi) …`: who holds the device outside gpuslice, and
/// what that means for slices new and old.
fn foreign_line(list: &[gpuslice_api::ForeignProcess], slices: usize) -> String {
    let who: Vec<String> = list
        .iter()
        .map(|f| {
            let comm = if f.comm.is_empty() { "?" } else { &f.comm };
            match f.used {
                Some(b) => format!("pid {} ({comm}, {})", f.pid, bytes(b)),
                None => format!("pid {} ({comm})", f.pid),
            }
        })
        .collect();
    let mut line = format!(
        "FOREIGN-OWNED by {} (CUDA without gpuslice): no new slice is placed here",
        who.join(", ")
    );
    if slices > 0 {
        line.push_str("; the slices below were here first and share the GPU with it");
    }
    line
}

/// `pid 4121: NVML 8.5Gi, counted 8Gi, own 520Mi (context and modules)`.
fn footprint_line(p: &ProcessFootprint) -> String {
    match (p.counted, p.footprint) {
        (Some(c), Some(f)) => format!(
            "pid {}: NVML {}, counted {}, own {} (context and modules)",
            p.pid,
            bytes(p.used),
            bytes(c),
            bytes(f)
        ),
        _ => format!("pid {}: NVML {}, counted n/a", p.pid, bytes(p.used)),
    }
}

fn pct(v: Option<f64>) -> String {
    v.map_or("n/a".into(), |p| format!("{p:.1}%"))
}

fn procs(p: Option<&[u32]>) -> String {
    match p {
        None => "n/a".into(),
        Some([]) => "0".into(),
        Some(list) => {
            let shown: Vec<String> = list.iter().take(4).map(u32::to_string).collect();
            let more = if list.len() > 4 { ",…" } else { "" };
            format!("{} ({}{more})", list.len(), shown.join(","))
        }
    }
}

/// Bytes in binary units, at most one decimal: `512Mi`, `1.5Gi`, `80Gi`, `123B`.
pub fn bytes(b: u64) -> String {
    const UNITS: [&str; 4] = ["Ki", "Mi", "Gi", "Ti"];
    if b < 1024 {
        return format!("{b}B");
    }
    let mut v = b as f64;
    let mut unit = "";
    for u in UNITS {
        if v < 1024.0 {
            break;
        }
        v /= 1024.0;
        unit = u;
    }
    let r = (v * 10.0).round() / 10.0;
    if r.fract() == 0.0 {
        format!("{r:.0}{unit}")
    } else {
        format!("{r:.1}{unit}")
    }
}

/// A slice id as the table shows it: a 64-digit hex id (Docker's and containerd's container
/// ids) as its first 12 digits, as `docker ps` does; any other id whole. `--json` keeps the
/// whole id, and `gpuslice update` takes any unique prefix.
pub fn short_id(id: &str) -> &str {
    if id.len() == 64 && id.bytes().all(|b| b.is_ascii_hexdigit()) {
        &id[..12]
    } else {
        id
    }
}

/// The one slice among `ids` that `prefix` names: itself when present, else the only id
/// starting with it. `Err` says why not (none, or which ones it is ambiguous between).
pub fn resolve_prefix<'a>(prefix: &str, ids: &'a [String]) -> Result<&'a str, String> {
    if let Some(id) = ids.iter().find(|i| *i == prefix) {
        return Ok(id);
    }
    let hits: Vec<&String> = ids.iter().filter(|i| i.starts_with(prefix)).collect();
    match hits.as_slice() {
        [one] => Ok(one),
        [] => Err(format!("no slice \"{prefix}\"")),
        many => Err(format!(
            "\"{prefix}\" is the start of {} slices ({}): give more of the id",
            many.len(),
            many.iter()
                .map(|s| short_id(s))
                .collect::<Vec<_>>()
                .join(", ")
        )),
    }
}
