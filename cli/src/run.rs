//! `gpuslice run`: admit a slice owned by this process, start the command under the interposer
//! (`LD_PRELOAD`, `GPUSLICE_SLICE_DIR`, `CUDA_VISIBLE_DEVICES` = the placed devices), forward
//! SIGINT / SIGTERM / SIGHUP to it, release the slice when it exits and exit with its status.
//! It is the subreaper of the command's descendants: one that double-forks stays its descendant
//! (and so attributed to the slice by the arbiter's backstop), and whatever the command leaves
//! running when it exits is killed before the slice is released.
//!
//! Exit status: the command's own; 128 + N when a signal N killed it; 125 when gpuslice itself
//! failed (refused, arbiter unreachable, interposer missing) — nothing was started then; 126 when
//! the command could not be executed and 127 when it was not found (the slice is released).

use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus};
use std::sync::{Arc, Mutex, PoisonError};

use gpuslice_api::{AssignedDevice, Owner, SliceRequest};

use crate::client::{self, Client, ClientError};
use crate::run_mounts::{self, SliceMounts};

/// gpuslice's own failures (`docker run` and `env` use the same numbers).
pub const EXIT_FAILED: i32 = 125;
/// The command exists but could not be executed.
pub const EXIT_CANNOT_EXEC: i32 = 126;
/// The command was not found.
pub const EXIT_NOT_FOUND: i32 = 127;

/// The interposer: the configured path, else `../lib/gpuslice/libgpuslice.so` next to the
/// running executable (so `target/dist/usr/bin/gpuslice` works uninstalled).
pub fn interposer_path(configured: Option<&Path>) -> PathBuf {
    if let Some(p) = configured {
        return p.to_path_buf();
    }
    let exe = std::env::current_exe().unwrap_or_else(|_| PathBuf::from("/usr/bin/gpuslice"));
    let bin = exe.parent().unwrap_or_else(|| Path::new("/usr/bin"));
    bin.join("../lib/gpuslice/libgpuslice.so")
}

/// `LD_PRELOAD` with the interposer first and the existing entries kept (without repeating it).
pub fn ld_preload(ours: &Path, existing: Option<&OsStr>) -> OsString {
    let mut out = OsString::from(ours.as_os_str());
    if let Some(old) = existing.and_then(OsStr::to_str) {
        for entry in old.split([' ', ':']).filter(|e| !e.is_empty()) {
            if Path::new(entry) != ours {
                out.push(":");
                out.push(entry);
            }
        }
    } else if let Some(old) = existing.filter(|o| !o.is_empty()) {
        out.push(":");
        out.push(old);
    }
    out
}

/// The status a shell would report for `status`.
pub fn exit_code(status: ExitStatus) -> i32 {
    match (status.code(), status.signal()) {
        (Some(c), _) => c,
        (None, Some(sig)) => 128 + sig,
        _ => EXIT_FAILED,
    }
}

/// A slice id unique on the node: `run-<pid>-<start time>`.
pub fn slice_id() -> String {
    let pid = std::process::id();
    match gpuslice_region::liveness::self_start_time() {
        Some(start) => format!("run-{pid}-{start}"),
        None => format!("run-{pid}"),
    }
}

/// Why `run` stopped before the command ran.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// The arbiter is not reachable or did not answer sensibly.
    #[error(transparent)]
    Client(#[from] ClientError),
    /// The arbiter said no.
    #[error("slice not admitted: {0}")]
    Refused(String),
    /// The slice's mount namespace could not be prepared (the slice was released).
    #[error("preparing the command's view of its slice: {0}")]
    Mounts(std::io::Error),
    /// The interposer is not where it should be.
    #[error("interposer not found at {0} (install it there or name it in the config file: interposer = \"…\")")]
    NoInterposer(PathBuf),
}

/// Admits the slice. On success returns the slice directory and devices.
pub fn admit(
    client: &mut Client,
    id: &str,
    request: SliceRequest,
) -> Result<(PathBuf, Vec<AssignedDevice>), RunError> {
    let owner = Owner {
        pid: Some(std::process::id()),
        ..Owner::default()
    };
    match client.admit(id, request, owner) {
        Ok(a) => Ok((a.slice_dir, a.devices)),
        Err(ClientError::Arbiter { message, .. }) => Err(RunError::Refused(message)),
        Err(e) => Err(e.into()),
    }
}

const FORWARDED: [libc::c_int; 3] = [libc::SIGINT, libc::SIGTERM, libc::SIGHUP];
/// `si_code` of signals the kernel sent (a terminal's Ctrl-C reaches the whole foreground
/// process group, the command included: forwarding it would deliver it twice).
const SI_KERNEL: libc::c_int = 0x80;

