//! `gpuslice cdi generate` against a fake driver root and dev root with real character device
//! nodes (mknod: needs root; under `CI=true` a non-root run fails, else it skips loudly).

use std::ffi::CString;
use std::path::{Path, PathBuf};

use gpuslice_cdi::{build, generate, ldcache, Format, Gpu, Options};

fn root_or_skip(test: &str) -> bool {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        return true;
    }
    let ci = std::env::var("CI").is_ok_and(|v| v == "true");
    assert!(
        !ci,
        "{test}: needs root (mknod) and CI=true forbids skipping"
    );
    eprintln!("\n\n*** SKIPPED {test}: needs root to mknod device nodes ***\n");
    false
}

fn mknod(path: &Path, major: u32, minor: u32) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    let c = CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: a valid NUL-terminated path; mknod has no memory preconditions.
    let rc = unsafe {
        libc::mknod(
            c.as_ptr(),
            libc::S_IFCHR | 0o666,
            libc::makedev(major, minor),
        )
    };
    assert_eq!(
        rc,
        0,
        "mknod {}: {}",
        path.display(),
        std::io::Error::last_os_error()
    );
}

struct Fake {
    root: PathBuf,
    opts: Options,
    gpus: Vec<Gpu>,
}

impl Drop for Fake {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

const LIB: &str = "/usr/lib/x86_64-linux-gnu";

fn fake(tag: &str) -> Fake {
    let root = std::env::temp_dir().join(format!("gs-cdi-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    let drv = root.join("driver");
    let dev = root.join("dev");
    for g in 0..2 {
        mknod(&dev.join(format!("nvidia{g}")), 195, g);
    }
    mknod(&dev.join("nvidiactl"), 195, 255);
    mknod(&dev.join("nvidia-uvm"), 510, 0);
    mknod(&dev.join("nvidia-uvm-tools"), 510, 1);
    mknod(&dev.join("nvidia-caps/nvidia-cap1"), 234, 1);
    // nvidia-modeset absent: it is optional. A regular file named like a node is ignored.
    std::fs::write(dev.join("nvidia-modeset"), "not a node").unwrap();
    let libs = [
        "libcuda.so.1",
        "libnvidia-ml.so.1",
        "libnvidia-ptxjitcompiler.so.1",
        "libc.so.6",
    ];
    std::fs::create_dir_all(drv.join(&LIB[1..])).unwrap();
    for l in libs {
        std::fs::write(drv.join(&LIB[1..]).join(l), "ELF").unwrap();
    }
    let mut entries: Vec<(String, String, i32)> = libs
        .iter()
        .map(|l| (l.to_string(), format!("{LIB}/{l}"), 0x0303))
        .collect();
    // A 32-bit libcuda must not be mounted; neither must a cache entry whose file is gone.
    entries.push((
        "libcuda.so.1".into(),
        "/usr/lib/i386-linux-gnu/libcuda.so.1".into(),
        0x0003,
    ));
    entries.push((
        "libnvidia-gone.so.1".into(),
        format!("{LIB}/libnvidia-gone.so.1"),
        0x0303,
    ));
    let refs: Vec<(&str, &str, i32)> = entries
        .iter()
        .map(|(a, b, c)| (a.as_str(), b.as_str(), *c))
        .collect();
    std::fs::create_dir_all(drv.join("etc")).unwrap();
    std::fs::write(drv.join("etc/ld.so.cache"), ldcache::encode(&refs)).unwrap();
    std::fs::create_dir_all(drv.join("usr/bin")).unwrap();
    std::fs::write(drv.join("usr/bin/nvidia-smi"), "#!/bin/sh\n").unwrap();
    let bin = root.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    std::fs::write(bin.join("libgpuslice.so"), "so").unwrap();
    std::fs::write(bin.join("gpuslice-hook"), "hook").unwrap();
    let opts = Options {
        driver_root: drv,
        dev_root: dev,
        interposer: bin.join("libgpuslice.so"),
        preload_file: bin.join("ld.so.preload"),
        hook: bin.join("gpuslice-hook"),
        state_dir: "/run/gpuslice".into(),
        config: None,
    };
    let gpus = (0..2)
        .map(|i| Gpu {
            index: i,
            uuid: format!("GPU-0000000{i}-aaaa-bbbb-cccc-dddddddddddd"),
            minor: i,
        })
        .collect();
    Fake { root, opts, gpus }
}

#[test]
fn spec_has_nodes_libraries_interposer_hooks_and_lowest_version() {
    if !root_or_skip("spec_has_nodes_libraries_interposer_hooks_and_lowest_version") {
        return;
    }
    let f = fake("spec");
    let out = f.root.join("cdi/gpuslice.yaml");
    let text = generate(&f.opts, &f.gpus, Format::Json, &out.with_extension("json")).unwrap();
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    println!("{text}");
    // Device names start with a digit and nodes carry hostPath: 0.5.0 is needed, no more.
    assert_eq!(v["cdiVersion"], "0.5.0");
    assert_eq!(v["kind"], "gpuslice.io/gpu");
    let names: Vec<&str> = v["devices"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "0",
            "GPU-00000000-aaaa-bbbb-cccc-dddddddddddd",
            "1",
            "GPU-00000001-aaaa-bbbb-cccc-dddddddddddd",
            "all"
        ]
    );
    let d1 = &v["devices"][2]["containerEdits"];
    assert_eq!(d1["deviceNodes"][0]["path"], "/dev/nvidia1");
    assert_eq!(d1["deviceNodes"][0]["major"], 195);
    assert_eq!(d1["deviceNodes"][0]["minor"], 1);
    assert_eq!(
        d1["env"][0],
        "GPUSLICE_CDI_GPU_1=GPU-00000001-aaaa-bbbb-cccc-dddddddddddd"
    );
    assert_eq!(
        v["devices"][4]["containerEdits"]["deviceNodes"]
            .as_array()
            .unwrap()
            .len(),
        2
    );
    let common = &v["containerEdits"];
    let nodes: Vec<&str> = common["deviceNodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["path"].as_str().unwrap())
        .collect();
    assert_eq!(
        nodes,
        [
            "/dev/nvidiactl",
            "/dev/nvidia-uvm",
            "/dev/nvidia-uvm-tools",
            "/dev/nvidia-caps/nvidia-cap1"
        ]
    );
    assert_eq!(common["deviceNodes"][1]["major"], 510);
    let mounts: Vec<(&str, &str)> = common["mounts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            (
                m["containerPath"].as_str().unwrap(),
                m["hostPath"].as_str().unwrap(),
            )
        })
        .collect();
    let cpaths: Vec<&str> = mounts.iter().map(|m| m.0).collect();
    assert_eq!(
        cpaths,
        [
            "/usr/lib/x86_64-linux-gnu/libcuda.so.1",
            "/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1",
            "/usr/lib/x86_64-linux-gnu/libnvidia-ptxjitcompiler.so.1",
            "/usr/bin/nvidia-smi",
            "/usr/lib/gpuslice/libgpuslice.so",
            "/etc/ld.so.preload",
        ]
    );
    assert!(mounts[0]
        .1
        .starts_with(f.opts.driver_root.to_str().unwrap()));
    // The interposer read-only but executable, the preload file not: the options the OCI
    // rendering of a slice's container writes too (`gpuslice_cdi::container`).
    assert_eq!(
        common["mounts"][4]["options"],
        serde_json::json!(["bind", "ro", "nosuid", "nodev"])
    );
    assert_eq!(
        common["mounts"][5]["options"],
        serde_json::json!(["bind", "ro", "nosuid", "nodev", "noexec"])
    );
    let hooks = common["hooks"].as_array().unwrap();
    assert_eq!(hooks[0]["hookName"], "createRuntime");
    assert_eq!(hooks[1]["hookName"], "poststop");
    let args: Vec<&str> = hooks[0]["args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap())
        .collect();
    assert_eq!(
        args,
        [
            "gpuslice-hook",
            "--state-dir",
            "/run/gpuslice",
            "--standalone",
            "create-runtime"
        ]
    );
    assert_eq!(
        std::fs::read_to_string(&f.opts.preload_file).unwrap(),
        "/usr/lib/gpuslice/libgpuslice.so\n"
    );
    // Written atomically: no temporary file left beside it.
    let left: Vec<_> = std::fs::read_dir(out.parent().unwrap())
        .unwrap()
        .flatten()
        .map(|e| e.file_name())
        .collect();
    assert_eq!(left, [std::ffi::OsString::from("gpuslice.json")]);
}

#[test]
fn yaml_is_written_and_reads_back_as_the_same_spec() {
    if !root_or_skip("yaml_is_written_and_reads_back_as_the_same_spec") {
        return;
    }
    let f = fake("yaml");
    let out = f.root.join("cdi/gpuslice.yaml");
    let text = generate(&f.opts, &f.gpus, Format::Yaml, &out).unwrap();
    assert_eq!(std::fs::read_to_string(&out).unwrap(), text);
    assert!(text.contains("cdiVersion: 0.5.0"), "{text}");
    // The crate's own reader accepts the file.
    let spec = container_device_interface::spec::read_spec(&out, 0).unwrap();
    assert_eq!(spec.get_devices().len(), 5);
    assert_eq!(spec.get_class(), "gpu");
}

#[test]
fn nodes_at_their_real_path_need_no_host_path_and_a_lower_version() {
    if !root_or_skip("nodes_at_their_real_path_need_no_host_path_and_a_lower_version") {
        return;
    }
    // With names that start with a letter and nodes at /dev, 0.3.0 suffices: the version
    // really is computed, not fixed. (Index names "0" force 0.5.0 in practice.)
    let f = fake("ver");
    let mut s = build(&f.opts, &f.gpus).unwrap();
    s.devices
        .retain(|d| d.name.starts_with('G') || d.name == "all");
    for e in std::iter::once(&mut s.container_edits)
        .chain(s.devices.iter_mut().map(|d| &mut d.container_edits))
    {
        for n in &mut e.device_nodes {
            n.host_path = None;
        }
    }
    s.set_lowest_version().unwrap();
    assert_eq!(s.cdi_version, "0.3.0");
}

#[test]
fn missing_pieces_are_named() {
    if !root_or_skip("missing_pieces_are_named") {
        return;
    }
    let f = fake("missing");
    let mut o = f.opts.clone();
    o.dev_root = f.root.join("nodev");
    let e = build(&o, &f.gpus).unwrap_err().to_string();
    assert!(
        e.contains("nodev/nvidiactl is not a character device"),
        "{e}"
    );
    let mut gpus = f.gpus.clone();
    gpus[1].minor = 7;
    let e = build(&f.opts, &gpus).unwrap_err().to_string();
    assert!(e.contains("GPU 1") && e.contains("nvidia7"), "{e}");
    let mut o = f.opts.clone();
    o.driver_root = f.root.join("nodriver");
    let e = build(&o, &f.gpus).unwrap_err().to_string();
    assert!(e.contains("ld.so.cache"), "{e}");
    let mut o = f.opts.clone();
    o.interposer = f.root.join("none.so");
    let e = build(&o, &f.gpus).unwrap_err().to_string();
    assert!(e.contains("interposer") && e.contains("none.so"), "{e}");
    assert!(build(&f.opts, &[])
        .unwrap_err()
        .to_string()
        .contains("no GPUs"));
    // Nothing written on failure.
    let out = f.root.join("cdi/x.yaml");
    assert!(generate(&o, &f.gpus, Format::Yaml, &out).is_err());
    assert!(!out.exists());
}
