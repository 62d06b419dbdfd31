//! `gpuslice-runtime`: a runc-compatible OCI runtime wrapper (Docker `runtimes.<name>.path`,
//! containerd `BinaryName`). `create` and `run` of a container that asks for a slice are
//! admitted and their `config.json` edited (`gpuslice_oci::prepare_bundle`); then, and for every
//! other subcommand, the configured low-level runtime (`runtime.low_level`, default `runc` from
//! `PATH`) runs with the same arguments. Reference: `docs/runtime.md`.

use std::ffi::OsString;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicI32, Ordering};

use gpuslice_api::Config;
use gpuslice_oci::lifecycle::{bind_created, owned_slice};
mod logfile;
mod runc_args;

use gpuslice_oci::prepare::release;
use gpuslice_oci::{prepare_bundle, Outcome, Settings};
use runc_args::{parse, Invocation};

const NAME: &str = "gpuslice-runtime";

fn main() {
    let args: Vec<OsString> = std::env::args_os().skip(1).collect();
    std::process::exit(run(&parse(&args)));
}

fn report(inv: &Invocation, level: &str, msg: &str) {
    eprintln!(
        "{NAME}: {}{msg}",
        if level == "warning" { "warning: " } else { "" }
    );
    if let Some(log) = &inv.log {
        logfile::append(log, level, &format!("{NAME}: {msg}"), inv.log_json);
    }
}

fn fail(inv: &Invocation, msg: &str) -> i32 {
    report(inv, "error", msg);
    1
}

fn run(inv: &Invocation) -> i32 {
    let creates = inv.creates();
    let settings = match Settings::load(inv.own.config.clone(), inv.own.state_dir.clone()) {
        Ok(s) => s,
        // Containers that exist must stay manageable: other subcommands fall back to defaults.
        Err(e) if !creates => {
            report(
                inv,
                "warning",
                &format!("{e}; using the default configuration"),
            );
            Settings::from_config(Config::default(), None, inv.own.state_dir.clone())
        }
        Err(e) => return fail(inv, &e.to_string()),
    };
    let resolved = resolve_low_level(&settings.config.runtime.low_level);
    // Top-level `--help` / `--version`: say what this wrapper is and what it wraps, then let
    // the low-level runtime add its own (when it exists); neither needs it installed.
    if inv.help && inv.command.is_none() {
        let wanted = &settings.config.runtime.low_level;
        println!(
            "{NAME} {}: runc-compatible OCI runtime wrapper; gives containers that ask for a GPU \
             slice (gpuslice.io/* annotations, GPUSLICE_* env) their slice, then runs the \
             low-level runtime with the same arguments",
            env!("CARGO_PKG_VERSION")
        );
        match &resolved {
            Ok(p) => println!(
                "low-level runtime: {} (config key runtime.low_level = {wanted:?})\n",
                p.display()
            ),
            Err(msg) => {
                println!("low-level runtime: missing: {msg}");
                return 0;
            }
        }
    }
    let low = match resolved {
        Ok(p) => p,
        Err(msg) => return fail(inv, &msg),
    };
    if inv.deletes() {
        return delete(inv, &settings, &low);
    }
    let Some(id) = inv.container_id.as_deref().filter(|_| creates) else {
        return exec(inv, &low);
    };
    // A `create` with runc's pid file: this process binds the pid after create and releases the
    // slice at `delete`, so the spec gets no hook processes (docs/runtime.md).
    let self_managed = inv.command.as_deref() == Some("create") && inv.pid_file.is_some();
    let mut settings = settings;
    settings.lifecycle_hooks = !self_managed;
    let mut warnings = Vec::new();
    let outcome = prepare_bundle(&inv.bundle, id, &settings, &mut warnings);
    for w in &warnings {
        report(inv, "warning", w);
    }
    match outcome {
        Err(e) => fail(inv, &e.to_string()),
        Ok(Outcome::Unchanged(_)) | Ok(Outcome::Open) => exec(inv, &low),
        Ok(Outcome::Sliced { slice_id, fresh }) => {
            let mut code = spawn_wait(inv, &low);
            if code == 0 && self_managed {
                code = bind_after_create(inv, &settings, &low, id, &slice_id);
            }
            let ended = inv.command.as_deref() == Some("run") && !inv.detach;
            if fresh && (code != 0 || ended) {
                let mut w = Vec::new();
                release(&settings, &slice_id, &mut w);
                if code != 0 && !ended {
                    report(
                        inv,
                        "error",
                        &format!(
                            "{} {} failed (exit status {code}); slice \"{slice_id}\" released",
                            low.display(),
                            inv.command.as_deref().unwrap_or("")
                        ),
                    );
                }
                for m in w {
                    report(inv, "warning", &m);
                }
            }
            code
        }
    }
}

