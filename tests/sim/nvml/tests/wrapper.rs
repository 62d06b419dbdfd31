//! The real `nvml-wrapper` crate drives the simulated library: enumeration, identity, memory,
//! running processes (another process's allocation shows up under its PID), utilisation.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::OnceLock;

use gpuslice_sim_core::{Node, SimConfig};
use nvml_wrapper::Nvml;

const DEVICES: &str = "name=NVIDIA H100 80GB HBM3,mem=80Gi,sms=132,cc=9.0;\
                       name=NVIDIA A100-SXM4-40GB,mem=40Gi,sms=108,cc=8.0";

/// target/<profile>/deps/<test> -> target/<profile>/libnvidia_ml.so
fn lib_path() -> PathBuf {
    let exe = std::env::current_exe().expect("current exe");
    exe.parent()
        .and_then(|d| d.parent())
        .expect("target dir")
        .join("libnvidia_ml.so")
}

/// Configures the simulated node for this process (once) and returns a core view of it.
fn node() -> &'static Node {
    static NODE: OnceLock<Node> = OnceLock::new();
    NODE.get_or_init(|| {
        let state = std::env::temp_dir().join(format!(
            "gpuslice-sim-nvml-test-{}.state",
            std::process::id()
        ));
        let _ = std::fs::remove_file(&state);
        std::env::set_var("GPUSLICE_SIM_DEVICES", DEVICES);
        std::env::set_var("GPUSLICE_SIM_STATE", &state);
        Node::open(SimConfig::from_env().expect("config")).expect("node")
    })
}

fn nvml() -> Nvml {
    node();
    Nvml::builder()
        .lib_path(lib_path().as_os_str())
        .init()
        .expect("nvml-wrapper loads and initialises the simulated library")
}

#[test]
fn child_hold() {
    // Child mode: allocate through the core and hold until stdin closes.
    if std::env::var("NVML_TEST_CHILD").is_err() {
        return;
    }
    let n = Node::open(SimConfig::from_env().expect("config")).expect("node");
    n.ctx_attach(1).expect("ctx");
    n.mem_alloc(1, 512 << 20).expect("alloc");
    println!("\n@ready");
    let mut s = String::new();
    while std::io::stdin()
        .read_line(&mut s)
        .map(|k| k > 0)
        .unwrap_or(false)
    {}
}

#[test]
fn enumerates_devices_and_identity() {
    let nvml = nvml();
    let cfg = node().config().clone();
    assert_eq!(nvml.device_count().expect("count"), 2);
    assert_eq!(
        nvml.sys_driver_version().expect("driver"),
        cfg.nvml_driver_version
    );
    assert_eq!(nvml.sys_cuda_driver_version().expect("cuda"), 12080);
    assert!(nvml
        .sys_nvml_version()
        .expect("nvml version")
        .starts_with("12."));
    for (i, spec) in cfg.devices.iter().enumerate() {
        let d = nvml.device_by_index(i as u32).expect("handle");
        assert_eq!(d.name().expect("name"), spec.name);
        assert_eq!(d.uuid().expect("uuid"), spec.uuid);
        assert_eq!(d.index().expect("index"), i as u32);
        assert_eq!(d.minor_number().expect("minor"), i as u32);
        let cc = d.cuda_compute_capability().expect("cc");
        assert_eq!(
            (cc.major as u32, cc.minor as u32),
            (spec.cc_major, spec.cc_minor)
        );
        let pci = d.pci_info().expect("pci");
        assert_eq!(pci.bus_id, spec.pci_bus_id);
        let by_uuid = nvml.device_by_uuid(spec.uuid.as_str()).expect("by uuid");
        assert_eq!(by_uuid.index().expect("index"), i as u32);
        let by_pci = nvml
            .device_by_pci_bus_id(spec.pci_bus_id.as_str())
            .expect("by pci");
        assert_eq!(by_pci.index().expect("index"), i as u32);
        let mem = d.memory_info().expect("memory");
        assert_eq!(mem.total, spec.total_mem);
        assert_eq!(mem.free + mem.used, mem.total);
    }
    assert!(nvml.device_by_index(2).is_err());
    assert!(nvml
        .device_by_uuid("GPU-00000000-0000-0000-0000-000000000000")
        .is_err());
}

