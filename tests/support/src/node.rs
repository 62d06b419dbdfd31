//! A simulated GPU node with a real arbiter: a temporary directory with the simulated driver
//! libraries under their real names (`lib/libcuda.so.1`, `lib/libnvidia-ml.so.1`), the
//! simulator's state file, and this build's [`Arbiter`] started on it (its `state/`,
//! `config.toml` and `arbiter.log` in the same directory). [`SimNode::env`] gives any command the same node.

use crate::Arbiter;
use std::ffi::OsString;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

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

/// What node to make.
#[derive(Clone, Debug)]
pub struct NodeConfig {
    /// `GPUSLICE_SIM_DEVICES`.
    pub devices: String,
    /// `GPUSLICE_SIM_CTX_OVERHEAD` (what a context costs on the simulated device).
    pub ctx_overhead: String,
    /// TOML appended to the config file after the `interposer` line (sections such as
    /// `[admission]` or `[backstop]`).
    pub config: String,
    /// Serve metrics on a free loopback port and wait until the arbiter says which.
    pub metrics: bool,
    /// `RUST_LOG` of the arbiter.
    pub log_level: String,
    /// Files of the profile directory the test needs beyond the simulator, the interposer and
    /// the arbiter (checked before anything starts).
    pub needs: Vec<&'static str>,
    /// `GPUSLICE_SIM_ENGINE` of the node (`timeslice` / `kernel`); None: the test's own
    /// environment decides (the simulator's default when unset).
    pub engine: Option<&'static str>,
}

impl Default for NodeConfig {
    fn default() -> Self {
        NodeConfig {
            devices: "name=Test GPU 8G,mem=8Gi,sms=16,cc=9.0".into(),
            ctx_overhead: "0".into(),
            config: String::new(),
            metrics: false,
            log_level: "info".into(),
            needs: Vec::new(),
            engine: None,
        }
    }
}

/// The node; the arbiter is killed and the directory removed on drop.
pub struct SimNode {
    /// The node's directory.
    pub dir: PathBuf,
    /// `host:port` of the metrics endpoint when asked for.
    pub metrics: Option<String>,
    devices: String,
    ctx_overhead: String,
    engine: Option<&'static str>,
    arbiter: Arbiter,
}

