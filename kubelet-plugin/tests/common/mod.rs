//! Test doubles for the kubelet plugin: no real kubelet, API server, arbiter daemon or GPU runs.
//! The arbiter double is the arbiter's own admission logic ([`Admission`]) in memory, so what it
//! admits is what the daemon would; claims come from an in-memory map (an API stand-in for
//! `get ResourceClaim` only); CDI specs are recorded as files in a scratch directory.

#![allow(dead_code)]

pub mod apienv;
pub mod apiserver;
pub mod grpcgo;
pub mod kubelet;
pub mod plugin;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use gpuslice_admission::admission::Admission;
use gpuslice_admission::fit::Policy;
use gpuslice_admission::inventory::DeviceInfo;
use gpuslice_api::{Owner, SliceRequest, SliceStatus};
use gpuslice_cdi::CdiError;
use gpuslice_kubelet_plugin::capacity::PublishPolicy;
use gpuslice_kubelet_plugin::dra::arbiter::{Admitted, Arbiter, ArbiterError};
use gpuslice_kubelet_plugin::dra::cdi::{device_id, ClaimCdi};
use gpuslice_kubelet_plugin::dra::checkpoint;
use gpuslice_kubelet_plugin::dra::claim::{ClaimSource, MemoryClaims};
use gpuslice_kubelet_plugin::dra::driver::{Driver, Parts};
use gpuslice_kubelet_plugin::gpu::{Gpu, StaticGpus};
use k8s_openapi::api::resource::v1::{
    AllocationResult, DeviceAllocationConfiguration, DeviceAllocationResult,
    DeviceRequestAllocationResult, OpaqueDeviceConfiguration, ResourceClaim, ResourceClaimSpec,
    ResourceClaimStatus,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::apimachinery::pkg::runtime::RawExtension;

pub const GI: u64 = 1 << 30;
pub const NODE: &str = "node-a";

/// The heterogeneous simulated node: an H100-class and an A100-class GPU.
pub fn gpus() -> Vec<Gpu> {
    [
        ("NVIDIA H100 80GB HBM3", 80 * GI, "Hopper", (9, 0)),
        ("NVIDIA A100-SXM4-40GB", 40 * GI, "Ampere", (8, 0)),
    ]
    .iter()
    .enumerate()
    .map(|(i, (name, mem, arch, cc))| Gpu {
        info: DeviceInfo {
            index: i as u32,
            uuid: format!("GPU-{i}0000000-aaaa-bbbb-cccc-dddddddddddd"),
            name: (*name).to_string(),
            memory_total: *mem,
        },
        minor: i as u32,
        architecture: Some((*arch).to_string()),
        compute_capability: Some(*cc),
        driver_version: Some("550.54.15".into()),
    })
    .collect()
}

/// The arbiter's admission in memory; `down` makes every call fail as if the socket were gone.
pub struct FakeArbiter {
    pub admission: Mutex<Admission>,
    pub down: Mutex<bool>,
    pub dir: PathBuf,
}

impl FakeArbiter {
    pub fn new(policy: Policy, dir: &Path) -> Self {
        FakeArbiter {
            admission: Mutex::new(Admission::new(
                gpus().into_iter().map(|g| g.info).collect(),
                policy,
            )),
            down: Mutex::new(false),
            dir: dir.to_path_buf(),
        }
    }

    pub fn slices(&self) -> Vec<SliceStatus> {
        self.admission.lock().unwrap().slices().cloned().collect()
    }

    fn check(&self) -> Result<(), ArbiterError> {
        if *self.down.lock().unwrap() {
            return Err(ArbiterError(
                "cannot reach /run/gpuslice/arbiter.sock: connection refused".into(),
            ));
        }
        Ok(())
    }
}

impl Arbiter for FakeArbiter {
    fn admit(&self, slice_id: &str, request: &SliceRequest) -> Result<Admitted, ArbiterError> {
        self.check()?;
        let a = self
            .admission
            .lock()
            .unwrap()
            .admit(slice_id, request.clone(), Owner::default())
            .map_err(|e| ArbiterError(e.to_string()))?;
        let slice_dir = self.dir.join(slice_id);
        std::fs::create_dir_all(&slice_dir).unwrap();
        Ok(Admitted {
            slice_dir,
            devices: a.devices,
            existing: a.existing,
        })
    }

    fn release(&self, slice_id: &str) -> Result<bool, ArbiterError> {
        self.check()?;
        Ok(self.admission.lock().unwrap().release(slice_id).is_ok())
    }
}

/// CDI specs recorded as `<dir>/<uid>` files (their content: the slice directory).
pub struct FakeCdi {
    pub dir: PathBuf,
    pub fail: Mutex<bool>,
}

impl FakeCdi {
    pub fn specs(&self) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(&self.dir)
            .map(|d| {
                d.filter_map(|e| e.ok())
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default();
        v.sort();
        v
    }
}

impl ClaimCdi for FakeCdi {
    fn write(&self, uid: &str, _gpu: &Gpu, slice_dir: &Path) -> Result<Vec<String>, CdiError> {
        if *self.fail.lock().unwrap() {
            return Err(CdiError::Io(format!(
                "create {}: read-only file system",
                self.dir.display()
            )));
        }
        std::fs::create_dir_all(&self.dir).unwrap();
        std::fs::write(self.dir.join(uid), slice_dir.display().to_string()).unwrap();
        Ok(vec![device_id(uid)])
    }

    fn remove(&self, uid: &str) -> Result<(), CdiError> {
        let _ = std::fs::remove_file(self.dir.join(uid));
        Ok(())
    }
}

/// Everything a test needs, under one scratch directory removed on drop.
pub struct Node {
    pub root: PathBuf,
    pub arbiter: Arc<FakeArbiter>,
    pub cdi: Arc<FakeCdi>,
    pub claims: Arc<MemoryClaims>,
    pub policy: Policy,
    pub publish: PublishPolicy,
}

impl Drop for Node {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

impl Node {
    pub fn new(tag: &str) -> Node {
        let root = std::env::temp_dir().join(format!("gs-kp-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        std::fs::create_dir_all(&root).unwrap();
        let policy = Policy::default();
        Node {
            arbiter: Arc::new(FakeArbiter::new(policy.clone(), &root.join("state"))),
            cdi: Arc::new(FakeCdi {
                dir: root.join("cdi"),
                fail: Mutex::new(false),
            }),
            claims: Arc::new(MemoryClaims::default()),
            policy,
            publish: PublishPolicy { slices_per_gpu: 4 },
            root,
        }
    }

    pub fn checkpoint_path(&self) -> PathBuf {
        self.root.join("plugin").join(checkpoint::FILE)
    }

    /// A driver over this node's doubles; a second call is a plugin restart.
    pub fn driver(&self) -> Driver {
        self.driver_with(self.claims.clone())
    }

    /// A driver over this node's doubles reading claims from `claims`.
    pub fn driver_with(&self, claims: Arc<dyn ClaimSource>) -> Driver {
        Driver::new(Parts {
            node: NODE.into(),
            gpus: Arc::new(StaticGpus(gpus())),
            policy: self.policy.clone(),
            publish: self.publish,
            claims,
            arbiter: self.arbiter.clone(),
            cdi: self.cdi.clone(),
            checkpoint: self.checkpoint_path(),
        })
        .unwrap()
    }
}

/// A claim allocated by a (pretend) scheduler: one result for `driver` on `device` of `pool`.
pub struct ClaimSpec<'a> {
    pub uid: &'a str,
    pub name: &'a str,
    pub driver: &'a str,
    pub pool: &'a str,
    pub device: &'a str,
    pub consumed: Vec<(&'a str, String)>,
    pub config: Option<serde_json::Value>,
}

impl<'a> ClaimSpec<'a> {
    pub fn new(uid: &'a str, device: &'a str, memory: u64, compute: u64) -> Self {
        ClaimSpec {
            uid,
            name: uid,
            driver: "gpuslice.io",
            pool: NODE,
            device,
            consumed: vec![
                ("memory", memory.to_string()),
                ("compute", compute.to_string()),
                ("slices", "1".into()),
            ],
            config: None,
        }
    }

    pub fn build(&self) -> ResourceClaim {
        let consumed: BTreeMap<String, Quantity> = self
            .consumed
            .iter()
            .map(|(k, v)| (k.to_string(), Quantity(v.clone())))
            .collect();
        ResourceClaim {
            metadata: ObjectMeta {
                name: Some(self.name.into()),
                namespace: Some("default".into()),
                uid: Some(self.uid.into()),
                ..Default::default()
            },
            spec: ResourceClaimSpec::default(),
            status: Some(ResourceClaimStatus {
                allocation: Some(AllocationResult {
                    devices: Some(DeviceAllocationResult {
                        results: Some(vec![DeviceRequestAllocationResult {
                            request: "gpu".into(),
                            driver: self.driver.into(),
                            pool: self.pool.into(),
                            device: self.device.into(),
                            consumed_capacity: Some(consumed),
                            share_id: Some("0a1b2c3d".into()),
                            ..Default::default()
                        }]),
                        config: self.config.clone().map(|p| {
                            vec![DeviceAllocationConfiguration {
                                source: "FromClaim".into(),
                                requests: None,
                                opaque: Some(OpaqueDeviceConfiguration {
                                    driver: "gpuslice.io".into(),
                                    parameters: RawExtension(p),
                                }),
                            }]
                        }),
                    }),
                    ..Default::default()
                }),
                ..Default::default()
            }),
        }
    }
}

/// When the test runs as root: the plugin process `pid` holds no capability in any set and has
/// `no_new_privs` (it dropped them at start, `docs/privileges.md`). `false` when not root
/// (nothing to check: an unprivileged plugin holds none anyway).
pub fn assert_no_capabilities(pid: u32) -> bool {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return false;
    }
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let field = |k: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(k))
            .map(|v| v.trim().to_string())
            .unwrap_or_else(|| panic!("no {k} in /proc/{pid}/status"))
    };
    for set in ["CapEff:", "CapPrm:", "CapBnd:", "CapInh:", "CapAmb:"] {
        assert_eq!(
            u64::from_str_radix(&field(set), 16).unwrap(),
            0,
            "{set} of the plugin (pid {pid})"
        );
    }
    assert_eq!(field("NoNewPrivs:"), "1");
    true
}

/// Writes the arbiter's `contexts.json` into `state` as if it had measured a context of `m0`
/// bytes on GPU 0 and 300 MiB on GPU 1 of [`gpus`].
pub fn measure_contexts(state: &std::path::Path, m0: u64) {
    let infos: Vec<DeviceInfo> = gpus().into_iter().map(|g| g.info).collect();
    let (list, _) = gpuslice_admission::contexts::resolve(
        &infos,
        "580",
        Ok(vec![(0, m0), (1, 300 << 20)]),
        None,
    );
    gpuslice_admission::contexts::save(state, &list).expect("contexts.json");
}
