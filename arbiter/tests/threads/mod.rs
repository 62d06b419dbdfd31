//! Shared by the tests that look at the arbiter's scheduler threads from outside: find a thread
//! by name in `/proc/<pid>/task`, and read its scheduling policy and priority from the kernel.

/// The tid of the thread of process `pid` whose name (`comm`) is `name`.
pub fn thread_of(pid: u32, name: &str) -> Option<libc::pid_t> {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .ok()?
        .filter_map(|e| e.ok())
        .find(|e| {
            std::fs::read_to_string(e.path().join("comm")).is_ok_and(|c| c.trim_end() == name)
        })?
        .file_name()
        .to_str()?
        .parse()
        .ok()
}

/// Policy (`SCHED_*`) and priority of thread `tid`; panics when the kernel refuses to say.
pub fn policy_of(tid: libc::pid_t) -> (i32, i32) {
    // SAFETY: plain queries of a thread by tid; `p` is valid for the call.
    unsafe {
        let pol = libc::sched_getscheduler(tid);
        let mut p = libc::sched_param { sched_priority: -1 };
        assert_eq!(
            libc::sched_getparam(tid, &mut p),
            0,
            "sched_getparam({tid})"
        );
        (pol, p.sched_priority)
    }
}
