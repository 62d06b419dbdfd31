//! The engine timeline of a simulated node, for diagnosis (`GPUSLICE_SIM_TRACE=<file>`): every
//! process of the node appends one line per event to the same file, CLOCK_MONOTONIC
//! nanoseconds (the clock the arbiter's scheduler events carry too, so the two line up):
//!
//! * `run <pid> <dev> <from> <to>`: the engine of `dev` ran a kernel of `pid` from `from` to
//!   `to` (the kernel engine: one per kernel; the time-sliced engine: one per stretch between
//!   switches, written by whichever process commits that part of the schedule);
//! * `kernel <pid> <dev> <ready> <start> <end>`: a kernel of `pid` became ready (enqueued, or
//!   its stream predecessor ended), started and ended (written by its own process when it ends).
//!
//! Each line is one `write(2)` on a file opened with `O_APPEND`, so lines of different
//! processes do not interleave. Off unless the variable is set; it costs a system call per
//! kernel, which the timings of a traced run include.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::Path;

use crate::error::SimError;

/// The open trace file of this process.
#[derive(Debug)]
pub(crate) struct Trace(File);

impl Trace {
    /// Opens (creating it) `path` for appending.
    pub(crate) fn open(path: &Path) -> Result<Trace, SimError> {
        OpenOptions::new()
            .append(true)
            .create(true)
            .open(path)
            .map(Trace)
            .map_err(|e| SimError::Config(format!("GPUSLICE_SIM_TRACE={}: {e}", path.display())))
    }

    /// `run <pid> <dev> <from> <to>`.
    pub(crate) fn run(&self, pid: u32, dev: usize, from: u64, to: u64) {
        self.line(format_args!("run {pid} {dev} {from} {to}\n"));
    }

    /// `kernel <pid> <dev> <ready> <start> <end>`.
    pub(crate) fn kernel(&self, pid: u32, dev: usize, ready: u64, start: u64, end: u64) {
        self.line(format_args!("kernel {pid} {dev} {ready} {start} {end}\n"));
    }

    fn line(&self, args: std::fmt::Arguments<'_>) {
        // One write per line (O_APPEND: whole lines, whatever other processes write); a
        // failed write loses a line of a diagnostic, nothing else.
        let _ = (&self.0).write_all(args.to_string().as_bytes());
    }
}
