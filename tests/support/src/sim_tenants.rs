//! `gpuslice-workload` tenants under the interposer on a simulated node with this build's
//! arbiter, as the share and latency tests run them: the node, admission, a tenant, and what it
//! printed. Failures panic with what went wrong.
//!
//! Needs `cargo build -p gpuslice-sim-cuda -p gpuslice-sim-nvml -p gpuslice-interposer
//! -p gpuslice-workloads -p gpuslice-arbiter` in the same target directory.

use crate::{NodeConfig, SimNode};
use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};

/// The simulated engine models every share and latency test runs on.
pub const ENGINES: [&str; 2] = ["timeslice", "kernel"];

/// A node on engine `engine` with `devices` (`GPUSLICE_SIM_DEVICES`; `None`: one device), its
/// arbiter reserving 16 MiB a context and nothing for modules.
pub fn node(tag: &str, engine: &'static str, devices: Option<&str>) -> SimNode {
    start(tag, engine, devices, false)
}

/// [`node`] with its arbiter serving metrics ([`SimNode::scrape`]).
pub fn node_with_metrics(tag: &str, engine: &'static str, devices: Option<&str>) -> SimNode {
    start(tag, engine, devices, true)
}

fn start(tag: &str, engine: &'static str, devices: Option<&str>, metrics: bool) -> SimNode {
    let mut cfg = NodeConfig {
        config: "[admission]\ncontext_reserve = \"16Mi\"\nmodule_allowance = \"0\"\n".into(),
        // The metrics address is logged at `info`.
        log_level: if metrics { "info" } else { "warn" }.into(),
        needs: vec!["gpuslice-workload"],
        engine: Some(engine),
        metrics,
        ..NodeConfig::default()
    };
    if let Some(d) = devices {
        cfg.devices = d.into();
    }
    SimNode::start(&format!("{tag}-{engine}"), cfg)
}

/// Admits slice `id` with `request` (JSON members, without braces) and 1 GiB; its directory.
pub fn admit(n: &SimNode, id: &str, request: &str) -> PathBuf {
    n.arbiter()
        .admit(id, &format!("{request},\"memory\":\"1Gi\""))
        .unwrap_or_else(|e| panic!("admit {id}: {e}"))
}

/// Releases slice `id`.
pub fn release(n: &SimNode, id: &str) {
    n.arbiter().release(id);
}

/// Starts `gpuslice-workload args` in `slice` under the interposer, stdout piped.
pub fn tenant<S: AsRef<OsStr>>(n: &SimNode, slice: &Path, args: &[S]) -> Child {
    n.tenant(slice, args)
        .stdout(Stdio::piped())
        .spawn()
        .expect("starting a tenant")
}

/// Waits for tenant `c`; what it printed (it must have succeeded).
pub fn output(c: Child) -> String {
    let o = c.wait_with_output().expect("tenant output");
    let text = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(o.status.success(), "tenant failed: {text}");
    text
}

/// The number after `key=` in a tenant's output.
pub fn field(out: &str, key: &str) -> f64 {
    out.split_whitespace()
        .find_map(|kv| kv.strip_prefix(key)?.strip_prefix('='))
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no {key}= in {out:?}"))
}
