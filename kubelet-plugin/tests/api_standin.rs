//! The plugin's API-server side against the API stand-in (`common::apiserver`) — NOT a real
//! Kubernetes API server: none can be obtained on these machines. The plugin's real `kube`
//! client (from a kubeconfig, bearer token, HTTP on loopback) talks to a small strict server
//! that implements only the calls the plugin makes: the ResourceSlice publisher (create, no
//! rewrite of an unchanged pool, generation bumps on device changes, several slices for a large
//! node, conflicts retried, foreign and deleted slices repaired, API down and back) and the
//! ResourceClaim source (found, not found, deleted between prepare attempts, recreated with
//! another UID, API down, wrong credentials).

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::apienv::{env, publisher, stored, wait_for, NODE_UID, TIMEOUT};
use common::apiserver::{kubeconfig_for, StandIn};
use common::{gpus, ClaimSpec, Node, GI, NODE};
use gpuslice_admission::admission::Admission;
use gpuslice_admission::fit::Policy;
use gpuslice_admission::inventory::InventoryError;
use gpuslice_kubelet_plugin::capacity::{offer, PublishPolicy};
use gpuslice_kubelet_plugin::dra::apiserver::{connect, ApiClaims};
use gpuslice_kubelet_plugin::dra::arbiter::Arbiter;
use gpuslice_kubelet_plugin::dra::claim::{ClaimRef, ClaimSource, SourceError};
use gpuslice_kubelet_plugin::dra::driver::ClaimError;
use gpuslice_kubelet_plugin::dra::publish::{PublishError, MAX_ATTEMPTS};
use gpuslice_kubelet_plugin::dra::resourceslice::resource_slices;
use gpuslice_kubelet_plugin::gpu::{Gpu, GpuSource, StaticGpus};
use gpuslice_kubelet_plugin::quantity;
use k8s_openapi::api::resource::v1::ResourceSlice;
use kube::api::PostParams;
use kube::Api;

fn many(n: usize) -> Vec<Gpu> {
    (0..n)
        .map(|i| {
            let mut g = gpus()[i % 2].clone();
            g.info.index = i as u32;
            g.info.uuid = format!("GPU-{i:04}");
            g
        })
        .collect()
}

#[test]
fn standin_api_publisher_creates_the_pool_and_leaves_it_alone_when_unchanged() {
    let e = env("create");
    let p = publisher(&e, Arc::new(StaticGpus(gpus())));
    let r = e.rt.block_on(p.sync()).unwrap();
    assert_eq!(r.generation, 0);
    assert_eq!(r.created, ["node-a-gpuslice.io-0"]);
    let slices = stored(&e);
    assert_eq!(slices.len(), 1);
    let s = &slices[0];
    assert_eq!(s.spec.node_name.as_deref(), Some(NODE));
    assert_eq!(s.spec.pool.name, NODE);
    assert_eq!(s.spec.pool.resource_slice_count, 1);
    // Owned by the Node (garbage-collected with it).
    let owners = s.metadata.owner_references.clone().unwrap();
    assert_eq!(owners.len(), 1);
    assert_eq!(
        (
            owners[0].kind.as_str(),
            owners[0].name.as_str(),
            owners[0].uid.as_str()
        ),
        ("Node", NODE, NODE_UID)
    );
    assert_eq!(owners[0].api_version, "v1");
    assert_eq!(owners[0].controller, Some(true));
    // What the stand-in stored is exactly the computed slice (plus the server's metadata).
    let mut want = resource_slices(
        NODE,
        &gpus(),
        &Policy::default(),
        &PublishPolicy::default(),
        0,
    );
    assert_eq!(s.spec, want.remove(0).spec);
    // The published capacities are what the arbiter's admission admits (capacity.rs), on the
    // heterogeneous node.
    for (d, g) in s.spec.devices.as_ref().unwrap().iter().zip(gpus()) {
        let o = offer(&Policy::default(), &PublishPolicy::default(), &g.info);
        let cap = d.capacity.as_ref().unwrap();
        assert_eq!(quantity::of(&cap["memory"].value).unwrap(), o.memory);
        assert_eq!(quantity::of(&cap["compute"].value).unwrap(), 100);
        assert_eq!(quantity::of(&cap["slices"].value).unwrap(), 8);
    }
    let writes = e.api.state().slice_writes().len();
    // Again, and from a restarted plugin: nothing written, same generation.
    assert_eq!(e.rt.block_on(p.sync()).unwrap().generation, 0);
    let again = publisher(&e, Arc::new(StaticGpus(gpus())));
    let r = e.rt.block_on(again.sync()).unwrap();
    assert!(!r.changed(), "{r:?}");
    assert_eq!(r.generation, 0);
    assert_eq!(e.api.state().slice_writes().len(), writes);
    // The list used the field selector of this node and driver.
    assert_eq!(
        p.field_selector(),
        "spec.nodeName=node-a,spec.driver=gpuslice.io"
    );
}

