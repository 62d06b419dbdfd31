//! A tenant in its own pid namespace (a container) records the pids it sees; a reader on the
//! host judges them through `PidNamespace` (the members of the owner's namespace by `NSpid`),
//! not through its own `/proc`, where the same number is another process or none. Uses a real
//! pid namespace (`unshare --pid --fork`, root); skipped loudly otherwise, failed under CI.

use gpuslice_region::liveness::{innermost_nspid, liveness, stat_of, PidNamespace};
use gpuslice_region::Liveness;
use std::path::Path;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

struct Kill(Child);
impl Drop for Kill {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn innermost_nspid_is_the_last_field() {
    let status = "Name:\tsleep\nNSpid:\t48213\t7\t1\nNSpgid:\t48213\n";
    assert_eq!(innermost_nspid(status), Some(1));
    assert_eq!(innermost_nspid("NSpid:\t42\n"), Some(42));
    assert_eq!(innermost_nspid("Name:\tx\n"), None);
}

#[test]
fn records_of_a_container_are_judged_in_its_pid_namespace() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        let why = "needs root (unshare --pid)";
        assert!(std::env::var("CI").as_deref() != Ok("true"), "{why}");
        eprintln!("SKIPPED pid namespace test: {why}");
        return;
    }
    let unshare = Kill(
        Command::new("unshare")
            .args(["--pid", "--fork", "--kill-child", "sleep", "30"])
            .spawn()
            .expect("unshare"),
    );
    // The forked child (pid 1 of the new namespace) on the host, once it runs `sleep`: unshare
    // sets its death signal (`--kill-child`) between fork and exec, and a child found before
    // that outlives an unshare killed too soon.
    let children = format!("/proc/{0}/task/{0}/children", unshare.0.id());
    let deadline = Instant::now() + Duration::from_secs(10);
    let inner_host = loop {
        let c = std::fs::read_to_string(&children).unwrap_or_default();
        if let Some(p) = c
            .split_whitespace()
            .next()
            .and_then(|p| p.parse::<u32>().ok())
            .filter(|p| {
                std::fs::read_to_string(format!("/proc/{p}/comm")).is_ok_and(|c| c == "sleep\n")
            })
        {
            break p;
        }
        assert!(Instant::now() < deadline, "unshare started no `sleep`");
        std::thread::sleep(Duration::from_millis(20));
    };
    let start = stat_of(inner_host).unwrap().expect("the child runs").start;
    let status = std::fs::read_to_string(format!("/proc/{inner_host}/status")).unwrap();
    assert_eq!(innermost_nspid(&status), Some(1), "{status}");

    let ns = PidNamespace::of(Path::new("/proc"), inner_host).expect("namespace readable");
    assert!(
        ns.alive(1, start),
        "the container's pid 1 with its start time"
    );
    assert!(
        !ns.alive(1, start + 1),
        "same pid, other start time: another process"
    );
    assert!(!ns.alive(2, start), "no pid 2 in that namespace");
    // What the host's own /proc says of the tenant's "pid 1": the host's init, another start.
    assert_eq!(liveness(1, Some(start)), Liveness::Dead);

    // A process in the reader's own namespace is judged directly.
    let me = std::process::id();
    let my_start = stat_of(me).unwrap().unwrap().start;
    let own = PidNamespace::of(Path::new("/proc"), me).unwrap();
    assert!(own.alive(me, my_start));
    assert!(!own.alive(me, my_start + 1));

    drop(unshare);
    let deadline = Instant::now() + Duration::from_secs(10);
    while stat_of(inner_host)
        .ok()
        .flatten()
        .is_some_and(|s| !s.exited())
    {
        assert!(Instant::now() < deadline, "the child outlived unshare");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(PidNamespace::of(Path::new("/proc"), inner_host).is_none_or(|n| !n.alive(1, start)));
}
