//! OCI bundles for runc (or any runc-compatible runtime such as `gpuslice-runtime`).
//!
//! The bundle's `config.json` starts from `runc spec` (the installed runc's defaults) and is
//! patched: arguments, environment, bind mounts, annotations, no terminal.

use crate::paths;
use crate::procs::{run_ok, run_timeout};
use crate::sim::Bind;
use anyhow::{Context, Result};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

/// What the container runs and asks for.
#[derive(Debug, Clone, Default)]
pub struct Spec {
    /// `process.args`.
    pub args: Vec<String>,
    /// Extra `process.env` entries (`KEY=VALUE`).
    pub env: Vec<String>,
    /// Extra bind mounts.
    pub binds: Vec<Bind>,
    /// OCI annotations.
    pub annotations: Vec<(String, String)>,
}

/// Create `dir/config.json` and `dir/rootfs` (a copy of `rootfs`).
pub fn make_bundle(dir: &Path, rootfs: &Path, spec: &Spec) -> Result<PathBuf> {
    std::fs::create_dir_all(dir)?;
    run_ok(
        Command::new("cp")
            .arg("-a")
            .arg(rootfs)
            .arg(dir.join("rootfs")),
        Duration::from_secs(60),
    )?;
    let _ = std::fs::remove_file(dir.join("config.json"));
    run_ok(
        Command::new(paths::runc()).arg("spec").current_dir(dir),
        Duration::from_secs(30),
    )?;
    let cfg_path = dir.join("config.json");
    let mut cfg: Value = serde_json::from_slice(&std::fs::read(&cfg_path)?)?;
    cfg["process"]["terminal"] = json!(false);
    cfg["process"]["args"] = json!(spec.args);
    if let Some(env) = cfg["process"]["env"].as_array_mut() {
        env.extend(spec.env.iter().map(|e| json!(e)));
    }
    cfg["root"]["readonly"] = json!(false);
    if let Some(m) = cfg["mounts"].as_array_mut() {
        for b in &spec.binds {
            let mode = if b.ro { "ro" } else { "rw" };
            m.push(json!({
                "destination": b.dst, "type": "bind", "source": b.src,
                "options": ["rbind", mode, "nosuid", "nodev"]
            }));
        }
    }
    let ann: serde_json::Map<String, Value> = spec
        .annotations
        .iter()
        .map(|(k, v)| (k.clone(), json!(v)))
        .collect();
    if !ann.is_empty() {
        cfg["annotations"] = Value::Object(ann);
    }
    std::fs::write(&cfg_path, serde_json::to_vec_pretty(&cfg)?)
        .with_context(|| format!("writing {}", cfg_path.display()))?;
    Ok(dir.to_path_buf())
}

/// Run a bundle to completion: `<runtime> --root <root> run -b <bundle> <id>`, with `env`
/// added to the runtime's own environment.
pub fn run_bundle(
    runtime: &Path,
    root: &Path,
    bundle: &Path,
    id: &str,
    env: &[(String, String)],
    timeout: Duration,
) -> Result<Output> {
    let mut c = Command::new(runtime);
    c.arg("--root")
        .arg(root)
        .arg("run")
        .arg("-b")
        .arg(bundle)
        .arg(id)
        .envs(env.iter().map(|(k, v)| (k, v)));
    let out = run_timeout(&mut c, timeout);
    // A failed or timed-out run may leave the container record: delete it (ours, by id).
    let _ = run_timeout(
        Command::new(paths::runc())
            .arg("--root")
            .arg(root)
            .args(["delete", "--force", id]),
        Duration::from_secs(20),
    );
    out
}