#[test]
fn standin_api_publisher_bumps_the_generation_when_a_gpu_goes_and_comes_back() {
    let e = env("gen");
    let p = publisher(&e, Arc::new(StaticGpus(gpus())));
    e.rt.block_on(p.sync_gpus(&gpus())).unwrap();
    let one = vec![gpus().remove(0)];
    let r = e.rt.block_on(p.sync_gpus(&one)).unwrap();
    assert_eq!((r.generation, r.updated.len()), (1, 1), "{r:?}");
    let s = stored(&e);
    assert_eq!(s[0].spec.pool.generation, 1);
    assert_eq!(s[0].spec.devices.as_ref().unwrap().len(), 1);
    let r = e.rt.block_on(p.sync_gpus(&gpus())).unwrap();
    assert_eq!(r.generation, 2);
    assert_eq!(stored(&e)[0].spec.devices.as_ref().unwrap().len(), 2);
}

#[test]
fn standin_api_publisher_spans_slices_for_a_large_node_and_shrinks_cleanly() {
    let e = env("large");
    let p = publisher(&e, Arc::new(StaticGpus(gpus())));
    let r = e.rt.block_on(p.sync_gpus(&many(300))).unwrap();
    assert_eq!(r.created.len(), 3);
    let counts: Vec<(usize, i64)> = stored(&e)
        .iter()
        .map(|s| {
            (
                s.spec.devices.as_ref().unwrap().len(),
                s.spec.pool.resource_slice_count,
            )
        })
        .collect();
    assert_eq!(counts, [(128, 3), (128, 3), (44, 3)]);
    // Down to 2 GPUs: slice 0 updated to generation 1 (count 1) before 1 and 2 are deleted —
    // the stand-in's pool check refuses any other order.
    let r = e.rt.block_on(p.sync_gpus(&gpus())).unwrap();
    assert_eq!(r.updated, ["node-a-gpuslice.io-0"]);
    assert_eq!(r.deleted, ["node-a-gpuslice.io-1", "node-a-gpuslice.io-2"]);
    let s = stored(&e);
    assert_eq!(s.len(), 1);
    assert_eq!(
        (
            s[0].spec.pool.generation,
            s[0].spec.pool.resource_slice_count
        ),
        (1, 1)
    );
    assert!(
        e.api.state().refused.is_empty(),
        "{:?}",
        e.api.state().refused
    );
}

