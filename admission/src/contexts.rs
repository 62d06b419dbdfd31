//! What a CUDA context really costs on each device, measured, not assumed (issue 32).
//!
//! At start the arbiter runs a **probe context**: it starts itself again as a child
//! (`gpuslice-arbiter --probe-contexts`, no preload) that loads the CUDA driver, retains the
//! primary context of every device and says `ready`; the arbiter then reads NVML's per-process
//! memory for that child on each device (what NVML lists for a process with a context and no
//! allocation is exactly the context's footprint: 518 MiB on an H200 with driver 580), and
//! lets it go. The figures are kept in `<state-dir>/contexts.json` with the driver version, so
//! a restart on a device that is too full for another context keeps the last measurement, and
//! the kubelet plugin publishes capacity from the same figures ([`node_policy`]). A device that
//! cannot be measured is assumed to hold [`FALLBACK_CONTEXT_FOOTPRINT`].
//!
//! Each device's per-process context charge (interposer, admission's reserve, the backstop's
//! allowance, published capacity) is then the larger of `admission.context_reserve` and that
//! device's own footprint plus `admission.module_allowance` ([`Policy::with_footprints`]), so
//! a node with GPUs of different kinds charges each what its contexts cost: configuration may
//! raise it, never lower it below what was measured.

use std::io::{BufRead, BufReader, Read, Write};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use gpuslice_api::config::{AdmissionConfig, FALLBACK_CONTEXT_FOOTPRINT};
use gpuslice_api::ContextStatus;
use serde::{Deserialize, Serialize};

use crate::fit::Policy;
use crate::inventory::DeviceInfo;

/// The file in the state directory that keeps the measurement.
pub const FILE: &str = "contexts.json";
/// The hidden argument that makes `gpuslice-arbiter` the probe child.
pub const PROBE_ARG: &str = "--probe-contexts";
/// How long the probe child may take to create its contexts (cuInit on 8 GPUs takes seconds).
const PROBE_TIMEOUT: Duration = Duration::from_secs(60);

/// One device's footprint, as kept in [`FILE`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Footprint {
    /// NVML index.
    pub index: u32,
    /// UUID.
    pub uuid: String,
    /// Driver version of the measurement.
    pub driver: String,
    /// Bytes the context holds beyond allocations.
    pub bytes: u64,
    /// `measured`, `saved` or `assumed` (see [`ContextStatus::source`]).
    pub source: String,
    /// Why it is assumed (the probe's error), for the log, `status` and the metrics.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// The footprint charged for a device that could not be measured: the larger of the assumed
/// H200 figure and the configured `context_reserve`, plus a margin of a quarter (rounded up to
/// a MiB) for GPUs and drivers whose contexts hold more than the H200's — so an unmeasured
/// device is never charged less than a measured H200 (518 + 130 MiB by default).
pub fn assumed_with_margin(c: &AdmissionConfig) -> u64 {
    const MI: u64 = 1 << 20;
    let base = FALLBACK_CONTEXT_FOOTPRINT.max(c.context_reserve.0);
    base.saturating_add((base / 4).div_ceil(MI) * MI)
}

/// The admission policy of this node: `c` with each device's context charge following its
/// own footprint in `list`; a device assumed there, or not in it (none measured yet), is charged
/// [`assumed_with_margin`].
pub fn policy_for(c: &AdmissionConfig, list: &[Footprint]) -> Policy {
    let assumed = assumed_with_margin(c);
    let footprint = |f: &Footprint| match f.source.as_str() {
        "assumed" => assumed,
        _ => f.bytes,
    };
    Policy::from(c)
        .with_unmeasured(assumed, c.module_allowance.0)
        .with_footprints(
            list.iter().map(|f| (f.index, footprint(f))),
            c.module_allowance.0,
        )
}

/// The policy the arbiter of `state_dir` uses, from its saved measurement (the footprint assumed
/// when there is none yet): what the kubelet plugin publishes capacity with.
pub fn node_policy(c: &AdmissionConfig, state_dir: &Path) -> Policy {
    policy_for(c, &load(state_dir).unwrap_or_default())
}

