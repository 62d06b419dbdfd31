//! A private containerd: its own root, state, sockets and configuration under a scratch
//! directory, the distribution's runc, CRI configured the way the suites need it
//! (`restrict_oom_score_adj`, a `gpuslice` runtime class with `BinaryName` and
//! `pod_annotations = ["gpuslice.io/*"]`, the local test image as sandbox image).
//! Configuration version 2 for containerd 1.x, version 3 for 2.x.

use crate::daemon::Daemon;
use crate::image::IMAGE;
use crate::paths::{self, ContainerdBins};
use crate::procs::{run_ok, run_timeout};
use crate::scratch::Scratch;
use crate::sim::Bind;
use anyhow::Result;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

/// Options for starting containerd.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// `BinaryName` of the `gpuslice` runtime class (CRI); absent: no such class.
    pub gpuslice_runtime: Option<PathBuf>,
    /// Extra environment for the daemon (inherited by shims and runtimes).
    pub env: Vec<(String, String)>,
}

/// A running private containerd.
#[derive(Debug)]
pub struct Containerd {
    /// The binaries.
    pub bins: ContainerdBins,
    /// The daemon's directory.
    pub dir: PathBuf,
    /// The gRPC socket.
    pub sock: PathBuf,
    /// The namespace `ctr` uses.
    pub ns: String,
    daemon: Daemon,
}

