//! The per-claim CDI spec as `CdiDir` writes it, on a fake driver root and dev root with real
//! character device nodes (`mknod`: needs root; under `CI=true` a non-root run fails, else it
//! skips loudly): the file parses with the `container-device-interface` crate as kind
//! `gpuslice.io/claim` with one device named by the claim's UID, and carries the slice mount,
//! the interposer and preload mounts, the env and exactly the allocated GPU's device nodes. A
//! failed write leaves no spec (nor temporary file), and through the driver no slice or
//! checkpoint entry either.

mod common;

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

use common::{gpus, ClaimSpec, FakeArbiter, GI, NODE};
use gpuslice_admission::fit::Policy;
use gpuslice_cdi::{ldcache, Options};
use gpuslice_kubelet_plugin::capacity::PublishPolicy;
use gpuslice_kubelet_plugin::dra::cdi::{CdiDir, ClaimCdi};
use gpuslice_kubelet_plugin::dra::checkpoint;
use gpuslice_kubelet_plugin::dra::claim::{ClaimRef, MemoryClaims};
use gpuslice_kubelet_plugin::dra::driver::{Driver, Parts};
use gpuslice_kubelet_plugin::gpu::StaticGpus;
use gpuslice_oci::edit::{apply, Plan, CONTAINER_SLICE_DIR};
use gpuslice_oci::spec::SpecDoc;
use serde_json::Value;

const UID: &str = "3f2e1d0c-0000-4000-8000-00000000cd01";
const LIB: &str = "usr/lib/x86_64-linux-gnu";

fn root_or_skip(test: &str) -> bool {
    if std::fs::metadata("/proc/self").map(|m| m.uid()).ok() == Some(0) {
        return true;
    }
    assert!(
        std::env::var("CI").as_deref() != Ok("true"),
        "{test}: needs root (mknod) and CI=true forbids skipping"
    );
    eprintln!("\n\n*** SKIPPED {test}: needs root to mknod device nodes ***\n");
    false
}

/// A character device node (coreutils' mknod).
fn mknod(path: &Path, major: u32, minor: u32) {
    let st = Command::new("mknod")
        .arg(path)
        .args(["c", &major.to_string(), &minor.to_string()])
        .status()
        .unwrap();
    assert!(st.success(), "mknod {}", path.display());
}

/// A scratch tree: `dev/` (nvidia0, nvidia1, nvidiactl, nvidia-uvm, nvidia-modeset), `driver/` (libcuda and
/// libnvidia-ml in a loader cache), `bin/` (interposer, hook), `cdi/`, `slice/`.
struct Fake {
    root: PathBuf,
    options: Options,
}