fn signal_set() -> libc::sigset_t {
    // SAFETY: sigset_t is plain data; sigemptyset initialises it before use.
    let mut set: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: `set` is a valid sigset_t owned by this frame.
    unsafe { libc::sigemptyset(&mut set) };
    for s in FORWARDED {
        // SAFETY: as above; `s` is a valid signal number.
        unsafe { libc::sigaddset(&mut set, s) };
    }
    set
}

/// Whether the child has been reaped (after which its pid may name another process).
type Reaped = Arc<Mutex<bool>>;

fn forward_signals(pid: libc::pid_t, reaped: Reaped) {
    let set = signal_set();
    loop {
        // SAFETY: siginfo_t is plain data filled by sigwaitinfo.
        let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
        // SAFETY: `set` and `info` are valid for the call; the signals are blocked in every
        // thread of this process, so sigwaitinfo is the only way they are delivered.
        let sig = unsafe { libc::sigwaitinfo(&set, &mut info) };
        if sig < 0 {
            continue;
        }
        if info.si_code == SI_KERNEL {
            continue; // the terminal already sent it to the command too
        }
        let done = reaped.lock().unwrap_or_else(PoisonError::into_inner);
        if !*done {
            // SAFETY: kill has no memory preconditions; `pid` is our unreaped child (checked
            // under the lock the reaper takes), so it cannot name another process.
            unsafe { libc::kill(pid, sig) };
        }
    }
}

/// Waits for the child to exit without reaping it, marks it reaped under the lock, then reaps.
/// Meanwhile reaps the orphans of the command that were re-parented to us (we are their
/// subreaper), so none stays a zombie.
fn wait_child(child: &mut std::process::Child, reaped: &Reaped) -> std::io::Result<ExitStatus> {
    let pid = child.id() as libc::pid_t;
    loop {
        // SAFETY: siginfo_t is plain data filled by waitid.
        let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
        // SAFETY: `info` is valid for writes; WNOWAIT leaves the child waitable for std.
        let rc = unsafe { libc::waitid(libc::P_ALL, 0, &mut info, libc::WEXITED | libc::WNOWAIT) };
        if rc == 0 {
            // SAFETY: waitid filled `info` for an exited child, so si_pid is valid to read.
            let who = unsafe { info.si_pid() };
            if who == pid {
                break;
            }
            // An orphan of the command: reap it (it is ours, so the pid names nobody else).
            // SAFETY: waitpid on our own exited child; a null status pointer is allowed.
            unsafe { libc::waitpid(who, std::ptr::null_mut(), libc::WNOHANG) };
            continue;
        }
        let e = std::io::Error::last_os_error();
        if e.kind() != std::io::ErrorKind::Interrupted {
            break; // std's wait below reports the error
        }
    }
    *reaped.lock().unwrap_or_else(PoisonError::into_inner) = true;
    child.wait()
}

/// Our children now: the command's descendants re-parented to us after their parents exited.
fn children() -> Vec<libc::pid_t> {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for t in tasks.flatten() {
        if let Ok(text) = std::fs::read_to_string(t.path().join("children")) {
            out.extend(
                text.split_ascii_whitespace()
                    .filter_map(|p| p.parse::<libc::pid_t>().ok()),
            );
        }
    }
    out
}

/// Ends what the command left running once it exited: the slice is released next, and a
/// process still running then would hold the GPU with no cap. Kills our children (each kill
/// re-parents their own children to us, so this repeats) and reaps them; gives up after 5 s.
/// Returns how many were killed.
fn end_descendants() -> usize {
    let mut killed = 0;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    loop {
        let kids = children();
        if kids.is_empty() || std::time::Instant::now() > deadline {
            return killed;
        }
        for k in kids {
            // SAFETY: `k` is our unreaped child, so the pid cannot name another process.
            if unsafe { libc::kill(k, libc::SIGKILL) } == 0 {
                killed += 1;
            }
            // SAFETY: waitpid on our own child; a null status pointer is allowed.
            unsafe { libc::waitpid(k, std::ptr::null_mut(), 0) };
        }
    }
}

/// In the forked child, before exec: only async-signal-safe calls.
fn child_setup(parent: libc::pid_t) -> std::io::Result<()> {
    // If gpuslice dies, its slice is released: the command must not run on unchecked.
    // SAFETY: prctl with PR_SET_PDEATHSIG takes a signal number, no pointers.
    unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM as libc::c_ulong) };
    // SAFETY: getppid has no preconditions.
    if unsafe { libc::getppid() } != parent {
        // The parent died before prctl took effect.
        // SAFETY: _exit is async-signal-safe and never returns.
        unsafe { libc::_exit(EXIT_FAILED) };
    }
    Ok(())
}