#[test]
fn standin_api_publisher_retries_conflicts_and_gives_up_after_max_attempts() {
    let e = env("conflict");
    let p = publisher(&e, Arc::new(StaticGpus(gpus())));
    e.rt.block_on(p.sync_gpus(&gpus())).unwrap();
    let one = vec![gpus().remove(0)];
    // A concurrent writer changes the slice between the publisher's list and its update, twice.
    e.api.state().interfere = 2;
    let r = e.rt.block_on(p.sync_gpus(&one)).unwrap();
    assert_eq!(r.conflicts, 2, "{r:?}");
    assert_eq!(r.generation, 1);
    let log = e.api.state().log.clone();
    assert_eq!(
        log.iter()
            .filter(|l| l.starts_with("PUT") && l.ends_with("409"))
            .count(),
        2,
        "{log:?}"
    );
    assert_eq!(stored(&e)[0].spec.devices.as_ref().unwrap().len(), 1);
    // One that never stops: a clear error after MAX_ATTEMPTS.
    e.api.state().interfere = 100;
    let err = e.rt.block_on(p.sync_gpus(&gpus())).unwrap_err();
    assert!(matches!(err, PublishError::Conflicts { .. }), "{err}");
    let text = err.to_string();
    assert!(
        text.contains(&format!("after {MAX_ATTEMPTS} attempts")),
        "{text}"
    );
    assert!(text.contains("the object has been modified"), "{text}");
}

#[test]
fn standin_api_publisher_deletes_stale_slices_of_its_node_and_repairs_deleted_ones() {
    let e = env("foreign");
    // Left over by an earlier run: a slice of this node and driver under another name, and one
    // of another node (not ours: left alone).
    let old = |node: &str, n: usize| {
        let mut s = resource_slices(
            node,
            &gpus(),
            &Policy::default(),
            &PublishPolicy::default(),
            0,
        )
        .remove(0);
        s.metadata.name = Some(format!("{node}-gpuslice.io-old{n}"));
        s
    };
    let api: Api<ResourceSlice> = Api::all(e.client.clone());
    let pp = PostParams::default();
    e.rt.block_on(api.create(&pp, &old(NODE, 7))).unwrap();
    e.rt.block_on(api.create(&pp, &old("node-b", 1))).unwrap();
    let p = publisher(&e, Arc::new(StaticGpus(gpus())));
    let r = e.rt.block_on(p.sync()).unwrap();
    assert_eq!(r.generation, 1);
    assert_eq!(r.created, ["node-a-gpuslice.io-0"]);
    assert_eq!(r.deleted, ["node-a-gpuslice.io-old7"]);
    let names: Vec<String> = stored(&e)
        .iter()
        .map(|s| s.metadata.name.clone().unwrap())
        .collect();
    assert_eq!(names, ["node-a-gpuslice.io-0", "node-b-gpuslice.io-old1"]);
    // Someone deletes ours: the next sync (the periodic resync) puts it back, one generation
    // above what this publisher published before.
    e.api.state().slices.remove("node-a-gpuslice.io-0");
    let r = e.rt.block_on(p.sync()).unwrap();
    assert_eq!((r.created.len(), r.generation), (1, 2), "{r:?}");
}

#[test]
fn standin_api_publisher_reports_the_api_down_and_recovers() {
    let mut e = env("down");
    let p = publisher(&e, Arc::new(StaticGpus(gpus())));
    e.api.state().down = true;
    let err = e.rt.block_on(p.sync()).unwrap_err().to_string();
    assert!(err.contains("ResourceSlices of node node-a: list"), "{err}");
    assert!(err.contains("HTTP 503"), "{err}");
    e.api.state().down = false;
    // Gone altogether: connection refused, said as such.
    let state = e.api.state.clone();
    let addr = e.api.addr;
    e.api.stop();
    std::thread::sleep(Duration::from_millis(100));
    let err = e.rt.block_on(p.sync()).unwrap_err().to_string();
    assert!(err.contains("unreachable"), "{err}");
    // Back on the same address: the same client publishes.
    e.api = StandIn::start_at(&e.rt, addr, state);
    let r = e.rt.block_on(p.sync()).unwrap();
    assert_eq!(r.created.len(), 1);
}

/// `p` running (polling every 30 ms) until the sender is used.
fn running(
    e: &common::apienv::Env,
    p: gpuslice_kubelet_plugin::dra::publish::Publisher,
) -> (
    tokio::sync::oneshot::Sender<()>,
    tokio::task::JoinHandle<()>,
) {
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let task = e.rt.spawn(async move {
        let wake = tokio::sync::Notify::new();
        let stop = async {
            let _ = rx.await;
        };
        p.run(
            Duration::from_millis(30),
            Duration::from_secs(600),
            &wake,
            stop,
        )
        .await
    });
    (tx, task)
}

