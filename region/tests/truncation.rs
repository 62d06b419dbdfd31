//! A tenant truncating its writable `usage` file must not kill a reader that maps it (the
//! arbiter, `gpuslice status`): reliability trial 1 (`docs/reliability.md`) found the arbiter
//! dying of SIGBUS. With the guard installed, the pages past the new end read as zeros.
//! The second half runs in a child without the guard, to show the fault is real.

use gpuslice_region::{create_slice, sigbus, DeviceSpec, SliceSpec, Usage};
use std::path::PathBuf;
use std::process::Command;

fn slice_dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("gpuslice-trunc-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("mkdir");
    let spec = SliceSpec {
        devices: vec![DeviceSpec {
            memory_cap: 1 << 30,
            ..DeviceSpec::default()
        }],
        flags: 0,
    };
    create_slice(&d, &spec, false).expect("create");
    d
}

/// Maps `dir/usage` for reading, truncates the file to 64 bytes and reads past the end.
fn read_after_truncation(dir: &std::path::Path) -> (u64, usize) {
    let usage = Usage::open_read_only(dir, 1).expect("map");
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(dir.join("usage"))
        .expect("open");
    f.set_len(64).expect("truncate");
    let used = usage.used(0);
    let live = usage.snapshot(&[1 << 30]).processes.len();
    (used, live)
}

#[test]
fn truncated_usage_reads_as_zeros_with_the_guard() {
    if std::env::var_os("GPUSLICE_TRUNC_CHILD").is_some() {
        // Child without the guard: this read must die of SIGBUS.
        let dir = PathBuf::from(std::env::var("GPUSLICE_TRUNC_CHILD").unwrap());
        let _ = read_after_truncation(&dir);
        return;
    }
    sigbus::install().expect("install");
    let dir = slice_dir("guarded");
    let before = sigbus::repaired();
    assert_eq!(read_after_truncation(&dir), (0, 0));
    assert!(sigbus::repaired() > before, "no fault was repaired");
    // Without the guard the same reads kill the process.
    let dir2 = slice_dir("unguarded");
    let out = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "truncated_usage_reads_as_zeros_with_the_guard"])
        .env("GPUSLICE_TRUNC_CHILD", &dir2)
        .output()
        .unwrap();
    assert_eq!(
        std::os::unix::process::ExitStatusExt::signal(&out.status),
        Some(libc::SIGBUS),
        "{out:?}"
    );
    let _ = std::fs::remove_dir_all(dir);
    let _ = std::fs::remove_dir_all(dir2);
}
