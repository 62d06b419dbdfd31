//! Fuzz target `request`: OCI annotations + process environment → slice request, through
//! `SliceRequest::from_sources` and the runtime's `select` (sandbox markers, container lists).
//!
//! Input: one entry per line, `a<key>=<value>` (annotation) or `e<NAME>=<value>` (environment).
//!
//! Invariants: no panic; every error names a key the input actually carried (annotation or
//! variable) and the value given for it; an accepted request passes `validate` and survives a
//! JSON round trip; no request is read when no request key is present.

#![no_main]

use std::collections::BTreeMap;

use gpuslice_api::request::{env, keys, provenance};
use gpuslice_api::SliceRequest;
use gpuslice_oci::select::{select, SelectError, Selection, CONTAINERS};
use libfuzzer_sys::fuzz_target;

/// Parses the input text: one entry per line, `a<key>=<value>` for an annotation and
/// `e<NAME>=<value>` for an environment entry (later lines win, as the engines do).
fn sources(text: &str) -> (BTreeMap<String, String>, Vec<(String, String)>) {
    let mut ann = BTreeMap::new();
    let mut env = Vec::new();
    for line in text.split('\n') {
        let (kind, rest) = match line.split_at_checked(1) {
            Some(x) => x,
            None => continue,
        };
        let (k, v) = rest.split_once('=').unwrap_or((rest, ""));
        match kind {
            "a" => {
                ann.insert(k.to_string(), v.to_string());
            }
            "e" => env.push((k.to_string(), v.to_string())),
            _ => {}
        }
    }
    (ann, env)
}

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let (ann, env) = sources(text);
    let carried = |key: &str, value: &str| {
        ann.get(key).is_some_and(|v| v == value) || env.iter().any(|(k, v)| k == key && v == value)
    };
    let asked = ann.keys().any(|k| k.starts_with(keys::PREFIX))
        || env.iter().any(|(k, _)| {
            env::ALL.contains(&k.as_str()) || k == env::HAMI_MEMORY || k == env::HAMI_SM
        });
    match SliceRequest::from_sources(&ann, &env) {
        Ok(Some(r)) => {
            assert!(asked, "a request from nothing: {ann:?} {env:?}");
            if let Err(e) = r.validate() {
                panic!("accepted request does not validate: {r:?}: {e}");
            }
            let json = serde_json::to_string(&r).expect("serialise");
            let back: SliceRequest = serde_json::from_str(&json).expect("parse back");
            assert_eq!(back, r, "JSON round trip");
        }
        Ok(None) => {}
        Err(e) => {
            assert!(
                carried(&e.key, &e.value),
                "error names {}={:?}, not in the input: {e}",
                e.key,
                e.value
            );
            let msg = e.to_string();
            assert!(msg.starts_with(&format!("{}=\"", e.key)), "{msg}");
        }
    }
    let _ = provenance(&ann, &env);
    match select(&ann, &env) {
        Ok(Selection::Slice(r, _)) => assert!(r.validate().is_ok()),
        Ok(Selection::Nothing | Selection::Sandbox) => {}
        Err(SelectError::Request(e)) => assert!(carried(&e.key, &e.value), "{e}"),
        Err(e @ SelectError::Containers { .. }) => {
            assert!(e.to_string().starts_with(CONTAINERS), "{e}");
            assert!(ann.contains_key(CONTAINERS));
        }
    }
});
