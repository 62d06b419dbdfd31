//! `gpuslice-workload-linked`: the same workloads, with the driver linked at build time
//! (`DT_NEEDED libcuda.so.1`), as programs built with `-lcuda` are.

use clap::Parser;
use gpuslice_workloads::cli::{self, Args};
use gpuslice_workloads::driver::Driver;

#[allow(
    clippy::missing_safety_doc,
    dead_code,
    clippy::undocumented_unsafe_blocks
)]
mod linked {
    include!(concat!(env!("OUT_DIR"), "/linked.rs"));
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    // SAFETY: each address is the linked driver export of that name, whose C signature is the one
    // the driver table declares for it.
    let drv = unsafe {
        Driver::resolve(|_, export| {
            linked::lookup(export)
                .ok_or_else(|| anyhow::anyhow!("{export} is not linked into this binary"))
        })
    }?;
    cli::run(args, drv)
}
