//! DRA claims prepared by the kubelet plugin, then containers created through CRI with the CDI
//! device ids the plugin returned — on real containerd 1.7 and 2.1, the real arbiter and the
//! simulated GPU. No real kubelet, scheduler or API server runs: each claim is allocated by hand
//! the way the scheduler would (device `gpu-0` of this node's pool, consumed `memory`,
//! `compute`, `slices: 1`, optionally a SliceConfig), read from an in-memory claim source, and
//! prepared by the plugin's own `Driver` (what its `NodePrepareResources` handler runs), with
//! claim CDI specs derived from the node's `gpuslice cdi generate` spec as in the DaemonSet
//! (`--node-cdi-spec`). kubelet's part is played by the test: `CreateContainer` with
//! `ContainerConfig.CDI_devices` = the returned ids.
//!
//! * One claim (`16Gi`, `40`, priority high): the arbiter holds slice `dra-<uid>` on exactly the
//!   claimed GPU with the claimed cap, guarantee and priority; containerd applied the claim's
//!   CDI spec (no hooks needed); the container sees 16 GiB in `cuDeviceTotalMem`,
//!   `cuMemGetInfo` and NVML and gets `CUDA_ERROR_OUT_OF_MEMORY` at exactly 16 GiB; a plugin
//!   restart before unprepare loses nothing; afterwards no slice, spec or anything else is left.
//! * Two Pods with two claims on the one GPU (`8Gi`/`30` and `16Gi`/`70`), both saturating it
//!   with 1 ms kernels for 5 s, released together: each sees its own cap, and the device splits
//!   30/70 ± 3 points (each Pod's share of the kernels both completed).

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{ensure, Context, Result};
use gpuslice_api::protocol::{Request, Response};
use gpuslice_api::{Priority, SliceStatus};
use gpuslice_arbiter::fit::Policy;
use gpuslice_arbiter::inventory::DeviceInfo;
use gpuslice_e2e::cdi::{self, CdiSpec};
use gpuslice_e2e::containerd::Containerd;
use gpuslice_e2e::cri::{self, ContainerSpec, Cri, K8S_NS};
use gpuslice_e2e::gate::{require, Need};
use gpuslice_e2e::image::WORKLOAD;
use gpuslice_e2e::paths;
use gpuslice_e2e::sim::CONTAINER_STATE_DIR;
use gpuslice_e2e::snapshot::Snapshot;
use gpuslice_e2e::suite::{assert_capped_slice, Node};
use gpuslice_e2e::workload;
use gpuslice_e2e::Arbiter;
use gpuslice_kubelet_plugin::capacity::PublishPolicy;
use gpuslice_kubelet_plugin::dra::arbiter::SocketArbiter;
use gpuslice_kubelet_plugin::dra::cdi::CdiDir;
use gpuslice_kubelet_plugin::dra::checkpoint;
use gpuslice_kubelet_plugin::dra::claim::{ClaimRef, MemoryClaims};
use gpuslice_kubelet_plugin::dra::driver::{slice_id, Driver, Parts};
use gpuslice_kubelet_plugin::gpu::{Gpu, StaticGpus};
use gpuslice_oci::client::Client;
use k8s_openapi::api::resource::v1::ResourceClaim;
use serde_json::json;

const T: Duration = Duration::from_secs(120);
const GIB: u64 = 1 << 30;
const NODE: &str = "e2e-node";
const TOLERANCE: f64 = 0.03;

