//! The running engines, as `gpuslice doctor` sees them (the file checks in [`crate::doctor`]
//! say what the configuration asks for; these say what the daemons did with it): is containerd
//! up on its socket, is its CRI plugin loaded (`ctr plugins ls`; the plugin's own error when
//! not), does containerd's own merge of the files (`containerd config dump`) hold the
//! `gpuslice` class, and was the daemon started after its files last changed; is dockerd up
//! and does `docker info` list the `gpuslice` runtime. An engine with neither a binary on
//! `PATH` nor a configuration file is not on this node, and gets no row.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant, SystemTime};

use super::check::{Check, Level};

/// containerd's gRPC socket when its config names none.
pub const CONTAINERD_SOCKET: &str = "/run/containerd/containerd.sock";
/// dockerd's socket when `daemon.json` names no `hosts`.
pub const DOCKER_SOCKET: &str = "/var/run/docker.sock";
/// Files changed this long after the daemon's start count as not loaded.
const START_SLACK: Duration = Duration::from_secs(2);
/// How long one engine command may take.
const CMD_TIMEOUT: Duration = Duration::from_secs(10);

/// `name` in the directories of `path` (a `PATH` value), if executable there.
pub fn which(name: &str, path: Option<&OsStr>) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let path = path?;
    std::env::split_paths(path).map(|d| d.join(name)).find(|p| {
        std::fs::metadata(p)
            .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
            .unwrap_or(false)
    })
}

/// Runs `c` with stdin closed, killed after [`CMD_TIMEOUT`]; `Err` names what went wrong.
pub fn run(c: &mut Command) -> Result<Output, String> {
    let what = format!("{}", c.get_program().to_string_lossy());
    let mut child = c
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot run {what}: {e}"))?;
    let end = Instant::now() + CMD_TIMEOUT;
    loop {
        match child.try_wait() {
            Ok(Some(_)) => break,
            Ok(None) if Instant::now() >= end => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!("{what} did not answer within {CMD_TIMEOUT:?}"));
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(10)),
            Err(e) => return Err(format!("waiting for {what}: {e}")),
        }
    }
    child
        .wait_with_output()
        .map_err(|e| format!("reading {what}'s output: {e}"))
}

/// The stdout of an engine command that succeeded, else the FAIL row saying the daemon at
/// `socket` does not answer.
fn answered(
    name: &'static str,
    daemon: &str,
    socket: &Path,
    fix: &str,
    r: Result<Output, String>,
) -> Result<String, Check> {
    match r {
        Ok(o) if o.status.success() => Ok(String::from_utf8_lossy(&o.stdout).into_owned()),
        Ok(o) => Err(Check::bad(
            name,
            Level::Fail,
            format!(
                "{daemon} at {} does not answer: {}",
                socket.display(),
                first_line(&o.stderr)
            ),
            fix,
        )),
        Err(e) => Err(Check::bad(name, Level::Fail, e, fix)),
    }
}

fn first_line(b: &[u8]) -> String {
    let s = String::from_utf8_lossy(b);
    s.lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .unwrap_or("")
        .to_string()
}

/// The pid of the process holding the listening unix socket `path` (root sees every process).
pub fn socket_owner(path: &Path) -> Option<i32> {
    let want = path.to_str()?;
    let table = std::fs::read_to_string("/proc/net/unix").ok()?;
    let inode = table.lines().skip(1).find_map(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        (f.len() >= 8 && f[7] == want).then(|| f[6].to_string())
    })?;
    let target = format!("socket:[{inode}]");
    for e in std::fs::read_dir("/proc").ok()?.flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let Ok(fds) = std::fs::read_dir(e.path().join("fd")) else {
            continue;
        };
        for fd in fds.flatten() {
            if std::fs::read_link(fd.path()).is_ok_and(|l| l.as_os_str() == target.as_str()) {
                return Some(pid);
            }
        }
    }
    None
}

