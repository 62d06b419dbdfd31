//! The API stand-in with the plugin's real `kube` client on one runtime: what the API-side
//! tests share.

use std::sync::Arc;
use std::time::{Duration, Instant};

use gpuslice_admission::fit::Policy;
use gpuslice_kubelet_plugin::capacity::PublishPolicy;
use gpuslice_kubelet_plugin::dra::apiserver::connect;
use gpuslice_kubelet_plugin::dra::publish::Publisher;
use gpuslice_kubelet_plugin::gpu::GpuSource;
use k8s_openapi::api::resource::v1::ResourceSlice;
use kube::Client;

use super::apiserver::StandIn;
use super::NODE;

pub const TIMEOUT: Duration = Duration::from_secs(5);
pub const NODE_UID: &str = "0f1e2d3c-node-4000-8000-00000000000a";

pub struct Env {
    pub rt: tokio::runtime::Runtime,
    pub api: StandIn,
    pub client: Client,
    pub dir: std::path::PathBuf,
}

impl Drop for Env {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

pub fn env(tag: &str) -> Env {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let api = StandIn::start(&rt);
    api.state().nodes.insert(NODE.into(), NODE_UID.into());
    let dir = std::env::temp_dir().join(format!("gs-kp-api-{tag}-{}", std::process::id()));
    let kc = api.kubeconfig(&dir);
    let client = rt.block_on(connect(Some(&kc), TIMEOUT)).unwrap();
    Env {
        rt,
        api,
        client,
        dir,
    }
}

pub fn publisher(e: &Env, source: Arc<dyn GpuSource>) -> Publisher {
    Publisher::new(
        e.client.clone(),
        NODE,
        source,
        Policy::default(),
        PublishPolicy::default(),
    )
}

pub fn stored(e: &Env) -> Vec<ResourceSlice> {
    e.api.state().slices.values().cloned().collect()
}

pub fn wait_for(e: &Env, what: &str, f: impl Fn(&[ResourceSlice]) -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !f(&stored(e)) {
        assert!(
            Instant::now() < deadline,
            "timed out waiting for {what}: {:?}",
            stored(e)
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}
