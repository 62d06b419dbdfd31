//! A simulated GPU node: a temporary directory with the simulated driver libraries under their
//! real names (`lib/libcuda.so.1`, `lib/libnvidia-ml.so.1`) and the simulator's state file, for
//! the programs of one build ([`Build`]: this build's `target/<profile>`, or a dist tree). With
//! [`SimNode::start`] the node runs the build's [`Arbiter`] (its `state/`, `config.toml` and
//! `arbiter.log` in the node's directory); [`SimNode::new`] makes the node alone, and
//! [`SimNode::new_arbiter`] lays out any number of arbiters on it, one at a time (the benchmarks'
//! and the demo's). [`SimNode::env`] gives any command the same node.

use crate::Arbiter;
use std::ffi::{OsStr, OsString};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

/// `target/<profile>`: where this build's binaries and cdylibs are (test binaries run from
/// `target/<profile>/deps`).
pub fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("current_exe");
    let dir = exe.parent().expect("exe dir").to_path_buf();
    if dir.ends_with("deps") {
        dir.parent().expect("profile dir").to_path_buf()
    } else {
        dir
    }
}

/// The files of a build a node runs: (cargo's name in `target/<profile>`, path in a dist tree).
const FILES: [(&str, &str); 6] = [
    ("gpuslice-arbiter", "usr/bin/gpuslice-arbiter"),
    ("gpuslice", "usr/bin/gpuslice"),
    ("libgpuslice.so", "usr/lib/gpuslice/libgpuslice.so"),
    ("libcuda.so", "sim/libcuda.so.1"),
    ("libnvidia_ml.so", "sim/libnvidia-ml.so.1"),
    ("gpuslice-workload", "sim/bin/gpuslice-workload"),
];

/// Where a node's programs and libraries come from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Build {
    /// A cargo profile directory ([`profile_dir`]): the files under cargo's names.
    Profile(PathBuf),
    /// A dist tree (`usr/bin/`, `usr/lib/gpuslice/`, and `sim/` for the simulator and the
    /// workload), as `cargo xtask` lays out for the demo and the benchmarks.
    Dist(PathBuf),
}

impl Build {
    /// The file cargo calls `name` (`gpuslice-arbiter`, `libgpuslice.so`, ...) in this build;
    /// in a dist tree, a program not in the table is in `usr/bin/`.
    pub fn file(&self, name: &str) -> PathBuf {
        match self {
            Build::Profile(dir) => dir.join(name),
            Build::Dist(dir) => match FILES.iter().find(|(n, _)| *n == name) {
                Some((_, at)) => dir.join(at),
                None => dir.join("usr/bin").join(name),
            },
        }
    }

    /// The arbiter.
    pub fn arbiter(&self) -> PathBuf {
        self.file("gpuslice-arbiter")
    }

    /// The interposer (`libgpuslice.so`).
    pub fn interposer(&self) -> PathBuf {
        self.file("libgpuslice.so")
    }

    /// The `gpuslice` CLI.
    pub fn cli(&self) -> PathBuf {
        self.file("gpuslice")
    }

    /// The simulator's test program, `gpuslice-workload`.
    pub fn workload(&self) -> PathBuf {
        self.file("gpuslice-workload")
    }

    /// The command that builds what is missing, for the message naming it.
    fn hint(&self) -> String {
        match self {
            Build::Profile(dir) => format!(
                "cargo build{} -p gpuslice-sim-cuda -p gpuslice-sim-nvml -p gpuslice-interposer \
                 -p gpuslice-workloads -p gpuslice-arbiter -p gpuslice-cli",
                if dir.ends_with("release") {
                    " --release"
                } else {
                    ""
                }
            ),
            Build::Dist(_) => "the dist tree is incomplete: build it again".into(),
        }
    }
}