/// A claim as the scheduler leaves it: allocated on `gpu-0` of this node's pool, consuming
/// `memory` and `compute`, with a SliceConfig of `priority` when given; and how kubelet names it.
fn claim(
    uid: &str,
    memory: &str,
    compute: &str,
    priority: Option<&str>,
) -> (ClaimRef, ResourceClaim) {
    let config = priority.map(|p| {
        json!([{"source": "FromClaim", "requests": ["gpu"], "opaque": {
            "driver": "gpuslice.io",
            "parameters": {"apiVersion": "gpuslice.io/v1", "kind": "SliceConfig", "priority": p}}}])
    });
    let c = json!({
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": format!("claim-{uid}"), "namespace": "default", "uid": uid},
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {
            "deviceClassName": "gpuslice.io",
            "capacity": {"requests": {"memory": memory, "compute": compute}}}}]}},
        "status": {"allocation": {"devices": {
            "results": [{"request": "gpu", "driver": "gpuslice.io", "pool": NODE,
                         "device": "gpu-0", "shareID": &uid[..8],
                         "consumedCapacity": {"memory": memory, "compute": compute, "slices": "1"}}],
            "config": config}}}
    });
    let r = ClaimRef {
        namespace: "default".into(),
        name: format!("claim-{uid}"),
        uid: uid.into(),
    };
    (r, serde_json::from_value(c).expect("a v1 ResourceClaim"))
}

/// A node with its arbiter, its CDI spec, a CDI-enabled containerd and the plugin's parts.
struct Env {
    series: String,
    node: Node,
    arbiter: Arbiter,
    spec: CdiSpec,
    ctd: Containerd,
    client: Cri,
    before: Snapshot,
    gpus: Vec<Gpu>,
    claims: Arc<MemoryClaims>,
}

impl Env {
    /// `None` (after the gate's report) when this machine cannot run it.
    fn start(series: &str, tag: &str) -> Result<Option<Env>> {
        let bins = paths::containerd(series);
        if !require(
            &format!("dra-cri-{series}/{tag}"),
            &[
                Need::Root,
                Need::Binary(bins.containerd()),
                Need::Binary(paths::runc()),
                Need::Dist,
                Need::Product,
                Need::Binary(paths::product("gpuslice")),
            ],
        ) {
            return Ok(None);
        }
        let node = Node::new(&format!("dra{}{tag}", series.replace('.', "")))?;
        let arbiter = node.start_arbiter()?;
        // The node's spec, as the DaemonSet's cdi init container writes it.
        let spec = cdi::generate(&node, &arbiter)?;
        let ctd = cdi::containerd(&bins, &node, &arbiter, &spec)?;
        let client = cri::client_with_image(&ctd, &node)?;
        // After containerd is up (it is a descendant too), before any claim is prepared.
        let before = Snapshot::take(Some(&arbiter.state_dir));
        let gpus = gpus(&arbiter)?;
        ensure!(!gpus.is_empty(), "the simulated node has no GPU");
        Ok(Some(Env {
            series: series.into(),
            node,
            arbiter,
            spec,
            ctd,
            client,
            before,
            gpus,
            claims: Arc::new(MemoryClaims::default()),
        }))
    }

    /// The claim at the (stand-in) API server; how kubelet names it.
    fn put(&self, (r, c): (ClaimRef, ResourceClaim)) -> ClaimRef {
        self.claims.put(c);
        r
    }

    /// The plugin's driver over this node (a second call is a plugin restart).
    fn driver(&self) -> Result<Driver> {
        Ok(Driver::new(Parts {
            node: NODE.into(),
            gpus: Arc::new(StaticGpus(self.gpus.clone())),
            policy: Policy::default(),
            publish: PublishPolicy::default(),
            claims: self.claims.clone(),
            arbiter: Arc::new(SocketArbiter::new(
                &self.arbiter.state_dir,
                Duration::from_secs(10),
            )),
            cdi: Arc::new(CdiDir {
                dir: self.spec.dir.clone(),
                // Only the node's spec is read (--node-cdi-spec): nothing is discovered here.
                options: gpuslice_cdi::Options {
                    driver_root: "/nonexistent".into(),
                    dev_root: "/nonexistent".into(),
                    interposer: "/nonexistent".into(),
                    preload_file: "/nonexistent".into(),
                    hook: "/nonexistent".into(),
                    state_dir: self.arbiter.state_dir.clone(),
                    config: None,
                },
                node_spec: Some(self.spec.file.clone()),
            }),
            checkpoint: self
                .node
                .scratch
                .join("plugins-gpuslice.io")
                .join(checkpoint::FILE),
        })?)
    }

