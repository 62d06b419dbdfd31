//! The plugin's sockets as kubelet's own gRPC client reaches them: a grpc-go client (Debian's
//! grpc-go, `tests/grpcgo/client.go`) that dials each unix socket by its path the way kubelet
//! does, so the HTTP/2 `:authority` is grpc-go's idea of it (the raw path, or the path
//! percent-encoded as grpc-go >= 1.54 sends it) rather than the valid one tonic's client sends.
//! Registration (GetInfo, NotifyRegistrationStatus), DRA v1 and v1beta1 prepare and unprepare,
//! and the device plugin (options, Allocate) must all answer. Still stand-ins around it: the
//! arbiter is its admission logic in memory and claims come from memory (no kubelet, API server
//! or GPU runs).

mod common;

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::grpcgo::{self, Authority};
use common::plugin::Plugin as DraPlugin;
use common::{gpus, ClaimSpec, Node, GI};
use gpuslice_admission::admission::Admission;
use gpuslice_admission::fit::Policy;
use gpuslice_api::NodeStatus;
use gpuslice_kubelet_plugin::capacity::PublishPolicy;
use gpuslice_kubelet_plugin::deviceplugin::serve::Paths;
use gpuslice_kubelet_plugin::deviceplugin::service::{devices, NodeSlices, Plugin, SlicesError};
use gpuslice_kubelet_plugin::deviceplugin::units::UnitPolicy;
use gpuslice_kubelet_plugin::deviceplugin::SOCKET;
use gpuslice_kubelet_plugin::gpu::StaticGpus;
use gpuslice_kubelet_plugin::proto::{
    deviceplugin as dp, dra_v1 as v1, dra_v1beta1 as v1beta1, registration as reg,
};
use prost::Message;
use tokio::sync::oneshot;

/// What kubelet's grpc-go may put in `:authority` for a socket it dials by path.
const AUTHORITIES: [Authority; 5] = [
    Authority::Default,
    Authority::Encoded,
    Authority::Set("localhost"),
    Authority::Set("unix:/var/lib/kubelet/plugins_registry/gpuslice.io-reg.sock"),
    Authority::Set("gpuslice.io"),
];