/// GPUs a test can change while the publisher runs.
struct Changing(Mutex<Result<Vec<Gpu>, String>>);

impl GpuSource for Changing {
    fn gpus(&self) -> Result<Vec<Gpu>, InventoryError> {
        self.0.lock().unwrap().clone().map_err(InventoryError)
    }
}

#[test]
fn standin_api_publisher_run_follows_device_changes() {
    let e = env("run");
    let source = Arc::new(Changing(Mutex::new(Ok(gpus()))));
    let p = publisher(&e, source.clone());
    let (tx, task) = running(&e, p);
    let devices = |s: &[ResourceSlice]| {
        s.first().map(|x| {
            (
                x.spec.pool.generation,
                x.spec.devices.as_ref().unwrap().len(),
            )
        })
    };
    wait_for(&e, "the first publication", |s| devices(s) == Some((0, 2)));
    // GPU 1 stops answering NVML (unhealthy): withdrawn.
    *source.0.lock().unwrap() = Ok(vec![gpus().remove(0)]);
    wait_for(&e, "GPU 1 withdrawn", |s| devices(s) == Some((1, 1)));
    // NVML down altogether: the pool is left as it is.
    *source.0.lock().unwrap() = Err("NVML: driver not loaded".into());
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(devices(&stored(&e)), Some((1, 1)));
    // Back: republished.
    *source.0.lock().unwrap() = Ok(gpus());
    wait_for(&e, "GPU 1 back", |s| devices(s) == Some((2, 2)));
    // Someone else's failed write in between does not stop it: API down, then up.
    e.api.state().down = true;
    *source.0.lock().unwrap() = Ok(vec![gpus().remove(1)]);
    std::thread::sleep(Duration::from_millis(200));
    e.api.state().down = false;
    wait_for(&e, "republished after the API came back", |s| {
        devices(s) == Some((3, 1))
    });
    tx.send(()).unwrap();
    e.rt.block_on(task).unwrap();
}