    /// NodePrepareResources of `claims`: their CDI device ids, in order.
    fn prepare(&self, driver: &Driver, claims: &[ClaimRef]) -> Result<Vec<Vec<String>>> {
        let out = driver.prepare(claims);
        claims
            .iter()
            .map(|c| {
                let devices = out[&c.uid]
                    .clone()
                    .map_err(anyhow::Error::msg)
                    .with_context(|| {
                        format!("NodePrepareResources; arbiter log:\n{}", self.arbiter.log())
                    })?;
                let ids = devices[0].cdi_device_ids.clone();
                ensure!(
                    ids == [format!("gpuslice.io/claim={}", c.uid)],
                    "CDI ids {ids:?}"
                );
                Ok(ids)
            })
            .collect()
    }

    /// The arbiter's record of claim `uid`'s slice.
    fn slice(&self, uid: &str) -> Result<SliceStatus> {
        let mut c = Client::connect(&self.arbiter.state_dir, Duration::from_secs(10))?;
        let Response::Status(st) = c.call(Request::Status {})? else {
            anyhow::bail!("arbiter status: unexpected answer");
        };
        let id = slice_id(uid);
        st.slices
            .into_iter()
            .find(|s| s.slice_id == id)
            .with_context(|| format!("no slice {id} at the arbiter"))
    }

    /// A container with no GPUSLICE_* request (everything comes from the claim's CDI device)
    /// running `script` under `sh -c`.
    fn container(&self, name: &str, script: String) -> ContainerSpec {
        ContainerSpec {
            name: name.into(),
            command: vec!["/bin/sh".into(), "-c".into(), script],
            env: gpuslice_e2e::sim::env_pairs(cdi::container_env()),
            mounts: cdi::container_binds(&self.node),
            annotations: vec![],
        }
    }

    /// Unprepares `claims` with a restarted plugin (the checkpoint must have them), and checks
    /// nothing is left.
    fn finish(&self, driver: Driver, claims: &[ClaimRef]) -> Result<()> {
        drop(driver);
        let restarted = self.driver()?;
        for c in claims {
            ensure!(restarted.checkpoint().claims.contains_key(&c.uid));
            restarted.unprepare(std::slice::from_ref(c))[&c.uid]
                .clone()
                .map_err(anyhow::Error::msg)?;
            let spec = self
                .spec
                .dir
                .join(format!("gpuslice.io-claim_{}.yaml", c.uid));
            ensure!(!spec.exists(), "{} is left", spec.display());
        }
        ensure!(restarted.checkpoint().claims.is_empty());
        let settled = Snapshot::settle(
            &self.before,
            Some(&self.arbiter.state_dir),
            Duration::from_secs(10),
        );
        if let Some(d) = settled {
            anyhow::bail!(
                "DRA claims on containerd {} left something behind:\n{d}",
                self.series
            );
        }
        Ok(())
    }
}

/// The node's GPUs as the arbiter sees them (the simulated NVML).
fn gpus(arbiter: &Arbiter) -> Result<Vec<Gpu>> {
    let mut c = Client::connect(&arbiter.state_dir, Duration::from_secs(10))?;
    let Response::Status(st) = c.call(Request::Status {})? else {
        anyhow::bail!("arbiter status: unexpected answer");
    };
    Ok(st
        .devices
        .iter()
        .map(|d| Gpu {
            info: DeviceInfo {
                index: d.index,
                uuid: d.uuid.clone(),
                name: d.name.clone(),
                memory_total: d.memory_total,
            },
            minor: d.index,
            architecture: None,
            compute_capability: None,
            driver_version: None,
        })
        .collect())
}

