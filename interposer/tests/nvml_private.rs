//! NVML inside a slice on the simulated GPU: beside a neighbour that keeps the device busy, a
//! process in a slice sees its own utilisation (idle: near 0), not the device's; power,
//! temperature, clocks and the other figures that show the device's load are "not supported";
//! a process's memory figure never exceeds the slice's total. Outside a slice the same calls
//! show the device as it is.
//!
//! Build the simulator first: `cargo build -p gpuslice-sim-cuda -p gpuslice-sim-nvml`.

mod support;

use gpuslice_cuda_abi::nvml::*;
use std::ffi::{c_uint, c_void, CStr};
use std::time::{Duration, Instant};
use support::{field, setup, Driver, MIB};

/// Every child and the parent must agree on the simulator's configuration.
const CTX: &str = "300Mi";

struct Nvml {
    h: *mut c_void,
    dev: nvmlDevice_t,
}

impl Nvml {
    fn open() -> Nvml {
        // SAFETY: loading the (simulated) NVML by soname.
        let h = unsafe { libc::dlopen(c"libnvidia-ml.so.1".as_ptr(), libc::RTLD_NOW) };
        assert!(!h.is_null());
        let mut n = Nvml {
            h,
            dev: std::ptr::null_mut(),
        };
        // SAFETY: NVML entry points with their nvml.h signatures.
        unsafe {
            let init: unsafe extern "C" fn() -> u32 = std::mem::transmute(n.sym(c"nvmlInit_v2"));
            assert_eq!(init(), 0);
            let get: unsafe extern "C" fn(c_uint, *mut nvmlDevice_t) -> u32 =
                std::mem::transmute(n.sym(c"nvmlDeviceGetHandleByIndex_v2"));
            assert_eq!(get(0, &mut n.dev), 0);
        }
        n
    }

    /// Looked up with `dlsym`, so the interposer's table decides what we get.
    fn sym(&self, name: &CStr) -> *mut c_void {
        // SAFETY: valid handle and name.
        let p = unsafe { libc::dlsym(self.h, name.as_ptr()) };
        assert!(!p.is_null(), "{name:?}");
        p
    }

    fn one_out(&self, name: &CStr) -> (u32, c_uint) {
        let mut v: c_uint = 0;
        // SAFETY: every function named here is (device, unsigned int *) in nvml.h.
        let rc = unsafe {
            let f: unsafe extern "C" fn(nvmlDevice_t, *mut c_uint) -> u32 =
                std::mem::transmute(self.sym(name));
            f(self.dev, &mut v)
        };
        (rc, v)
    }

    fn arg_out(&self, name: &CStr, arg: c_uint) -> u32 {
        let mut v: c_uint = 0;
        // SAFETY: every function named here is (device, unsigned int, unsigned int *).
        unsafe {
            let f: unsafe extern "C" fn(nvmlDevice_t, c_uint, *mut c_uint) -> u32 =
                std::mem::transmute(self.sym(name));
            f(self.dev, arg, &mut v)
        }
    }

    fn utilization(&self) -> (u32, nvmlUtilization_t) {
        let mut u = nvmlUtilization_t::default();
        // SAFETY: nvmlDeviceGetUtilizationRates(device, nvmlUtilization_t *).
        let rc = unsafe {
            let f: unsafe extern "C" fn(nvmlDevice_t, *mut nvmlUtilization_t) -> u32 =
                std::mem::transmute(self.sym(c"nvmlDeviceGetUtilizationRates"));
            f(self.dev, &mut u)
        };
        (rc, u)
    }

    fn memory_total(&self) -> u64 {
        let mut m = nvmlMemory_t::default();
        // SAFETY: nvmlDeviceGetMemoryInfo(device, nvmlMemory_t *).
        unsafe {
            let f: unsafe extern "C" fn(nvmlDevice_t, *mut nvmlMemory_t) -> u32 =
                std::mem::transmute(self.sym(c"nvmlDeviceGetMemoryInfo"));
            assert_eq!(f(self.dev, &mut m), 0);
        }
        m.total
    }

