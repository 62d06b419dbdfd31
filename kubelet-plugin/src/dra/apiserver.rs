//! The API server as the plugin uses it, through the `kube` client (rustls, no OpenSSL): a
//! client from the in-cluster service account or a kubeconfig ([`connect`]), and the
//! [`ClaimSource`] that reads ResourceClaims from it ([`ApiClaims`]). The ResourceSlice side is
//! [`crate::dra::publish`].
//!
//! Only the REST calls the plugin needs, all under `resource.k8s.io/v1`: `GET` of one
//! ResourceClaim, and list / create / update / delete of this node's ResourceSlices.

use std::path::Path;
use std::time::Duration;

use k8s_openapi::api::resource::v1::ResourceClaim;
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Api, Client, Config};

use crate::dra::claim::{ClaimSource, SourceError};

/// The client could not be set up.
#[derive(Debug, thiserror::Error)]
#[error("API server client: {0}")]
pub struct ConnectError(pub String);

/// A client of the cluster's API server: from `kubeconfig` when given (its current context),
/// else from the Pod's service account (`KUBERNETES_SERVICE_HOST` / `_PORT` and the token and CA
/// under `/var/run/secrets/kubernetes.io/serviceaccount`). Every request is bounded by `timeout`
/// (connect and read). Needs a tokio runtime (the client spawns its connection tasks on it).
pub async fn connect(kubeconfig: Option<&Path>, timeout: Duration) -> Result<Client, ConnectError> {
    client(kubeconfig, timeout, timeout).await
}

/// How long the API server keeps one watch open (below its 295 s maximum), as
/// [`crate::dra::slicewatch`] asks. A client used for watching needs a read timeout above it
/// ([`connect_for_watch`]). Here, below the watch, so that the two do not import each other.
pub const WATCH_SECONDS: u32 = 290;

/// A client for watches ([`crate::dra::slicewatch`]): as [`connect`]'s, but a read may wait longer
/// than one watch lasts (a quiet watch sends nothing until the server ends it).
pub async fn connect_for_watch(
    kubeconfig: Option<&Path>,
    timeout: Duration,
) -> Result<Client, ConnectError> {
    let watch = Duration::from_secs(u64::from(WATCH_SECONDS) + 30);
    client(kubeconfig, timeout, watch).await
}

async fn client(
    kubeconfig: Option<&Path>,
    timeout: Duration,
    read_timeout: Duration,
) -> Result<Client, ConnectError> {
    // ring, explicitly: should both of rustls' providers ever be compiled in (a dependency
    // enabling aws-lc-rs) it would refuse to choose. An earlier install (this is called again)
    // is fine.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let mut config = match kubeconfig {
        Some(p) => {
            let file = Kubeconfig::read_from(p)
                .map_err(|e| ConnectError(format!("kubeconfig {}: {e}", p.display())))?;
            Config::from_custom_kubeconfig(file, &KubeConfigOptions::default())
                .await
                .map_err(|e| ConnectError(format!("kubeconfig {}: {e}", p.display())))?
        }
        None => Config::incluster().map_err(|e| {
            ConnectError(format!(
                "in-cluster configuration (not running in a Pod? give --kubeconfig): {e}"
            ))
        })?,
    };
    // No retries inside the client (its default retries 429 / 503 / 504 up to 15 times over
    // minutes): the publisher retries with its own back-off and kubelet retries a prepare, and
    // both must hear of a failure within the timeout.
    config.default_retry = false;
    config.connect_timeout = Some(timeout);
    config.read_timeout = Some(read_timeout);
    config.write_timeout = Some(timeout);
    Client::try_from(config).map_err(|e| ConnectError(e.to_string()))
}

/// A `kube` error as one sentence: the API server's own message and code when it answered,
/// else what failed on the way.
pub fn describe(e: &kube::Error) -> String {
    match e {
        kube::Error::Api(s) => {
            let reason = if s.reason.is_empty() {
                String::new()
            } else {
                format!(", {}", s.reason)
            };
            format!("{} (HTTP {}{reason})", s.message, s.code)
        }
        e => {
            // The transport error's chain says what happened (refused, timed out, TLS).
            let mut text = e.to_string();
            let mut src = std::error::Error::source(e);
            while let Some(s) = src {
                let t = s.to_string();
                if !text.contains(&t) {
                    text.push_str(": ");
                    text.push_str(&t);
                }
                src = s.source();
            }
            format!("unreachable: {text}")
        }
    }
}

/// The HTTP status of an API error, when the API server answered.
pub fn code(e: &kube::Error) -> Option<u16> {
    match e {
        kube::Error::Api(s) => Some(s.code),
        _ => None,
    }
}

/// ResourceClaims read from the API server, one `GET` per call.
///
/// [`ClaimSource::get`] blocks on `handle` (the driver runs on blocking threads, see
/// [`crate::dra::grpc`]); it must not be called from inside an async task.
#[derive(Clone)]
pub struct ApiClaims {
    client: Client,
    handle: tokio::runtime::Handle,
    timeout: Duration,
}

impl ApiClaims {
    /// Claims through `client`, its requests run on `handle`, each bounded by `timeout` in all.
    pub fn new(client: Client, handle: tokio::runtime::Handle, timeout: Duration) -> Self {
        ApiClaims {
            client,
            handle,
            timeout,
        }
    }

    /// The claim, asynchronously.
    pub async fn get_async(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<ResourceClaim, SourceError> {
        let api: Api<ResourceClaim> = Api::namespaced(self.client.clone(), namespace);
        match tokio::time::timeout(self.timeout, api.get(name)).await {
            Err(_) => Err(SourceError::Unavailable(format!(
                "GET ResourceClaim {namespace}/{name}: no answer within {:?}",
                self.timeout
            ))),
            Ok(Ok(c)) => Ok(c),
            Ok(Err(e)) if code(&e) == Some(404) => Err(SourceError::NotFound),
            Ok(Err(e)) => Err(SourceError::Unavailable(format!(
                "GET ResourceClaim {namespace}/{name}: {}",
                describe(&e)
            ))),
        }
    }
}

impl ClaimSource for ApiClaims {
    fn get(&self, namespace: &str, name: &str) -> Result<ResourceClaim, SourceError> {
        self.handle.block_on(self.get_async(namespace, name))
    }
}
