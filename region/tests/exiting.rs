//! A process whose leader thread has exited while another of its threads still runs shows `Z`
//! in `/proc/<pid>/stat`, yet still holds its descriptors — on a GPU, the driver's, and with
//! them its contexts and memory. Liveness must call it alive until the whole thread group is
//! gone, or a slice's charge for that memory is given back while the memory is still held.

use gpuslice_region::liveness::{liveness, stat_of};
use gpuslice_region::protocol::Liveness;
use std::ffi::CString;
use std::time::{Duration, Instant};

extern "C" fn wait_for_ever(_: *mut libc::c_void) -> *mut libc::c_void {
    loop {
        // SAFETY: pause takes no arguments; the thread sleeps until a signal ends the process.
        unsafe { libc::pause() };
    }
}

/// Whether some other open file description holds a write lock on byte 0 of `fd`'s file.
fn byte_locked(fd: libc::c_int) -> bool {
    // SAFETY: an all-zero flock is a valid value of this plain C struct.
    let mut fl: libc::flock = unsafe { std::mem::zeroed() };
    fl.l_type = libc::F_WRLCK as libc::c_short;
    fl.l_whence = libc::SEEK_SET as libc::c_short;
    fl.l_len = 1;
    // SAFETY: F_OFD_GETLK on an open descriptor with a valid flock out-pointer.
    let rc = unsafe { libc::fcntl(fd, libc::F_OFD_GETLK, &mut fl) };
    assert_eq!(rc, 0, "F_OFD_GETLK: {}", std::io::Error::last_os_error());
    fl.l_type != libc::F_UNLCK as libc::c_short
}

fn wait_for(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn a_zombie_leader_with_a_live_thread_is_alive_until_the_group_exits() {
    let dir = std::env::temp_dir().join(format!("gpuslice-exiting-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("lockfile");
    std::fs::write(&path, b"x").unwrap();
    let cpath = CString::new(path.to_str().unwrap()).unwrap();
    // SAFETY: the child calls only open, fcntl, pthread_create and exit syscalls, and never
    // returns into the test harness.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork: {}", std::io::Error::last_os_error());
    if pid == 0 {
        // SAFETY: in the child: a fresh description of our own, locked on byte 0 (what the
        // simulated GPU does for a process holding device memory); a second thread that
        // sleeps; then the leader thread alone exits.
        unsafe {
            let fd = libc::open(cpath.as_ptr(), libc::O_RDWR | libc::O_CLOEXEC);
            let mut fl: libc::flock = std::mem::zeroed();
            fl.l_type = libc::F_WRLCK as libc::c_short;
            fl.l_whence = libc::SEEK_SET as libc::c_short;
            fl.l_len = 1;
            if fd < 0 || libc::fcntl(fd, libc::F_OFD_SETLK, &fl) != 0 {
                libc::_exit(2);
            }
            let mut t: libc::pthread_t = std::mem::zeroed();
            if libc::pthread_create(
                &mut t,
                std::ptr::null(),
                wait_for_ever,
                std::ptr::null_mut(),
            ) != 0
            {
                libc::_exit(3);
            }
            // exit(2) of this thread alone (not exit_group), without unwinding Rust frames.
            libc::syscall(libc::SYS_exit, 0);
            libc::_exit(4);
        }
    }
    let upid = u32::try_from(pid).unwrap();
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&path)
        .unwrap();
    let fd = std::os::fd::AsRawFd::as_raw_fd(&file);
    wait_for("the leader to exit alone", || {
        stat_of(upid)
            .unwrap()
            .is_some_and(|s| s.state == b'Z' && s.threads == 2)
    });
    let st = stat_of(upid).unwrap().unwrap();
    assert!(byte_locked(fd), "the exiting process still holds its lock");
    assert!(!st.exited(), "{st:?}");
    assert_eq!(liveness(upid, Some(st.start)), Liveness::Alive, "{st:?}");

    // SAFETY: kill our own child by pid; it has not been reaped, so the pid is still its own.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGKILL) }, 0);
    wait_for("the thread group to exit", || {
        stat_of(upid).unwrap().is_some_and(|s| s.threads == 1)
    });
    let gone = stat_of(upid).unwrap().unwrap();
    assert!(gone.exited(), "{gone:?}");
    assert!(!byte_locked(fd), "an exited process holds no lock");
    assert_eq!(liveness(upid, Some(st.start)), Liveness::Dead);

    let mut status = 0;
    // SAFETY: reap our own child; `status` is a valid out-pointer.
    assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
    std::fs::remove_dir_all(&dir).ok();
}
