//! A kubelet stand-in — not a real kubelet, none can be obtained on these machines — that
//! speaks the real kubelet plugin gRPC protocols (pluginregistration v1, DRA v1 and v1beta1)
//! over real unix sockets to the plugin's servers, dialling them as kubelet does (the socket
//! path as `:authority`: `common::kubelet::channel`). The arbiter is the arbiter's admission logic
//! in memory and claims come from an in-memory API stand-in (no API server runs).

mod common;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::plugin::Plugin;
use common::{ClaimSpec, Node, GI, NODE};
use gpuslice_api::{MemoryRequest, Priority};
use gpuslice_kubelet_plugin::proto::{dra_v1 as v1, dra_v1beta1 as v1beta1, registration as reg};
use tonic::transport::Channel;

/// How a bad case prepares the node.
type Setup = Box<dyn Fn(&Node)>;

const UID: &str = "5b0c3a52-9f1e-4c7e-9b7a-1d2e3f405060";

async fn channel(path: &Path) -> Channel {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !path.exists() {
        assert!(
            Instant::now() < deadline,
            "{} never appeared",
            path.display()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // As kubelet dials: the socket path as :authority.
    common::kubelet::channel(path).await
}

fn claim(uid: &str) -> v1::Claim {
    v1::Claim {
        namespace: "default".into(),
        uid: uid.into(),
        name: uid.into(),
    }
}

async fn prepare(ch: Channel, uid: &str) -> v1::NodePrepareResourceResponse {
    let mut c = v1::dra_plugin_client::DraPluginClient::new(ch);
    let r = c
        .node_prepare_resources(v1::NodePrepareResourcesRequest {
            claims: vec![claim(uid)],
        })
        .await
        .unwrap()
        .into_inner();
    r.claims.get(uid).cloned().unwrap()
}

async fn unprepare(ch: Channel, uid: &str) -> String {
    let mut c = v1::dra_plugin_client::DraPluginClient::new(ch);
    let r = c
        .node_unprepare_resources(v1::NodeUnprepareResourcesRequest {
            claims: vec![claim(uid)],
        })
        .await
        .unwrap()
        .into_inner();
    r.claims.get(uid).cloned().unwrap().error
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn standin_kubelet_registration_get_info_and_notify() {
    let node = Node::new("reg");
    let plugin = Plugin::start(&node);
    let ch = channel(&plugin.sockets.registration()).await;
    let mut c = reg::registration_client::RegistrationClient::new(ch);
    let info = c.get_info(reg::InfoRequest {}).await.unwrap().into_inner();
    assert_eq!(info.r#type, "DRAPlugin");
    assert_eq!(info.name, "gpuslice.io");
    assert_eq!(PathBuf::from(&info.endpoint), plugin.sockets.dra());
    assert_eq!(
        info.supported_versions,
        ["v1.DRAPlugin", "v1beta1.DRAPlugin"]
    );
    assert!(
        plugin.sockets.dra().exists(),
        "the endpoint exists before kubelet is told of it"
    );
    c.notify_registration_status(reg::RegistrationStatus {
        plugin_registered: true,
        error: String::new(),
    })
    .await
    .unwrap();
    plugin.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn standin_kubelet_prepare_retry_restart_unprepare_v1() {
    let node = Node::new("life");
    let mut spec = ClaimSpec::new(UID, "gpu-0", 16 * GI, 40);
    spec.config = Some(serde_json::json!({
        "apiVersion": "gpuslice.io/v1", "kind": "SliceConfig", "priority": "high", "computeLimit": 60
    }));
    node.claims.put(spec.build());
    let plugin = Plugin::start(&node);
    let ch = channel(&plugin.sockets.dra()).await;

    let first = prepare(ch.clone(), UID).await;
    assert_eq!(first.error, "");
    let want = v1::Device {
        request_names: vec!["gpu".into()],
        pool_name: NODE.into(),
        device_name: "gpu-0".into(),
        cdi_device_ids: vec![format!("gpuslice.io/claim={UID}")],
    };
    assert_eq!(first.devices, [want]);
    let slices = node.arbiter.slices();
    assert_eq!(slices.len(), 1);
    let s = &slices[0];
    assert_eq!(s.slice_id, format!("dra-{UID}"));
    assert_eq!(s.request.memory, Some(MemoryRequest::Bytes(16 * GI)));
    assert_eq!(
        (
            s.request.compute,
            s.request.compute_limit,
            s.request.priority
        ),
        (Some(40), Some(60), Priority::High)
    );
    assert_eq!(s.devices.len(), 1);
    assert_eq!(s.devices[0].index, 0, "exactly the allocated GPU");
    assert_eq!(s.devices[0].memory_cap, Some(16 * GI));
    assert_eq!(node.cdi.specs(), [UID]);

    // kubelet retries: the same answer, nothing doubled.
    assert_eq!(prepare(ch.clone(), UID).await, first);
    assert_eq!(node.arbiter.slices().len(), 1);

    // Plugin restart between prepare and unprepare; the claim is even gone from the API.
    plugin.stop().await;
    node.claims.delete("default", UID);
    let plugin = Plugin::start(&node);
    let ch = channel(&plugin.sockets.dra()).await;
    assert_eq!(
        prepare(ch.clone(), UID).await,
        first,
        "answered from the checkpoint"
    );

    assert_eq!(unprepare(ch.clone(), UID).await, "");
    assert!(node.arbiter.slices().is_empty());
    assert!(node.cdi.specs().is_empty());
    let cp: serde_json::Value =
        serde_json::from_slice(&std::fs::read(node.checkpoint_path()).unwrap()).unwrap();
    assert_eq!(cp["claims"], serde_json::json!({}));
    // Unprepare is idempotent too.
    assert_eq!(unprepare(ch, UID).await, "");
    plugin.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn standin_kubelet_v1beta1_prepare_and_unprepare() {
    let node = Node::new("beta");
    node.claims
        .put(ClaimSpec::new(UID, "gpu-1", 8 * GI, 0).build());
    let plugin = Plugin::start(&node);
    let ch = channel(&plugin.sockets.dra()).await;
    let mut c = v1beta1::dra_plugin_client::DraPluginClient::new(ch);
    let c1 = v1beta1::Claim {
        namespace: "default".into(),
        uid: UID.into(),
        name: UID.into(),
    };
    let r = c
        .node_prepare_resources(v1beta1::NodePrepareResourcesRequest {
            claims: vec![c1.clone()],
        })
        .await
        .unwrap()
        .into_inner();
    let got = &r.claims[UID];
    assert_eq!(got.error, "");
    assert_eq!(got.devices[0].device_name, "gpu-1");
    assert_eq!(
        got.devices[0].cdi_device_ids,
        [format!("gpuslice.io/claim={UID}")]
    );
    let s = node.arbiter.slices();
    assert_eq!(
        (s[0].devices[0].index, s[0].request.compute),
        (1, None),
        "best effort on gpu-1"
    );
    let r = c
        .node_unprepare_resources(v1beta1::NodeUnprepareResourcesRequest { claims: vec![c1] })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(r.claims[UID].error, "");
    assert!(node.arbiter.slices().is_empty());
    plugin.stop().await;
}

/// Each bad claim fails alone, with a message naming the claim, the device and the field, and
/// leaves no slice, CDI spec or checkpoint entry behind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn standin_kubelet_bad_claims_fail_alone_and_leak_nothing() {
    let node = Node::new("bad");
    let plugin = Plugin::start(&node);
    let ch = channel(&plugin.sockets.dra()).await;
    let uid = "0d9e8f7a-0000-4000-8000-000000000001";
    let cases: Vec<(&str, Setup, Vec<&str>)> = vec![
        (
            "unknown device",
            Box::new(|n: &Node| n.claims.put(ClaimSpec::new(uid, "gpu-7", GI, 0).build())),
            vec!["device gpu-7", "results[0].device", "no such device"],
        ),
        (
            "other driver",
            Box::new(|n: &Node| {
                n.claims.put(
                    ClaimSpec {
                        driver: "gpu.nvidia.com",
                        ..ClaimSpec::new(uid, "gpu-0", GI, 0)
                    }
                    .build(),
                )
            }),
            vec![
                "status.allocation.devices.results",
                "no device of driver gpuslice.io",
            ],
        ),
        (
            "other pool",
            Box::new(|n: &Node| {
                n.claims.put(
                    ClaimSpec {
                        pool: "node-b",
                        ..ClaimSpec::new(uid, "gpu-0", GI, 0)
                    }
                    .build(),
                )
            }),
            vec!["device gpu-0", "results[0].pool", "node-b"],
        ),
        (
            "above capacity",
            Box::new(|n: &Node| {
                n.claims
                    .put(ClaimSpec::new(uid, "gpu-1", 40 * GI, 0).build())
            }),
            vec![
                "device gpu-1",
                "consumedCapacity.memory",
                "above the device's published memory capacity",
            ],
        ),
        (
            "compute above 100",
            Box::new(|n: &Node| n.claims.put(ClaimSpec::new(uid, "gpu-1", GI, 101).build())),
            vec!["device gpu-1", "consumedCapacity.compute"],
        ),
        (
            "bad config",
            Box::new(|n: &Node| {
                n.claims.put(ClaimSpec { config: Some(serde_json::json!({"apiVersion": "gpuslice.io/v1", "kind": "SliceConfig", "computeLimit": 0})), ..ClaimSpec::new(uid, "gpu-0", GI, 0) }.build())
            }),
            vec![
                "device gpu-0",
                "opaque.parameters.computeLimit",
                "from 1 to 100",
            ],
        ),
        (
            "limit below guarantee",
            Box::new(|n: &Node| {
                n.claims.put(ClaimSpec { config: Some(serde_json::json!({"apiVersion": "gpuslice.io/v1", "kind": "SliceConfig", "computeLimit": 20})), ..ClaimSpec::new(uid, "gpu-0", GI, 40) }.build())
            }),
            vec!["device gpu-0", "config"],
        ),
        (
            "claim deleted",
            Box::new(|_: &Node| {}),
            vec!["not found at the API server"],
        ),
        (
            "API down",
            Box::new(|n: &Node| {
                n.claims.put(ClaimSpec::new(uid, "gpu-0", GI, 0).build());
                *n.claims.down.lock().unwrap() = Some("connection refused".into());
            }),
            vec!["API server: connection refused"],
        ),
        (
            "arbiter down",
            Box::new(|n: &Node| {
                n.claims.put(ClaimSpec::new(uid, "gpu-0", GI, 0).build());
                *n.arbiter.down.lock().unwrap() = true;
            }),
            vec!["device gpu-0", "arbiter", "connection refused"],
        ),
        (
            "CDI dir unwritable",
            Box::new(|n: &Node| {
                n.claims.put(ClaimSpec::new(uid, "gpu-0", GI, 0).build());
                *n.cdi.fail.lock().unwrap() = true;
            }),
            vec![
                "device gpu-0",
                "CDI spec",
                "read-only file system",
                "nothing was left behind",
            ],
        ),
    ];
    for (what, setup, needles) in cases {
        node.claims.delete("default", uid);
        *node.claims.down.lock().unwrap() = None;
        *node.arbiter.down.lock().unwrap() = false;
        *node.cdi.fail.lock().unwrap() = false;
        setup(&node);
        let r = prepare(ch.clone(), uid).await;
        assert!(r.devices.is_empty(), "{what}");
        assert!(
            r.error.contains(&format!("claim default/{uid} ({uid})")),
            "{what}: {}",
            r.error
        );
        for n in needles {
            assert!(r.error.contains(n), "{what}: {:?} lacks {n:?}", r.error);
        }
        assert!(node.arbiter.slices().is_empty(), "{what}: slice leaked");
        assert!(node.cdi.specs().is_empty(), "{what}: CDI spec leaked");
        let cp: serde_json::Value = std::fs::read(node.checkpoint_path())
            .map(|b| serde_json::from_slice(&b).unwrap())
            .unwrap_or(serde_json::json!({"claims": {}}));
        assert_eq!(
            cp["claims"],
            serde_json::json!({}),
            "{what}: checkpoint entry leaked"
        );
    }
    plugin.stop().await;
}
