//! A private dockerd on a private containerd: its own data root, exec root, socket and pidfile,
//! `--iptables=false --bridge=none`, runtimes from a `daemon.json`, and the matching client.

use crate::containerd::Containerd;
use crate::daemon::Daemon;
use crate::image::IMAGE;
use crate::paths::DockerBins;
use crate::procs::{run_ok, run_timeout};
use crate::scratch::Scratch;
use crate::sim::Bind;
use anyhow::Result;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

/// A running private dockerd.
#[derive(Debug)]
pub struct Dockerd {
    /// The binaries.
    pub bins: DockerBins,
    /// The API socket.
    pub sock: PathBuf,
    daemon: Daemon,
}

impl Dockerd {
    /// Start dockerd on `containerd` with `daemon_json` (e.g. `{"runtimes": {…}}`); waits for its socket.
    pub fn start(
        bins: &DockerBins,
        containerd: &Containerd,
        scratch: &Scratch,
        daemon_json: &Value,
        env: &[(String, String)],
    ) -> Result<Self> {
        let dir = scratch.dir("dkr")?;
        let cfg = dir.join("daemon.json");
        std::fs::write(&cfg, serde_json::to_vec_pretty(daemon_json)?)?;
        Self::start_from_file(bins, containerd, &dir, &cfg, env)
    }

    /// Start dockerd on `containerd` with the `daemon.json` at `cfg` as it is, its data, exec
    /// root, socket (`dir/d.sock`) and pidfile under `dir`; waits for its socket.
    pub fn start_from_file(
        bins: &DockerBins,
        containerd: &Containerd,
        dir: &Path,
        cfg: &Path,
        env: &[(String, String)],
    ) -> Result<Self> {
        let sock = dir.join("d.sock");
        let mut c = Command::new(&bins.dockerd);
        c.arg("--config-file")
            .arg(cfg)
            .arg("--data-root")
            .arg(dir.join("data"))
            .arg("--exec-root")
            .arg(dir.join("x"))
            .arg("-H")
            .arg(format!("unix://{}", sock.display()))
            .arg("--pidfile")
            .arg(dir.join("docker.pid"))
            .arg("--containerd")
            .arg(&containerd.sock)
            .args([
                "--iptables=false",
                "--ip6tables=false",
                "--bridge=none",
                "--ip-masq=false",
            ])
            .args(["--userland-proxy=false", "--storage-driver=overlay2"])
            .envs(env.iter().map(|(k, v)| (k, v)));
        if bins.dockerd.starts_with("/usr") {
            // 20.10 has no --ip6tables
            c = strip_arg(c, "--ip6tables=false");
        }
        let mut daemon = Daemon::spawn("dockerd", c, &dir.join("dockerd.log"), dir)?;
        daemon.wait_socket(&sock, Duration::from_secs(90))?;
        Ok(Self {
            bins: bins.clone(),
            sock,
            daemon,
        })
    }

    /// A `docker` client command for this daemon.
    pub fn docker(&self) -> Command {
        let mut c = Command::new(&self.bins.docker);
        c.arg("-H").arg(format!("unix://{}", self.sock.display()));
        c
    }

    /// `docker import` the rootfs tarball as [`IMAGE`].
    pub fn import(&self, layer: &Path) -> Result<()> {
        run_ok(
            self.docker().arg("import").arg(layer).arg(IMAGE),
            Duration::from_secs(120),
        )?;
        Ok(())
    }

    /// `docker run --rm --network none ARGS…` (caller adds runtime, env, mounts, image, command).
    pub fn run(&self, args: &[String], timeout: Duration) -> Result<Output> {
        let mut c = self.docker();
        c.args(["run", "--rm", "--network", "none"]).args(args);
        run_timeout(&mut c, timeout)
    }

    /// Container ids (all states).
    pub fn containers(&self) -> Result<Vec<String>> {
        let out = run_ok(self.docker().args(["ps", "-aq"]), Duration::from_secs(30))?;
        Ok(out.lines().map(str::to_string).collect())
    }

    /// The daemon's log tail.
    pub fn log_tail(&self, n: usize) -> String {
        self.daemon.log_tail(n)
    }
}

fn strip_arg(c: Command, drop: &str) -> Command {
    let mut n = Command::new(c.get_program());
    n.args(c.get_args().filter(|a| *a != drop));
    for (k, v) in c.get_envs() {
        match v {
            Some(v) => n.env(k, v),
            None => n.env_remove(k),
        };
    }
    n
}

impl Drop for Dockerd {
    fn drop(&mut self) {
        if let Ok(ids) = self.containers() {
            for id in ids {
                let _ = run_timeout(
                    self.docker().args(["rm", "-f", &id]),
                    Duration::from_secs(30),
                );
            }
        }
    }
}

/// `docker run` arguments: `-e` for each of `env`, `-v SRC:DST:ro|rw` for each of `binds`, then
/// `extra`, the image and the command.
pub fn run_args(
    env: Vec<String>,
    binds: Vec<Bind>,
    extra: &[&str],
    image: &str,
    cmd: Vec<String>,
) -> Vec<String> {
    let mut a: Vec<String> = Vec::new();
    for e in env {
        a.push("-e".into());
        a.push(e);
    }
    for b in binds {
        let mode = if b.ro { "ro" } else { "rw" };
        a.push("-v".into());
        a.push(format!("{}:{}:{mode}", b.src.display(), b.dst));
    }
    a.extend(extra.iter().map(|s| s.to_string()));
    a.push(image.into());
    a.extend(cmd);
    a
}
