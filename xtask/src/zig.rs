//! The glibc floor of everything gpuslice ships: every ELF of the dist tree (and of the trees
//! built from it: the .deb, the node image, the gpu-kit) is linked by zig against glibc 2.17
//! stubs through `cargo zigbuild`, so it loads on any glibc since 2.17 (the manylinux2014
//! baseline: RHEL/CentOS 7 and 8, Ubuntu 18.04+, Debian 10+, Amazon Linux 2, UBI 8). An ELF
//! built on the host would need the host's glibc (2.34+ on Debian 12). The tools are pinned in
//! `xtask/zig-requirements.txt` and installed (binary wheels) into `<target>/zig/venv`; the
//! floor is checked on the result by [`crate::elf_floor`].

use crate::clients::pinned_venv;
use crate::shell::{cargo, root, target_dir};
use anyhow::Result;
use std::path::PathBuf;
use std::process::Command;

/// The Rust target of every shipped build.
pub const TARGET: &str = "x86_64-unknown-linux-gnu";

/// The same target with the glibc version cargo-zigbuild links against.
pub const TARGET_FLOOR: &str = "x86_64-unknown-linux-gnu.2.17";

/// Where `cargo zigbuild --target …` leaves profile `profile`'s output.
pub fn out_dir(profile: &str) -> PathBuf {
    target_dir().join(TARGET).join(profile)
}

/// `cargo zigbuild --profile <profile> --target <TARGET_FLOOR>`, its tools installed first.
pub fn build(profile: &str) -> Result<Command> {
    let venv = target_dir().join("zig/venv");
    pinned_venv(&venv, &root().join("xtask/zig-requirements.txt"))?;
    let bin = venv.join("bin");
    // The venv's python3 comes first: cargo-zigbuild finds zig as `python3 -m ziglang`.
    let path = std::env::var_os("PATH").unwrap_or_default();
    let mut paths = vec![bin.clone()];
    paths.extend(std::env::split_paths(&path));
    let mut cmd = cargo();
    cmd.env("PATH", std::env::join_paths(paths)?).args([
        "zigbuild",
        "--profile",
        profile,
        "--target",
        TARGET_FLOOR,
    ]);
    Ok(cmd)
}