fn wait_for(path: &Path) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !path.exists() {
        assert!(
            Instant::now() < deadline,
            "{} never appeared",
            path.display()
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// A call through the grpc-go client, on a blocking thread; the decoded answer.
async fn call<R: Message + Default>(
    client: &Path,
    socket: &Path,
    method: &'static str,
    request: impl Message,
    authority: Authority,
) -> R {
    let (client, socket) = (client.to_path_buf(), socket.to_path_buf());
    let body = request.encode_to_vec();
    let got = tokio::task::spawn_blocking(move || {
        grpcgo::call(&client, &socket, method, &body, authority)
    })
    .await
    .unwrap();
    match got {
        Ok(bytes) => R::decode(bytes.as_slice()).unwrap(),
        Err(e) => panic!("{method} with :authority {authority:?}: {e}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpc_go_registers_and_prepares_over_v1_and_v1beta1_with_kubelets_authority() {
    let Some(client) = grpcgo::client() else {
        return;
    };
    let node = Node::new("grpcgo-dra");
    let plugin = DraPlugin::start(&node);
    let sockets = plugin.sockets.clone();
    wait_for(&sockets.registration());
    for (i, authority) in AUTHORITIES.into_iter().enumerate() {
        let info: reg::PluginInfo = call(
            &client,
            &sockets.registration(),
            "/pluginregistration.Registration/GetInfo",
            reg::InfoRequest {},
            authority,
        )
        .await;
        assert_eq!(
            (info.r#type.as_str(), info.name.as_str()),
            ("DRAPlugin", "gpuslice.io")
        );
        let _: reg::RegistrationStatusResponse = call(
            &client,
            &sockets.registration(),
            "/pluginregistration.Registration/NotifyRegistrationStatus",
            reg::RegistrationStatus {
                plugin_registered: true,
                error: String::new(),
            },
            authority,
        )
        .await;
        // DRA v1, then v1beta1, on the endpoint GetInfo named, each prepare and unprepare.
        for (service, beta) in [("v1.DRAPlugin", false), ("v1beta1.DRAPlugin", true)] {
            let uid = format!("7e57c0de-0000-4000-8000-00000000{i}{}", u8::from(beta));
            node.claims
                .put(ClaimSpec::new(&uid, "gpu-1", GI, 10).build());
            let claim = v1::Claim {
                namespace: "default".into(),
                uid: uid.clone(),
                name: uid.clone(),
            };
            let endpoint = Path::new(&info.endpoint);
            let prepared: v1::NodePrepareResourcesResponse = if beta {
                let r: v1beta1::NodePrepareResourcesResponse = call(
                    &client,
                    endpoint,
                    "/k8s.io.kubelet.pkg.apis.dra.v1beta1.DRAPlugin/NodePrepareResources",
                    v1::NodePrepareResourcesRequest {
                        claims: vec![claim.clone()],
                    },
                    authority,
                )
                .await;
                v1::NodePrepareResourcesResponse::decode(r.encode_to_vec().as_slice()).unwrap()
            } else {
                call(
                    &client,
                    endpoint,
                    "/k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin/NodePrepareResources",
                    v1::NodePrepareResourcesRequest {
                        claims: vec![claim.clone()],
                    },
                    authority,
                )
                .await
            };
            let got = &prepared.claims[&uid];
            assert_eq!(got.error, "", "{service} {authority:?}");
            assert_eq!(
                got.devices[0].device_name, "gpu-1",
                "{service} {authority:?}"
            );
            assert_eq!(node.arbiter.slices().len(), 1, "{service} {authority:?}");
            let method = if beta {
                "/k8s.io.kubelet.pkg.apis.dra.v1beta1.DRAPlugin/NodeUnprepareResources"
            } else {
                "/k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin/NodeUnprepareResources"
            };
            let un: v1::NodeUnprepareResourcesResponse = call(
                &client,
                endpoint,
                method,
                v1::NodeUnprepareResourcesRequest {
                    claims: vec![claim],
                },
                authority,
            )
            .await;
            assert_eq!(un.claims[&uid].error, "", "{service} {authority:?}");
            assert!(node.arbiter.slices().is_empty(), "{service} {authority:?}");
        }
    }
    plugin.stop().await;
}

/// The arbiter's admission in memory, as the device plugin reads it.
struct Slices(Mutex<Admission>);

impl NodeSlices for Slices {
    fn status(&self) -> Result<NodeStatus, SlicesError> {
        Ok(self.0.lock().unwrap().status())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpc_go_reaches_the_device_plugin_with_kubelets_authority() {
    let Some(client) = grpcgo::client() else {
        return;
    };
    let tmp = std::env::temp_dir().join(format!("gs-kp-grpcgo-dp-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&tmp);
    let policy = Policy::default();
    let plugin = Arc::new(Plugin::new(
        UnitPolicy {
            unit: GI,
            policy: policy.clone(),
            publish: PublishPolicy::default(),
        },
        Arc::new(StaticGpus(gpus())),
        Arc::new(Slices(Mutex::new(Admission::new(
            gpus().into_iter().map(|g| g.info).collect(),
            policy,
        )))),
    ));
    let ids: Vec<String> = devices(&plugin.units()).into_iter().map(|d| d.id).collect();
    // No kubelet: the plugin serves its socket and keeps waiting for kubelet.sock.
    let paths = Paths { dir: tmp.clone() };
    let (stop, stopped) = oneshot::channel::<()>();
    let task = tokio::spawn(async move {
        gpuslice_kubelet_plugin::deviceplugin::serve::serve(
            &paths,
            plugin,
            Duration::from_millis(50),
            async {
                let _ = stopped.await;
            },
        )
        .await
    });
    let socket = tmp.join(SOCKET);
    wait_for(&socket);
    for authority in AUTHORITIES {
        let options: dp::DevicePluginOptions = call(
            &client,
            &socket,
            "/v1beta1.DevicePlugin/GetDevicePluginOptions",
            dp::Empty {},
            authority,
        )
        .await;
        assert!(options.get_preferred_allocation_available, "{authority:?}");
        let allocated: dp::AllocateResponse = call(
            &client,
            &socket,
            "/v1beta1.DevicePlugin/Allocate",
            dp::AllocateRequest {
                container_requests: vec![dp::ContainerAllocateRequest {
                    devices_ids: vec![ids[0].clone()],
                }],
            },
            authority,
        )
        .await;
        let envs = &allocated.container_responses[0].envs;
        assert!(!envs.is_empty(), "{authority:?}: {allocated:?}");
    }
    let _ = stop.send(());
    task.await.unwrap().unwrap();
    let _ = std::fs::remove_dir_all(&tmp);
}
