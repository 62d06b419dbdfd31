//! The container state (OCI `state` JSON) the engine writes to an OCI hook's stdin, reduced to
//! the fields `gpuslice-hook` uses. Pure parsing, no I/O (fuzz target `hook_state`).

use std::path::PathBuf;

/// Why a state document was refused.
#[derive(Debug, thiserror::Error)]
pub enum StateError {
    /// Not JSON at all.
    #[error("the container state on stdin is not JSON: {0}")]
    NotJson(#[from] serde_json::Error),
    /// No string `id`.
    #[error("the container state has no \"id\"")]
    NoId,
}

/// The fields of the OCI state this hook uses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct State {
    /// The container id (`id`, required).
    pub id: String,
    /// The container's pid (`pid`), when present, positive and within `u32`.
    pub pid: Option<u32>,
    /// The bundle directory (`bundle`), when present.
    pub bundle: Option<PathBuf>,
}

/// Parses the state document `bytes`.
pub fn parse(bytes: &[u8]) -> Result<State, StateError> {
    let v: serde_json::Value = serde_json::from_slice(bytes)?;
    let id = v
        .get("id")
        .and_then(|x| x.as_str())
        .ok_or(StateError::NoId)?
        .to_string();
    let pid = v
        .get("pid")
        .and_then(|x| x.as_u64())
        .and_then(|p| u32::try_from(p).ok())
        .filter(|p| *p > 0);
    let bundle = bundle_of(&v);
    Ok(State { id, pid, bundle })
}

/// The bundle path from the state JSON.
pub fn bundle_of(v: &serde_json::Value) -> Option<PathBuf> {
    v.get("bundle").and_then(|b| b.as_str()).map(PathBuf::from)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_and_errors() {
        let s =
            parse(br#"{"ociVersion":"1.0.2","id":"c1","status":"created","pid":42,"bundle":"/b"}"#)
                .unwrap();
        assert_eq!(s.id, "c1");
        assert_eq!(s.pid, Some(42));
        assert_eq!(s.bundle, Some(PathBuf::from("/b")));
        let s = parse(br#"{"id":"c","pid":0}"#).unwrap();
        assert_eq!((s.pid, s.bundle), (None, None));
        assert_eq!(parse(br#"{"id":"c","pid":4294967296}"#).unwrap().pid, None);
        let e = parse(b"{}").unwrap_err().to_string();
        assert!(e.contains("no \"id\""), "{e}");
        let e = parse(b"\xff").unwrap_err().to_string();
        assert!(e.contains("not JSON"), "{e}");
    }
}
