//! Slice ids derived from container ids: the container id itself when it is a valid slice id
//! (Docker, containerd and CRI ids are 64 hex digits), otherwise `ctr-<sanitised prefix>-<hash>`
//! so that any id an engine accepts still maps to one stable, valid slice id.

use gpuslice_api::protocol::valid_slice_id;

/// The slice id for container `id`.
pub fn slice_id_for(id: &str) -> String {
    if valid_slice_id(id) {
        return id.to_string();
    }
    // FNV-1a 64: stable across builds and machines (std's hasher is not).
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in id.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    let clean: String = id
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
        .take(80)
        .collect();
    format!("ctr-{clean}-{h:016x}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn valid_ids_are_kept_and_others_mapped_stably() {
        let hex = "3f9c1e".repeat(10);
        assert_eq!(slice_id_for(&hex), hex);
        let odd = ".hidden/with space";
        let a = slice_id_for(odd);
        assert!(valid_slice_id(&a), "{a}");
        assert_eq!(a, slice_id_for(odd));
        assert_ne!(a, slice_id_for(".hidden/with spacf"));
        let long = "x".repeat(300);
        assert!(valid_slice_id(&slice_id_for(&long)));
    }
}
