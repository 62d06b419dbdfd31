//! Publishing this node's pool through the API server: the ResourceSlices of
//! [`crate::dra::resourceslice`] for the GPUs the node has now.
//!
//! One sync ([`Publisher::sync_gpus`]):
//! 1. list the slices of driver `gpuslice.io` on this node (`fieldSelector
//!    spec.nodeName=<node>,spec.driver=gpuslice.io`);
//! 2. if they already say what the node has (same slices, each one's spec containing the
//!    computed one, at one generation), nothing is written — a restarted plugin does not bump the
//!    generation of an unchanged node;
//! 3. otherwise the pool's generation becomes the highest listed (or published earlier by this
//!    process) + 1 (0 for a new pool): every
//!    computed slice is created or updated (with the listed `resourceVersion`, so a concurrent
//!    writer makes it fail with 409 instead of being overwritten), then every other listed slice
//!    is deleted (with its `resourceVersion` as precondition). Creating and updating first is
//!    the order the scheduler wants: slices of an older generation are ignored once a newer one
//!    is seen, so it never sees a half-written pool as complete.
//!
//! A conflict (409) or a slice gone meanwhile (404 on update) starts the sync over from a fresh
//! list, at most [`MAX_ATTEMPTS`] times. Every computed slice is checked by
//! [`crate::dra::validate`] before anything is sent. The slices are owned by this node's Node object
//! (`ownerReferences`, read once with `get nodes`), so they go when the node is deleted.
//!
//! Quantities are compared by value ([`by_value`]): the API server returns them in canonical
//! form (`39321600000` comes back as `39321600k`), which must not count as a change.
//!
//! [`Publisher::run`] syncs at start, whenever the GPUs the node reports change (a GPU appears
//! or disappears, or NVML stops answering for one: see [`crate::nvml`]), after a failed sync
//! (with back-off), when woken (slices deleted or changed by someone else, such as a starting
//! kubelet, or a new registration: [`crate::dra::slicewatch`]), when the arbiter's context charges
//! change (its `contexts.json`, [`crate::policysource`]), and every `resync` period (a
//! backstop for what the watch missed).

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use gpuslice_admission::fit::Policy;
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::resource::v1::ResourceSlice;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{DeleteParams, ListParams, PostParams, Preconditions};
use kube::{Api, Client};
use serde_json::Value;
use tokio::sync::Notify;

use crate::capacity::PublishPolicy;
use crate::dra::apiserver::{code, describe};
use crate::dra::resourceslice::{by_value, resource_slices};
use crate::dra::validate;
use crate::gpu::{Gpu, GpuSource};
use crate::policysource::PolicySource;
use crate::DRIVER;

/// Syncs retried after a conflict, at most.
pub const MAX_ATTEMPTS: u32 = 5;

/// Why publishing failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PublishError {
    /// The API server refused a call or could not be reached.
    #[error("ResourceSlices of node {node}: {call}: {reason}")]
    Api {
        /// The node.
        node: String,
        /// The call (`list`, `create <name>`, …).
        call: String,
        /// The API server's message, or why it could not be asked.
        reason: String,
    },
    /// Every attempt ran into a concurrent writer.
    #[error(
        "ResourceSlices of node {node}: still conflicting after {MAX_ATTEMPTS} attempts: {last}"
    )]
    Conflicts {
        /// The node.
        node: String,
        /// The last conflict.
        last: String,
    },
    /// What this node computed would be refused (a bug, or a GPU reporting odd values).
    #[error("ResourceSlice {name}: computed slice is invalid: {problems}")]
    Invalid {
        /// The slice.
        name: String,
        /// The violations.
        problems: String,
    },
    /// The GPUs could not be listed.
    #[error("listing the node's GPUs: {0}")]
    Gpus(String),
}

/// What a sync did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Published {
    /// The pool's generation now.
    pub generation: i64,
    /// Slices created.
    pub created: Vec<String>,
    /// Slices updated.
    pub updated: Vec<String>,
    /// Slices deleted.
    pub deleted: Vec<String>,
    /// Conflicts that made it start over.
    pub conflicts: u32,
}

impl Published {
    /// Whether anything was written.
    pub fn changed(&self) -> bool {
        !(self.created.is_empty() && self.updated.is_empty() && self.deleted.is_empty())
    }
}

