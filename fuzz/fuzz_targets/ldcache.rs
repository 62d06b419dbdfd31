//! Fuzz target `ldcache`: the binary `/etc/ld.so.cache` parser CDI generation uses to find the
//! driver libraries under a driver root (a file anyone who controls that root can write).
//!
//! Invariants: no panic, no huge allocation from a forged entry count; every entry's name and
//! path are NUL-free; an image written by the crate's own encoder parses back to its entries.

#![no_main]

use gpuslice_cdi::ldcache;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(entries) = ldcache::parse(data) {
        // 24 bytes per entry at least: a count can never outgrow the input.
        assert!(entries.len() <= data.len() / 24);
        for e in &entries {
            assert!(!e.name.contains('\0') && !e.path.contains('\0'));
            let _ = e.native();
        }
        // Re-encode what was read: the encoder and the parser agree.
        let owned: Vec<(&str, &str, i32)> = entries
            .iter()
            .map(|e| (e.name.as_str(), e.path.as_str(), e.flags))
            .collect();
        let again = ldcache::parse(&ldcache::encode(&owned)).expect("own encoding parses");
        assert_eq!(again, entries);
    }
});
