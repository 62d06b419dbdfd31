//! The suites' one scratch directory, from the test support crate (`gpuslice_test_support::scratch`),
//! under the path the e2e modules name it by.

pub use gpuslice_test_support::scratch::{
    detach_mounts_below, mounts_below, unescape_mount, Scratch,
};