impl Drop for Fake {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

fn fake(tag: &str) -> Fake {
    let root = std::env::temp_dir().join(format!("gs-kp-cdi-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    let dev = root.join("dev");
    std::fs::create_dir_all(&dev).unwrap();
    for (name, major, minor) in [
        ("nvidia0", 195, 0),
        ("nvidia1", 195, 1),
        ("nvidiactl", 195, 255),
        ("nvidia-uvm", 510, 0),
        ("nvidia-modeset", 195, 254),
    ] {
        mknod(&dev.join(name), major, minor);
    }
    let drv = root.join("driver");
    std::fs::create_dir_all(drv.join(LIB)).unwrap();
    std::fs::create_dir_all(drv.join("etc")).unwrap();
    let libs = ["libcuda.so.1", "libnvidia-ml.so.1"];
    for l in libs {
        std::fs::write(drv.join(LIB).join(l), "ELF").unwrap();
    }
    let entries: Vec<(String, String)> = libs
        .iter()
        .map(|l| (l.to_string(), format!("/{LIB}/{l}")))
        .collect();
    let refs: Vec<(&str, &str, i32)> = entries
        .iter()
        .map(|(a, b)| (a.as_str(), b.as_str(), 0x0303))
        .collect();
    std::fs::write(drv.join("etc/ld.so.cache"), ldcache::encode(&refs)).unwrap();
    let bin = root.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    std::fs::write(bin.join("libgpuslice.so"), "so").unwrap();
    std::fs::write(bin.join("gpuslice-hook"), "hook").unwrap();
    std::fs::create_dir_all(root.join("slice")).unwrap();
    let options = Options {
        driver_root: drv,
        dev_root: dev,
        interposer: bin.join("libgpuslice.so"),
        preload_file: bin.join("ld.so.preload"),
        hook: bin.join("gpuslice-hook"),
        state_dir: root.join("state"),
        config: None,
    };
    Fake { root, options }
}

impl Fake {
    fn cdi(&self) -> CdiDir {
        CdiDir {
            dir: self.root.join("cdi"),
            options: self.options.clone(),
            node_spec: None,
        }
    }
}

fn files(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

#[test]
fn cdi_dir_writes_a_spec_the_cdi_crate_reads_with_mounts_env_preload_and_nodes() {
    if !root_or_skip("cdi_dir_writes_a_spec_the_cdi_crate_reads_with_mounts_env_preload_and_nodes")
    {
        return;
    }
    let f = fake("spec");
    let cdi = f.cdi();
    let gpu = gpus().remove(1); // minor 1
    let slice = f.root.join("slice");
    let ids = cdi.write(UID, &gpu, &slice).unwrap();
    assert_eq!(ids, [format!("gpuslice.io/claim={UID}")]);
    let path = cdi.path(UID);
    assert_eq!(
        files(&f.root.join("cdi")),
        [format!("gpuslice.io-claim_{UID}.yaml")]
    );

    // The CDI crate's own reader accepts it: vendor gpuslice.io, class claim, one device.
    let spec = container_device_interface::spec::read_spec(&path, 0).unwrap();
    assert_eq!(spec.get_vendor(), "gpuslice.io");
    assert_eq!(spec.get_class(), "claim");
    let names: Vec<String> = spec
        .get_devices()
        .values()
        .map(|d| d.get_qualified_name())
        .collect();
    assert_eq!(names, [format!("gpuslice.io/claim={UID}")]);

    // Its content, field by field.
    let v: Value = serde_yaml_ng::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    let dev = &v["devices"][0];
    assert_eq!(dev["name"], UID);
    let edits = &dev["containerEdits"];
    let mounts: Vec<(String, String, Vec<String>)> = edits["mounts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            (
                m["hostPath"].as_str().unwrap().to_string(),
                m["containerPath"].as_str().unwrap().to_string(),
                m["options"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|o| o.as_str().unwrap().to_string())
                    .collect(),
            )
        })
        .collect();
    let mount = |container: &str| {
        mounts
            .iter()
            .find(|m| m.1 == container)
            .unwrap_or_else(|| panic!("no mount at {container}: {mounts:?}"))
            .clone()
    };
    let s = mount(CONTAINER_SLICE_DIR);
    assert_eq!(s.0, slice.display().to_string());
    assert!(s.2.contains(&"ro".to_string()), "{s:?}");
    let u = mount(&format!("{CONTAINER_SLICE_DIR}/usage"));
    assert_eq!(u.0, slice.join("usage").display().to_string());
    assert!(u.2.contains(&"rw".to_string()), "{u:?}");
    let i = mount("/usr/lib/gpuslice/libgpuslice.so");
    assert_eq!(i.0, f.options.interposer.display().to_string());
    let p = mount("/etc/ld.so.preload");
    assert_eq!(p.0, f.options.preload_file.display().to_string());
    mount(&format!("/{LIB}/libcuda.so.1"));
    mount(&format!("/{LIB}/libnvidia-ml.so.1"));
    // The preload file it names holds the interposer's container path.
    assert_eq!(
        std::fs::read_to_string(&f.options.preload_file).unwrap(),
        gpuslice_cdi::preload_content()
    );
    let env: Vec<&str> = edits["env"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e.as_str().unwrap())
        .collect();
    assert!(env.contains(&"GPUSLICE_SLICE_DIR=/run/gpuslice"), "{env:?}");
    let visible = format!("CUDA_VISIBLE_DEVICES={}", gpu.info.uuid);
    assert!(env.contains(&visible.as_str()), "{env:?}");
    let nodes: Vec<&str> = edits["deviceNodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["path"].as_str().unwrap())
        .collect();
    for n in ["/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia1"] {
        assert!(nodes.contains(&n), "{n} missing: {nodes:?}");
    }
    assert!(
        !nodes.contains(&"/dev/nvidia0"),
        "another GPU's node: {nodes:?}"
    );
    // The slice already exists (it belongs to the claim): no hooks.
    assert!(
        edits["hooks"].as_array().is_none_or(|h| h.is_empty()),
        "{edits}"
    );

    // Removed, and removing again is fine.
    cdi.remove(UID).unwrap();
    cdi.remove(UID).unwrap();
    assert!(files(&f.root.join("cdi")).is_empty());
}

#[test]
fn cdi_dir_a_failed_write_leaves_nothing() {
    if !root_or_skip("cdi_dir_a_failed_write_leaves_nothing") {
        return;
    }
    let f = fake("fail");
    let cdi = f.cdi();
    let gpu = gpus().remove(0);
    // The spec's name is taken by a directory: the final rename fails.
    let blocker = cdi.path(UID);
    std::fs::create_dir_all(&blocker).unwrap();
    let err = cdi
        .write(UID, &gpu, &f.root.join("slice"))
        .unwrap_err()
        .to_string();
    assert!(err.contains(&blocker.display().to_string()), "{err}");
    assert_eq!(
        files(&f.root.join("cdi")),
        [format!("gpuslice.io-claim_{UID}.yaml")],
        "a temporary file was left"
    );
    std::fs::remove_dir(&blocker).unwrap();
    // The GPU's device node is missing: named, nothing written.
    std::fs::remove_file(f.options.dev_root.join("nvidia0")).unwrap();
    let err = cdi
        .write(UID, &gpu, &f.root.join("slice"))
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("nvidia0") && err.contains("not a character device"),
        "{err}"
    );
    assert!(files(&f.root.join("cdi")).is_empty());
}

#[test]
fn cdi_dir_through_the_driver_a_failed_spec_undoes_the_slice_and_the_entry() {
    if !root_or_skip("cdi_dir_through_the_driver_a_failed_spec_undoes_the_slice_and_the_entry") {
        return;
    }
    let f = fake("driver");
    let cdi = f.cdi();
    let arbiter = Arc::new(FakeArbiter::new(Policy::default(), &f.root.join("state")));
    let claims = Arc::new(MemoryClaims::default());
    claims.put(ClaimSpec::new(UID, "gpu-0", 16 * GI, 40).build());
    let cp = f.root.join("plugin").join(checkpoint::FILE);
    let driver = Driver::new(Parts {
        node: NODE.into(),
        gpus: Arc::new(StaticGpus(gpus())),
        policy: Policy::default(),
        publish: PublishPolicy::default(),
        claims,
        arbiter: arbiter.clone(),
        cdi: Arc::new(cdi.clone()),
        checkpoint: cp.clone(),
    })
    .unwrap();
    let c = ClaimRef {
        namespace: "default".into(),
        name: UID.into(),
        uid: UID.into(),
    };
    // The allocated GPU's device node is missing (driver reloading): the spec cannot be built.
    let node0 = f.options.dev_root.join("nvidia0");
    std::fs::remove_file(&node0).unwrap();
    let err = driver.prepare(std::slice::from_ref(&c))[UID]
        .clone()
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("device gpu-0: CDI spec")
            && err.contains("nvidia0")
            && err.contains("nothing was left behind"),
        "{err}"
    );
    assert!(arbiter.slices().is_empty());
    assert!(driver.checkpoint().claims.is_empty());
    assert!(files(&f.root.join("cdi")).is_empty());
    mknod(&node0, 195, 0);
    // Once the node is back, the same claim prepares: a real spec on disk.
    let devs = driver.prepare(std::slice::from_ref(&c))[UID]
        .clone()
        .unwrap();
    assert_eq!(devs[0].cdi_device_ids, [format!("gpuslice.io/claim={UID}")]);
    container_device_interface::spec::read_spec(&cdi.path(UID), 0).unwrap();
    driver.unprepare(std::slice::from_ref(&c))[UID]
        .clone()
        .unwrap();
    assert!(files(&f.root.join("cdi")).is_empty());
    assert!(arbiter.slices().is_empty());
}

/// As in the DaemonSet: the node's spec written by `gpuslice cdi generate` (host paths), and a
/// plugin that cannot see the driver root: the claim's spec takes the node spec's common edits
/// and the GPU's own entry, hooks dropped, and writes nothing but itself.
#[test]
fn cdi_dir_derives_the_claim_spec_from_the_nodes_spec() {
    if !root_or_skip("cdi_dir_derives_the_claim_spec_from_the_nodes_spec") {
        return;
    }
    let f = fake("node-spec");
    let node_spec = f.root.join("cdi/gpuslice.yaml");
    let all: Vec<gpuslice_cdi::Gpu> = gpus()
        .iter()
        .map(|g| gpuslice_cdi::Gpu {
            index: g.info.index,
            uuid: g.info.uuid.clone(),
            minor: g.minor,
        })
        .collect();
    gpuslice_cdi::generate(&f.options, &all, gpuslice_cdi::Format::Yaml, &node_spec).unwrap();
    let preload_before = std::fs::metadata(&f.options.preload_file)
        .unwrap()
        .modified()
        .unwrap();
    let plugin = CdiDir {
        dir: f.root.join("cdi"),
        options: Options {
            driver_root: "/nonexistent/driver".into(),
            dev_root: "/nonexistent/dev".into(),
            interposer: "/nonexistent/libgpuslice.so".into(),
            preload_file: "/nonexistent/ld.so.preload".into(),
            hook: "/nonexistent/gpuslice-hook".into(),
            ..f.options.clone()
        },
        node_spec: Some(node_spec.clone()),
    };
    let gpu = gpus().remove(1);
    plugin.write(UID, &gpu, &f.root.join("slice")).unwrap();
    let claim: Value =
        serde_yaml_ng::from_str(&std::fs::read_to_string(plugin.path(UID)).unwrap()).unwrap();
    let node: Value =
        serde_yaml_ng::from_str(&std::fs::read_to_string(&node_spec).unwrap()).unwrap();
    let edits = &claim["devices"][0]["containerEdits"];
    // Every common mount of the node spec (libraries, interposer, preload), at its host path.
    for m in node["containerEdits"]["mounts"].as_array().unwrap() {
        assert!(
            edits["mounts"].as_array().unwrap().contains(m),
            "{m} missing from {edits}"
        );
    }
    let nodes: Vec<&str> = edits["deviceNodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["path"].as_str().unwrap())
        .collect();
    assert!(
        nodes.contains(&"/dev/nvidia1") && nodes.contains(&"/dev/nvidiactl"),
        "{nodes:?}"
    );
    assert!(!nodes.contains(&"/dev/nvidia0"), "{nodes:?}");
    assert!(edits["hooks"].is_null(), "{edits}");
    container_device_interface::spec::read_spec(&plugin.path(UID), 0).unwrap();
    // Nothing else written: the preload file is the generator's.
    assert_eq!(
        std::fs::metadata(&f.options.preload_file)
            .unwrap()
            .modified()
            .unwrap(),
        preload_before
    );
    assert_eq!(
        files(&f.root.join("cdi")),
        [
            format!("gpuslice.io-claim_{UID}.yaml"),
            "gpuslice.yaml".into()
        ]
    );
    // A node spec without the GPU, or none at all: named, nothing written.
    plugin.remove(UID).unwrap();
    let mut other = gpu.clone();
    other.info.uuid = "GPU-ffffffff-0000-0000-0000-000000000000".into();
    let err = plugin
        .write(UID, &other, &f.root.join("slice"))
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("no CDI device GPU-ffffffff") && err.contains("gpuslice.yaml"),
        "{err}"
    );
    std::fs::remove_file(&node_spec).unwrap();
    let err = plugin
        .write(UID, &gpu, &f.root.join("slice"))
        .unwrap_err()
        .to_string();
    assert!(err.contains("read the node's CDI spec"), "{err}");
    assert!(files(&f.root.join("cdi")).is_empty());
}

/// (source, destination, options) of each mount, sorted.
type Mounts = Vec<(String, String, Vec<String>)>;
/// (path, major, minor) of each device node, sorted.
type Nodes = Vec<(String, i64, i64)>;

/// The OCI edits of one slice as the runtime makes them, on an empty spec.
fn oci_rendering(f: &Fake, gpu: &gpuslice_kubelet_plugin::gpu::Gpu, slice: &Path) -> Value {
    let mut doc = SpecDoc::parse(br#"{"process":{"env":[]}}"#).unwrap();
    let device: gpuslice_api::AssignedDevice = serde_json::from_value(serde_json::json!({
        "index": gpu.info.index, "uuid": gpu.info.uuid, "name": gpu.info.name,
        "memory_total": gpu.info.memory_total,
    }))
    .unwrap();
    let plan = Plan {
        interposer: f.options.interposer.clone(),
        slice_dir: Some(slice.to_path_buf()),
        preload_file: Some(f.options.preload_file.clone()),
        devices: vec![device],
        device_nodes: gpuslice_oci::devices::nodes_for(&f.options.dev_root, &[gpu.info.index])
            .unwrap(),
        hook: None,
        extra_env: Vec::new(),
    };
    apply(&mut doc, &plan).unwrap();
    doc.0
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .map(|a| a.iter().map(|s| s.as_str().unwrap().to_string()).collect())
        .unwrap_or_default()
}

/// The one description of a slice's container (`gpuslice_cdi::container`) rendered both ways,
/// for the same slice on the same GPU: the runtime's OCI edits and the kubelet plugin's claim
/// spec name the same mounts (source, destination, options), environment and device nodes.
/// Two differences are by design and named here: the claim spec also binds the driver's
/// files (the runtime leaves them to the NVIDIA runtime or the image) and carries the node
/// spec's `GPUSLICE_CDI_GPU_<i>` label; the OCI edits also set `LD_PRELOAD`, merged with the
/// image's value, which a CDI spec cannot do (it has `/etc/ld.so.preload`).
#[test]
fn oci_edits_and_the_claims_cdi_spec_describe_the_same_container() {
    if !root_or_skip("oci_edits_and_the_claims_cdi_spec_describe_the_same_container") {
        return;
    }
    let f = fake("golden");
    let gpu = gpus().remove(1);
    let slice = f.root.join("slice");
    let claim = f.cdi().spec(UID, &gpu, &slice).unwrap();
    let cdi = serde_json::to_value(&claim.devices[0].container_edits).unwrap();
    let oci = oci_rendering(&f, &gpu, &slice);

    let driver_file = |dst: &str| dst.starts_with(&format!("/{LIB}/"));
    let mut cdi_mounts: Mounts = cdi["mounts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            let dst = m["containerPath"].as_str().unwrap().to_string();
            (
                m["hostPath"].as_str().unwrap().to_string(),
                dst,
                strings(&m["options"]),
            )
        })
        .filter(|m| !driver_file(&m.1))
        .collect();
    let mut oci_mounts: Mounts = oci["mounts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            (
                m["source"].as_str().unwrap().to_string(),
                m["destination"].as_str().unwrap().to_string(),
                strings(&m["options"]),
            )
        })
        .collect();
    cdi_mounts.sort();
    oci_mounts.sort();
    assert_eq!(cdi_mounts, oci_mounts);
    // The golden: what both must be.
    let host = |p: &Path| p.display().to_string();
    let opts = |o: &[&str]| o.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    let mut want: Mounts = vec![
        (
            host(&f.options.interposer),
            "/usr/lib/gpuslice/libgpuslice.so".into(),
            opts(&["bind", "ro", "nosuid", "nodev"]),
        ),
        (
            host(&slice),
            CONTAINER_SLICE_DIR.into(),
            opts(&["bind", "ro", "nosuid", "nodev", "noexec"]),
        ),
        (
            host(&slice.join("usage")),
            "/run/gpuslice/usage".into(),
            opts(&["bind", "rw", "nosuid", "nodev", "noexec"]),
        ),
        (
            host(&f.options.preload_file),
            "/etc/ld.so.preload".into(),
            opts(&["bind", "ro", "nosuid", "nodev", "noexec"]),
        ),
    ];
    want.sort();
    assert_eq!(oci_mounts, want);
    // The usage file is mounted after (on top of) the directory, in both.
    for (what, list) in [("CDI", &cdi["mounts"]), ("OCI", &oci["mounts"])] {
        let key = if what == "CDI" {
            "containerPath"
        } else {
            "destination"
        };
        let at = |d: &str| list.as_array().unwrap().iter().position(|m| m[key] == d);
        assert!(
            at("/run/gpuslice/usage") > at(CONTAINER_SLICE_DIR),
            "{what}: {list}"
        );
    }

    let mut cdi_env: Vec<String> = strings(&cdi["env"])
        .into_iter()
        .filter(|e| !e.starts_with("GPUSLICE_CDI_GPU_"))
        .collect();
    let mut oci_env: Vec<String> = strings(&oci["process"]["env"])
        .into_iter()
        .filter(|e| !e.starts_with("LD_PRELOAD="))
        .collect();
    cdi_env.sort();
    oci_env.sort();
    assert_eq!(cdi_env, oci_env);
    assert_eq!(
        oci_env,
        [
            format!("CUDA_VISIBLE_DEVICES={}", gpu.info.uuid),
            "GPUSLICE_SLICE_DIR=/run/gpuslice".to_string(),
        ]
    );

    let node = |n: &Value, path: &str| {
        (
            n[path].as_str().unwrap().to_string(),
            n["major"].as_i64().unwrap(),
            n["minor"].as_i64().unwrap(),
        )
    };
    let mut cdi_nodes: Nodes = cdi["deviceNodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| node(n, "path"))
        .collect();
    let mut oci_nodes: Nodes = oci["linux"]["devices"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| node(n, "path"))
        .collect();
    cdi_nodes.sort();
    oci_nodes.sort();
    assert_eq!(cdi_nodes, oci_nodes);
    assert_eq!(
        oci_nodes,
        [
            ("/dev/nvidia-modeset".to_string(), 195, 254),
            ("/dev/nvidia-uvm".to_string(), 510, 0),
            ("/dev/nvidia1".to_string(), 195, 1),
            ("/dev/nvidiactl".to_string(), 195, 255),
        ]
    );
}
