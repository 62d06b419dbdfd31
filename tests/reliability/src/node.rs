//! A simulated node for one trial: a scratch directory with the simulated driver's libraries, the
//! simulator's state file, a state directory and a `gpuslice-arbiter` on it that the trial can
//! SIGKILL and restart; the control protocol, `gpuslice status --json`, the slices' `usage`
//! files and the simulator's ground truth.

use crate::Tenant;
use anyhow::{bail, Context, Result};
use gpuslice_region::{Limits, Usage};
use gpuslice_sim_core::Node as SimNode;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// The simulated device: one 8 GiB GPU, no per-context memory (so usage sums are exact).
pub const SIM_DEVICES: &str = "name=Trial GPU 8G,mem=8Gi,sms=16,cc=9.0";

/// What a trial's node simulates and how its arbiter admits: [`NodeConfig::default`] is the
/// node of most trials ([`SIM_DEVICES`], contexts cost nothing, so the arbiter charges nothing
/// for them either: `context_reserve = 0`, `module_allowance = 0`, and the arbiter's probe
/// context measures 0; the fork-wave trial sets both to a real cost, `real_costs.rs` and the
/// soak to the H200's).
#[derive(Debug, Clone)]
pub struct NodeConfig {
    /// `GPUSLICE_SIM_DEVICES`.
    pub devices: String,
    /// `GPUSLICE_SIM_CTX_OVERHEAD`: device memory each process's context costs in the simulator.
    pub ctx_overhead: String,
    /// The arbiter's `[admission]` table (TOML lines).
    pub admission: String,
}

impl Default for NodeConfig {
    fn default() -> Self {
        NodeConfig {
            devices: SIM_DEVICES.into(),
            ctx_overhead: "0".into(),
            admission: "context_reserve = \"0\"\nmodule_allowance = \"0\"\n".into(),
        }
    }
}

pub use gpuslice_test_support::profile_dir;

/// The arbiter and the simulated GPU of one trial.
pub struct Node {
    /// Scratch directory (removed on drop).
    pub dir: PathBuf,
    /// The arbiter's state directory.
    pub state: PathBuf,
    /// What it simulates and how its arbiter admits.
    pub config: NodeConfig,
    node: gpuslice_test_support::SimNode,
    sim: SimNode,
}

impl Node {
    /// Starts a node with [`NodeConfig::default`]; `tag` names its scratch directory.
    pub fn start(tag: &str) -> Result<Node> {
        Node::start_with(tag, NodeConfig::default())
    }

    /// Starts a node simulating and admitting as `config` says.
    pub fn start_with(tag: &str, config: NodeConfig) -> Result<Node> {
        let node = gpuslice_test_support::SimNode::start(
            &format!("rel-{tag}"),
            gpuslice_test_support::NodeConfig {
                devices: config.devices.clone(),
                ctx_overhead: Some(config.ctx_overhead.clone()),
                config: format!("[admission]\n{}", config.admission),
                metrics: false,
                log_level: "warn".into(),
                needs: vec!["gpuslice-workload", "gpuslice", "gpuslice-trial-tenant"],
                engine: None,
                ..gpuslice_test_support::NodeConfig::default()
            },
        );
        let dir = node.dir.clone();
        let sim = open_sim(&node)?;
        Ok(Node {
            state: node.state_dir(),
            dir,
            config,
            node,
            sim,
        })
    }

    /// Environment of every process of the node (simulated driver, state dir, config).
    pub fn env(&self, c: &mut Command) {
        self.node.env(c);
    }

    /// Spawns the arbiter (appending to `arbiter.log`) and waits until its socket answers.
    pub fn start_arbiter(&mut self) -> Result<Duration> {
        Ok(self.node.start_arbiter())
    }

    /// SIGKILLs the arbiter and reaps it.
    pub fn kill_arbiter(&mut self) {
        self.node.kill_arbiter();
    }

    /// The arbiter's log so far.
    pub fn log(&self) -> String {
        self.node.log()
    }