enum Failure {
    /// Start over from a fresh list.
    Retry(String),
    Fatal(PublishError),
}

/// Publishes one node's pool.
pub struct Publisher {
    api: Api<ResourceSlice>,
    nodes: Api<Node>,
    /// The Node object as owner of the slices (garbage collection when the node is deleted),
    /// once it could be read.
    owner: tokio::sync::Mutex<Option<OwnerReference>>,
    node: String,
    gpus: Arc<dyn GpuSource>,
    /// The arbiter's policy: fixed, or following its `contexts.json` ([`Publisher::following`]).
    policy: Arc<PolicySource>,
    publish: PublishPolicy,
    /// The highest generation this process published: a pool whose slices were all deleted
    /// meanwhile comes back above it, never below.
    last_generation: std::sync::Mutex<Option<i64>>,
}

/// `a` contains `b`: every field `b` has is in `a` with the same value (arrays element-wise, of
/// equal length). The API server may add defaulted fields; they do not make a slice stale.
fn contains(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Object(a), Value::Object(b)) => b
            .iter()
            .all(|(k, vb)| a.get(k).is_some_and(|va| contains(va, vb))),
        (Value::Array(a), Value::Array(b)) => {
            a.len() == b.len() && a.iter().zip(b).all(|(x, y)| contains(x, y))
        }
        _ => a == b,
    }
}

impl Publisher {
    /// The publisher of `node`'s pool through `client`.
    pub fn new(
        client: Client,
        node: &str,
        gpus: Arc<dyn GpuSource>,
        policy: Policy,
        publish: PublishPolicy,
    ) -> Self {
        Publisher {
            api: Api::all(client.clone()),
            nodes: Api::all(client),
            owner: tokio::sync::Mutex::new(None),
            node: node.to_string(),
            gpus,
            policy: Arc::new(PolicySource::fixed(policy)),
            publish,
            last_generation: std::sync::Mutex::new(None),
        }
    }

    /// This publisher computing capacity with `policy` as it is at each sync; [`Self::run`]
    /// republishes when it changes (the arbiter measured its contexts again).
    pub fn following(mut self, policy: Arc<PolicySource>) -> Self {
        self.policy = policy;
        self
    }

    /// The field selector of this node's slices.
    pub fn field_selector(&self) -> String {
        format!("spec.nodeName={},spec.driver={DRIVER}", self.node)
    }

    fn api_error(&self, call: String, e: &kube::Error) -> PublishError {
        PublishError::Api {
            node: self.node.clone(),
            call,
            reason: describe(e),
        }
    }

    /// Lists the GPUs and publishes them.
    pub async fn sync(&self) -> Result<Published, PublishError> {
        let gpus = self.list_gpus().await?;
        self.sync_gpus(&gpus).await
    }

    async fn list_gpus(&self) -> Result<Vec<Gpu>, PublishError> {
        let source = self.gpus.clone();
        tokio::task::spawn_blocking(move || source.gpus())
            .await
            .map_err(|e| PublishError::Gpus(e.to_string()))?
            .map_err(|e| PublishError::Gpus(e.to_string()))
    }

    /// Publishes `gpus` as this node's pool (see the module's description).
    pub async fn sync_gpus(&self, gpus: &[Gpu]) -> Result<Published, PublishError> {
        let mut conflicts = 0;
        let mut last = String::new();
        while conflicts < MAX_ATTEMPTS {
            match self.attempt(gpus).await {
                Ok(mut p) => {
                    p.conflicts = conflicts;
                    *self
                        .last_generation
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(p.generation);
                    return Ok(p);
                }
                Err(Failure::Fatal(e)) => return Err(e),
                Err(Failure::Retry(why)) => {
                    tracing::info!(node = %self.node, "ResourceSlices changed meanwhile ({why}); starting over");
                    conflicts += 1;
                    last = why;
                }
            }
        }
        Err(PublishError::Conflicts {
            node: self.node.clone(),
            last,
        })
    }