/// Reads [`FILE`] from `dir`.
pub fn load(dir: &Path) -> Option<Vec<Footprint>> {
    let text = std::fs::read_to_string(dir.join(FILE)).ok()?;
    serde_json::from_str(&text).ok()
}

/// Writes [`FILE`] into `dir` (atomically).
pub fn save(dir: &Path, list: &[Footprint]) -> std::io::Result<()> {
    let body = serde_json::to_vec_pretty(list).map_err(std::io::Error::other)?;
    crate::files::write_private(dir, FILE, &body)
}

/// The status of device `index` under `policy`.
pub fn status_of(list: &[Footprint], index: u32, policy: &Policy) -> Option<ContextStatus> {
    list.iter()
        .find(|f| f.index == index)
        .map(|f| ContextStatus {
            footprint: f.bytes,
            source: f.source.clone(),
            driver: f.driver.clone(),
            charge: policy.charge_on(index),
            reason: f.reason.clone(),
        })
}

/// The footprint of every device in `devices`: measured by a probe context where `probe`
/// answered, else the saved figure for the same device and driver, else assumed. Returns the
/// list and what to warn about.
pub fn resolve(
    devices: &[DeviceInfo],
    driver: &str,
    probe: Result<Vec<(u32, u64)>, String>,
    saved: Option<Vec<Footprint>>,
) -> (Vec<Footprint>, Vec<String>) {
    let mut warnings = Vec::new();
    let (measured, failure) = match probe {
        Ok(m) => (m, None),
        Err(e) => {
            warnings.push(format!("cannot measure CUDA contexts: {e}"));
            (Vec::new(), Some(e))
        }
    };
    let saved = saved.unwrap_or_default();
    let list = devices
        .iter()
        .map(|d| {
            let (bytes, source, reason) = match measured.iter().find(|m| m.0 == d.index) {
                Some(&(_, b)) => (b, "measured", None),
                None => match saved
                    .iter()
                    .find(|s| s.uuid == d.uuid && s.driver == driver && s.source != "assumed")
                {
                    Some(s) => (s.bytes, "saved", None),
                    None => {
                        let why = failure
                            .clone()
                            .unwrap_or_else(|| "the probe context did not list it".into());
                        warnings.push(format!(
                            "device {}: context footprint not measured ({why}); assuming {} MiB \
                             and charging it with a margin (docs/contexts.md)",
                            d.index,
                            FALLBACK_CONTEXT_FOOTPRINT >> 20
                        ));
                        (FALLBACK_CONTEXT_FOOTPRINT, "assumed", Some(why))
                    }
                },
            };
            Footprint {
                index: d.index,
                uuid: d.uuid.clone(),
                driver: driver.to_string(),
                bytes,
                source: source.to_string(),
                reason,
            }
        })
        .collect();
    (list, warnings)
}

/// Runs the probe child `exe --probe-contexts` and asks `used_by(pid)` for what NVML lists for
/// it on each device once its contexts exist. `used_by` returns `(index, bytes)` per device
/// that lists the pid.
pub fn probe(
    exe: &Path,
    cuda_library: Option<&Path>,
    used_by: impl Fn(u32) -> Vec<(u32, u64)>,
) -> Result<Vec<(u32, u64)>, String> {
    let mut c = Command::new(exe);
    c.arg(PROBE_ARG)
        .env_remove("LD_PRELOAD")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if let Some(lib) = cuda_library {
        c.env("GPUSLICE_CUDA_LIBRARY", lib);
    }
    let mut child = c.spawn().map_err(|e| format!("{}: {e}", exe.display()))?;
    let result = read_ready(&mut child).map(|_| used_by(child.id()));
    drop(child.stdin.take()); // its cue to exit
    let _ = child.wait();
    let list = result?;
    if list.is_empty() {
        return Err(not_listed(child.id(), &own_nspid()));
    }
    Ok(list)
}

