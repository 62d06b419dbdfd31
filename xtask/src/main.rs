//! `cargo xtask`: the project's build, test, benchmark and demo entry points.
//!
//! - `dist` lays out `target/dist/` exactly as the design brief names it.
//! - `package` builds the Debian package from that tree into `target/packages/`.
//! - `test [SUITE…]` runs suites (all by default) and ends with one `suites: N passed, N failed` line;
//!   `test --list` names them.
//! - `bench NAME` runs a benchmark that prints ratios measured side by side in one run.
//! - `demo` runs the main story on the simulated GPU (or the real one when a driver is present).
//! - `fuzz [--time SECS] [TARGET…]` runs the cargo-fuzz targets in `fuzz/` (`docs/fuzzing.md`).
//! - `gpu-kit [--sim]` builds the small tree that travels to the real-GPU machine.
//! - `gen-procaddr DIR…` regenerates the `cuGetProcAddress` table from CUDA headers.

#[cfg(test)]
mod arch_doc;
mod bench;
mod clients;
mod demo;
mod dist;
mod elf_floor;
mod fuzz;
mod gen_procaddr;
mod gpu_kit;
mod image;
mod package;
mod shell;
mod suites;
mod zig;

use anyhow::Result;
use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "cargo xtask",
    about = "gpuslice build, test, bench and demo entry points"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Build release binaries (linked against glibc 2.17 by zig) and lay out target/dist/
    /// (usr/bin, usr/lib/gpuslice, sim/).
    Dist,
    /// Check that no ELF file under DIR needs a glibc symbol version above 2.17 (the floor
    /// `cargo xtask test dist` holds target/dist to).
    ElfFloor {
        /// The tree to check.
        dir: std::path::PathBuf,
    },
    /// Build the node image (packaging/kubernetes) as an OCI archive: a base image's OCI
    /// layout plus the dist tree's usr/bin and usr/lib/gpuslice, no container engine needed.
    Image {
        /// The base image as an OCI layout directory (`skopeo copy docker://… oci:DIR`).
        #[arg(long)]
        base: std::path::PathBuf,
        /// The dist tree [default: target/dist, from `cargo xtask dist`].
        #[arg(long)]
        dist: Option<std::path::PathBuf>,
        /// The archive to write [default: target/gpuslice-image.tar].
        #[arg(long)]
        out: Option<std::path::PathBuf>,
        /// The reference name in the archive's index.
        #[arg(long, default_value = env!("CARGO_PKG_VERSION"))]
        tag: String,
    },
    /// Build the Debian package gpuslice_<version>_<arch>.deb into <target>/packages/.
    Package {
        /// Use this dist tree instead of building one with `cargo xtask dist`.
        #[arg(long)]
        dist: Option<std::path::PathBuf>,
    },
    /// Run test suites (all when none is named).
    Test {
        /// List the suites and what each covers, then exit.
        #[arg(long)]
        list: bool,
        /// Suites to run, in order.
        suites: Vec<String>,
    },
    /// Run one benchmark (`cargo xtask bench --list` names them).
    Bench {
        /// List benchmarks and exit.
        #[arg(long)]
        list: bool,
        /// Benchmark name.
        name: Option<String>,
        /// Extra arguments passed to the benchmark.
        #[arg(trailing_var_arg = true)]
        args: Vec<String>,
    },
    /// Run the demo on the simulated GPU (or the real one when an NVIDIA driver is present).
    Demo {
        /// Force the simulated GPU even when a driver is present.
        #[arg(long)]
        sim: bool,
    },
    /// Run the cargo-fuzz targets in fuzz/ (all when none is named) for a set time each.
    Fuzz {
        /// Seconds per target.
        #[arg(long, default_value_t = fuzz::DEFAULT_SECS)]
        time: u64,
        /// cargo-fuzz sanitizer: address or none.
        #[arg(long, default_value = "address")]
        sanitizer: String,
        /// Targets to run, in order.
        targets: Vec<String>,
    },
    /// Build the real-GPU kit's travelling tree, target/gpu-kit/tree (stripped, < 32 MiB).
    GpuKit {
        /// Include the simulated GPU (for the dry run).
        #[arg(long)]
        sim: bool,
    },
    /// Regenerate abi/src/procaddr_table.rs from CUDA include directories (cudaTypedefs.h, cuda.h).
    GenProcaddr {
        /// Include directories, e.g. the 12.9 and 13.0 runtime wheels' `include/`.
        #[arg(required = true)]
        dirs: Vec<std::path::PathBuf>,
    },
}

fn main() {
    if let Err(e) = run(Cli::parse()) {
        eprintln!("xtask: {e:#}");
        std::process::exit(1);
    }
}

fn run(cli: Cli) -> Result<()> {
    match cli.command {
        Command::Dist => dist::run().map(|_| ()),
        Command::ElfFloor { dir } => elf_floor::check(&dir, &dir.display().to_string()),
        Command::Package { dist } => package::run(dist.as_deref()).map(|_| ()),
        Command::Image {
            base,
            dist,
            out,
            tag,
        } => image::run(&image::Options {
            base,
            dist: dist.unwrap_or_else(|| shell::target_dir().join("dist")),
            out: out.unwrap_or_else(|| shell::target_dir().join("gpuslice-image.tar")),
            tag,
        }),
        Command::Test { list, suites } => suites::run(list, &suites),
        Command::Bench { list, name, args } => bench::run(list, name.as_deref(), &args),
        Command::Demo { sim } => demo::run(sim),
        Command::Fuzz {
            time,
            sanitizer,
            targets,
        } => fuzz::run(&fuzz::Options {
            secs: time,
            targets,
            sanitizer,
        }),
        Command::GpuKit { sim } => gpu_kit::prepare(sim).map(|_| ()),
        Command::GenProcaddr { dirs } => gen_procaddr::run(&shell::root(), &dirs),
    }
}
