//! Fuzz target `quantity`: memory quantities (`gpuslice.io/memory`, `GPUSLICE_MEMORY`, HAMi's
//! `CUDA_DEVICE_MEMORY_LIMIT`, configuration byte sizes) and compute shares.
//!
//! Invariants: no panic; a parsed byte count is never zero, a percentage is 1–100; the displayed
//! form parses back to the same value; `resolve` stays within the device (a percentage resolves
//! to 1..=total on a non-empty device); a compute share is 1–100 and its error names the key.

#![no_main]

use std::collections::BTreeMap;

use gpuslice_api::request::keys;
use gpuslice_api::{ByteSize, MemoryRequest, SliceRequest};
use gpuslice_region::quantity::{format_bytes, MemQuantity};
use libfuzzer_sys::fuzz_target;

fn check_quantity(q: MemQuantity, device_total: u64) {
    match q {
        MemQuantity::Bytes(b) => {
            assert!(b > 0, "zero bytes accepted");
            assert_eq!(
                MemQuantity::parse(&format_bytes(b)),
                Ok(q),
                "round trip of {b}"
            );
            assert_eq!(q.resolve(device_total), b);
        }
        MemQuantity::Percent(p) => {
            assert!((1..=100).contains(&p), "percent {p} accepted");
            let r = q.resolve(device_total);
            assert!(r >= 1);
            if device_total > 0 {
                assert!(r <= device_total, "{p}% of {device_total} resolved to {r}");
            }
        }
    }
    let m = MemoryRequest::from(q);
    assert_eq!(
        MemoryRequest::parse(&m.to_string()),
        Ok(m),
        "display round trip"
    );
}

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let device_total = data
        .iter()
        .take(8)
        .fold(0u64, |acc, b| acc.rotate_left(8) ^ u64::from(*b));
    if let Ok(q) = MemQuantity::parse(text) {
        check_quantity(q, device_total);
        assert_eq!(MemoryRequest::parse(text), Ok(q.into()));
    }
    if let Ok(q) = MemQuantity::parse_hami(text) {
        assert!(matches!(q, MemQuantity::Bytes(b) if b > 0), "hami {q:?}");
        check_quantity(q, device_total);
    }
    // Configuration byte sizes (serde path) and the JSON form of a request.
    if let Ok(s) = serde_json::to_string(text) {
        let _ = serde_json::from_str::<ByteSize>(&s);
        if let Ok(m) = serde_json::from_str::<MemoryRequest>(&s) {
            assert_eq!(MemoryRequest::parse(text), Ok(m));
        }
    }
    // Compute share and ceiling: only through the request parser (the one entry point).
    for key in [keys::COMPUTE, keys::COMPUTE_LIMIT] {
        let ann = BTreeMap::from([(key.to_string(), text.to_string())]);
        match SliceRequest::from_sources(&ann, &[]) {
            Ok(Some(r)) => {
                let v = if key == keys::COMPUTE {
                    r.compute
                } else {
                    r.compute_limit
                };
                assert!(matches!(v, Some(1..=100)), "{key}={text:?} gave {v:?}");
                assert!(r.validate().is_ok());
            }
            Ok(None) => panic!("{key}={text:?} read as no request"),
            Err(e) => {
                assert_eq!(e.key, key);
                assert_eq!(e.value, text);
            }
        }
    }
});
