//! The plugin keeps no capability. In both modes it needs only what uid 0 has as the owner of
//! the root-owned paths it uses — kubelet's plugin and device-plugin directories (its sockets,
//! the checkpoint), the CDI directory, the arbiter's socket (mode 0600, root) and the NVIDIA
//! device nodes NVML opens (0666) — none of which takes a capability. Called first thing in
//! `main`, before NVML or the async runtime start any thread (`docs/privileges.md`).

use gpuslice_privileges::{names, restrict_to, Restricted};

/// Capabilities `gpuslice-kubelet-plugin` keeps: none.
pub const KEEP: &[gpuslice_privileges::Capability] = &[];

/// Drops every capability and sets `no_new_privs` (as root; nothing otherwise).
pub fn drop_all() -> anyhow::Result<()> {
    match restrict_to(KEEP)? {
        Restricted::NotRoot => tracing::debug!("not root: capabilities left as they are"),
        Restricted::Dropped { kept, .. } => {
            tracing::debug!("capabilities kept: {}; no_new_privs set", names(&kept))
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpuslice_privileges::doc_table;

    #[test]
    fn the_privileges_table_says_none_for_both_modes() {
        let doc = include_str!("../../docs/privileges.md");
        let rows: Vec<_> = doc_table(doc)
            .into_iter()
            .filter(|(b, _, _)| b == "gpuslice-kubelet-plugin")
            .collect();
        assert_eq!(rows.len(), 2, "one row per mode: {rows:?}");
        for (_, mode, caps) in rows {
            assert_eq!(caps, KEEP, "{mode}");
        }
    }
}
