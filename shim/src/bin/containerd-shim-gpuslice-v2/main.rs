//! `containerd-shim-gpuslice-v2`: the containerd shim for `runtime_type =
//! "io.containerd.gpuslice.v2"`. A thin proxy in front of the distribution's
//! `containerd-shim-runc-v2` that edits each container's bundle at `Task.Create`
//! ([`shimv2`]). Reference: `docs/shim.md`.
//!
//! Invocations (flags as containerd passes them, parsed by the `containerd-shim` crate):
//! `start` and `delete` run runc-v2's own subcommand first; `-info` and `-v` are answered by
//! runc-v2; no action with `-socket` is the proxy process `start` spawned.

use std::ffi::OsString;
use std::io::Write;
use std::os::unix::process::CommandExt;
use std::process::Command;

mod shimv2;

use shimv2::{proxy, start, upstream};

const NAME: &str = "containerd-shim-gpuslice-v2";

fn main() {
    let args: Vec<OsString> = std::env::args_os().skip(1).collect();
    std::process::exit(run(&args));
}

fn fail(msg: impl std::fmt::Display) -> i32 {
    let _ = writeln!(std::io::stderr().lock(), "{NAME}: {msg}");
    1
}

fn run(args: &[OsString]) -> i32 {
    let flags = match containerd_shim::parse(args) {
        Ok(f) => f,
        Err(e) => return fail(format_args!("{e}")),
    };
    if flags.version {
        println!("{NAME}:\n  Version:  {}", env!("CARGO_PKG_VERSION"));
        return exec_upstream(args);
    }
    if flags.info {
        return exec_upstream(args);
    }
    match flags.action.as_str() {
        "start" => match start::start(args, &flags) {
            Ok(reply) => {
                let mut out = std::io::stdout().lock();
                match out.write_all(&reply).and_then(|()| out.flush()) {
                    Ok(()) => 0,
                    Err(e) => fail(format_args!("writing the start answer: {e}")),
                }
            }
            Err(e) => fail(e),
        },
        "delete" => match start::delete(args, &flags) {
            Ok(code) => code,
            Err(e) => fail(e),
        },
        "" if !flags.socket.is_empty() => match proxy::serve(&flags.socket) {
            Ok(()) => 0,
            Err(e) => {
                proxy::log(format_args!("{e}"));
                fail(e)
            }
        },
        "" => fail("no action (expected start or delete)"),
        other => fail(format_args!(
            "unknown action {other:?} (expected start or delete)"
        )),
    }
}

/// Replaces this process with runc-v2, same arguments.
fn exec_upstream(args: &[OsString]) -> i32 {
    match upstream::find() {
        Ok(p) => {
            let e = Command::new(&p).args(args).exec();
            fail(format_args!("cannot run {}: {e}", p.display()))
        }
        Err(e) => fail(e),
    }
}