/// When process `pid` started.
pub fn started_at(pid: i32) -> Option<SystemTime> {
    let stat = std::fs::read(format!("/proc/{pid}/stat")).ok()?;
    let ticks = gpuslice_region::liveness::parse_stat(&stat)?.start;
    let btime: u64 = std::fs::read_to_string("/proc/stat")
        .ok()?
        .lines()
        .find_map(|l| l.strip_prefix("btime "))?
        .trim()
        .parse()
        .ok()?;
    // SAFETY: sysconf has no preconditions; it returns -1 for an unknown name.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    let hz = u64::try_from(hz).ok().filter(|h| *h > 0)?;
    Some(SystemTime::UNIX_EPOCH + Duration::from_millis(btime * 1000 + ticks * 1000 / hz))
}

/// What the containerd check needs.
#[derive(Debug, Clone)]
pub struct ContainerdLive<'a> {
    /// The main config (may not exist).
    pub config: &'a Path,
    /// The main config and its imports that exist (for the restart check).
    pub files: &'a [PathBuf],
    /// The gRPC socket.
    pub address: PathBuf,
    /// `PATH` to find `ctr` and `containerd` in.
    pub path: Option<&'a OsStr>,
}

/// The containerd daemon's row.
const CONTAINERD: &str = "containerd-daemon";

/// The running containerd; `None` when containerd is not on this node.
pub fn containerd(c: &ContainerdLive<'_>) -> Option<Check> {
    const NAME: &str = CONTAINERD;
    let binary = which("containerd", c.path);
    if !c.address.exists() {
        if binary.is_none() && !c.config.exists() {
            return None;
        }
        return Some(Check::bad(
            NAME,
            Level::Fail,
            format!(
                "containerd is not running: no socket at {}",
                c.address.display()
            ),
            "systemctl start containerd   (why it stopped: journalctl -u containerd)",
        ));
    }
    let Some(ctr) = which("ctr", c.path) else {
        return Some(Check::bad(
            NAME,
            Level::Warn,
            "ctr not found on PATH: the running containerd was not checked",
            "install containerd's ctr (it ships in the containerd package)",
        ));
    };
    let ctr_cmd = || {
        let mut k = Command::new(&ctr);
        k.arg("--address").arg(&c.address);
        k
    };
    let plugins = match answered(
        NAME,
        "containerd",
        &c.address,
        "systemctl restart containerd   (journalctl -u containerd)",
        run(ctr_cmd().args(["plugins", "ls"])),
    ) {
        Ok(out) => out,
        Err(check) => return Some(check),
    };
    let cri = plugins.lines().find_map(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        (f.len() >= 3 && f[0] == "io.containerd.grpc.v1" && f[1] == "cri")
            .then(|| f[f.len() - 1].to_string())
    });
    let restart_fix = format!(
        "gpuslice configure containerd --file {} && systemctl restart containerd",
        c.config.display()
    );
    match cri.as_deref() {
        Some("ok") => {}
        None => {
            return Some(Check::bad(
                NAME,
                Level::Warn,
                "containerd runs without its CRI plugin (disabled_plugins?): runtime classes are unused; `ctr run --runtime` still works",
                format!("remove \"cri\" from disabled_plugins in {}", c.config.display()),
            ))
        }
        Some(status) => {
            let why = run(ctr_cmd().args(["plugins", "ls", "--detailed", "id==cri"]))
                .ok()
                .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
                .and_then(|d| {
                    d.lines()
                        .find_map(|l| l.trim().strip_prefix("Message:").map(|m| m.trim().to_string()))
                })
                .unwrap_or_else(|| "see journalctl -u containerd".into());
            return Some(Check::bad(
                NAME,
                Level::Fail,
                format!("containerd's CRI plugin is in {status}: {why} (every Pod of this node fails)"),
                restart_fix,
            ));
        }
    }
    let pid = socket_owner(&c.address);
    let mut detail = match pid {
        Some(p) => format!("containerd pid {p} at {}: CRI loaded", c.address.display()),
        None => format!("containerd at {}: CRI loaded", c.address.display()),
    };
    if let Some(bad) = merged_config(c, binary.as_deref(), &mut detail, &restart_fix) {
        return Some(bad);
    }
    if let Some(bad) = stale_daemon(c, pid, &detail) {
        return Some(bad);
    }
    Some(Check::ok(NAME, detail))
}

