//! A simulated GPU node with a real arbiter: a temporary directory with the simulated driver
//! libraries under their real names (`lib/libcuda.so.1`, `lib/libnvidia-ml.so.1`), the
//! simulator's state file, a `config.toml`, the arbiter's state directory and log; the arbiter
//! binary of this build started on it. [`SimNode::env`] gives any command the same node.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
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
    log_level: String,
    arbiter: Option<Child>,
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
            "{missing:?} missing in {}: cargo build -p gpuslice-sim-cuda -p gpuslice-sim-nvml \
             -p gpuslice-interposer -p gpuslice-workloads -p gpuslice-arbiter",
            prof.display()
        );
        let dir = std::env::temp_dir().join(format!("gs-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("lib")).expect("node dir");
        std::fs::create_dir_all(dir.join("state")).expect("state dir");
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
        std::fs::write(
            dir.join("config.toml"),
            format!(
                "interposer = \"{}\"\n{metrics}{}\n",
                prof.join("libgpuslice.so").display(),
                cfg.config
            ),
        )
        .expect("config.toml");
        let mut node = SimNode {
            dir,
            metrics: None,
            devices: cfg.devices,
            ctx_overhead: cfg.ctx_overhead,
            log_level: cfg.log_level,
            arbiter: None,
        };
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
        let t0 = Instant::now();
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.join("arbiter.log"))
            .expect("arbiter.log");
        let mut c = Command::new(profile_dir().join("gpuslice-arbiter"));
        c.env(
            "GPUSLICE_NVML_LIBRARY",
            self.dir.join("lib/libnvidia-ml.so.1"),
        )
        .env("RUST_LOG", &self.log_level)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log);
        self.env(&mut c);
        let mut child = c.spawn().expect("starting gpuslice-arbiter");
        while self.try_call("{\"version\":1,\"op\":\"status\"}").is_none() {
            if let Ok(Some(st)) = child.try_wait() {
                panic!("the arbiter exited ({st}); log:\n{}", self.log());
            }
            assert!(
                t0.elapsed() < Duration::from_secs(30),
                "the arbiter did not answer in 30 s; log:\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(5));
        }
        self.arbiter = Some(child);
        t0.elapsed()
    }

    /// SIGKILLs the arbiter and reaps it.
    pub fn kill_arbiter(&mut self) {
        if let Some(mut a) = self.arbiter.take() {
            let _ = a.kill();
            let _ = a.wait();
        }
    }

    /// The running arbiter's pid (it may have exited since: not reaped).
    pub fn arbiter_pid(&self) -> Option<u32> {
        self.arbiter.as_ref().map(Child::id)
    }

    /// One request line and its answer, `None` when the arbiter cannot be reached or answers
    /// garbage (within 10 s).
    pub fn try_call(&self, line: &str) -> Option<serde_json::Value> {
        let mut s = UnixStream::connect(self.socket()).ok()?;
        s.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
        writeln!(s, "{line}").ok()?;
        let mut out = String::new();
        BufReader::new(s).read_line(&mut out).ok()?;
        serde_json::from_str(&out).ok()
    }

    /// Puts `c` on this node: the simulated driver first on the library path, the simulator's
    /// state and devices, the arbiter's state directory and config; no inherited preload.
    pub fn env(&self, c: &mut Command) {
        c.env("LD_LIBRARY_PATH", self.dir.join("lib"))
            .env("GPUSLICE_SIM_STATE", self.dir.join("sim.state"))
            .env("GPUSLICE_SIM_DEVICES", &self.devices)
            .env("GPUSLICE_SIM_CTX_OVERHEAD", &self.ctx_overhead)
            .env("GPUSLICE_STATE_DIR", self.state_dir())
            .env("GPUSLICE_CONFIG", self.dir.join("config.toml"))
            .env_remove("LD_PRELOAD")
            .env_remove("GPUSLICE_SLICE_DIR")
            .env_remove("GPUSLICE_MEMORY");
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
        self.dir.join("state")
    }

    /// The arbiter's socket.
    pub fn socket(&self) -> PathBuf {
        self.state_dir().join("arbiter.sock")
    }

    /// The arbiter's log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("arbiter.log")).unwrap_or_default()
    }

    /// Sends one request line to the arbiter and returns its answer.
    pub fn call(&self, line: &str) -> serde_json::Value {
        let mut s = UnixStream::connect(self.socket()).expect("arbiter socket");
        writeln!(s, "{line}").expect("request");
        let mut out = String::new();
        BufReader::new(s).read_line(&mut out).expect("answer");
        serde_json::from_str(&out).unwrap_or_else(|e| panic!("answer {out:?}: {e}"))
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
