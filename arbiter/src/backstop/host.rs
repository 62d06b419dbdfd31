//! [`Host`] on the real machine: process identity from `/proc`, signals through pidfds (with a
//! start-time check, so a reused pid is never signalled), and the cgroup freezer (v1 or v2).

use std::fs;
use std::io;
use std::os::fd::AsRawFd;
use std::path::PathBuf;

use super::engine::{Counted, Host, HostProc};

/// The real host: `/proc`, pidfds, the cgroup freezer.
#[derive(Clone, Debug)]
pub struct RealHost {
    /// `/proc`.
    pub proc_root: PathBuf,
    /// The cgroup mount (`/sys/fs/cgroup`).
    pub cgroup_root: PathBuf,
    /// The arbiter's state directory (slice `usage` files; `None`: nothing counted is known).
    pub state_dir: Option<PathBuf>,
}

impl Default for RealHost {
    fn default() -> Self {
        RealHost {
            proc_root: PathBuf::from("/proc"),
            cgroup_root: PathBuf::from("/sys/fs/cgroup"),
            state_dir: None,
        }
    }
}

impl RealHost {
    fn signal(&self, pid: u32, start: u64, sig: i32) -> io::Result<()> {
        let fd = match crate::syscalls::pidfd_open(pid) {
            Ok(fd) => fd,
            Err(e) if crate::syscalls::unsupported(&e) => {
                return self.signal_by_kill(pid, start, sig)
            }
            Err(e) => return Err(e),
        };
        // The pidfd now pins the process; check it is the one judged (not a reused pid).
        if self.process(pid).is_none_or(|h| h.start != start) {
            return Err(io::Error::new(
                io::ErrorKind::NotFound,
                "process gone (or its pid reused) before the signal",
            ));
        }
        // SAFETY: pidfd_send_signal with a live pidfd, a signal number, no siginfo, no flags.
        let rc = unsafe {
            libc::syscall(
                libc::SYS_pidfd_send_signal,
                fd.as_raw_fd(),
                sig,
                std::ptr::null::<libc::siginfo_t>(),
                0,
            )
        };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }
}

impl RealHost {
    /// The signal without a pidfd (Linux < 5.3, a sandbox, or forced fallbacks): the start time
    /// is checked, then `kill(2)`. The pid could be reused between the two calls — a full pid
    /// wrap-around within those microseconds; docs/kernels.md states the window.
    fn signal_by_kill(&self, pid: u32, start: u64, sig: i32) -> io::Result<()> {
        if self.process(pid).is_none_or(|h| h.start != start) {
            return Err(io::Error::new(
                io::ErrorKind::NotFound,
                "process gone (or its pid reused) before the signal",
            ));
        }
        let p = libc::pid_t::try_from(pid).map_err(io::Error::other)?;
        // SAFETY: kill takes a pid and a signal number; no memory is passed.
        if unsafe { libc::kill(p, sig) } != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }
}

impl Host for RealHost {
    fn process(&self, pid: u32) -> Option<HostProc> {
        let dir = self.proc_root.join(pid.to_string());
        let st = gpuslice_region::liveness::parse_stat(&fs::read(dir.join("stat")).ok()?)?;
        if st.exited() {
            return None;
        }
        let cg = fs::read_to_string(dir.join("cgroup")).unwrap_or_default();
        let cgroups = cg
            .lines()
            .filter_map(|l| l.splitn(3, ':').nth(2))
            .map(str::to_string)
            .collect();
        Some(HostProc {
            start: st.start,
            ppid: st.ppid,
            cgroups,
        })
    }

    fn ns_pid(&self, pid: u32) -> Option<u32> {
        super::ledger::ns_pid(&self.proc_root, pid)
    }

    fn ledger(&self, slice_id: &str, dev: usize) -> Option<Vec<Counted>> {
        let dir = self.state_dir.as_ref()?.join(slice_id);
        super::ledger::allocations(&dir, dev)
    }

    fn interposed(&self, pid: u32) -> Option<bool> {
        let maps = fs::read_to_string(self.proc_root.join(pid.to_string()).join("maps")).ok()?;
        Some(gpuslice_api::interposer::maps_interposer(&maps))
    }

    fn comm(&self, pid: u32) -> String {
        fs::read_to_string(self.proc_root.join(pid.to_string()).join("comm"))
            .map(|c| c.trim().to_string())
            .unwrap_or_default()
    }

