//! Root-only smoke test with the real runc (ignored by default; the e2e suites in `tests/e2e`
//! own the real-engine checks): `cargo build -p gpuslice-hook && cargo test -p gpuslice-shim
//! --test runc_smoke -- --ignored` as root with `runc` and a static `/bin/busybox`.
//! Shows inside a real container: `limits` and the slice directory are read-only, `usage` is
//! writable, `/etc/ld.so.preload` is merged, `GPUSLICE_SLICE_DIR` is set; and afterwards the
//! slice is gone.

use gpuslice_oci::elf_versions::minimal_elf;
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::process::Command;
use std::sync::{Arc, Mutex};

use gpuslice_arbiter::server::{bind, serve, State};
use gpuslice_arbiter::store::Store;
use gpuslice_arbiter::{DeviceInventory, Policy, StaticInventory};

const BIN: &str = env!("CARGO_BIN_EXE_gpuslice-runtime");

#[test]
#[ignore = "needs root, runc and a static /bin/busybox"]
fn real_runc_sees_read_only_limits_and_writable_usage() {
    let dir = std::env::temp_dir().join(format!("gs-h9-runc-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let state = dir.join("state");
    let bundle = dir.join("bundle");
    std::fs::create_dir_all(bundle.join("rootfs/bin")).unwrap();
    std::fs::create_dir_all(bundle.join("rootfs/etc")).unwrap();
    std::fs::create_dir_all(&state).unwrap();
    std::fs::copy("/bin/busybox", bundle.join("rootfs/bin/busybox")).unwrap();
    for a in ["sh", "cat", "touch"] {
        std::os::unix::fs::symlink("busybox", bundle.join("rootfs/bin").join(a)).unwrap();
    }
    std::fs::write(bundle.join("rootfs/etc/ld.so.preload"), "/lib/image.so\n").unwrap();
    std::fs::write(dir.join("libgpuslice.so"), minimal_elf(62)).unwrap();
    // The create-time check wants a glibc in the image (busybox is static and ignores it).
    std::fs::create_dir_all(bundle.join("rootfs/lib64")).unwrap();
    std::fs::write(bundle.join("rootfs/lib64/libc.so.6"), minimal_elf(62)).unwrap();
    let hook = PathBuf::from(BIN).with_file_name("gpuslice-hook");
    assert!(hook.exists(), "build gpuslice-hook first");
    // The arbiter here has no scheduler, so it creates no region files: a wrapper adds them
    // before runc runs (with a scheduler the arbiter does).
    let low = dir.join("low");
    std::fs::write(
        &low,
        format!(
            "#!/bin/sh\nfor f in limits lease usage; do echo 0 > {}/smoke/$f; done\nexec runc \"$@\"\n",
            state.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&low, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::write(
        dir.join("config.toml"),
        format!(
            "state_dir = \"{}\"\ninterposer = \"{}/libgpuslice.so\"\n[runtime]\nlow_level = \"{}\"\nhook = \"{}\"\n",
            state.display(),
            dir.display(),
            low.display(),
            hook.display()
        ),
    )
    .unwrap();
    let st = Command::new("runc")
        .args(["spec"])
        .current_dir(&bundle)
        .status()
        .unwrap();
    assert!(st.success());
    let mut spec: serde_json::Value =
        serde_json::from_slice(&std::fs::read(bundle.join("config.json")).unwrap()).unwrap();
    spec["process"]["terminal"] = false.into();
    spec["process"]["args"] = serde_json::json!([
        "sh",
        "-c",
        "echo x > /run/gpuslice/limits 2>/dev/null && echo LIMITS_WRITABLE; \
         echo y > /run/gpuslice/usage && echo USAGE_OK; \
         touch /run/gpuslice/new 2>/dev/null && echo DIR_WRITABLE; \
         cat /etc/ld.so.preload; echo \"DIR=$GPUSLICE_SLICE_DIR\""
    ]);
    spec["annotations"] = serde_json::json!({"gpuslice.io/memory": "1Gi"});
    std::fs::write(
        bundle.join("config.json"),
        serde_json::to_vec(&spec).unwrap(),
    )
    .unwrap();

    let devs = StaticInventory::fake(&[("NVIDIA H100 80GB", 80 << 30)])
        .devices()
        .unwrap();
    let (st, _) = State::open(devs, Policy::default(), Store::open(&state).unwrap()).unwrap();
    let st = Arc::new(Mutex::new(st));
    let listener = bind(&state.join("arbiter.sock")).unwrap();
    let s2 = Arc::clone(&st);
    std::thread::spawn(move || serve(listener, s2));

    let out = Command::new(BIN)
        .args(["--root"])
        .arg(dir.join("runc-root"))
        .args(["run", "-b"])
        .arg(&bundle)
        .arg("smoke")
        .env("GPUSLICE_CONFIG", dir.join("config.toml"))
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "stdout:\n{stdout}\nstderr:\n{stderr}");
    assert!(!stdout.contains("LIMITS_WRITABLE"), "{stdout}");
    assert!(!stdout.contains("DIR_WRITABLE"), "{stdout}");
    assert!(stdout.contains("USAGE_OK"), "{stdout}\n{stderr}");
    assert!(
        stdout.contains("/usr/lib/gpuslice/libgpuslice.so\n/lib/image.so\n"),
        "{stdout}"
    );
    assert!(stdout.contains("DIR=/run/gpuslice"), "{stdout}");
    assert_eq!(st.lock().unwrap().admission().status().slices.len(), 0);
    assert!(!state.join("smoke").exists(), "slice directory removed");
    let _ = std::fs::remove_dir_all(&dir);
}