    /// This node's Node object as the slices' owner: read once; until it can be read (no
    /// `get nodes` permission, the API down) slices are published without an owner.
    async fn owner(&self) -> Option<OwnerReference> {
        let mut cached = self.owner.lock().await;
        if cached.is_none() {
            match self.nodes.get(&self.node).await {
                Ok(n) => {
                    *cached = n.metadata.uid.map(|uid| OwnerReference {
                        api_version: "v1".into(),
                        kind: "Node".into(),
                        name: self.node.clone(),
                        uid,
                        controller: Some(true),
                        block_owner_deletion: None,
                    })
                }
                Err(e) => tracing::warn!(
                    node = %self.node,
                    "GET Node {}: {}; ResourceSlices are published without an owner (not \
                     garbage-collected with the node)",
                    self.node,
                    describe(&e)
                ),
            }
        }
        cached.clone()
    }

    async fn attempt(&self, gpus: &[Gpu]) -> Result<Published, Failure> {
        let owner = self.owner().await;
        let listed = self
            .api
            .list(&ListParams::default().fields(&self.field_selector()))
            .await
            .map_err(|e| Failure::Fatal(self.api_error("list".into(), &e)))?;
        let ours = listed.items;
        let current = ours.iter().map(|s| s.spec.pool.generation).max();
        let policy = self.policy.current();
        let compute = |generation| {
            let mut slices = resource_slices(&self.node, gpus, &policy, &self.publish, generation);
            for s in &mut slices {
                s.metadata.owner_references = owner.clone().map(|o| vec![o]);
            }
            slices
        };
        let same = compute(current.unwrap_or(0));
        check_valid(&same)?;
        if current.is_some() && up_to_date(&ours, &same) {
            return Ok(Published {
                generation: current.unwrap_or(0),
                ..Published::default()
            });
        }
        let remembered = *self
            .last_generation
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let generation = current.max(remembered).map_or(0, |g| g.saturating_add(1));
        let mut out = Published {
            generation,
            ..Published::default()
        };
        let wanted = compute(generation);
        self.put(&ours, &wanted, &mut out).await?;
        self.delete_stale(&ours, &wanted, &mut out).await?;
        Ok(out)
    }

    /// Creates the `wanted` slices not among `ours` and replaces those that are.
    async fn put(
        &self,
        ours: &[ResourceSlice],
        wanted: &[ResourceSlice],
        out: &mut Published,
    ) -> Result<(), Failure> {
        let pp = PostParams::default();
        for mut want in wanted.iter().cloned() {
            let name = want.metadata.name.clone().unwrap_or_default();
            match ours
                .iter()
                .find(|h| h.metadata.name.as_deref() == Some(&name))
            {
                Some(have) => {
                    want.metadata.resource_version = have.metadata.resource_version.clone();
                    match self.api.replace(&name, &pp, &want).await {
                        Ok(_) => out.updated.push(name),
                        Err(e) if matches!(code(&e), Some(404 | 409)) => {
                            return Err(Failure::Retry(format!("update {name}: {}", describe(&e))))
                        }
                        Err(e) => {
                            return Err(Failure::Fatal(
                                self.api_error(format!("update {name}"), &e),
                            ))
                        }
                    }
                }
                None => match self.api.create(&pp, &want).await {
                    Ok(_) => out.created.push(name),
                    Err(e) if code(&e) == Some(409) => {
                        return Err(Failure::Retry(format!("create {name}: {}", describe(&e))))
                    }
                    Err(e) => {
                        return Err(Failure::Fatal(self.api_error(format!("create {name}"), &e)))
                    }
                },
            }
        }
        Ok(())
    }

    /// Deletes the slices among `ours` that are not `wanted` (only the versions read: a slice
    /// changed meanwhile is retried, not deleted blind).
    async fn delete_stale(
        &self,
        ours: &[ResourceSlice],
        wanted: &[ResourceSlice],
        out: &mut Published,
    ) -> Result<(), Failure> {
        for old in ours {
            let name = old.metadata.name.clone().unwrap_or_default();
            if wanted
                .iter()
                .any(|w| w.metadata.name.as_deref() == Some(&name))
            {
                continue;
            }
            let dp = DeleteParams {
                preconditions: Some(Preconditions {
                    resource_version: old.metadata.resource_version.clone(),
                    uid: old.metadata.uid.clone(),
                }),
                ..DeleteParams::default()
            };
            match self.api.delete(&name, &dp).await {
                Ok(_) => out.deleted.push(name),
                Err(e) if code(&e) == Some(404) => {}
                Err(e) if code(&e) == Some(409) => {
                    return Err(Failure::Retry(format!("delete {name}: {}", describe(&e))))
                }
                Err(e) => return Err(Failure::Fatal(self.api_error(format!("delete {name}"), &e))),
            }
        }
        Ok(())
    }