    /// One request line, one response line (no judgement of the response).
    pub fn try_req(&self, line: &str) -> Result<serde_json::Value> {
        let mut s = UnixStream::connect(self.state.join("arbiter.sock"))?;
        s.set_read_timeout(Some(Duration::from_secs(10)))?;
        writeln!(s, "{line}")?;
        let mut out = String::new();
        BufReader::new(s).read_line(&mut out)?;
        serde_json::from_str(&out).with_context(|| format!("response {out:?}"))
    }

    /// Whether the arbiter is still running, or how it ended (without reaping it).
    pub fn arbiter_state(&self) -> String {
        let Some(pid) = self.node.arbiter_pid() else {
            return "not started".into();
        };
        // SAFETY: an all-zero siginfo_t is a valid out-buffer for waitid.
        let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
        // SAFETY: waitid on our own child with WNOWAIT only reads its state; `info` is writable.
        let r = unsafe {
            libc::waitid(
                libc::P_PID,
                pid,
                &mut info,
                libc::WEXITED | libc::WNOHANG | libc::WNOWAIT,
            )
        };
        // SAFETY: after a successful waitid the pid and status fields are initialised.
        let (pid, status) = unsafe { (info.si_pid(), info.si_status()) };
        match (r, pid, info.si_code) {
            (0, 0, _) => "running".into(),
            (0, _, libc::CLD_KILLED | libc::CLD_DUMPED) => format!("killed by signal {status}"),
            (0, _, _) => format!("exited with status {status}"),
            _ => format!("unknown ({})", std::io::Error::last_os_error()),
        }
    }

    /// A request that must succeed.
    pub fn req(&self, body: &str) -> serde_json::Value {
        let line = format!("{{\"version\":1,{body}}}");
        let v = self.try_req(&line).unwrap_or_else(|e| {
            panic!(
                "{line}: {e:#}; the arbiter is {}; its log:\n{}",
                self.arbiter_state(),
                self.log()
            )
        });
        assert_ne!(v["result"], "error", "{line}: {v}");
        v
    }

    /// Admits `id` with `request` (JSON members), owned by this test process (so the arbiter
    /// judges its records' processes, as it does for `gpuslice run` slices). Returns its directory.
    pub fn admit(&self, id: &str, request: &str) -> PathBuf {
        self.req(&format!(
            "\"op\":\"admit\",\"slice_id\":\"{id}\",\"request\":{{{request}}},\
             \"owner\":{{\"pid\":{}}}",
            std::process::id()
        ));
        self.state.join(id)
    }

    /// Starts `exe args` as the owner of a new slice `id` (admitted with `request`, JSON
    /// members), as `gpuslice run` and containers own theirs: a shell waits on its stdin, the
    /// slice is admitted with that pid as its owner, and the shell execs `exe` (same pid, same
    /// start time) under the interposer once the trial sends it a `go` line. So the backstop can
    /// tell this slice from the others.
    pub fn spawn_owner(&self, id: &str, request: &str, exe: &Path, args: &[&str]) -> Tenant {
        // The slice directory does not exist yet; the tenant opens it after the exec.
        let mut c = self.tenant_command(Path::new("/bin/sh"), &self.state.join(id));
        c.arg("-c")
            .arg("read go && exec \"$0\" \"$@\"")
            .arg(exe)
            .args(args);
        let t = Tenant::spawn(c).expect("tenant");
        self.req(&format!(
            "\"op\":\"admit\",\"slice_id\":\"{id}\",\"request\":{{{request}}},\
             \"owner\":{{\"pid\":{}}}",
            t.pid()
        ));
        t
    }

    /// The arbiter's `status` reply.
    pub fn status(&self) -> serde_json::Value {
        self.req("\"op\":\"status\"")
    }

    /// `gpuslice status --json` (the CLI: arbiter reply plus the slices' usage files).
    pub fn cli_status(&self) -> Result<serde_json::Value> {
        let mut c = Command::new(profile_dir().join("gpuslice"));
        c.args(["status", "--json"]);
        self.env(&mut c);
        let o = c.output()?;
        if !o.status.success() {
            bail!("gpuslice status: {}", String::from_utf8_lossy(&o.stderr));
        }
        Ok(serde_json::from_slice(&o.stdout)?)
    }