/// containerd's own merge of its config and imports (`containerd config dump`) holds the
/// `gpuslice` class; what it found goes into `detail`.
fn merged_config(
    c: &ContainerdLive<'_>,
    binary: Option<&Path>,
    detail: &mut String,
    restart_fix: &str,
) -> Option<Check> {
    let (Some(bin), true) = (binary, c.config.exists()) else {
        return None;
    };
    match run(Command::new(bin)
        .arg("--config")
        .arg(c.config)
        .args(["config", "dump"]))
    {
        Ok(o) if o.status.success() => {
            let dump = String::from_utf8_lossy(&o.stdout);
            if !dump.contains(".containerd.runtimes.gpuslice]") {
                return Some(Check::bad(
                    CONTAINERD,
                    Level::Fail,
                    format!(
                        "containerd's own merge of {} and its imports has no `gpuslice` runtime class",
                        c.config.display()
                    ),
                    restart_fix.to_string(),
                ));
            }
            detail.push_str(", class `gpuslice` in its merged config");
        }
        Ok(o) => {
            return Some(Check::bad(
                CONTAINERD,
                Level::Fail,
                format!(
                    "containerd cannot load {}: {}",
                    c.config.display(),
                    first_line(&o.stderr)
                ),
                restart_fix.to_string(),
            ))
        }
        Err(e) => detail.push_str(&format!(" (config not merged: {e})")),
    }
    None
}

/// A config file changed after the running containerd started: it has not loaded it.
fn stale_daemon(c: &ContainerdLive<'_>, pid: Option<i32>, detail: &str) -> Option<Check> {
    if let Some(start) = pid.and_then(started_at) {
        // The start time is known to about a second (the boot time is in whole seconds).
        let after = start + START_SLACK;
        let newer = c.files.iter().find(|f| {
            std::fs::metadata(f)
                .and_then(|m| m.modified())
                .is_ok_and(|m| m > after)
        });
        if let Some(f) = newer {
            return Some(Check::bad(
            CONTAINERD,
            Level::Warn,
            format!(
                "{detail}; but {} changed after containerd started: the running daemon has not loaded it",
                f.display()
            ),
            "systemctl restart containerd",
        ));
        }
    }
    None
}

/// The socket path of a `unix://` Docker host.
pub fn docker_socket(hosts: &[String]) -> PathBuf {
    hosts
        .iter()
        .find_map(|h| h.strip_prefix("unix://"))
        .map_or_else(|| PathBuf::from(DOCKER_SOCKET), PathBuf::from)
}

/// The running dockerd; `None` when Docker is not on this node.
pub fn docker(config: &Path, socket: &Path, path: Option<&OsStr>) -> Option<Check> {
    const NAME: &str = "docker-daemon";
    if !socket.exists() {
        if which("dockerd", path).is_none() && !config.exists() {
            return None;
        }
        return Some(Check::bad(
            NAME,
            Level::Fail,
            format!("dockerd is not running: no socket at {}", socket.display()),
            "systemctl start docker   (why it stopped: journalctl -u docker)",
        ));
    }
    let Some(docker) = which("docker", path) else {
        return Some(Check::bad(
            NAME,
            Level::Warn,
            "docker CLI not found on PATH: the running dockerd was not checked",
            "install the docker client",
        ));
    };
    let host = format!("unix://{}", socket.display());
    let out = match answered(
        NAME,
        "dockerd",
        socket,
        "systemctl restart docker",
        run(Command::new(&docker).args(["-H", &host, "info", "--format", "{{json .Runtimes}}"])),
    ) {
        Ok(out) => out,
        Err(check) => return Some(check),
    };
    let runtimes: serde_json::Value = serde_json::from_str(out.trim()).unwrap_or_default();
    if runtimes.get("gpuslice").is_none() {
        let names: Vec<&String> = runtimes
            .as_object()
            .map(|m| m.keys().collect())
            .unwrap_or_default();
        return Some(Check::bad(
            NAME,
            Level::Fail,
            format!(
                "dockerd lists runtimes {names:?}, not `gpuslice`: it has not loaded {}",
                config.display()
            ),
            format!(
                "gpuslice configure docker --file {} && systemctl restart docker",
                config.display()
            ),
        ));
    }
    Some(Check::ok(
        NAME,
        format!(
            "dockerd at {} lists the `gpuslice` runtime",
            socket.display()
        ),
    ))
}