    /// Publishes at start and then keeps the pool current until `shutdown` completes: the GPUs
    /// are listed every `poll`; a change, a failed last sync (retried with back-off up to
    /// `resync`), `resync` since the last success, or `wake` (the node's slices deleted or
    /// changed at the API server, kubelet registered the plugin: see [`crate::dra::slicewatch`]) makes
    /// it sync.
    pub async fn run(
        &self,
        poll: Duration,
        resync: Duration,
        wake: &Notify,
        shutdown: impl Future<Output = ()> + Send,
    ) {
        tokio::pin!(shutdown);
        // What was last published: the GPUs and the policy their capacity came from.
        let mut published: Option<(Vec<Gpu>, Policy)> = None;
        let mut last_ok: Option<Instant> = None;
        let mut backoff = poll;
        let mut wait = Duration::ZERO;
        loop {
            let woken = tokio::select! {
                _ = &mut shutdown => return,
                _ = tokio::time::sleep(wait) => false,
                _ = wake.notified() => true,
            };
            wait = poll;
            let gpus = match self.list_gpus().await {
                Ok(g) => g,
                Err(e) => {
                    tracing::warn!(node = %self.node, "{e}; the published pool is left as it is");
                    continue;
                }
            };
            let stale = match last_ok {
                Some(t) => t.elapsed() >= resync,
                None => true,
            };
            let policy = self.policy.current();
            let now = (gpus, policy);
            let due = woken || stale || published.as_ref() != Some(&now);
            if !due {
                continue;
            }
            let gpus = &now.0;
            match self.sync_gpus(gpus).await {
                Ok(p) => {
                    if p.changed() {
                        tracing::info!(
                            node = %self.node,
                            generation = p.generation,
                            created = ?p.created,
                            updated = ?p.updated,
                            deleted = ?p.deleted,
                            devices = gpus.len(),
                            "published ResourceSlices"
                        );
                    }
                    published = Some(now);
                    last_ok = Some(Instant::now());
                    backoff = poll;
                }
                Err(e) => {
                    tracing::warn!("{e}; retrying in {backoff:?}");
                    wait = backoff;
                    backoff = (backoff * 2).min(resync.max(poll));
                    published = None;
                }
            }
        }
    }
}

/// Every slice about to be published passes the API server's validation (checked here so
/// that a refusal names the slice and every problem at once).
fn check_valid(slices: &[ResourceSlice]) -> Result<(), Failure> {
    for s in slices {
        let bad = validate::resource_slice(s);
        if !bad.is_empty() {
            let problems: Vec<String> = bad.iter().map(ToString::to_string).collect();
            return Err(Failure::Fatal(PublishError::Invalid {
                name: s.metadata.name.clone().unwrap_or_default(),
                problems: problems.join("; "),
            }));
        }
    }
    Ok(())
}

/// `ours` (as read) already say what `same` (computed at their generation) says: the same
/// names, owners where we set one, and every field we set (the API server adds defaults).
fn up_to_date(ours: &[ResourceSlice], same: &[ResourceSlice]) -> bool {
    ours.len() == same.len()
        && same.iter().all(|want| {
            ours.iter().any(|have| {
                have.metadata.name == want.metadata.name
                    && (want.metadata.owner_references.is_none()
                        || have.metadata.owner_references == want.metadata.owner_references)
                    && contains(
                        &serde_json::to_value(by_value(&have.spec)).unwrap_or_default(),
                        &serde_json::to_value(&want.spec).unwrap_or_default(),
                    )
            })
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn containment_ignores_fields_the_server_added() {
        let want = json!({"a": 1, "b": [{"c": "x"}]});
        assert!(contains(
            &json!({"a": 1, "b": [{"c": "x", "d": true}], "e": 2}),
            &want
        ));
        assert!(!contains(&json!({"a": 2, "b": [{"c": "x"}]}), &want));
        assert!(!contains(
            &json!({"a": 1, "b": [{"c": "x"}, {"c": "y"}]}),
            &want
        ));
        assert!(!contains(&json!({"b": [{"c": "x"}]}), &want));
    }
}
