//! `--mode device-plugin` against a kubelet stand-in — not a real kubelet, none can be obtained
//! on these machines — that speaks the real device plugin API v1beta1 over real unix sockets:
//! kubelet's `Registration` server on `<dir>/kubelet.sock`, and the `DevicePlugin` client on the
//! socket the plugin registers (options, ListAndWatch, GetPreferredAllocation, Allocate), with
//! kubelet's bookkeeping of allocated ids done here the way its device manager does it. The
//! arbiter is the arbiter's own admission logic in memory; the node is the heterogeneous
//! simulated one (H100-class 80 GiB + A100-class 40 GiB).

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{gpus, GI};
use gpuslice_admission::admission::Admission;
use gpuslice_admission::fit::Policy;
use gpuslice_api::{DeviceSelector, NodeStatus, Owner, SliceRequest};
use gpuslice_kubelet_plugin::capacity::PublishPolicy;
use gpuslice_kubelet_plugin::deviceplugin::serve::{serve, Paths};
use gpuslice_kubelet_plugin::deviceplugin::service::{NodeSlices, Plugin, SlicesError};
use gpuslice_kubelet_plugin::deviceplugin::units::UnitPolicy;
use gpuslice_kubelet_plugin::deviceplugin::{RESOURCE, SOCKET};
use gpuslice_kubelet_plugin::gpu::StaticGpus;
use gpuslice_kubelet_plugin::proto::deviceplugin as api;
use gpuslice_oci::select::{select, Selection};
use gpuslice_test_support::kubelet::{healthy, Kubelet};
use tokio::sync::oneshot;
use tonic::Status;

const POLL: Duration = Duration::from_millis(50);
const WAIT: Duration = Duration::from_secs(10);
const H100: &str = "GPU-00000000-aaaa-bbbb-cccc-dddddddddddd";
const A100: &str = "GPU-10000000-aaaa-bbbb-cccc-dddddddddddd";

/// The arbiter's admission in memory, as the plugin sees it through `status`.
struct FakeArbiter(Mutex<Admission>);

impl NodeSlices for FakeArbiter {
    fn status(&self) -> Result<NodeStatus, SlicesError> {
        Ok(self.0.lock().unwrap().status())
    }
}

impl FakeArbiter {
    fn admit(&self, id: &str, req: SliceRequest, container: bool) -> Result<String, String> {
        let owner = Owner {
            container_id: container.then(|| id.to_string()),
            ..Owner::default()
        };
        let a = self
            .0
            .lock()
            .unwrap()
            .admit(id, req, owner)
            .map_err(|e| e.to_string())?;
        Ok(a.devices[0].uuid.clone())
    }
}

struct Node {
    _tmp: PathBuf,
    dir: PathBuf,
    arbiter: Arc<FakeArbiter>,
    stop: Option<oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<anyhow::Result<()>>,
}