/// Why NVML listed no probe process `pid`, given the arbiter's own `NSpid` line: NVML lists
/// host pids, so an arbiter in a pid namespace of its own (a Pod without `hostPID: true`) looks
/// for a pid NVML never shows.
fn not_listed(pid: u32, nspid: &[u32]) -> String {
    if nspid.len() > 1 {
        format!(
            "NVML does not list the probe process: the arbiter is not in the host's pid \
             namespace (its pids {nspid:?} from the host inward), and NVML lists host pids; \
             run it with hostPID: true to measure contexts"
        )
    } else {
        format!("NVML does not list the probe process (pid {pid}) on any device")
    }
}

/// The pids of this process from the outermost pid namespace inward (`NSpid` of
/// `/proc/self/status`; one entry in the host's namespace).
fn own_nspid() -> Vec<u32> {
    let text = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    text.lines()
        .find_map(|l| l.strip_prefix("NSpid:"))
        .map(|l| {
            l.split_ascii_whitespace()
                .filter_map(|p| p.parse().ok())
                .collect()
        })
        .unwrap_or_default()
}

/// Waits for the child's `ready` line (or its error) within [`PROBE_TIMEOUT`].
fn read_ready(child: &mut Child) -> Result<(), String> {
    let out = child.stdout.take().ok_or("no stdout")?;
    let mut err = child.stderr.take().ok_or("no stderr")?;
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut line = String::new();
        let _ = BufReader::new(out).read_line(&mut line);
        let _ = tx.send(line);
    });
    match rx.recv_timeout(PROBE_TIMEOUT) {
        Ok(l) if l.starts_with("ready") => Ok(()),
        Ok(_) => {
            let _ = child.kill();
            let mut why = String::new();
            let _ = err.read_to_string(&mut why);
            Err(format!("probe context failed: {}", why.trim()))
        }
        Err(_) => {
            let _ = child.kill();
            Err(format!("no probe context within {PROBE_TIMEOUT:?}"))
        }
    }
}