fn claim_to_container(series: &str) -> Result<()> {
    let Some(env) = Env::start(series, "one")? else {
        return Ok(());
    };
    let uid = "6a7b8c9d-0000-4000-8000-00000000e2e1";
    let r = env.put(claim(uid, "16Gi", "40", Some("high")));
    let driver = env.driver()?;
    let ids = env.prepare(&driver, std::slice::from_ref(&r))?.remove(0);
    let slice = env.slice(uid)?;
    ensure!(
        slice.devices.len() == 1 && slice.devices[0].uuid == env.gpus[0].info.uuid,
        "{slice:?}"
    );
    ensure!(slice.devices[0].memory_cap == Some(16 * GIB), "{slice:?}");
    ensure!(slice.request.compute == Some(40), "{slice:?}");
    ensure!(slice.request.priority == Priority::High, "{slice:?}");

    let log_dir = env.node.scratch.dir("pod-logs")?;
    let (pod, guard) = env
        .client
        .start_pod("dra-trainer", "runc", &log_dir)
        .with_context(|| format!("RunPodSandbox; containerd log:\n{}", env.ctd.log_tail(30)))?;
    let trainer = ContainerSpec {
        command: cdi::command(),
        ..env.container("trainer", String::new())
    };
    let refs: Vec<&str> = ids.iter().map(String::as_str).collect();
    let cid = env
        .client
        .create_container_with_cdi(&guard.id, &pod, &trainer, &refs)
        .with_context(|| format!("CreateContainer; containerd log:\n{}", env.ctd.log_tail(30)))?;
    env.client.start_container(&cid)?;
    let bundle = cri::bundle_config(&env.ctd, K8S_NS, &cid)?;
    let penv = bundle["process"]["env"].to_string();
    ensure!(
        penv.contains("GPUSLICE_SLICE_DIR=/run/gpuslice"),
        "the claim's CDI edits are not in config.json: {penv}"
    );
    let st = env.client.wait_exited(&cid, T)?;
    let out = cri::read_log(&log_dir.join(trainer.log_path()))?;
    println!("containerd {series} CRI, DRA claim {uid}:\n{out}");
    ensure!(
        st.exit_code == 0,
        "trainer exited {} ({}):\n{out}\narbiter log:\n{}",
        st.exit_code,
        st.reason,
        env.arbiter.log()
    );
    ensure!(
        out.contains("slice=mounted"),
        "the claim's slice is not at /run/gpuslice:\n{out}"
    );
    assert_capped_slice(&out, 16 * GIB)?;
    guard.remove()?;
    env.finish(driver, &[r])
}

