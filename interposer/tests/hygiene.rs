//! Hygiene checks that need no GPU: `GPUSLICE_LOG` is read once. (No panicking construct in the
//! library's non-test code is a lint: `#![deny(clippy::unwrap_used, …)]` in `src/lib.rs`.)

#[test]
fn log_level_is_read_once() {
    std::env::set_var("GPUSLICE_LOG", "debug");
    assert!(gpuslice::log::enabled(gpuslice::log::Level::Debug));
    std::env::set_var("GPUSLICE_LOG", "off");
    assert!(
        gpuslice::log::enabled(gpuslice::log::Level::Debug),
        "a later change of GPUSLICE_LOG must not be seen"
    );
}
