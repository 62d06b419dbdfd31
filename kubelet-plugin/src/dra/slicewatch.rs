//! Watching this node's ResourceSlices, so that slices deleted or changed by someone else are
//! republished within seconds instead of at the next `--resync`.
//!
//! The case that matters: a starting kubelet deletes every ResourceSlice of its node
//! (`DeleteCollection` with `fieldSelector spec.nodeName=<node>`, in the background and retried
//! until the Node object is readable: `wipeResourceSlices` in
//! `pkg/kubelet/cm/dra/plugin/registration.go`) and then registers its plugins again. The wipe
//! may land before or after the new registration, so both wake the publisher: every `Deleted`
//! or `Modified` event of a watch on the node's slices, and every successful registration
//! ([`crate::dra::grpc::Registration`]). The publisher's sync lists and compares, so a wake that finds
//! the pool as it should be writes nothing.
//!
//! The watch lists once for a `resourceVersion`, then watches from it, resuming from the last
//! version seen when the server ends the watch (its timeout) and listing again when the version
//! has expired (410) or the API server cannot be reached (with back-off). A fresh list wakes the
//! publisher too: slices may have gone while nothing watched.

use std::future::Future;
use std::time::Duration;

use k8s_openapi::api::resource::v1::ResourceSlice;
use kube::api::{ListParams, WatchEvent, WatchParams};
use kube::{Api, Client};
use tokio::sync::Notify;
use tokio_stream::StreamExt;

use crate::dra::apiserver::describe;

pub use crate::dra::apiserver::WATCH_SECONDS;
/// The first wait after a failed list or watch; doubled up to [`MAX_BACKOFF`].
const BACKOFF: Duration = Duration::from_millis(500);
const MAX_BACKOFF: Duration = Duration::from_secs(30);
/// The pause before resuming a watch the server closed (no busy loop against a server that
/// closes at once).
const RESUME: Duration = Duration::from_millis(100);

/// Why a watch stopped.
enum Ended {
    /// The server closed it (timeout): watch again from the last version.
    Closed(String),
    /// List again (the version expired, an error event, a failed request).
    Relist(String),
}

/// Watches the slices selected by `field_selector` through `client` until `shutdown`, waking
/// `wake` whenever one is deleted or modified.
pub async fn watch(
    client: Client,
    field_selector: &str,
    wake: &Notify,
    shutdown: impl Future<Output = ()> + Send,
) {
    tokio::select! {
        _ = shutdown => {}
        _ = watch_forever(Api::all(client), field_selector, wake) => {}
    }
}

async fn watch_forever(api: Api<ResourceSlice>, field_selector: &str, wake: &Notify) {
    let mut backoff = BACKOFF;
    let mut first = true;
    loop {
        let version = match api
            .list(&ListParams::default().fields(field_selector))
            .await
        {
            Ok(l) => l.metadata.resource_version.unwrap_or_default(),
            Err(e) => {
                tracing::warn!(
                    "watching ResourceSlices ({field_selector}): list: {}; again in {backoff:?}",
                    describe(&e)
                );
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(MAX_BACKOFF);
                continue;
            }
        };
        if !first {
            wake.notify_one();
        }
        first = false;
        let mut version = version;
        let why = loop {
            match watch_once(&api, field_selector, &mut version, wake).await {
                Ended::Closed(why) => {
                    tracing::debug!("watch of ResourceSlices ended ({why}); resuming");
                    backoff = BACKOFF;
                    tokio::time::sleep(RESUME).await;
                }
                Ended::Relist(why) => break why,
            }
        };
        tracing::info!(
            "watching ResourceSlices ({field_selector}): {why}; listing again in {backoff:?}"
        );
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(MAX_BACKOFF);
    }
}

/// One watch from `version` (advanced as events arrive).
async fn watch_once(
    api: &Api<ResourceSlice>,
    field_selector: &str,
    version: &mut String,
    wake: &Notify,
) -> Ended {
    let params = WatchParams::default()
        .fields(field_selector)
        .timeout(WATCH_SECONDS);
    let stream = match api.watch(&params, version).await {
        Ok(s) => s,
        Err(e) => return Ended::Relist(format!("watch: {}", describe(&e))),
    };
    tokio::pin!(stream);
    while let Some(event) = stream.next().await {
        let slice = match event {
            Ok(WatchEvent::Added(s)) => s,
            Ok(WatchEvent::Modified(s) | WatchEvent::Deleted(s)) => {
                wake.notify_one();
                s
            }
            Ok(WatchEvent::Bookmark(b)) => {
                *version = b.metadata.resource_version;
                continue;
            }
            Ok(WatchEvent::Error(s)) => {
                return Ended::Relist(format!("watch error: {} (HTTP {})", s.message, s.code))
            }
            Err(e) => return Ended::Relist(format!("watch: {}", describe(&e))),
        };
        if let Some(v) = slice.metadata.resource_version {
            *version = v;
        }
    }
    Ended::Closed("closed by the API server".into())
}