/// What node to make.
#[derive(Clone, Debug)]
pub struct NodeConfig {
    /// `GPUSLICE_SIM_DEVICES`.
    pub devices: String,
    /// `GPUSLICE_SIM_CTX_OVERHEAD` (what a context costs on the simulated device); `None`: the
    /// simulator's default (518 MiB, as an H100 measured) unless the caller's environment says.
    pub ctx_overhead: Option<String>,
    /// `GPUSLICE_SIM_MODULE_OVERHEAD` (what loading a module costs); `None` as above (64 MiB).
    pub module_overhead: Option<String>,
    /// TOML appended to the config file after the `interposer` line (sections such as
    /// `[admission]` or `[backstop]`).
    pub config: String,
    /// Serve metrics on a free loopback port and wait until the arbiter says which.
    pub metrics: bool,
    /// `RUST_LOG` of the arbiter.
    pub log_level: String,
    /// Files of the build the test needs beyond the simulator, the interposer and the arbiter,
    /// under cargo's names (checked before anything starts).
    pub needs: Vec<&'static str>,
    /// `GPUSLICE_SIM_ENGINE` of the node (`timeslice` / `kernel`); None: the test's own
    /// environment decides (the simulator's default when unset).
    pub engine: Option<&'static str>,
    /// Whose programs the node runs (default: this build's, [`profile_dir`]).
    pub build: Build,
}

impl Default for NodeConfig {
    fn default() -> Self {
        NodeConfig {
            devices: "name=Test GPU 8G,mem=8Gi,sms=16,cc=9.0".into(),
            ctx_overhead: Some("0".into()),
            // Modules load for free unless a device says otherwise (`module=` in the devices).
            module_overhead: Some("0".into()),
            config: String::new(),
            metrics: false,
            log_level: "info".into(),
            needs: Vec::new(),
            engine: None,
            build: Build::Profile(profile_dir()),
        }
    }
}

impl NodeConfig {
    /// A node for the programs of the dist tree `dist` on `devices`, the simulator's own
    /// context and module costs (as on the real driver): the demo's and the benchmarks'.
    pub fn dist(dist: &Path, devices: &str) -> NodeConfig {
        NodeConfig {
            devices: devices.into(),
            ctx_overhead: None,
            module_overhead: None,
            build: Build::Dist(dist.to_path_buf()),
            ..NodeConfig::default()
        }
    }
}

/// The node; its arbiter, if it has one, is killed and the directory removed on drop.
pub struct SimNode {
    /// The node's directory.
    pub dir: PathBuf,
    /// `host:port` of the metrics endpoint when asked for.
    pub metrics: Option<String>,
    build: Build,
    devices: String,
    ctx_overhead: Option<String>,
    module_overhead: Option<String>,
    engine: Option<&'static str>,
    /// The node's own arbiter ([`SimNode::start`]).
    arbiter: Option<Arbiter>,
}

impl SimNode {
    /// Makes the node under the temporary directory (`gs-<tag>-<pid>`, emptied first) and
    /// starts its arbiter with `cfg`'s configuration; returns once its socket answers (and its
    /// metrics port is known).
    pub fn start(tag: &str, cfg: NodeConfig) -> SimNode {
        let mut node = SimNode::new(tag, &cfg);
        let metrics = if cfg.metrics {
            "[metrics]\nlisten = \"127.0.0.1:0\"\n"
        } else {
            "[metrics]\nenabled = false\n"
        };
        let mut arbiter = node
            .new_arbiter("", &format!("{metrics}{}\n", cfg.config))
            .expect("the arbiter's state dir and config.toml");
        arbiter.env("RUST_LOG", &cfg.log_level);
        node.arbiter = Some(arbiter);
        node.start_arbiter();
        if cfg.metrics {
            node.metrics = Some(node.metrics_address());
        }
        node
    }