#[test]
fn standin_api_is_strict_about_what_it_accepts() {
    let e = env("strict");
    let api: Api<ResourceSlice> = Api::all(e.client.clone());
    let pp = PostParams::default();
    let good = resource_slices(
        NODE,
        &gpus(),
        &Policy::default(),
        &PublishPolicy::default(),
        0,
    )
    .remove(0);
    // 129 devices in one slice.
    let mut big = resource_slices(
        NODE,
        &many(129),
        &Policy::default(),
        &PublishPolicy::default(),
        0,
    )
    .remove(0);
    let mut devs = big.spec.devices.take().unwrap();
    devs.push({
        let mut d = devs[0].clone();
        d.name = "gpu-128".into();
        d
    });
    big.spec.devices = Some(devs);
    let err =
        e.rt.block_on(api.create(&pp, &big))
            .unwrap_err()
            .to_string();
    assert!(err.contains("at most 128"), "{err}");
    // A device name that is not a DNS label, a capacity that is not a quantity.
    let mut bad = good.clone();
    bad.spec.devices.as_mut().unwrap()[0].name = "GPU_0".into();
    let err =
        e.rt.block_on(api.create(&pp, &bad))
            .unwrap_err()
            .to_string();
    assert!(err.contains("is not a DNS label"), "{err}");
    let mut bad = good.clone();
    bad.spec.devices.as_mut().unwrap()[0]
        .capacity
        .as_mut()
        .unwrap()
        .get_mut("memory")
        .unwrap()
        .value = k8s_openapi::apimachinery::pkg::api::resource::Quantity("lots".into());
    let err =
        e.rt.block_on(api.create(&pp, &bad))
            .unwrap_err()
            .to_string();
    assert!(err.contains("capacity[memory].value"), "{err}");
    // A pool without slices.
    let mut bad = good.clone();
    bad.spec.pool.resource_slice_count = 0;
    let err =
        e.rt.block_on(api.create(&pp, &bad))
            .unwrap_err()
            .to_string();
    assert!(err.contains("resourceSliceCount"), "{err}");
    // An unknown field, sent raw (the typed client cannot).
    let raw = e.rt.block_on(async {
        let mut v = serde_json::to_value(&good).unwrap();
        v["spec"]["devices"][0]["capcity"] = serde_json::json!({});
        let req = http::Request::post("/apis/resource.k8s.io/v1/resourceslices")
            .header("content-type", "application/json")
            .body(serde_json::to_vec(&v).unwrap())
            .unwrap();
        e.client.request::<ResourceSlice>(req).await
    });
    let err = raw.unwrap_err().to_string();
    assert!(
        err.contains(".spec.devices[0].capcity: unknown field"),
        "{err}"
    );
    // The good one; then a stale update, a duplicate create, an immutable field, a 404.
    let created = e.rt.block_on(api.create(&pp, &good)).unwrap();
    let err =
        e.rt.block_on(api.create(&pp, &good))
            .unwrap_err()
            .to_string();
    assert!(
        err.contains("already exists") && err.contains("409"),
        "{err}"
    );
    let created =
        e.rt.block_on(api.replace("node-a-gpuslice.io-0", &pp, &created))
            .unwrap();
    let mut stale = created.clone();
    stale.metadata.resource_version = Some("1".into());
    let err =
        e.rt.block_on(api.replace("node-a-gpuslice.io-0", &pp, &stale))
            .unwrap_err()
            .to_string();
    assert!(
        err.contains("has been modified") && err.contains("409"),
        "{err}"
    );
    let mut moved = created.clone();
    moved.spec.node_name = Some("node-b".into());
    let err =
        e.rt.block_on(api.replace("node-a-gpuslice.io-0", &pp, &moved))
            .unwrap_err()
            .to_string();
    assert!(err.contains("spec.nodeName: field is immutable"), "{err}");
    let err = e.rt.block_on(api.get("nope")).unwrap_err().to_string();
    assert!(err.contains("not found") && err.contains("404"), "{err}");
    // An older generation next to a newer one of the same pool (stand-in pool check).
    let mut older = good.clone();
    older.metadata.name = Some("node-a-gpuslice.io-9".into());
    let mut newer = created.clone();
    newer.spec.pool.generation = 4;
    e.rt.block_on(api.replace("node-a-gpuslice.io-0", &pp, &newer))
        .unwrap();
    let err =
        e.rt.block_on(api.create(&pp, &older))
            .unwrap_err()
            .to_string();
    assert!(err.contains("is older than"), "{err}");
}

#[test]
fn standin_api_claims_found_not_found_down_and_unauthorized() {
    let mut e = env("claims");
    let uid = "7c1d2e3f-0000-4000-8000-000000000001";
    e.api
        .state()
        .put_claim(ClaimSpec::new(uid, "gpu-0", 16 * GI, 40).build());
    let claims = ApiClaims::new(e.client.clone(), e.rt.handle().clone(), TIMEOUT);
    let c = claims.get("default", uid).unwrap();
    assert_eq!(c.metadata.uid.as_deref(), Some(uid));
    assert!(c.status.unwrap().allocation.is_some());
    assert_eq!(claims.get("default", "other"), Err(SourceError::NotFound));
    assert_eq!(claims.get("kube-system", uid), Err(SourceError::NotFound));
    e.api.state().down = true;
    match claims.get("default", uid) {
        Err(SourceError::Unavailable(m)) => {
            assert!(
                m.contains(&format!("GET ResourceClaim default/{uid}")),
                "{m}"
            );
            assert!(m.contains("HTTP 503"), "{m}");
        }
        r => panic!("{r:?}"),
    }
    e.api.state().down = false;
    // Wrong credentials.
    let kc = kubeconfig_for(
        &format!("http://{}", e.api.addr),
        "wrong",
        &e.dir.join("bad"),
    );
    let bad = e.rt.block_on(connect(Some(&kc), TIMEOUT)).unwrap();
    let bad = ApiClaims::new(bad, e.rt.handle().clone(), TIMEOUT);
    match bad.get("default", uid) {
        Err(SourceError::Unavailable(m)) => assert!(m.contains("HTTP 401"), "{m}"),
        r => panic!("{r:?}"),
    }
    // Nothing listening.
    e.api.stop();
    std::thread::sleep(Duration::from_millis(100));
    match claims.get("default", uid) {
        Err(SourceError::Unavailable(m)) => assert!(m.contains("unreachable"), "{m}"),
        r => panic!("{r:?}"),
    }
    // A missing kubeconfig is named.
    let err = match e.rt.block_on(connect(Some(&e.dir.join("none")), TIMEOUT)) {
        Ok(_) => panic!("a missing kubeconfig connected"),
        Err(err) => err.to_string(),
    };
    assert!(err.contains("kubeconfig") && err.contains("none"), "{err}");
}

