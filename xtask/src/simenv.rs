//! The environment a process needs to run on the simulated GPU from a dist tree: the loader path to
//! `sim/`, a private state file, and a device list.

use std::path::{Path, PathBuf};
use std::process::Command;

/// A simulated node: a private state file and a device description.
pub struct SimNode {
    pub dist: PathBuf,
    pub state_dir: PathBuf,
    pub devices: String,
    /// `GPUSLICE_SIM_ENGINE` for its processes (`None`: the simulator's default).
    pub engine: Option<&'static str>,
}

impl SimNode {
    /// A node with a fresh state file under a new temporary directory.
    pub fn new(dist: &Path, devices: &str) -> std::io::Result<SimNode> {
        Self::make(dist, devices, None)
    }

    /// A node whose engine runs in `engine` mode (`timeslice` or `kernel`), with a state
    /// directory of its own, so nodes of both modes can exist side by side.
    pub fn with_engine(
        dist: &Path,
        devices: &str,
        engine: &'static str,
    ) -> std::io::Result<SimNode> {
        Self::make(dist, devices, Some(engine))
    }

    fn make(dist: &Path, devices: &str, engine: Option<&'static str>) -> std::io::Result<SimNode> {
        let suffix = engine.map(|e| format!("-{e}")).unwrap_or_default();
        let state_dir =
            std::env::temp_dir().join(format!("gpuslice-xtask-{}{suffix}", std::process::id()));
        std::fs::create_dir_all(&state_dir)?;
        let _ = std::fs::remove_file(state_dir.join("sim.state"));
        Ok(SimNode {
            dist: dist.to_path_buf(),
            state_dir,
            devices: devices.to_string(),
            engine,
        })
    }

    /// Environment variables (name, value) for processes on this node.
    pub fn env(&self) -> Vec<(String, String)> {
        vec![
            (
                "LD_LIBRARY_PATH".into(),
                self.dist.join("sim").display().to_string(),
            ),
            (
                "GPUSLICE_SIM_STATE".into(),
                self.state_dir.join("sim.state").display().to_string(),
            ),
            ("GPUSLICE_SIM_DEVICES".into(), self.devices.clone()),
        ]
        .into_iter()
        .chain(
            self.engine
                .map(|e| ("GPUSLICE_SIM_ENGINE".to_string(), e.to_string())),
        )
        // The engine's time slice, when the caller set one: every process sharing the state
        // file (this one's own reader too) must agree on it.
        .chain(
            std::env::var("GPUSLICE_SIM_TIMESLICE_US")
                .ok()
                .map(|v| ("GPUSLICE_SIM_TIMESLICE_US".to_string(), v)),
        )
        .collect()
    }

    /// A `gpuslice-workload` command from the dist tree with this node's environment.
    pub fn workload(&self) -> Command {
        let mut c = Command::new(self.dist.join("sim/bin/gpuslice-workload"));
        c.envs(self.env());
        c
    }

    /// The simulator's own view of this node's state (its ground truth: memory, busy time).
    pub fn open_sim(&self) -> anyhow::Result<gpuslice_sim_core::Node> {
        let env = self.env();
        let cfg = gpuslice_sim_core::SimConfig::from_lookup(|k| {
            env.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone())
        })
        .map_err(|e| anyhow::anyhow!("simulator configuration: {e}"))?;
        gpuslice_sim_core::Node::open(cfg).map_err(|e| anyhow::anyhow!("simulator state: {e}"))
    }

    /// Path of the simulated NVML library in the dist tree.
    pub fn nvml_lib(&self) -> PathBuf {
        self.dist.join("sim/libnvidia-ml.so.1")
    }
}

impl Drop for SimNode {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.state_dir);
    }
}

/// The dist tree's `gpuslice-arbiter` on a [`SimNode`] (the demo's and the share benchmark's):
/// the suites' [`gpuslice_test_support::Arbiter`] (process, readiness, stop on drop) with the
/// node's environment and requests that fail on an `error` answer. Its log is
/// `<node>/<name>/arbiter.log`.
pub struct Arbiter {
    inner: gpuslice_test_support::Arbiter,
    dist: PathBuf,
    /// What points a process at this arbiter and the node.
    env: Vec<(String, String)>,
}

impl Arbiter {
    /// Starts it on `node` in `<node>/<name>`, with the configuration `config` (TOML) and
    /// `extra` environment for the arbiter alone; returns once it answers.
    pub fn start(
        node: &SimNode,
        name: &str,
        config: &str,
        extra: &[(&str, String)],
    ) -> anyhow::Result<Arbiter> {
        let mut inner = gpuslice_test_support::Arbiter::new(
            node.dist.join("usr/bin/gpuslice-arbiter"),
            &node.state_dir.join(name),
            config,
        )?;
        let mut env = node.env();
        inner
            .envs(env.iter().cloned())
            .envs(extra.iter().map(|(k, v)| (*k, v.as_str())))
            .env("GPUSLICE_NVML_LIBRARY", node.nvml_lib())
            .env("RUST_LOG", "warn");
        inner.start()?;
        env.extend(inner.client_env());
        Ok(Arbiter {
            inner,
            dist: node.dist.clone(),
            env,
        })
    }

    /// Its state directory (slice directories, `arbiter.sock`).
    pub fn state(&self) -> &Path {
        &self.inner.state_dir
    }

    /// Its pid.
    pub fn pid(&self) -> u32 {
        self.inner.pid().unwrap_or(0)
    }

    /// Its control socket.
    pub fn socket(&self) -> PathBuf {
        self.inner.socket()
    }

    /// One request (the members after `"version":1,`); an `error` answer is an error.
    pub fn req(&self, body: &str) -> anyhow::Result<String> {
        use std::io::{BufRead as _, Write as _};
        let mut s = std::os::unix::net::UnixStream::connect(self.socket())?;
        writeln!(s, "{{\"version\":1,{body}}}")?;
        let mut line = String::new();
        std::io::BufReader::new(s).read_line(&mut line)?;
        if line.contains("\"error\"") {
            anyhow::bail!("arbiter refused {body}: {line}");
        }
        Ok(line)
    }

    /// Admits `id` with `request` (JSON members); its slice directory.
    pub fn admit(&self, id: &str, request: &str) -> anyhow::Result<PathBuf> {
        self.req(&format!(
            "\"op\":\"admit\",\"slice_id\":\"{id}\",\"request\":{{{request}}}"
        ))?;
        Ok(self.state().join(id))
    }

    /// Releases `id` (an error is ignored: it may be gone already).
    pub fn release(&self, id: &str) {
        let _ = self.req(&format!("\"op\":\"release\",\"slice_id\":\"{id}\""));
    }

    /// Updates `id` with `fields` (JSON members).
    pub fn update(&self, id: &str, fields: &str) -> anyhow::Result<()> {
        self.req(&format!("\"op\":\"update\",\"slice_id\":\"{id}\",{fields}"))
            .map(|_| ())
    }

    /// The `gpuslice` CLI of the dist tree, pointed at this arbiter and the simulated node.
    pub fn gpuslice(&self) -> Command {
        let mut c = Command::new(self.dist.join("usr/bin/gpuslice"));
        c.envs(self.env.iter().cloned());
        c
    }

    /// `gpuslice status --json`.
    pub fn status(&self) -> anyhow::Result<serde_json::Value> {
        let out = self.gpuslice().args(["status", "--json"]).output()?;
        if !out.status.success() {
            anyhow::bail!(
                "gpuslice status failed: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        Ok(serde_json::from_slice(&out.stdout)?)
    }
}