/// Binds the created container's pid to its slice. On failure the container is deleted again
/// (`delete --force` with the same global options) and 1 is returned, so the caller releases a
/// fresh slice and the create fails with the reason.
fn bind_after_create(
    inv: &Invocation,
    settings: &Settings,
    low: &Path,
    id: &str,
    slice_id: &str,
) -> i32 {
    let Some(pid_file) = &inv.pid_file else {
        return 0;
    };
    match bind_created(settings, slice_id, pid_file) {
        Ok(None) => 0,
        Ok(Some(m)) => {
            report(
                inv,
                "warning",
                &format!(
                    "the arbiter does not support bind ({m}); slice \"{slice_id}\" is released at delete only"
                ),
            );
            0
        }
        Err(e) => {
            report(inv, "error", &e.to_string());
            let undo = Command::new(low).args(inv.force_delete_args(id)).status();
            if !undo.is_ok_and(|s| s.success()) {
                report(
                    inv,
                    "warning",
                    &format!(
                        "{} delete --force {id} failed after the bind error",
                        low.display()
                    ),
                );
            }
            1
        }
    }
}

/// `delete`: runs the low-level runtime; when the container owns a slice (its record names the
/// container) and the delete succeeded, releases the slice — the job of the `poststop` hook,
/// without its process. A container without a slice: plain `exec`, nothing else.
fn delete(inv: &Invocation, settings: &Settings, low: &Path) -> i32 {
    let Some(slice_id) = inv
        .container_id
        .as_deref()
        .and_then(|id| owned_slice(&settings.state_dir, id))
    else {
        return exec(inv, low);
    };
    let code = spawn_wait(inv, low);
    if code == 0 {
        let mut w = Vec::new();
        release(settings, &slice_id, &mut w);
        for m in w {
            report(inv, "warning", &m);
        }
    }
    code
}

/// Finds the low-level runtime: a path as given, or a name in `PATH`. Refuses this binary.
fn resolve_low_level(name: &Path) -> Result<PathBuf, String> {
    let found = if name.components().count() > 1 || name.is_absolute() {
        name.is_file().then(|| name.to_path_buf())
    } else {
        std::env::var_os("PATH").and_then(|p| {
            std::env::split_paths(&p)
                .map(|d| d.join(name))
                .find(|c| is_executable(c))
        })
    };
    let Some(path) = found else {
        return Err(format!(
            "low-level runtime \"{}\" not found{} (config key runtime.low_level)",
            name.display(),
            if name.is_absolute() { "" } else { " in PATH" }
        ));
    };
    let me = std::env::current_exe().and_then(std::fs::canonicalize).ok();
    if me.is_some() && std::fs::canonicalize(&path).ok() == me {
        return Err(format!(
            "low-level runtime \"{}\" is gpuslice-runtime itself (config key runtime.low_level)",
            path.display()
        ));
    }
    Ok(path)
}

fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// Replaces this process with the low-level runtime.
fn exec(inv: &Invocation, low: &Path) -> i32 {
    let err = Command::new(low).args(&inv.args).exec();
    fail(inv, &format!("cannot run {}: {err}", low.display()))
}

static CHILD: AtomicI32 = AtomicI32::new(0);

extern "C" fn forward(sig: libc::c_int) {
    let pid = CHILD.load(Ordering::Relaxed);
    if pid > 0 {
        // SAFETY: kill(2) is async-signal-safe; pid is our own child's.
        unsafe {
            libc::kill(pid, sig);
        }
    }
}

/// Runs the low-level runtime as a child (so a failed create can be cleaned up), forwarding
/// signals; returns its exit status (128 + signal when killed).
fn spawn_wait(inv: &Invocation, low: &Path) -> i32 {
    let mut child = match Command::new(low).args(&inv.args).spawn() {
        Ok(c) => c,
        Err(e) => return fail(inv, &format!("cannot run {}: {e}", low.display())),
    };
    CHILD.store(child.id() as i32, Ordering::Relaxed);
    for sig in [
        libc::SIGINT,
        libc::SIGTERM,
        libc::SIGHUP,
        libc::SIGQUIT,
        libc::SIGUSR1,
        libc::SIGUSR2,
        libc::SIGWINCH,
    ] {
        // SAFETY: `forward` only calls the async-signal-safe kill(2); a zeroed sigaction with
        // a handler and an empty mask is a valid argument.
        unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = forward as *const () as usize;
            sa.sa_flags = libc::SA_RESTART;
            libc::sigemptyset(&mut sa.sa_mask);
            libc::sigaction(sig, &sa, std::ptr::null_mut());
        }
    }
    match child.wait() {
        Ok(st) => st.code().unwrap_or_else(|| 128 + st.signal().unwrap_or(0)),
        Err(e) => fail(inv, &format!("waiting for {}: {e}", low.display())),
    }
}