    /// (pid, used) of the running compute processes.
    fn processes(&self) -> Vec<(u32, u64)> {
        let mut buf = [nvmlProcessInfo_t::default(); 64];
        let mut n: c_uint = 64;
        // SAFETY: nvmlDeviceGetComputeRunningProcesses_v3(device, count *, infos *).
        unsafe {
            let f: unsafe extern "C" fn(nvmlDevice_t, *mut c_uint, *mut nvmlProcessInfo_t) -> u32 =
                std::mem::transmute(self.sym(c"nvmlDeviceGetComputeRunningProcesses_v3"));
            assert_eq!(f(self.dev, &mut n, buf.as_mut_ptr()), 0);
        }
        buf[..n as usize]
            .iter()
            .map(|p| (p.pid, p.usedGpuMemory))
            .collect()
    }
}

/// Keeps the device busy from outside any slice, straight on the simulator, until stdin closes.
fn child_busy() {
    let cfg = gpuslice_sim_core::SimConfig::from_env().expect("sim config");
    let node = gpuslice_sim_core::Node::open(cfg).expect("sim node");
    node.ctx_attach(0).expect("context");
    println!("\nBUSY=1");
    let until = Instant::now() + Duration::from_secs(30);
    while Instant::now() < until {
        node.engine_execute(0, 5_000_000);
    }
}

/// What NVML shows this process, with a context and 32 MiB on device 0.
fn child_look() {
    let d = Driver::open();
    d.context(0);
    let _held = support::paths::alloc(
        &d,
        &support::paths::prepare(&d, 0),
        support::paths::Path::Plain,
        32,
        0,
    );
    let n = Nvml::open();
    let (urc, u) = n.utilization();
    let (prc, _) = n.one_out(c"nvmlDeviceGetPowerUsage");
    let trc = n.arg_out(c"nvmlDeviceGetTemperature", 0);
    let crc = n.arg_out(c"nvmlDeviceGetClockInfo", 1);
    let total = n.memory_total();
    let me = std::process::id();
    let mine = n
        .processes()
        .into_iter()
        .find(|p| p.0 == me)
        .map(|p| p.1)
        .unwrap_or(0);
    println!(
        "\nUTIL_RC={urc} UTIL={} POWER_RC={prc} TEMP_RC={trc} CLOCK_RC={crc} TOTAL={total} \
         MINE={mine}",
        u.gpu
    );
}

#[test]
fn child_entry() {
    match std::env::var("H6_CHILD").as_deref() {
        Ok("busy") => child_busy(),
        Ok("look") => child_look(),
        Ok(m) => panic!("unknown child mode {m}"),
        Err(_) => {}
    }
}

#[test]
fn inside_a_slice_nvml_shows_the_slices_own_load_and_hides_the_devices() {
    let e = setup("nvmlpriv");
    let sim = [("GPUSLICE_SIM_CTX_OVERHEAD", CTX)];
    let mut busy = e
        .child("busy", &[sim[0], ("LD_PRELOAD", "")])
        .stdin(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Let it run for over a second so the utilisation window is full.
    std::thread::sleep(Duration::from_millis(1500));
    let (outside, _) = e.run("look", &[sim[0], ("LD_PRELOAD", "")]);
    let (inside, err) = e.run("look", &[sim[0], ("GPUSLICE_MEMORY", "64Mi")]);
    let _ = busy.kill();
    let _ = busy.wait();
    let ctx = format!("outside: {outside}\ninside: {inside}\n{err}");
    // Outside any slice: the neighbour's load shows.
    assert_eq!(field(&outside, "UTIL_RC"), 0, "{ctx}");
    assert!(field(&outside, "UTIL") >= 50, "{ctx}");
    assert_eq!(field(&outside, "POWER_RC"), 0, "{ctx}");
    assert_eq!(field(&outside, "TEMP_RC"), 0, "{ctx}");
    // Inside: its own (idle) utilisation, the load-revealing figures hidden.
    assert_eq!(field(&inside, "UTIL_RC"), 0, "{ctx}");
    assert!(field(&inside, "UTIL") <= 5, "{ctx}");
    for k in ["POWER_RC", "TEMP_RC", "CLOCK_RC"] {
        assert_eq!(
            field(&inside, k),
            u64::from(NVML_ERROR_NOT_SUPPORTED),
            "{k}: {ctx}"
        );
    }
    // Its context (300 MiB) plus 32 MiB would exceed the 64 MiB total it is shown.
    assert_eq!(field(&inside, "TOTAL"), 64 * MIB, "{ctx}");
    let mine = field(&inside, "MINE");
    assert!(mine > 0 && mine <= 64 * MIB, "{ctx}");
    assert!(field(&outside, "MINE") > 64 * MIB, "{ctx}");
}