impl Node {
    fn start(name: &str, unit: u64) -> Node {
        let tmp = std::env::temp_dir().join(format!("gs-dp-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&tmp);
        let dir = tmp.join("device-plugins");
        let policy = Policy::default();
        let arbiter = Arc::new(FakeArbiter(Mutex::new(Admission::new(
            gpus().into_iter().map(|g| g.info).collect(),
            policy.clone(),
        ))));
        let plugin = Arc::new(Plugin::new(
            UnitPolicy {
                unit,
                policy,
                publish: PublishPolicy::default(),
            },
            Arc::new(StaticGpus(gpus())),
            arbiter.clone(),
        ));
        let (stop, rx) = oneshot::channel::<()>();
        let paths = Paths { dir: dir.clone() };
        let task = tokio::spawn(async move {
            serve(&paths, plugin, POLL, async {
                let _ = rx.await;
            })
            .await
        });
        Node {
            _tmp: tmp,
            dir,
            arbiter,
            stop: Some(stop),
            task,
        }
    }

    async fn stop(mut self) {
        let _ = self.stop.take().unwrap().send(());
        self.task.await.unwrap().unwrap();
        assert!(!self.dir.join(SOCKET).exists(), "socket left behind");
        let _ = std::fs::remove_dir_all(&self._tmp);
    }
}

/// kubelet's device manager for one container: free healthy ids, GetPreferredAllocation,
/// Allocate; then the runtime's reading of the env and the arbiter's admission, as at container
/// creation. Returns (GPU, cap) or the refusal kubelet would put in the Pod's status.
async fn place_pod(
    k: &Kubelet,
    node: &Node,
    allocated: &mut BTreeSet<String>,
    pod: &str,
    units: i32,
) -> Result<(String, u64), String> {
    let env = k.allocate(allocated, units).await?.envs;
    let Selection::Slice(req, _) = select(&BTreeMap::new(), &env).unwrap() else {
        panic!("no slice from {env:?}");
    };
    let cap = match req.memory {
        Some(gpuslice_api::MemoryRequest::Bytes(b)) => b,
        other => panic!("{other:?}"),
    };
    let uuid = node.arbiter.admit(pod, req, true)?;
    Ok((uuid, cap))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn standin_kubelet_registration_options_and_units_advertised() {
    let node = Node::start("reg", GI);
    let mut k = Kubelet::start(&node.dir).unwrap();
    let regs = k.wait_registrations(1, WAIT).await.unwrap();
    assert_eq!(regs[0].resource_name, RESOURCE);
    assert_eq!(regs[0].endpoint, SOCKET);
    assert!(
        regs[0]
            .options
            .as_ref()
            .unwrap()
            .get_preferred_allocation_available
    );
    k.wait_devices("the first list", WAIT, |d| !d.is_empty())
        .await
        .unwrap();
    let devs = k.devices();
    // 80 GiB and 40 GiB, less 8 context reserves of 512 MiB each (--slices-per-gpu 8).
    assert_eq!(healthy(&devs, H100), 76);
    assert_eq!(healthy(&devs, A100), 36);
    assert_eq!(devs.len(), 112);
    assert!(devs.iter().any(|d| d.id == format!("{H100}::75")));
    assert!(devs.iter().all(|d| d.id.len() <= 63));
    println!("advertised: H100-class 76 units, A100-class 36 units (1 GiB)");
    k.stop();
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn standin_kubelet_list_and_watch_follows_slices_made_outside_the_plugin() {
    let node = Node::start("law", GI);
    let mut k = Kubelet::start(&node.dir).unwrap();
    k.wait_devices("the first list", WAIT, |d| healthy(d, A100) == 36)
        .await
        .unwrap();
    // An annotation-made slice of 10 GiB on the A100 takes 10 units there.
    let req = |mem: &str, dev: &str| {
        let key = if dev.starts_with("GPU-") {
            "gpuslice.io/devices"
        } else {
            "gpuslice.io/model"
        };
        let a = BTreeMap::from([
            ("gpuslice.io/memory".to_string(), mem.to_string()),
            (key.to_string(), dev.to_string()),
        ]);
        SliceRequest::from_sources(&a, &[]).unwrap().unwrap()
    };
    node.arbiter
        .admit("annotated", req("10Gi", "A100"), true)
        .unwrap();
    k.wait_devices("A100 at 26", WAIT, |d| {
        healthy(d, A100) == 26 && healthy(d, H100) == 76
    })
    .await
    .unwrap();
    // A slice in the plugin's own form (what Allocate gives) is already counted by kubelet.
    node.arbiter
        .admit("plugin-made", req("5Gi", A100), true)
        .unwrap();
    tokio::time::sleep(POLL * 4).await;
    assert_eq!(healthy(&k.devices(), A100), 26);
    // `gpuslice run` (a bare process, no container) of 1.5 GiB takes 2 units.
    node.arbiter
        .admit("bare", req("1536Mi", "H100"), false)
        .unwrap();
    k.wait_devices("H100 at 74", WAIT, |d| healthy(d, H100) == 74)
        .await
        .unwrap();
    node.arbiter.0.lock().unwrap().release("annotated").unwrap();
    node.arbiter.0.lock().unwrap().release("bare").unwrap();
    k.wait_devices("all back", WAIT, |d| {
        healthy(d, A100) == 36 && healthy(d, H100) == 76
    })
    .await
    .unwrap();
    k.stop();
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn standin_kubelet_pods_of_30_30_40_bin_packed_and_50_refused_naming_both_gpus() {
    let node = Node::start("pack", GI);
    let mut k = Kubelet::start(&node.dir).unwrap();
    k.wait_devices("the first list", WAIT, |d| d.len() == 112)
        .await
        .unwrap();
    let mut allocated = BTreeSet::new();
    let mut placed = Vec::new();
    for (pod, units) in [("pod-a", 30), ("pod-b", 30), ("pod-c", 40)] {
        let (uuid, cap) = place_pod(&k, &node, &mut allocated, pod, units)
            .await
            .unwrap();
        assert_eq!(cap, units as u64 * GI);
        placed.push((pod, units, uuid));
    }
    // Bin-pack: 30 on the A100 (36 → 6), 30 then 40 on the H100 (76 → 46 → 6).
    assert_eq!(
        placed,
        vec![
            ("pod-a", 30, A100.to_string()),
            ("pod-b", 30, H100.to_string()),
            ("pod-c", 40, H100.to_string())
        ]
    );
    // Plugin-made slices change nothing in what is advertised.
    tokio::time::sleep(POLL * 4).await;
    assert_eq!(healthy(&k.devices(), H100), 76);
    let e = place_pod(&k, &node, &mut allocated, "pod-d", 50)
        .await
        .unwrap_err();
    println!("pod of 50 units: {e}");
    assert!(
        e.starts_with(
            "ResourceExhausted: gpuslice.io/gpu-memory: the container asks 50 units (50Gi)"
        ) && e.contains(&format!(
            "GPU 0 {H100} (NVIDIA H100 80GB HBM3): 6 units (6Gi) free of 76"
        )) && e.contains(&format!(
            "GPU 1 {A100} (NVIDIA A100-SXM4-40GB): 6 units (6Gi) free of 36"
        )),
        "{e}"
    );
    // Nothing was allocated or admitted for it.
    assert_eq!(allocated.len(), 100);
    assert_eq!(node.arbiter.0.lock().unwrap().slices().count(), 3);
    k.stop();
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn standin_kubelet_two_gpus_half_full_and_a_pod_bigger_than_either() {
    let node = Node::start("half", GI);
    let mut k = Kubelet::start(&node.dir).unwrap();
    k.wait_devices("the first list", WAIT, |d| d.len() == 112)
        .await
        .unwrap();
    let mut allocated = BTreeSet::new();
    // Half of each GPU: 18 of the A100's 36, 38 of the H100's 76.
    assert_eq!(
        place_pod(&k, &node, &mut allocated, "half-a", 18)
            .await
            .unwrap()
            .0,
        A100
    );
    assert_eq!(
        place_pod(&k, &node, &mut allocated, "half-h", 38)
            .await
            .unwrap()
            .0,
        H100
    );
    // The node has 56 units free: a scheduler counting per node places a Pod of 40 here.
    let free = k.devices().len() - allocated.len();
    assert_eq!(free, 56);
    let e = place_pod(&k, &node, &mut allocated, "big", 40)
        .await
        .unwrap_err();
    println!("node with 56 free units, pod of 40: {e}");
    assert!(
        e.contains("asks 40 units (40Gi)")
            && e.contains("38 units (38Gi) free of 76")
            && e.contains("18 units (18Gi) free of 36"),
        "{e}"
    );
    // A Pod of 38 still fits the H100 exactly.
    assert_eq!(
        place_pod(&k, &node, &mut allocated, "fits", 38)
            .await
            .unwrap()
            .0,
        H100
    );
    k.stop();
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn standin_kubelet_allocate_refuses_unknown_and_split_ids_and_256mi_units_work() {
    let node = Node::start("alloc", 256 << 20);
    let mut k = Kubelet::start(&node.dir).unwrap();
    // 256 MiB units: (80 GiB − 4 GiB) / 256 MiB = 304, (40 − 4) GiB / 256 MiB = 144.
    k.wait_devices("the first list", WAIT, |d| {
        healthy(d, H100) == 304 && healthy(d, A100) == 144
    })
    .await
    .unwrap();
    let mut c = k.plugin().unwrap();
    let alloc = |ids: &[&str]| api::AllocateRequest {
        container_requests: vec![api::ContainerAllocateRequest {
            devices_ids: ids.iter().map(|s| s.to_string()).collect(),
        }],
    };
    let ok = c
        .allocate(alloc(&[&format!("{A100}::0"), &format!("{A100}::1")]))
        .await
        .unwrap()
        .into_inner();
    let env = &ok.container_responses[0].envs;
    assert_eq!(env["GPUSLICE_MEMORY"], (512u64 << 20).to_string());
    assert_eq!(env["GPUSLICE_DEVICES"], A100);
    assert_eq!(
        env["GPUSLICE_DEVICE_PLUGIN"],
        format!("{A100}:{}", 512u64 << 20)
    );
    let err = |s: Status| format!("{:?}: {}", s.code(), s.message());
    let e = err(c.allocate(alloc(&["gpu-0"])).await.unwrap_err());
    assert!(
        e.starts_with("InvalidArgument: gpuslice.io/gpu-memory: unknown device id \"gpu-0\""),
        "{e}"
    );
    let e = err(c
        .allocate(alloc(&[&format!("{A100}::144")]))
        .await
        .unwrap_err());
    assert!(e.contains("has units 0..143"), "{e}");
    let e = err(c
        .allocate(alloc(&[&format!("{A100}::0"), &format!("{H100}::0")]))
        .await
        .unwrap_err());
    assert!(e.contains("span 2 GPUs"), "{e}");
    // What the runtime does with the env and a Pod annotation that disagrees: refused.
    let env: Vec<(String, String)> = env.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
    let ann = BTreeMap::from([("gpuslice.io/memory".to_string(), "1Gi".to_string())]);
    let e = select(&ann, &env).unwrap_err().to_string();
    println!("disagreeing annotation: {e}");
    assert!(
        e.starts_with("gpuslice.io/memory=\"1Gi\": disagrees with the allocation"),
        "{e}"
    );
    let Selection::Slice(r, _) = select(&BTreeMap::new(), &env).unwrap() else {
        panic!()
    };
    assert!(matches!(r.devices, DeviceSelector::List(ref l) if l.len() == 1));
    k.stop();
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn standin_kubelet_restart_wipes_the_directory_and_the_plugin_registers_again() {
    let node = Node::start("restart", GI);
    let mut k = Kubelet::start(&node.dir).unwrap();
    k.wait_registrations(1, WAIT).await.unwrap();
    k.wait_devices("the first list", WAIT, |d| d.len() == 112)
        .await
        .unwrap();
    // kubelet stops, then starts: the directory is emptied (the plugin's socket too) and a new
    // kubelet.sock appears.
    k.stop();
    tokio::time::sleep(POLL * 3).await;
    let mut k2 = Kubelet::start(&node.dir).unwrap();
    let regs = k2.wait_registrations(1, WAIT).await.unwrap();
    assert_eq!(regs[0].resource_name, RESOURCE);
    k2.wait_devices("the list after the restart", WAIT, |d| d.len() == 112)
        .await
        .unwrap();
    assert!(node.dir.join(SOCKET).exists());
    // The new kubelet can allocate.
    let mut allocated = BTreeSet::new();
    assert_eq!(
        place_pod(&k2, &node, &mut allocated, "after", 4)
            .await
            .unwrap()
            .0,
        A100
    );
    // And a restart while kubelet.sock is replaced at once (no gap) is noticed too.
    k2.stop();
    let mut k3 = Kubelet::start(&node.dir).unwrap();
    k3.wait_registrations(1, WAIT).await.unwrap();
    k3.stop();
    node.stop().await;
}

/// The device plugin follows the arbiter's `contexts.json`: when the arbiter measures its
/// contexts again, the next refresh recomputes each GPU's units with that GPU's own reserves
/// (and every `ListAndWatch` stream sends the new list, as for any change of the units).
#[test]
fn units_follow_the_arbiters_context_measurement() {
    use gpuslice_kubelet_plugin::policysource::PolicySource;
    const MI: u64 = 1 << 20;
    let state = std::env::temp_dir().join(format!("gs-dp-ctx-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&state);
    std::fs::create_dir_all(&state).unwrap();
    let infos: Vec<_> = gpus().into_iter().map(|g| g.info).collect();
    let measure = |m0: u64| common::measure_contexts(&state, m0);
    measure(518 * MI);
    let config = gpuslice_api::config::AdmissionConfig::default();
    let source = Arc::new(PolicySource::following(&config, &state));
    let policy = source.current();
    let arbiter = Arc::new(FakeArbiter(Mutex::new(Admission::new(
        infos.clone(),
        policy.clone(),
    ))));
    let plugin = Plugin::new(
        UnitPolicy {
            unit: GI,
            policy,
            publish: PublishPolicy::default(),
        },
        Arc::new(StaticGpus(gpus())),
        arbiter,
    )
    .following(source);
    let units = |p: &Plugin| p.units().iter().map(|g| g.units).collect::<Vec<_>>();
    // floor((80 GiB − 8 × 774 MiB) / 1 GiB), floor((40 GiB − 8 × 556 MiB) / 1 GiB).
    assert_eq!(units(&plugin), [73, 35]);
    assert!(!plugin.refresh(), "nothing changed");
    measure(1252 * MI);
    assert!(plugin.refresh(), "the new measurement changes the units");
    // floor((80 GiB − 8 × 1 508 MiB) / 1 GiB); the A100's unchanged.
    assert_eq!(units(&plugin), [68, 35]);
    let _ = std::fs::remove_dir_all(&state);
}