#[test]
fn standin_api_prepare_reads_the_claim_and_copes_with_its_deletion_between_attempts() {
    let e = env("prepare");
    let node = Node::new("api-prepare");
    let claims = Arc::new(ApiClaims::new(
        e.client.clone(),
        e.rt.handle().clone(),
        TIMEOUT,
    ));
    let driver = node.driver_with(claims.clone());
    // The node runs its arbiter with [admission] dra_only, as the DaemonSet of the dra overlay
    // does: the plugin's slices must pass, anything else is refused.
    *node.arbiter.admission.lock().unwrap() = Admission::new(
        gpus().into_iter().map(|g| g.info).collect(),
        Policy {
            dra_only: true,
            ..Policy::default()
        },
    );
    let uid = "8d2e3f40-0000-4000-8000-000000000001";
    let r = ClaimRef {
        namespace: "default".into(),
        name: "trainer-gpu".into(),
        uid: uid.into(),
    };
    let spec = ClaimSpec {
        name: "trainer-gpu",
        ..ClaimSpec::new(uid, "gpu-0", 16 * GI, 40)
    };
    e.api.state().put_claim(spec.build());
    // First attempt: the arbiter is down — refused, nothing left behind.
    *node.arbiter.down.lock().unwrap() = true;
    let out = driver.prepare(std::slice::from_ref(&r));
    let err = out[uid].clone().unwrap_err();
    assert!(matches!(err, ClaimError::Prepare(_)), "{err:?}");
    assert!(err.to_string().contains("device gpu-0: arbiter"), "{err}");
    assert!(node.arbiter.slices().is_empty());
    *node.arbiter.down.lock().unwrap() = false;
    // The user deletes the claim before kubelet retries.
    e.api.state().claims.clear();
    let err = driver.prepare(std::slice::from_ref(&r))[uid]
        .clone()
        .unwrap_err();
    assert!(matches!(err, ClaimError::NotFound(_)), "{err:?}");
    let err = err.to_string();
    assert!(
        err.contains(&format!("claim default/trainer-gpu ({uid})"))
            && err.contains("not found at the API server"),
        "{err}"
    );
    // ... and recreates one under the same name: another UID, refused.
    let other = ClaimSpec {
        name: "trainer-gpu",
        ..ClaimSpec::new("9e3f4051-0000-4000-8000-000000000002", "gpu-0", 16 * GI, 40)
    };
    e.api.state().put_claim(other.build());
    let err = driver.prepare(std::slice::from_ref(&r))[uid]
        .clone()
        .unwrap_err();
    assert!(matches!(err, ClaimError::Plan(_)), "{err:?}");
    let err = err.to_string();
    assert!(
        err.ends_with(
            "metadata.uid: the API server has 9e3f4051-0000-4000-8000-000000000002: the claim \
             was deleted and recreated"
        ),
        "{err}"
    );
    assert!(node.arbiter.slices().is_empty());
    assert!(node.cdi.specs().is_empty());
    // The claim as the scheduler allocated it: prepared from the API's copy, one slice of 16 GiB.
    e.api.state().claims.clear();
    e.api.state().put_claim(spec.build());
    let devs = driver.prepare(std::slice::from_ref(&r))[uid]
        .clone()
        .unwrap();
    assert_eq!(devs[0].cdi_device_ids, [format!("gpuslice.io/claim={uid}")]);
    let slices = node.arbiter.slices();
    assert_eq!(slices.len(), 1);
    assert_eq!(slices[0].devices[0].memory_cap, Some(16 * GI));
    let annotated = node.arbiter.admit(
        "0123456789ab",
        &gpuslice_api::SliceRequest {
            memory: Some(gpuslice_api::MemoryRequest::Bytes(GI)),
            ..Default::default()
        },
    );
    let err = annotated.unwrap_err().to_string();
    assert!(
        err.contains("slice \"0123456789ab\" refused") && err.contains("dra_only"),
        "{err}"
    );
    // A retry after the claim is gone: answered from the checkpoint, no API call needed.
    e.api.state().claims.clear();
    let gets = e.api.state().log.len();
    assert!(driver.prepare(std::slice::from_ref(&r))[uid].is_ok());
    assert_eq!(e.api.state().log.len(), gets);
    driver.unprepare(std::slice::from_ref(&r))[uid]
        .clone()
        .unwrap();
    assert!(node.arbiter.slices().is_empty());
}

