//! `[scheduler] realtime_priority`: a device scheduler thread started with it runs under
//! `SCHED_FIFO` at that priority (read back from the kernel by thread id) and says so in its
//! status; started by a thread without `CAP_SYS_NICE` (and `RLIMIT_RTPRIO` 0) it is refused,
//! runs with normal scheduling and its status says 0. Needs root (CI runs as root); otherwise
//! skipped with a message, and failing when `CI=true`.

use gpuslice_arbiter::sched::{Params, Scheduler};
use std::time::{Duration, Instant};

mod gate_words;
mod threads;
use gate_words::slice_dir;
use threads::{policy_of, thread_of};

fn skip(why: &str) {
    if std::env::var("CI").as_deref() == Ok("true") {
        panic!("realtime scheduler test cannot run under CI: {why}");
    }
    eprintln!("\n\n*** SKIPPED sched_realtime: {why} (run as root to check SCHED_FIFO) ***\n");
}

/// Starts device `index`'s loop (by scheduling a slice on it) and returns its thread's policy
/// and the priority its status reports.
fn start_device(sched: &Scheduler, index: u32, tag: &str) -> ((i32, i32), u32) {
    let dir = slice_dir("gpuslice-rt", tag);
    sched.add(index, tag, &dir, 0, Params::default());
    let name = format!("sched-gpu{index}");
    let t0 = Instant::now();
    let tid = loop {
        if let Some(t) = thread_of(std::process::id(), &name) {
            // Its status is published once the slice is added (after the priority is set).
            if sched
                .status()
                .devices
                .iter()
                .any(|d| d.index == index && !d.slices.is_empty())
            {
                break t;
            }
        }
        assert!(
            t0.elapsed() < Duration::from_secs(20),
            "no {name} thread with the slice"
        );
        std::thread::sleep(Duration::from_millis(10));
    };
    let pol = policy_of(tid);
    let st = sched.status();
    let rt = st
        .devices
        .iter()
        .find(|d| d.index == index)
        .unwrap()
        .realtime_priority;
    sched.remove(tag);
    let _ = std::fs::remove_dir_all(dir);
    (pol, rt)
}

const CAP_SYS_NICE: u32 = 23;
const CAP_V3: u32 = 0x2008_0522;

#[repr(C)]
struct CapHeader {
    version: u32,
    pid: i32,
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
struct CapData {
    effective: u32,
    permitted: u32,
    inheritable: u32,
}

/// Drops CAP_SYS_NICE from the calling thread's effective set (capabilities are per thread;
/// threads it creates inherit its sets).
fn drop_sys_nice_in_this_thread() {
    let mut h = CapHeader {
        version: CAP_V3,
        pid: 0,
    };
    let mut d = [CapData::default(); 2];
    // SAFETY: v3 header and two data structs, as capget(2) expects; both outlive the calls.
    unsafe {
        assert_eq!(libc::syscall(libc::SYS_capget, &mut h, d.as_mut_ptr()), 0);
        d[0].effective &= !(1 << CAP_SYS_NICE);
        assert_eq!(libc::syscall(libc::SYS_capset, &mut h, d.as_ptr()), 0);
    }
}

#[test]
fn device_threads_run_sched_fifo_when_asked_and_normally_when_refused() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return skip("not running as root");
    }
    let sched = Scheduler::with_realtime(Duration::from_millis(5), 10);
    let ((pol, prio), rt) = start_device(&sched, 6, "on");
    assert_eq!(pol, libc::SCHED_FIFO, "policy of sched-gpu6");
    assert_eq!((prio, rt), (10, 10));
    drop(sched);

    // Off: normal scheduling.
    let sched = Scheduler::new(Duration::from_millis(5));
    let ((pol, _), rt) = start_device(&sched, 5, "off");
    assert_eq!((pol, rt), (libc::SCHED_OTHER, 0));
    drop(sched);

    // Refused: no CAP_SYS_NICE in the thread that starts the device loop, RLIMIT_RTPRIO 0.
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `lim` is valid for both calls; lowering the soft limit needs no privilege.
    unsafe {
        assert_eq!(libc::getrlimit(libc::RLIMIT_RTPRIO, &mut lim), 0);
        lim.rlim_cur = 0;
        assert_eq!(libc::setrlimit(libc::RLIMIT_RTPRIO, &lim), 0);
    }
    let ((pol, _), rt) = std::thread::spawn(|| {
        drop_sys_nice_in_this_thread();
        let sched = Scheduler::with_realtime(Duration::from_millis(5), 10);
        start_device(&sched, 7, "refused")
    })
    .join()
    .unwrap();
    assert_eq!(
        (pol, rt),
        (libc::SCHED_OTHER, 0),
        "a refused thread must run normally and say 0"
    );
}