/// Render the configuration file for `bins`' series.
pub fn config(bins: &ContainerdBins, dir: &Path, opts: &Options) -> String {
    let d = dir.display();
    let rt = opts
        .gpuslice_runtime
        .as_ref()
        .map(|p| p.display().to_string());
    if bins.major() >= 2 {
        let mut s = format!(
            r#"version = 3
root = "{d}/root"
state = "{d}/state"
disabled_plugins = ["io.containerd.nri.v1.nri"]

[grpc]
  address = "{d}/c.sock"
[ttrpc]
  address = "{d}/c.sock.ttrpc"

[plugins.'io.containerd.internal.v1.opt']
  path = "{d}/opt"
[plugins.'io.containerd.cri.v1.images'.pinned_images]
  sandbox = "{IMAGE}"
[plugins.'io.containerd.cri.v1.runtime']
  restrict_oom_score_adj = true
  [plugins.'io.containerd.cri.v1.runtime'.cni]
    bin_dirs = ["{d}/cni/bin"]
    conf_dir = "{d}/cni/conf"
  [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
    runtime_type = "io.containerd.runc.v2"
    [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
      BinaryName = "{runc}"
      Root = "{d}/runc"
"#,
            runc = paths::runc().display()
        );
        if let Some(rt) = rt {
            s.push_str(&format!(
                r#"  [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.gpuslice]
    runtime_type = "io.containerd.runc.v2"
    pod_annotations = ["gpuslice.io/*"]
    [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.gpuslice.options]
      BinaryName = "{rt}"
      Root = "{d}/runc"
"#
            ));
        }
        s
    } else {
        let mut s = format!(
            r#"version = 2
root = "{d}/root"
state = "{d}/state"
disabled_plugins = ["io.containerd.nri.v1.nri"]

[grpc]
  address = "{d}/c.sock"
[ttrpc]
  address = "{d}/c.sock.ttrpc"

[plugins."io.containerd.internal.v1.opt"]
  path = "{d}/opt"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{IMAGE}"
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "{d}/cni/bin"
    conf_dir = "{d}/cni/conf"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        BinaryName = "{runc}"
        Root = "{d}/runc"
"#,
            runc = paths::runc().display()
        );
        if let Some(rt) = rt {
            s.push_str(&format!(
                r#"    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.gpuslice]
      runtime_type = "io.containerd.runc.v2"
      pod_annotations = ["gpuslice.io/*"]
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.gpuslice.options]
        BinaryName = "{rt}"
        Root = "{d}/runc"
"#
            ));
        }
        s
    }
}

impl Containerd {
    /// Start containerd of `bins` under `scratch/containerd-<series>`; waits for its socket.
    pub fn start(bins: &ContainerdBins, scratch: &Scratch, opts: &Options) -> Result<Self> {
        Self::start_with_extra(bins, scratch, opts, "")
    }

    /// [`Containerd::start`] with `extra` appended to the configuration file (further tables,
    /// e.g. a runtime class; `{d}` in `extra` is replaced by the daemon's directory).
    pub fn start_with_extra(
        bins: &ContainerdBins,
        scratch: &Scratch,
        opts: &Options,
        extra: &str,
    ) -> Result<Self> {
        Self::start_with_config(bins, scratch, opts, &|text, dir| {
            text + &extra.replace("{d}", &dir.display().to_string())
        })
    }

    /// [`Containerd::start`] with the configuration file's text passed through `edit` (which
    /// gets the rendered text and the daemon's directory), e.g. to add keys to the CRI table.
    pub fn start_with_config(
        bins: &ContainerdBins,
        scratch: &Scratch,
        opts: &Options,
        edit: &dyn Fn(String, &Path) -> String,
    ) -> Result<Self> {
        let dir = scratch.dir(&format!("ctd{}", bins.series))?;
        let cfg = dir.join("config.toml");
        let text = edit(config(bins, &dir, opts), &dir);
        std::fs::write(&cfg, text)?;
        Self::start_from_file(bins, &dir, &cfg, &opts.env)
    }

    /// containerd of `bins` with the configuration file `cfg` as it is (which must put the
    /// gRPC socket at `dir/c.sock` and keep root and state under `dir`); waits for its socket.
    pub fn start_from_file(
        bins: &ContainerdBins,
        dir: &Path,
        cfg: &Path,
        env: &[(String, String)],
    ) -> Result<Self> {
        let dir = dir.to_path_buf();
        let mut c = Command::new(bins.containerd());
        c.arg("--config").arg(cfg).arg("--log-level").arg("info");
        // The shims find runc and our binaries through PATH; put the engine's own bin first.
        let path = format!(
            "{}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            bins.bin.display()
        );
        c.env("PATH", path).envs(env.iter().map(|(k, v)| (k, v)));
        let mut daemon = Daemon::spawn(
            &format!("containerd {}", bins.series),
            c,
            &dir.join("containerd.log"),
            &dir,
        )?;
        let sock = dir.join("c.sock");
        daemon.wait_socket(&sock, Duration::from_secs(60))?;
        Ok(Self {
            bins: bins.clone(),
            dir,
            sock,
            ns: "gpuslice-e2e".into(),
            daemon,
        })
    }

    /// A `ctr` command for this daemon and namespace.
    pub fn ctr(&self) -> Command {
        let mut c = Command::new(self.bins.ctr());
        c.arg("--address")
            .arg(&self.sock)
            .arg("--namespace")
            .arg(&self.ns);
        c
    }

    /// Import an OCI archive (into this namespace).
    pub fn import(&self, oci: &Path) -> Result<()> {
        run_ok(
            self.ctr()
                .args(["images", "import", "--platform", "linux/amd64"])
                .arg(oci),
            Duration::from_secs(120),
        )?;
        Ok(())
    }

    /// `ctr run --rm` of [`IMAGE`] with the runc v2 shim and `runc_binary` as its runtime.
    pub fn run(&self, id: &str, runc_binary: &Path, run: &CtrRun) -> Result<Output> {
        let mut c = self.ctr();
        c.args(["run", "--rm", "--net-host"])
            .args(["--runtime", "io.containerd.runc.v2", "--runc-binary"])
            .arg(runc_binary)
            .arg("--runc-root")
            .arg(self.dir.join("runc"));
        self.finish_run(c, id, run)
    }

    /// Completes a `ctr run` whose runtime options `c` already holds: adds `run`'s annotations,
    /// environment, bind mounts, [`IMAGE`], `id` and arguments, runs it under `run.timeout`, and
    /// removes what is left of the container.
    pub fn finish_run(&self, mut c: Command, id: &str, run: &CtrRun) -> Result<Output> {
        for (k, v) in &run.annotations {
            c.arg("--annotation").arg(format!("{k}={v}"));
        }
        for e in &run.env {
            c.arg("--env").arg(e);
        }
        for b in &run.binds {
            let mode = if b.ro { "rbind:ro" } else { "rbind:rw" };
            c.arg("--mount").arg(format!(
                "type=bind,src={},dst={},options={mode}",
                b.src.display(),
                b.dst
            ));
        }
        c.arg(IMAGE).arg(id).args(&run.args);
        let out = run_timeout(&mut c, run.timeout);
        self.remove(id);
        out
    }

    /// Best-effort removal of a container and its task (ours, by id).
    pub fn remove(&self, id: &str) {
        let t = Duration::from_secs(20);
        let _ = run_timeout(self.ctr().args(["tasks", "kill", "-s", "SIGKILL", id]), t);
        let _ = run_timeout(self.ctr().args(["tasks", "delete", "-f", id]), t);
        let _ = run_timeout(self.ctr().args(["containers", "delete", id]), t);
    }

    /// Container ids in the namespace.
    pub fn containers(&self) -> Result<Vec<String>> {
        let out = run_ok(
            self.ctr().args(["containers", "ls", "-q"]),
            Duration::from_secs(20),
        )?;
        Ok(out.lines().map(str::to_string).collect())
    }

    /// The daemon's log tail.
    pub fn log_tail(&self, n: usize) -> String {
        self.daemon.log_tail(n)
    }

    /// `ctr plugins ls` as `(type id, status)` pairs, sorted.
    pub fn plugins(&self) -> Result<Vec<(String, String)>> {
        let out = run_ok(self.ctr().args(["plugins", "ls"]), Duration::from_secs(20))?;
        let mut v: Vec<(String, String)> = out
            .lines()
            .skip(1)
            .filter_map(|l| {
                let f: Vec<&str> = l.split_whitespace().collect();
                (f.len() >= 4).then(|| (format!("{} {}", f[0], f[1]), f[f.len() - 1].to_string()))
            })
            .collect();
        v.sort();
        Ok(v)
    }
}

/// One `ctr run`.
#[derive(Debug, Clone)]
pub struct CtrRun {
    /// Command and arguments in the container.
    pub args: Vec<String>,
    /// `--env` entries.
    pub env: Vec<String>,
    /// `--annotation` entries.
    pub annotations: Vec<(String, String)>,
    /// `--mount` binds.
    pub binds: Vec<Bind>,
    /// Limit for the whole run.
    pub timeout: Duration,
}

impl Drop for Containerd {
    fn drop(&mut self) {
        if let Ok(ids) = self.containers() {
            for id in ids {
                self.remove(&id);
            }
        }
    }
}