#[test]
fn standin_api_publisher_without_the_node_object_publishes_unowned_then_adopts() {
    let e = env("owner");
    e.api.state().nodes.clear();
    let p = publisher(&e, Arc::new(StaticGpus(gpus())));
    let r = e.rt.block_on(p.sync()).unwrap();
    assert_eq!(r.created.len(), 1);
    assert!(stored(&e)[0].metadata.owner_references.is_none());
    // The Node can be read later (RBAC fixed, API back): the next sync sets the owner.
    e.api.state().nodes.insert(NODE.into(), NODE_UID.into());
    let r = e.rt.block_on(p.sync()).unwrap();
    assert_eq!((r.updated.len(), r.generation), (1, 1), "{r:?}");
    let owners = stored(&e)[0].metadata.owner_references.clone().unwrap();
    assert_eq!(owners[0].uid, NODE_UID);
    // And then it is left alone.
    assert!(!e.rt.block_on(p.sync()).unwrap().changed());
}

/// The running publisher follows the arbiter's `contexts.json`: when the arbiter measures its
/// contexts again (here: eager module loading, 1 252 MiB on GPU 0), the pool is republished
/// with that GPU's new reserves set aside, the other GPU's capacity unchanged.
#[test]
fn standin_api_publisher_run_follows_the_arbiters_context_measurement() {
    use gpuslice_kubelet_plugin::policysource::PolicySource;
    const MI: u64 = 1 << 20;
    let e = env("contexts");
    let state = e.dir.join("state");
    std::fs::create_dir_all(&state).unwrap();
    let measure = |m0: u64| common::measure_contexts(&state, m0);
    measure(518 * MI);
    let config = gpuslice_api::config::AdmissionConfig::default();
    let source = Arc::new(PolicySource::following(&config, &state));
    let p = publisher(&e, Arc::new(StaticGpus(gpus()))).following(source);
    let (tx, task) = running(&e, p);
    let memory = |s: &[ResourceSlice]| -> Option<Vec<u64>> {
        let devs = s.first()?.spec.devices.as_ref()?;
        let caps = devs
            .iter()
            .map(|d| d.capacity.as_ref().map(|c| c["memory"].value.clone()));
        caps.map(|q| q.and_then(|q| quantity::of(&q).ok()))
            .collect()
    };
    let expect = |charge0: u64| Some(vec![80 * GI - 8 * charge0, 40 * GI - 8 * 556 * MI]);
    wait_for(&e, "the first publication", |s| {
        memory(s) == expect(774 * MI)
    });
    measure(1252 * MI);
    wait_for(&e, "the new measurement published", |s| {
        memory(s) == expect(1508 * MI)
    });
    tx.send(()).unwrap();
    e.rt.block_on(task).unwrap();
}