#[test]
fn processes_and_memory_from_ground_truth() {
    let nvml = nvml();
    let me = std::process::id();
    let core = node();
    core.ctx_attach(0).expect("ctx");
    core.mem_alloc(0, 1 << 30).expect("alloc");
    let d0 = nvml.device_by_index(0).expect("dev 0");
    let mine = 518u64 * (1 << 20) + (1 << 30);
    let procs = d0.running_compute_processes().expect("processes");
    let p = procs.iter().find(|p| p.pid == me).expect("our pid listed");
    assert!(matches!(
        p.used_gpu_memory,
        nvml_wrapper::enums::device::UsedGpuMemory::Used(b) if b == mine
    ));
    assert!(d0.memory_info().expect("mem").used >= mine);

    // another process, on device 1, shows up under its own PID
    let mut child = Command::new(std::env::current_exe().expect("exe"))
        .args(["child_hold", "--exact", "--nocapture"])
        .env("NVML_TEST_CHILD", "1")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn");
    let mut out = BufReader::new(child.stdout.take().expect("stdout"));
    loop {
        let mut l = String::new();
        assert!(out.read_line(&mut l).expect("read") > 0, "child died");
        if l.contains("@ready") {
            break;
        }
    }
    let d1 = nvml.device_by_index(1).expect("dev 1");
    let procs = d1.running_compute_processes().expect("processes");
    let cp = procs
        .iter()
        .find(|p| p.pid == child.id())
        .expect("child listed");
    assert!(matches!(
        cp.used_gpu_memory,
        nvml_wrapper::enums::device::UsedGpuMemory::Used(b) if b == (512 << 20) + (518 << 20)
    ));
    assert_eq!(
        d1.memory_info().expect("mem").used,
        (512 << 20) + (518 << 20)
    );
    child.kill().expect("kill");
    child.wait().expect("wait");
    assert!(d1
        .running_compute_processes()
        .expect("processes")
        .is_empty());
    assert_eq!(d1.memory_info().expect("mem").used, 0);
    core.mem_free(0, 1 << 30);
    core.ctx_detach(0);
}

#[test]
fn utilization_follows_the_engine() {
    let nvml = nvml();
    let core = node();
    let me = std::process::id();
    let t0 = std::time::Instant::now();
    while t0.elapsed() < std::time::Duration::from_millis(400) {
        core.engine_execute(1, 2_000_000);
    }
    let d1 = nvml.device_by_index(1).expect("dev 1");
    let u = d1.utilization_rates().expect("util");
    // 400 ms of saturation within the last second: ~40 %, generous bounds
    assert!((20..=60).contains(&u.gpu), "gpu util {}", u.gpu);
    let samples = d1.process_utilization_stats(None).expect("samples");
    // One sample per 200 ms window, with the device's busy percent: at least one window lies
    // wholly inside the 400 ms of saturation.
    let s = samples
        .iter()
        .filter(|s| s.pid == me)
        .max_by_key(|s| s.sm_util)
        .expect("our sample");
    assert!(s.sm_util >= 80, "sm util {samples:?}");
    let s = samples.iter().max_by_key(|s| s.timestamp).expect("newest");
    let later = d1.process_utilization_stats(s.timestamp + 1);
    assert!(later.is_err() || later.unwrap().iter().all(|x| x.timestamp > s.timestamp));
}

/// What monitoring tools ask besides memory and processes: clocks, codec utilisation, ECC
/// counters answer; fan speed and the (Windows-only) driver model say "not supported", as on a
/// passively cooled Linux data-centre GPU, instead of being missing symbols.
#[test]
fn monitoring_queries_answer_like_a_data_centre_gpu() {
    use nvml_wrapper::enum_wrappers::device::{Clock, EccCounter, MemoryError};
    use nvml_wrapper::error::NvmlError;
    let nvml = nvml();
    let d = nvml.device_by_index(0).expect("device 0");
    for c in [Clock::Graphics, Clock::SM, Clock::Memory, Clock::Video] {
        let mhz = d.clock_info(c).expect("clock_info");
        assert!((300..=3000).contains(&mhz), "{c:?}: {mhz} MHz");
    }
    let dec = d.decoder_utilization().expect("decoder utilization");
    let enc = d.encoder_utilization().expect("encoder utilization");
    assert_eq!((dec.utilization, enc.utilization), (0, 0));
    assert!(dec.sampling_period > 0 && enc.sampling_period > 0);
    for e in [MemoryError::Corrected, MemoryError::Uncorrected] {
        for k in [EccCounter::Volatile, EccCounter::Aggregate] {
            assert_eq!(d.total_ecc_errors(e, k).expect("ecc errors"), 0);
        }
    }
    assert!(
        matches!(d.fan_speed(0), Err(NvmlError::NotSupported)),
        "{:?}",
        d.fan_speed(0)
    );
}
