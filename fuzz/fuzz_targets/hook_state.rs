//! Fuzz target `hook_state`: the OCI state JSON an engine writes to `gpuslice-hook`'s stdin,
//! parsed by the hook's parser (`gpuslice_oci::hook_state`).
//!
//! Invariants: no panic; an accepted state has the `id` string of the document, a pid only when
//! the document's `pid` is a positive integer that fits in `u32`, and its `bundle` string.

#![no_main]

use libfuzzer_sys::fuzz_target;

use gpuslice_oci::hook_state as state;

fuzz_target!(|data: &[u8]| {
    // The hook reads at most 1 MiB of stdin.
    let data = &data[..data.len().min(1 << 20)];
    let parsed = state::parse(data);
    let doc: Option<serde_json::Value> = serde_json::from_slice(data).ok();
    match (parsed, doc) {
        (Ok(s), Some(v)) => {
            assert_eq!(Some(s.id.as_str()), v.get("id").and_then(|x| x.as_str()));
            let pid = v.get("pid").and_then(|x| x.as_u64());
            match s.pid {
                Some(p) => assert!(p > 0 && pid == Some(u64::from(p))),
                None => assert!(pid.is_none_or(|p| p == 0 || p > u64::from(u32::MAX))),
            }
            assert_eq!(
                s.bundle.as_deref().and_then(|b| b.to_str()),
                v.get("bundle").and_then(|x| x.as_str())
            );
        }
        (Ok(s), None) => panic!("accepted a document that is not JSON: {s:?}"),
        (Err(e), Some(v)) => {
            assert!(
                v.get("id").and_then(|x| x.as_str()).is_none(),
                "refused: {e:#}"
            );
        }
        (Err(_), None) => {}
    }
});