/// Everything `run` needs.
#[derive(Debug)]
pub struct RunPlan {
    /// Where the arbiter is.
    pub state_dir: PathBuf,
    /// The interposer.
    pub interposer: PathBuf,
    /// What to ask for.
    pub request: SliceRequest,
    /// The command and arguments.
    pub command: Vec<OsString>,
}

/// Runs the plan; returns the exit status for gpuslice.
pub fn run(plan: RunPlan) -> i32 {
    match run_inner(plan) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("gpuslice run: {e}");
            EXIT_FAILED
        }
    }
}

fn run_inner(plan: RunPlan) -> Result<i32, RunError> {
    if !plan.interposer.is_file() {
        return Err(RunError::NoInterposer(plan.interposer));
    }
    let interposer = plan
        .interposer
        .canonicalize()
        .unwrap_or_else(|_| plan.interposer.clone());
    let Some((program, args)) = plan.command.split_first() else {
        return Err(RunError::Refused("no command given".into()));
    };
    let mut client = Client::connect(&plan.state_dir, client::TIMEOUT)?;
    let id = slice_id();
    let (slice_dir, devices) = admit(&mut client, &id, plan.request)?;
    let release = |client: &mut Client| {
        if let Err(e) = client.release(&id) {
            eprintln!(
                "gpuslice run: releasing slice {id}: {e} (the arbiter's reclaim frees it once this process is gone)"
            );
        }
    };

    let uuids: Vec<&str> = devices.iter().map(|d| d.uuid.as_str()).collect();
    let mut cmd = Command::new(program);
    cmd.args(args)
        .env(
            "LD_PRELOAD",
            ld_preload(&interposer, std::env::var_os("LD_PRELOAD").as_deref()),
        )
        .env("CUDA_VISIBLE_DEVICES", uuids.join(","));
    // The command sees its slice where the state directory was, in a mount namespace of its
    // own (see run_mounts), when we may make one.
    let mounts = if run_mounts::can_mount() {
        match SliceMounts::new(&plan.state_dir, &slice_dir) {
            Ok(m) => Some(m),
            Err(e) => {
                release(&mut client);
                return Err(RunError::Mounts(e));
            }
        }
    } else {
        None
    };
    match &mounts {
        Some(m) => cmd.env(
            "GPUSLICE_SLICE_DIR",
            OsStr::from_bytes(m.visible_dir().to_bytes()),
        ),
        None => cmd.env("GPUSLICE_SLICE_DIR", &slice_dir),
    };
    // Descendants whose parent exits (a double fork, a daemonising child) are re-parented to
    // us instead of init: they stay descendants of the slice's owner (this process), which is
    // how the arbiter's backstop attributes them, and we end them with the command.
    // SAFETY: prctl with PR_SET_CHILD_SUBREAPER takes an integer flag, no pointers.
    unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1 as libc::c_ulong) };
    let parent = std::process::id() as libc::pid_t;
    // SAFETY: the closure runs in the forked child before exec and calls only async-signal-safe
    // functions (see `child_setup`) on no shared state.
    unsafe {
        cmd.pre_exec(move || {
            child_setup(parent)?;
            match &mounts {
                Some(m) => m.enter(),
                None => Ok(()),
            }
        });
    }
    // Block the forwarded signals in this thread (and so in the forwarding thread spawned after);
    // std's spawn gives the child an empty mask.
    let set = signal_set();
    // SAFETY: `set` is a valid sigset_t; the old mask is not needed.
    unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()) };
    let mut child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("gpuslice run: {}: {e}", Path::new(program).display());
            release(&mut client);
            return Ok(if e.kind() == std::io::ErrorKind::NotFound {
                EXIT_NOT_FOUND
            } else {
                EXIT_CANNOT_EXEC
            });
        }
    };
    let reaped: Reaped = Arc::new(Mutex::new(false));
    {
        let reaped = Arc::clone(&reaped);
        let pid = child.id() as libc::pid_t;
        let _ = std::thread::Builder::new()
            .name("signals".into())
            .spawn(move || forward_signals(pid, reaped));
    }
    let status = wait_child(&mut child, &reaped);
    let left = end_descendants();
    if left > 0 {
        eprintln!(
            "gpuslice run: the command left {left} process(es) running; killed them before \
             releasing the slice"
        );
    }
    // The connection may have idled out during a long run: release on a fresh one.
    match Client::connect(&plan.state_dir, client::TIMEOUT) {
        Ok(mut c) => release(&mut c),
        Err(_) => release(&mut client),
    }
    Ok(match status {
        Ok(s) => exit_code(s),
        Err(e) => {
            eprintln!("gpuslice run: waiting for the command: {e}");
            EXIT_FAILED
        }
    })
}
