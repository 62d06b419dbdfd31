//! Harness for the end-to-end suites (`tests/e2e/tests/*.rs`): real engines, run as root.
//!
//! This crate is test support only (never shipped), so it reports errors with `anyhow`.
//! The pieces:
//! - [`gate`]: may this suite run here? (root, engines, dist tree; `CI=true` turns a skip into a failure)
//! - [`paths`]: the workspace, the dist tree, the engines' binaries
//! - [`scratch`]: per-test temporary directories, removed safely (never through a mount)
//! - [`procs`]: child processes and descendants (the test process is a child subreaper)
//! - [`daemon`]: a daemon started by a test, stopped by PID when dropped
//! - [`snapshot`]: "nothing left behind": state directory, mount table, descendant processes
//! - [`sim`]: the simulated GPU node seen from the host and from containers
//! - [`image`]: the test root filesystem, OCI archive and Docker import tarball
//! - [`runc`], [`containerd`], [`docker`]: one engine each; the arbiter is
//!   [`gpuslice_test_support::Arbiter`] (the harness the other suites share), started on a node by
//!   [`suite::Node::start_arbiter`]
//! - [`suite`]: shared set-up and assertions of the suites
//! - [`cri`], [`proto`]: a minimal CRI (gRPC) client for the Pod path
//! - [`shimv2`]: containerd-shim-gpuslice-v2 set-up (runtime class, PATH, `ctr run --runtime`)
//! - [`workload`]: running `gpuslice-workload` and reading its `key=value` output
//! - [`package`]: the Debian package on a clean (debootstrap) root
//! - [`stock`]: stock containerd configurations made runnable here, one-container Pods

pub mod cdi;
pub mod containerd;
pub mod cri;
pub mod daemon;
pub mod docker;
pub mod gate;
pub mod image;
pub mod metrics;
pub mod package;
pub mod paths;
pub mod pod;
pub mod podman;
pub mod procs;
pub mod proto;
pub mod runc;
pub mod scratch;
pub mod shimv2;
pub mod sim;
pub mod snapshot;
pub mod static_image;
pub mod stock;
pub mod suite;
pub mod workload;

pub use gpuslice_test_support::Arbiter;

/// One GiB, the cap most suites ask for.
pub const GIB: u64 = 1 << 30;