impl SimNode {
    /// Makes the node under the temporary directory (`gs-<tag>-<pid>`) and starts the arbiter;
    /// returns once its socket answers (and its metrics port is known).
    pub fn start(tag: &str, cfg: NodeConfig) -> SimNode {
        let prof = profile_dir();
        let base = [
            "libcuda.so",
            "libnvidia_ml.so",
            "libgpuslice.so",
            "gpuslice-arbiter",
        ];
        let missing: Vec<String> = base
            .iter()
            .chain(cfg.needs.iter())
            .filter(|f| !prof.join(f).exists())
            .map(|f| f.to_string())
            .collect();
        assert!(
            missing.is_empty(),
            "{missing:?} missing in {}: cargo build{} -p gpuslice-sim-cuda -p gpuslice-sim-nvml \
             -p gpuslice-interposer -p gpuslice-workloads -p gpuslice-arbiter -p gpuslice-cli",
            prof.display(),
            if prof.ends_with("release") {
                " --release"
            } else {
                ""
            }
        );
        let dir = std::env::temp_dir().join(format!("gs-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("lib")).expect("node dir");
        for (from, to) in [
            ("libcuda.so", "libcuda.so.1"),
            ("libnvidia_ml.so", "libnvidia-ml.so.1"),
        ] {
            std::os::unix::fs::symlink(prof.join(from), dir.join("lib").join(to))
                .expect("library link");
        }
        let metrics = if cfg.metrics {
            "[metrics]\nlisten = \"127.0.0.1:0\"\n"
        } else {
            "[metrics]\nenabled = false\n"
        };
        let arbiter = Arbiter::new(
            prof.join("gpuslice-arbiter"),
            &dir,
            &format!(
                "interposer = \"{}\"\n{metrics}{}\n",
                prof.join("libgpuslice.so").display(),
                cfg.config
            ),
        )
        .expect("the arbiter's state dir and config.toml");
        let mut node = SimNode {
            dir,
            metrics: None,
            devices: cfg.devices,
            ctx_overhead: cfg.ctx_overhead,
            engine: cfg.engine,
            arbiter,
        };
        for (k, v) in node.vars() {
            match v {
                Some(v) => node.arbiter.env(k, v),
                None => node.arbiter.env_remove(k),
            };
        }
        node.arbiter
            .env(
                "GPUSLICE_NVML_LIBRARY",
                node.dir.join("lib/libnvidia-ml.so.1"),
            )
            .env("RUST_LOG", &cfg.log_level);
        node.start_arbiter();
        let t0 = Instant::now();
        let limit = Duration::from_secs(30);
        if cfg.metrics {
            node.metrics = Some(loop {
                let log = node.log();
                if let Some(rest) = log.split("metrics on http://").nth(1) {
                    break rest.split('/').next().unwrap_or_default().to_string();
                }
                assert!(t0.elapsed() < limit, "no metrics address; log:\n{log}");
                std::thread::sleep(Duration::from_millis(20));
            });
        }
        node
    }

    /// Spawns this build's arbiter on the node (appending to `arbiter.log`) and waits until it
    /// answers a `status` request; how long that took. Panics if it exits or stays silent 30 s.
    pub fn start_arbiter(&mut self) -> Duration {
        self.arbiter.start().unwrap_or_else(|e| panic!("{e}"))
    }

    /// SIGKILLs the arbiter and reaps it.
    pub fn kill_arbiter(&mut self) {
        self.arbiter.kill();
    }

    /// The running arbiter's pid (it may have exited since: not reaped).
    pub fn arbiter_pid(&self) -> Option<u32> {
        self.arbiter.pid()
    }

    /// The node's arbiter.
    pub fn arbiter(&self) -> &Arbiter {
        &self.arbiter
    }

    /// One request line and its answer, `None` when the arbiter cannot be reached or answers
    /// garbage (within 10 s).
    pub fn try_call(&self, line: &str) -> Option<serde_json::Value> {
        self.arbiter.try_call(line)
    }

    /// What [`SimNode::env`] sets (`Some`) and removes (`None`).
    fn vars(&self) -> Vec<(&'static str, Option<OsString>)> {
        let mut v = vec![
            ("LD_LIBRARY_PATH", Some(self.dir.join("lib").into())),
            (
                "GPUSLICE_SIM_STATE",
                Some(self.dir.join("sim.state").into()),
            ),
            ("GPUSLICE_SIM_DEVICES", Some((&self.devices).into())),
            (
                "GPUSLICE_SIM_CTX_OVERHEAD",
                Some((&self.ctx_overhead).into()),
            ),
            // Modules load for free unless a device says otherwise (`module=` in the devices).
            ("GPUSLICE_SIM_MODULE_OVERHEAD", Some("0".into())),
            ("GPUSLICE_STATE_DIR", Some(self.state_dir().into())),
            ("GPUSLICE_CONFIG", Some(self.arbiter.config.clone().into())),
            ("LD_PRELOAD", None),
            ("GPUSLICE_SLICE_DIR", None),
            ("GPUSLICE_MEMORY", None),
        ];
        if let Some(e) = self.engine {
            v.push(("GPUSLICE_SIM_ENGINE", Some(e.into())));
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
    pub fn command(&self, program: impl AsRef<std::ffi::OsStr>) -> Command {
        let mut c = Command::new(program);
        c.current_dir(&self.dir);
        self.env(&mut c);
        c
    }

    /// The arbiter's state directory.
    pub fn state_dir(&self) -> PathBuf {
        self.arbiter.state_dir.clone()
    }

    /// The arbiter's socket.
    pub fn socket(&self) -> PathBuf {
        self.arbiter.socket()
    }

    /// The arbiter's log so far.
    pub fn log(&self) -> String {
        self.arbiter.log()
    }

    /// Sends one request line to the arbiter and returns its answer.
    pub fn call(&self, line: &str) -> serde_json::Value {
        self.arbiter.call(line)
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
    /// Kills the arbiter and removes the directory (kept with `GPUSLICE_TRIALS_KEEP` set, to
    /// look at after a failure).
    fn drop(&mut self) {
        self.kill_arbiter();
        if std::env::var_os("GPUSLICE_TRIALS_KEEP").is_none() {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}