fn two_claims_share_one_gpu_30_70(series: &str) -> Result<()> {
    let Some(env) = Env::start(series, "two")? else {
        return Ok(());
    };
    let a = env.put(claim(
        "7b8c9dae-0000-4000-8000-00000000e2e2",
        "8Gi",
        "30",
        None,
    ));
    let b = env.put(claim(
        "8c9daebf-0000-4000-8000-00000000e2e3",
        "16Gi",
        "70",
        None,
    ));
    let driver = env.driver()?;
    let ids = env.prepare(&driver, &[a.clone(), b.clone()])?;
    let log_dir = env.node.scratch.dir("pod-logs")?;
    let d = CONTAINER_STATE_DIR;
    let mut pods = Vec::new();
    for (tag, ids) in ["a", "b"].into_iter().zip(&ids) {
        let (pod, guard) = env
            .client
            .start_pod(&format!("dra-share-{tag}"), "runc", &log_dir)
            .with_context(|| format!("RunPodSandbox; log:\n{}", env.ctd.log_tail(30)))?;
        // Caps first, then both saturate the GPU together once both are up.
        let c = env.container(
            &format!("worker-{tag}"),
            format!(
                "{WORKLOAD} info && echo --- && touch {d}/ready-{tag} && \
                 while [ ! -e {d}/go ]; do sleep 0.02; done && \
                 exec {WORKLOAD} saturate --kernel-us 1000 --seconds 5 --depth 8"
            ),
        );
        let refs: Vec<&str> = ids.iter().map(String::as_str).collect();
        let cid = env
            .client
            .create_container_with_cdi(&guard.id, &pod, &c, &refs)
            .with_context(|| format!("CreateContainer; log:\n{}", env.ctd.log_tail(30)))?;
        env.client.start_container(&cid)?;
        pods.push((guard, c, cid));
    }
    let shared = env
        .node
        .sim
        .state_file()
        .parent()
        .context("simulator state directory")?
        .to_path_buf();
    let t0 = Instant::now();
    while !(shared.join("ready-a").exists() && shared.join("ready-b").exists())
        && t0.elapsed() < Duration::from_secs(60)
    {
        std::thread::sleep(Duration::from_millis(10));
    }
    ensure!(
        shared.join("ready-a").exists() && shared.join("ready-b").exists(),
        "not both ready after 60 s: a {} b {}; logs:\n{}\n{}\narbiter log:\n{}",
        shared.join("ready-a").exists(),
        shared.join("ready-b").exists(),
        cri::read_log(&log_dir.join(pods[0].1.log_path())).unwrap_or_default(),
        cri::read_log(&log_dir.join(pods[1].1.log_path())).unwrap_or_default(),
        env.arbiter.log()
    );
    std::fs::write(shared.join("go"), b"")?;
    let mut outs = Vec::new();
    for ((_, c, cid), cap) in pods.iter().zip([8 * GIB, 16 * GIB]) {
        let log = log_dir.join(c.log_path());
        let st = env.client.wait_exited(cid, T).with_context(|| {
            // What the arbiter's scheduler measured per slice, for whoever looks into a hang.
            let status = Client::connect(&env.arbiter.state_dir, Duration::from_secs(5))
                .and_then(|mut c| c.call(Request::Status {}))
                .map(|r| format!("{r:?}"))
                .unwrap_or_else(|e| e.to_string());
            format!(
                "{}: its log so far:\n{}\narbiter status: {status}\narbiter log:\n{}",
                c.name,
                cri::read_log(&log).unwrap_or_default(),
                env.arbiter.log()
            )
        })?;
        let out = cri::read_log(&log)?;
        println!("containerd {series} CRI, {}:\n{out}", c.name);
        ensure!(
            st.exit_code == 0,
            "{} exited {} ({}):\n{out}\narbiter log:\n{}",
            c.name,
            st.exit_code,
            st.reason,
            env.arbiter.log()
        );
        ensure!(
            workload::get_u64(&out, "total_mem") == Some(cap),
            "{}: cuDeviceTotalMem, expected {cap}:\n{out}",
            c.name
        );
        outs.push(out);
    }
    let ka = workload::get_u64(&outs[0], "kernels").context("no kernels= from A")?;
    let kb = workload::get_u64(&outs[1], "kernels").context("no kernels= from B")?;
    let share = ka as f64 / (ka + kb) as f64;
    println!(
        "kernels A={ka} B={kb}: A (compute 30) {:.1} %, B (compute 70) {:.1} %",
        share * 100.0,
        (1.0 - share) * 100.0
    );
    ensure!(
        ka + kb >= 4000,
        "only {} kernels of 1 ms completed in 5 s",
        ka + kb
    );
    ensure!(
        (share - 0.30).abs() <= TOLERANCE,
        "A ran {ka} kernels, B {kb}: shares {:.1}/{:.1}, wanted 30/70 ± {:.0} points\narbiter log:\n{}",
        share * 100.0,
        (1.0 - share) * 100.0,
        TOLERANCE * 100.0,
        env.arbiter.log()
    );
    for (guard, _, _) in pods {
        guard.remove()?;
    }
    env.finish(driver, &[a, b])
}

#[test]
fn dra_cri_1_7_claim_cdi_device_caps_the_container_at_16gi() -> Result<()> {
    claim_to_container("1.7")
}

#[test]
fn dra_cri_2_1_claim_cdi_device_caps_the_container_at_16gi() -> Result<()> {
    claim_to_container("2.1")
}

#[test]
fn dra_cri_1_7_two_claims_on_one_gpu_get_their_caps_and_30_70() -> Result<()> {
    two_claims_share_one_gpu_30_70("1.7")
}

#[test]
fn dra_cri_2_1_two_claims_on_one_gpu_get_their_caps_and_30_70() -> Result<()> {
    two_claims_share_one_gpu_30_70("2.1")
}