    /// Bytes slice `id` holds on its device 0, as its `usage` file says (clamped to the cap,
    /// live processes only — what `gpuslice status` shows).
    pub fn slice_used(&self, id: &str) -> u64 {
        let dir = self.state.join(id);
        let limits = Limits::open(&dir).expect("limits");
        let usage = Usage::open_read_only(&dir, limits.device_count()).expect("usage");
        usage.snapshot(&[limits.memory_cap(0)]).used[0]
    }

    /// The raw total word's bytes of slice `id` on device 0 (no clamping, no liveness filter).
    pub fn slice_total_raw(&self, id: &str) -> u64 {
        let dir = self.state.join(id);
        let limits = Limits::open(&dir).expect("limits");
        Usage::open_read_only(&dir, limits.device_count())
            .expect("usage")
            .used(0)
    }

    /// Every record of slice `id`'s `usage` file that is not free, raw: (record, state word,
    /// start time, bytes reserved on device 0, operations in flight on device 0), plus the raw
    /// total word of device 0 — for failure messages.
    pub fn usage_dump(&self, id: &str) -> String {
        usage_dump_at(&self.state.join(id))
    }

    /// A second handle on the simulator's state, for a sampler thread of the trial.
    pub fn sim_reader(&self) -> Result<SimNode> {
        open_sim(&self.node)
    }

    /// The simulator's ground truth: bytes in use on device 0 by live processes.
    pub fn sim_used(&self) -> u64 {
        self.sim.mem_used(0)
    }

    /// The simulator's ground truth per live process on device 0: (pid, bytes).
    pub fn sim_processes(&self) -> Vec<(u32, u64)> {
        self.sim
            .processes(0)
            .into_iter()
            .map(|p| (p.pid, p.used_bytes))
            .collect()
    }

    /// A command for `exe` running as a tenant of `slice` under the interposer.
    pub fn tenant_command(&self, exe: &Path, slice: &Path) -> Command {
        let mut c = Command::new(exe);
        self.env(&mut c);
        c.env("LD_PRELOAD", profile_dir().join("libgpuslice.so"))
            .env("GPUSLICE_SLICE_DIR", slice);
        c
    }
}

/// Opens the simulator's state of `node` (the test's own view of the ground truth), configured
/// as the node's processes are.
fn open_sim(node: &gpuslice_test_support::SimNode) -> Result<SimNode> {
    node.open_sim().context("opening the simulator's state")
}

/// Polls `f` every 2 ms until it holds or `limit` passes; returns the time it took, or `None`.
pub fn wait_until(limit: Duration, mut f: impl FnMut() -> bool) -> Option<Duration> {
    let t0 = Instant::now();
    loop {
        if f() {
            return Some(t0.elapsed());
        }
        if t0.elapsed() > limit {
            return None;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// [`Node::usage_dump`] of the slice directory `dir` (usable from a sampler thread).
pub fn usage_dump_at(dir: &std::path::Path) -> String {
    let Ok(b) = std::fs::read(dir.join("usage")) else {
        return "unreadable".into();
    };
    let u64_at = |o: usize| {
        b.get(o..o + 8)
            .map_or(0, |s| u64::from_le_bytes(s.try_into().unwrap_or([0; 8])))
    };
    let u32_at = |o: usize| {
        b.get(o..o + 4)
            .map_or(0, |s| u32::from_le_bytes(s.try_into().unwrap_or([0; 4])))
    };
    let mut out = format!("total word {:#x}; records:", u64_at(64));
    for r in 0..gpuslice_region::MAX_PROCS {
        let o = 64 + 16 * 64 + r * 208;
        let st = u64_at(o);
        if st & 0xff != 0 {
            out += &format!(
                " [{r}: state {} pid {} start {} reserved {} inflight {}]",
                st & 0xff,
                st >> 32,
                u64_at(o + 8),
                u64_at(o + 16),
                u32_at(o + 16 + 16 * 8)
            );
        }
    }
    out
}
