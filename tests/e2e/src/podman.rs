//! Podman for one test, isolated: its own `--root`, `--runroot`, `--tmpdir`, vfs storage,
//! cgroupfs, no network, no events, no system hooks; the CDI spec directory is a scratch
//! directory bind-mounted on `/var/run/cdi` inside a private mount namespace (podman 4.3 has no
//! `cdi_spec_dirs`), so nothing on the host changes. Also: a fake driver root (the simulated
//! libraries behind a real `ld.so.cache`) and fake device nodes (mknod) for `gpuslice cdi
//! generate`.

use crate::paths;
use crate::procs::{run_ok, run_timeout};
use anyhow::{ensure, Context, Result};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

/// `/usr/bin/podman`.
pub fn binary() -> PathBuf {
    PathBuf::from("/usr/bin/podman")
}

/// Directory the sim libraries appear in inside the container (via the CDI spec's mounts).
pub const DRIVER_LIB_DIR: &str = "/usr/lib/x86_64-linux-gnu";

/// An isolated podman.
#[derive(Debug)]
pub struct Podman {
    dir: PathBuf,
    /// Where CDI specs go (seen by podman as `/var/run/cdi`).
    pub cdi_dir: PathBuf,
}

impl Podman {
    /// State under `dir`.
    pub fn new(dir: &Path) -> Result<Self> {
        let cdi_dir = dir.join("cdi");
        for d in ["root", "runroot", "tmp", "hooks", "cdi"] {
            std::fs::create_dir_all(dir.join(d))?;
        }
        Ok(Self {
            dir: dir.to_path_buf(),
            cdi_dir,
        })
    }

    fn global_args(&self) -> Vec<String> {
        let p = |d: &str| self.dir.join(d).to_string_lossy().into_owned();
        vec![
            "--root".into(),
            p("root"),
            "--runroot".into(),
            p("runroot"),
            "--tmpdir".into(),
            p("tmp"),
            "--storage-driver".into(),
            "vfs".into(),
            "--cgroup-manager".into(),
            "cgroupfs".into(),
            "--events-backend".into(),
            "none".into(),
            "--hooks-dir".into(),
            p("hooks"),
            "--runtime".into(),
            paths::runc().to_string_lossy().into_owned(),
        ]
    }

    /// `podman <global> args…` in a private mount namespace with the CDI dir on /var/run/cdi.
    pub fn command(&self, args: &[String]) -> Command {
        let script = "set -e; mkdir -p /run/cdi; mount --bind \"$GS_CDI\" /run/cdi; exec \"$@\"";
        let mut c = Command::new("unshare");
        c.args([
            "--mount",
            "--propagation",
            "private",
            "sh",
            "-c",
            script,
            "sh",
        ])
        .arg(binary())
        .args(self.global_args())
        .args(args)
        .env("GS_CDI", &self.cdi_dir)
        .env("CONTAINERS_CONF", self.dir.join("containers.conf"));
        c
    }

    /// Writes an empty containers.conf (host configuration ignored) and imports the image tarball.
    pub fn import(&self, layer: &Path, name: &str) -> Result<()> {
        std::fs::write(self.dir.join("containers.conf"), "[engine]\n")?;
        run_ok(
            &mut self.command(&[
                "import".into(),
                layer.to_string_lossy().into_owned(),
                name.into(),
            ]),
            Duration::from_secs(300),
        )
        .context("podman import")?;
        Ok(())
    }

    /// `podman run --rm --network none args…`.
    pub fn run(&self, args: &[String], timeout: Duration) -> Result<Output> {
        // podman's default RLIMIT_NOFILE / RLIMIT_NPROC can exceed what runc may set in a
        // sandbox (even `--ulimit host` and this process's own hard limits failed here with
        // "error setting rlimit type 6/7: operation not permitted"): ask for at most 4096.
        let mut a: Vec<String> = vec![
            "run".into(),
            "--rm".into(),
            "--network".into(),
            "none".into(),
            "--ulimit".into(),
            own_limit("nofile", libc::RLIMIT_NOFILE),
            "--ulimit".into(),
            own_limit("nproc", libc::RLIMIT_NPROC),
        ];
        a.extend(args.iter().cloned());
        run_timeout(&mut self.command(&a), timeout)
    }

    /// Removes every container and the storage (`podman system reset` is too broad: rm -a).
    pub fn cleanup(&self) {
        let _ = run_timeout(
            &mut self.command(&["rm".into(), "-af".into()]),
            Duration::from_secs(60),
        );
        // vfs layers may be mounted nowhere, but podman's runroot may hold a shm mount.
        crate::scratch::detach_mounts_below(&self.dir);
        // /run/cdi is created (empty) on the host the first time; remove it if still empty.
        let _ = std::fs::remove_dir("/run/cdi");
    }
}

/// `<name>=<soft>:<hard>` of this process's `resource` limit.
fn own_limit(name: &str, resource: libc::__rlimit_resource_t) -> String {
    let mut r = libc::rlimit {
        rlim_cur: 1024,
        rlim_max: 1024,
    };
    // SAFETY: getrlimit writes one rlimit into the valid struct it is given.
    unsafe {
        libc::getrlimit(resource, &mut r);
    }
    let v = |x: libc::rlim_t| {
        if x == libc::RLIM_INFINITY {
            "-1".to_string()
        } else {
            x.to_string()
        }
    };
    format!(
        "{name}={}:{}",
        v(r.rlim_cur.min(4096)),
        v(r.rlim_max.min(4096))
    )
}

fn mknod(path: &Path, major: u32, minor: u32) -> Result<()> {
    if let Some(d) = path.parent() {
        std::fs::create_dir_all(d)?;
    }
    let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes())?;
    // SAFETY: a valid NUL-terminated path; mknod has no memory preconditions.
    let rc = unsafe {
        libc::mknod(
            c.as_ptr(),
            libc::S_IFCHR | 0o666,
            libc::makedev(major, minor),
        )
    };
    ensure!(
        rc == 0,
        "mknod {}: {}",
        path.display(),
        std::io::Error::last_os_error()
    );
    Ok(())
}

/// A fake node for `gpuslice cdi generate`: `<dir>/dev` with nvidia0, nvidiactl, nvidia-uvm
/// (mknod, NVIDIA's major numbers; nothing opens them with the simulator), and `<dir>/driver`
/// with the simulated libraries in [`DRIVER_LIB_DIR`] behind a real `etc/ld.so.cache` written
/// by `ldconfig -r`. Returns (driver root, dev root).
pub fn fake_driver(dir: &Path) -> Result<(PathBuf, PathBuf)> {
    let dev = dir.join("dev");
    mknod(&dev.join("nvidia0"), 195, 0)?;
    mknod(&dev.join("nvidiactl"), 195, 255)?;
    mknod(&dev.join("nvidia-uvm"), 511, 0)?;
    let drv = dir.join("driver");
    let lib = drv.join(&DRIVER_LIB_DIR[1..]);
    std::fs::create_dir_all(&lib)?;
    std::fs::create_dir_all(drv.join("etc"))?;
    for l in ["libcuda.so.1", "libnvidia-ml.so.1"] {
        std::fs::copy(paths::sim_lib_dir().join(l), lib.join(l))
            .with_context(|| format!("copying the simulated {l}"))?;
    }
    std::fs::write(drv.join("etc/ld.so.conf"), format!("{DRIVER_LIB_DIR}\n"))?;
    run_ok(
        Command::new("ldconfig").arg("-X").arg("-r").arg(&drv),
        Duration::from_secs(60),
    )
    .context("ldconfig -r <fake driver root>")?;
    Ok((drv, dev))
}
