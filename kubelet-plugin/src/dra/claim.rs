//! Reading ResourceClaims: [`ClaimRef`] (what kubelet sends: namespace, name, UID) and the
//! [`ClaimSource`] trait (the API server in the daemon — not written yet — and a map in tests).

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Mutex;

use k8s_openapi::api::resource::v1::ResourceClaim;

/// A claim as kubelet names it.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ClaimRef {
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// UID.
    pub uid: String,
}

impl fmt::Display for ClaimRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "claim {}/{} ({})", self.namespace, self.name, self.uid)
    }
}

/// Why a claim could not be read.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SourceError {
    /// It does not exist (deleted meanwhile).
    #[error("not found")]
    NotFound,
    /// The API server could not be asked or answered badly.
    #[error("API server: {0}")]
    Unavailable(String),
}

/// Where claims come from.
pub trait ClaimSource: Send + Sync {
    /// The claim `namespace/name` as it is now.
    fn get(&self, namespace: &str, name: &str) -> Result<ResourceClaim, SourceError>;
}

/// Claims held in memory, keyed by `(namespace, name)`; the tests' API stand-in.
#[derive(Debug, Default)]
pub struct MemoryClaims {
    claims: Mutex<BTreeMap<(String, String), ResourceClaim>>,
    /// When set, every `get` fails with this.
    pub down: Mutex<Option<String>>,
}

impl MemoryClaims {
    /// Stores (or replaces) a claim.
    pub fn put(&self, claim: ResourceClaim) {
        let key = (
            claim.metadata.namespace.clone().unwrap_or_default(),
            claim.metadata.name.clone().unwrap_or_default(),
        );
        self.lock().insert(key, claim);
    }

    /// Deletes a claim.
    pub fn delete(&self, namespace: &str, name: &str) {
        self.lock()
            .remove(&(namespace.to_string(), name.to_string()));
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<(String, String), ResourceClaim>> {
        self.claims
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

impl ClaimSource for MemoryClaims {
    fn get(&self, namespace: &str, name: &str) -> Result<ResourceClaim, SourceError> {
        if let Some(why) = self
            .down
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
        {
            return Err(SourceError::Unavailable(why));
        }
        self.lock()
            .get(&(namespace.to_string(), name.to_string()))
            .cloned()
            .ok_or(SourceError::NotFound)
    }
}

/// Claims read from JSON files `<dir>/<namespace>/<name>.json` (each a ResourceClaim as the API
/// server returns it): `--claims-from`, for running the plugin without an API server until the
/// API client exists.
#[derive(Clone, Debug)]
pub struct DirClaims(pub std::path::PathBuf);

impl ClaimSource for DirClaims {
    fn get(&self, namespace: &str, name: &str) -> Result<ResourceClaim, SourceError> {
        let p = self.0.join(namespace).join(format!("{name}.json"));
        match std::fs::read(&p) {
            Ok(b) => serde_json::from_slice(&b)
                .map_err(|e| SourceError::Unavailable(format!("{}: {e}", p.display()))),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err(SourceError::NotFound),
            Err(e) => Err(SourceError::Unavailable(format!("{}: {e}", p.display()))),
        }
    }
}
