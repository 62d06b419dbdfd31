//! `gpuslice-workload`: reaches the driver through `dlsym` or `cuGetProcAddress_v2`.

use clap::Parser;
use gpuslice_workloads::cli::{self, Args};

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let drv = cli::load(&args)?;
    cli::run(args, drv)
}