    fn kill(&mut self, pid: u32, start: u64) -> io::Result<()> {
        self.signal(pid, start, libc::SIGKILL)
    }

    fn stop(&mut self, pid: u32, start: u64) -> io::Result<()> {
        self.signal(pid, start, libc::SIGSTOP)
    }

    fn freeze(&mut self, path: &str) -> io::Result<()> {
        let rel = path.trim_start_matches('/');
        if rel.split('/').any(|c| c == "..") {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("cgroup path {path} contains .."),
            ));
        }
        let v1 = self.cgroup_root.join("freezer").join(rel);
        if v1.join("freezer.state").exists() {
            return fs::write(v1.join("freezer.state"), "FROZEN");
        }
        let v2 = self.cgroup_root.join(rel).join("cgroup.freeze");
        if v2.exists() {
            return fs::write(v2, "1");
        }
        Err(io::Error::new(
            io::ErrorKind::NotFound,
            format!(
                "no freezer for cgroup {path} under {}",
                self.cgroup_root.display()
            ),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interposed_reads_the_maps_and_comm_names_the_process() {
        let h = RealHost::default();
        let me = std::process::id();
        // The test binary has no interposer mapped; its maps are readable.
        assert_eq!(h.interposed(me), Some(false));
        assert!(!h.comm(me).is_empty());
        assert_eq!(h.interposed(u32::MAX - 1), None);
        assert_eq!(h.comm(u32::MAX - 1), "");
        // A fake /proc whose process maps it.
        let dir = std::env::temp_dir().join(format!("gs-bs-maps-{me}"));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(dir.join("42")).unwrap();
        fs::write(
            dir.join("42/maps"),
            "7f00-7f10 r-xp 00000000 08:01 7 /usr/lib/gpuslice/libgpuslice.so\n",
        )
        .unwrap();
        let fake = RealHost {
            proc_root: dir.clone(),
            ..RealHost::default()
        };
        assert_eq!(fake.interposed(42), Some(true));
        let _ = fs::remove_dir_all(&dir);
    }

    #[test]
    fn freeze_refuses_dotdot_and_missing_cgroups() {
        let dir = std::env::temp_dir().join(format!("gs-bs-fz-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(dir.join("freezer/a")).unwrap();
        fs::write(dir.join("freezer/a/freezer.state"), "THAWED").unwrap();
        let mut h = RealHost {
            proc_root: PathBuf::from("/proc"),
            cgroup_root: dir.clone(),
            state_dir: None,
        };
        assert_eq!(
            h.freeze("/a/../../etc").unwrap_err().kind(),
            io::ErrorKind::InvalidInput
        );
        let e = h.freeze("/nope").unwrap_err();
        assert!(e.to_string().contains("no freezer for cgroup /nope"), "{e}");
        h.freeze("/a").unwrap();
        assert_eq!(
            fs::read_to_string(dir.join("freezer/a/freezer.state")).unwrap(),
            "FROZEN"
        );
        fs::create_dir_all(dir.join("b")).unwrap();
        fs::write(dir.join("b/cgroup.freeze"), "0").unwrap();
        h.freeze("b").unwrap();
        assert_eq!(
            fs::read_to_string(dir.join("b/cgroup.freeze")).unwrap(),
            "1"
        );
        let _ = fs::remove_dir_all(&dir);
    }

    #[test]
    fn kill_fallback_checks_the_start_time() {
        let h = RealHost::default();
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let pid = child.id();
        let start = h.process(pid).unwrap().start;
        let e = h.signal_by_kill(pid, start + 1, libc::SIGKILL).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::NotFound);
        assert!(
            h.process(pid).is_some(),
            "a wrong start time signals nothing"
        );
        h.signal_by_kill(pid, start, libc::SIGKILL).unwrap();
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(child.wait().unwrap().signal(), Some(libc::SIGKILL));
        assert!(h.signal_by_kill(pid, start, libc::SIGKILL).is_err(), "gone");
    }

    #[test]
    fn signal_refuses_a_reused_pid() {
        let mut h = RealHost::default();
        let me = std::process::id();
        let start = h.process(me).unwrap().start;
        let e = h.kill(me, start + 1).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::NotFound);
        assert!(h.kill(u32::MAX - 1, 0).is_err());
    }
}