    /// Makes the node alone (no arbiter), as [`SimNode::start`] does; panics, naming them,
    /// when files of the build are missing.
    pub fn new(tag: &str, cfg: &NodeConfig) -> SimNode {
        let base = [
            "libcuda.so",
            "libnvidia_ml.so",
            "libgpuslice.so",
            "gpuslice-arbiter",
        ];
        let missing: Vec<PathBuf> = base
            .iter()
            .chain(cfg.needs.iter())
            .map(|f| cfg.build.file(f))
            .filter(|f| !f.exists())
            .collect();
        assert!(
            missing.is_empty(),
            "{missing:?} missing: {}",
            cfg.build.hint()
        );
        let dir = std::env::temp_dir().join(format!("gs-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("lib")).expect("node dir");
        for (from, to) in [
            ("libcuda.so", "libcuda.so.1"),
            ("libnvidia_ml.so", "libnvidia-ml.so.1"),
        ] {
            std::os::unix::fs::symlink(cfg.build.file(from), dir.join("lib").join(to))
                .expect("library link");
        }
        SimNode {
            dir,
            metrics: None,
            build: cfg.build.clone(),
            devices: cfg.devices.clone(),
            ctx_overhead: cfg.ctx_overhead.clone(),
            module_overhead: cfg.module_overhead.clone(),
            engine: cfg.engine,
            arbiter: None,
        }
    }

    /// The build's arbiter for this node in `<dir>/<name>` (`""`: the node's directory), not
    /// started: the node's environment, its simulated NVML, the build's interposer, and
    /// `config` (TOML; sections such as `[metrics]` or `[admission]`).
    pub fn new_arbiter(&self, name: &str, config: &str) -> std::io::Result<Arbiter> {
        let mut a = Arbiter::new(
            self.build.arbiter(),
            &self.dir.join(name),
            &format!(
                "interposer = \"{}\"\n{config}",
                self.build.interposer().display()
            ),
        )?;
        for (k, v) in self.node_vars() {
            match v {
                Some(v) => a.env(k, v),
                None => a.env_remove(k),
            };
        }
        a.env(
            "GPUSLICE_NVML_LIBRARY",
            self.dir.join("lib/libnvidia-ml.so.1"),
        );
        Ok(a)
    }

    /// Waits (30 s at most) for the arbiter to log its metrics address.
    fn metrics_address(&self) -> String {
        self.arbiter()
            .metrics_address(Duration::from_secs(30))
            .unwrap_or_else(|e| panic!("{e}"))
    }

    /// Whose programs the node runs.
    pub fn build(&self) -> &Build {
        &self.build
    }

    /// Spawns the node's arbiter (appending to `arbiter.log`) and waits until it answers a
    /// `status` request; how long that took. Panics if it exits or stays silent 30 s.
    pub fn start_arbiter(&mut self) -> Duration {
        self.own_mut().start().unwrap_or_else(|e| panic!("{e}"))
    }

    /// SIGKILLs the node's arbiter and reaps it.
    pub fn kill_arbiter(&mut self) {
        if let Some(a) = self.arbiter.as_mut() {
            a.kill();
        }
    }

    /// The running arbiter's pid (it may have exited since: not reaped).
    pub fn arbiter_pid(&self) -> Option<u32> {
        self.arbiter.as_ref().and_then(Arbiter::pid)
    }

    /// The node's arbiter (panics on a node made by [`SimNode::new`]).
    pub fn arbiter(&self) -> &Arbiter {
        self.arbiter
            .as_ref()
            .expect("a node made by SimNode::start has an arbiter")
    }

    fn own_mut(&mut self) -> &mut Arbiter {
        self.arbiter
            .as_mut()
            .expect("a node made by SimNode::start has an arbiter")
    }

    /// One request line and its answer, `None` when the arbiter cannot be reached or answers
    /// garbage (within 10 s).
    pub fn try_call(&self, line: &str) -> Option<serde_json::Value> {
        self.arbiter().try_call(line)
    }

    /// The simulator's part of [`SimNode::vars`]: the driver first on the library path, the
    /// state and devices, no inherited preload or slice.
    fn node_vars(&self) -> Vec<(&'static str, Option<OsString>)> {
        let some = |v: &Option<String>| v.as_ref().map(OsString::from);
        let mut v = vec![
            ("LD_LIBRARY_PATH", Some(self.dir.join("lib").into())),
            (
                "GPUSLICE_SIM_STATE",
                Some(self.dir.join("sim.state").into()),
            ),
            ("GPUSLICE_SIM_DEVICES", Some((&self.devices).into())),
            ("LD_PRELOAD", None),
            ("GPUSLICE_SLICE_DIR", None),
            ("GPUSLICE_MEMORY", None),
        ];
        let costs = [
            ("GPUSLICE_SIM_CTX_OVERHEAD", some(&self.ctx_overhead)),
            ("GPUSLICE_SIM_MODULE_OVERHEAD", some(&self.module_overhead)),
            ("GPUSLICE_SIM_ENGINE", self.engine.map(OsString::from)),
        ];
        // Unset costs and engine: the simulator's defaults, or the caller's environment.
        v.extend(costs.into_iter().filter(|(_, val)| val.is_some()));
        v
    }

    /// What [`SimNode::env`] sets (`Some`) and removes (`None`): the node, and the node's
    /// arbiter's state directory and config when it has one.
    fn vars(&self) -> Vec<(&'static str, Option<OsString>)> {
        let mut v = self.node_vars();
        if let Some(a) = &self.arbiter {
            v.push(("GPUSLICE_STATE_DIR", Some(a.state_dir.clone().into())));
            v.push(("GPUSLICE_CONFIG", Some(a.config.clone().into())));
        }
        v
    }

    /// Puts `c` on this node: the simulated driver first on the library path, the simulator's
    /// state and devices, the arbiter's state directory and config; no inherited preload.
    pub fn env(&self, c: &mut Command) {
        for (k, v) in self.vars() {
            match v {
                Some(v) => c.env(k, v),
                None => c.env_remove(k),
            };
        }
    }

    /// `program` with [`SimNode::env`], run in the node's directory.
    pub fn command(&self, program: impl AsRef<OsStr>) -> Command {
        let mut c = Command::new(program);
        c.current_dir(&self.dir);
        self.env(&mut c);
        c
    }

    /// The build's `gpuslice-workload` on this node (no slice).
    pub fn workload(&self) -> Command {
        self.command(self.build.workload())
    }

    /// `gpuslice-workload --via dlsym args` in the slice whose directory is `slice`, under the
    /// build's interposer: a tenant, to spawn.
    pub fn tenant<S: AsRef<OsStr>>(&self, slice: &Path, args: &[S]) -> Command {
        let mut c = self.workload();
        c.args(["--via", "dlsym"])
            .args(args)
            .env("LD_PRELOAD", self.build.interposer())
            .env("GPUSLICE_SLICE_DIR", slice);
        c
    }

    /// The simulator's own view of this node (its ground truth: memory, device time per
    /// process), configured as the node's processes are: the node's variables, then the
    /// caller's environment, which they inherit.
    pub fn open_sim(&self) -> Result<gpuslice_sim_core::Node, gpuslice_sim_core::SimError> {
        let vars = self.vars();
        let cfg = gpuslice_sim_core::SimConfig::from_lookup(|k| {
            match vars.iter().find(|(n, _)| *n == k) {
                Some((_, v)) => v.as_ref().map(|v| v.to_string_lossy().into_owned()),
                None => std::env::var(k).ok(),
            }
        })?;
        gpuslice_sim_core::Node::open(cfg)
    }

    /// The arbiter's state directory.
    pub fn state_dir(&self) -> PathBuf {
        self.arbiter().state_dir.clone()
    }

    /// The arbiter's socket.
    pub fn socket(&self) -> PathBuf {
        self.arbiter().socket()
    }

    /// The arbiter's log so far.
    pub fn log(&self) -> String {
        self.arbiter().log()
    }

    /// Sends one request line to the arbiter and returns its answer.
    pub fn call(&self, line: &str) -> serde_json::Value {
        self.arbiter().call(line)
    }

    /// The metrics page (`GET /metrics`), headers included.
    pub fn scrape(&self) -> String {
        let addr = self
            .metrics
            .as_deref()
            .expect("the node was started with metrics");
        let mut s = TcpStream::connect(addr).expect("metrics endpoint");
        write!(s, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n").expect("request");
        let mut out = String::new();
        s.read_to_string(&mut out).expect("metrics");
        out
    }
}

impl Drop for SimNode {
    /// Kills the arbiter and removes the directory (kept with `GPUSLICE_KEEP_SCRATCH` or
    /// `GPUSLICE_TRIALS_KEEP` set, to look at after a failure).
    fn drop(&mut self) {
        self.kill_arbiter();
        if !crate::scratch::keep() {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}