/// The probe child: retains the primary context of every device through the CUDA driver
/// (`GPUSLICE_CUDA_LIBRARY` or `libcuda.so.1`), prints `ready <count>` and holds them until
/// stdin closes.
pub fn probe_child() -> Result<(), String> {
    let lib = std::env::var("GPUSLICE_CUDA_LIBRARY").unwrap_or_else(|_| "libcuda.so.1".into());
    let cu = crate::contexts_driver::Driver::open(&lib)?;
    let n = cu.init_and_retain_all()?;
    let mut out = std::io::stdout();
    writeln!(out, "ready {n}").map_err(|e| e.to_string())?;
    out.flush().map_err(|e| e.to_string())?;
    let mut sink = String::new();
    while std::io::stdin()
        .read_line(&mut sink)
        .map(|k| k > 0)
        .unwrap_or(false)
    {
        sink.clear();
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dev(index: u32) -> DeviceInfo {
        DeviceInfo {
            index,
            uuid: format!("GPU-{index}"),
            name: "x".into(),
            memory_total: 1 << 40,
        }
    }

    #[test]
    fn measured_then_saved_then_assumed() {
        const MI: u64 = 1 << 20;
        let devs = [dev(0), dev(1), dev(2)];
        let saved = vec![
            Footprint {
                index: 1,
                uuid: "GPU-1".into(),
                driver: "580".into(),
                bytes: 600 * MI,
                source: "measured".into(),
                reason: None,
            },
            Footprint {
                index: 2,
                uuid: "GPU-2".into(),
                driver: "570".into(),
                bytes: 400 * MI,
                source: "measured".into(),
                reason: None,
            },
        ];
        let (list, warnings) = resolve(&devs, "580", Ok(vec![(0, 518 * MI)]), Some(saved));
        let got: Vec<(u64, &str)> = list
            .iter()
            .map(|f| (f.bytes >> 20, f.source.as_str()))
            .collect();
        assert_eq!(got, [(518, "measured"), (600, "saved"), (518, "assumed")]);
        assert_eq!(warnings.len(), 1, "{warnings:?}");
        assert!(warnings[0].contains("device 2"), "{warnings:?}");
        let (list, warnings) = resolve(&devs[..1], "580", Err("no driver".into()), None);
        assert!(warnings[0].contains("no driver"), "{warnings:?}");
        assert_eq!(list[0].reason.as_deref(), Some("no driver"));
    }

    /// NVML cannot see the probe child (the arbiter in a pid namespace of its own): the log and
    /// `status` say why, and the device is charged the assumed footprint with its margin —
    /// never less than a measured H200, and never below the configured reserve.
    #[test]
    fn an_unmeasurable_device_is_charged_with_a_margin_and_says_why() {
        const MI: u64 = 1 << 20;
        let why = not_listed(7, &[48211, 7]);
        assert!(why.contains("not in the host's pid namespace"), "{why}");
        assert!(why.contains("hostPID: true"), "{why}");
        assert!(!not_listed(7, &[7]).contains("namespace"));
        let (list, warnings) = resolve(&[dev(0)], "580", Err(why.clone()), None);
        assert_eq!(list[0].source, "assumed");
        assert!(
            warnings.iter().any(|w| w.contains("hostPID")),
            "{warnings:?}"
        );
        let c = AdmissionConfig::default();
        let p = policy_for(&c, &list);
        assert_eq!(p.charge_on(0), (518 + 130 + 256) * MI);
        let st = status_of(&list, 0, &p).expect("status");
        assert_eq!(st.reason.as_deref(), Some(why.as_str()));
        assert_eq!(st.footprint, 518 * MI);
        // A larger configured reserve is the base of the margin.
        let big = AdmissionConfig {
            context_reserve: gpuslice_api::ByteSize(1024 * MI),
            ..c
        };
        assert_eq!(
            policy_for(&big, &list).charge_on(0),
            (1024 + 256 + 256) * MI
        );
        // This test process is in the host's namespace or a container's: one pid or more.
        assert!(!own_nspid().is_empty());
    }

    #[test]
    fn each_device_is_charged_its_own_footprint_and_config_only_raises_it() {
        const MI: u64 = 1 << 20;
        let f = |index, bytes| Footprint {
            index,
            uuid: format!("GPU-{index}"),
            driver: "580".into(),
            bytes,
            source: "measured".into(),
            reason: None,
        };
        let c = AdmissionConfig::default(); // reserve 512 MiB, modules 256 MiB
                                            // A mixed node: each device its own footprint + 256 MiB; one unlisted keeps the reserve.
        let mixed = policy_for(&c, &[f(0, 518 * MI), f(1, 300 * MI)]);
        assert_eq!(mixed.charge_on(0), 774 * MI);
        assert_eq!(mixed.charge_on(1), 556 * MI);
        assert_eq!(
            mixed.charge_on(7),
            904 * MI,
            "not measured: 518 + 130 MiB assumed"
        );
        assert_eq!(
            Policy::default().charge_on(7),
            512 * MI,
            "the configured reserve"
        );
        assert_eq!(
            mixed.reserve_on(1),
            556 * MI * u64::from(c.processes_per_slice)
        );
        assert_eq!(mixed.commitment_on(1, Some(GI)), GI + mixed.reserve_on(1));
        let low = AdmissionConfig {
            context_reserve: gpuslice_api::ByteSize(16 * MI),
            ..c.clone()
        };
        assert_eq!(policy_for(&low, &[f(0, 518 * MI)]).charge_on(0), 774 * MI);
        let high = AdmissionConfig {
            context_reserve: gpuslice_api::ByteSize(2048 * MI),
            ..c
        };
        let high = policy_for(&high, &[f(0, 518 * MI), f(1, 300 * MI)]);
        assert_eq!(
            (high.charge_on(0), high.charge_on(1)),
            (2048 * MI, 2048 * MI)
        );
    }

    const GI: u64 = 1 << 30;
}
