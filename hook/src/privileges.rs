//! The capabilities `gpuslice-hook` keeps when run as root (by the container runtime), per
//! mode; reasons per capability below and in `docs/privileges.md` (a test keeps the two in step).
//!
//! `create-runtime` and `poststop` keep none: they read the OCI state from stdin and
//! `/proc/<pid>/cgroup` (world-readable) and talk to `arbiter.sock`, a 0600 socket owned by
//! uid 0, which the hook is. Standalone mode (`--standalone create-runtime`, `prestart` and the
//! internal `mount-slice` child it runs) enters the container's mount namespace and mounts.

use gpuslice_privileges::Capability;

/// `create-runtime`, `poststop`: nothing.
pub const KEEP: &[Capability] = &[];

/// Standalone mode and its `mount-slice` child.
pub const KEEP_STANDALONE: &[Capability] = &[
    // mkdir `<rootfs>/run/gpuslice` when the rootfs or its `/run` belongs to another uid (a
    // user-namespaced container's root is not uid 0 on the host).
    Capability::CAP_DAC_OVERRIDE,
    // setns(CLONE_NEWNS) and mount(MS_BIND / MS_REMOUNT).
    Capability::CAP_SYS_ADMIN,
    // setns(CLONE_NEWNS) also requires CAP_SYS_CHROOT.
    Capability::CAP_SYS_CHROOT,
    // open /proc/<pid>/ns/mnt of the container's init: `runc init` is non-dumpable until it
    // execs the container's process, so the ptrace access check needs CAP_SYS_PTRACE.
    Capability::CAP_SYS_PTRACE,
];

/// Keeps only the capabilities of this mode; reports what it did on stderr when
/// `GPUSLICE_HOOK_DEBUG` is set (the hook has no logger; runtimes show its stderr on failure).
pub fn restrict(standalone: bool) -> anyhow::Result<()> {
    use anyhow::Context;
    use gpuslice_privileges::{names, restrict_to, Restricted};
    let keep = if standalone { KEEP_STANDALONE } else { KEEP };
    let done = restrict_to(keep).context("dropping capabilities")?;
    if std::env::var_os("GPUSLICE_HOOK_DEBUG").is_some() {
        match done {
            Restricted::NotRoot => eprintln!("gpuslice-hook: not root: capabilities unchanged"),
            Restricted::Dropped { kept, missing } => eprintln!(
                "gpuslice-hook: capabilities kept: {}; missing: {}; no_new_privs set",
                names(&kept),
                names(&missing)
            ),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpuslice_privileges::doc_table;

    fn row(mode: &str) -> Vec<Capability> {
        let doc = include_str!("../../docs/privileges.md");
        doc_table(doc)
            .into_iter()
            .find(|(b, m, _)| b == "gpuslice-hook" && m == mode)
            .unwrap_or_else(|| panic!("docs/privileges.md has no gpuslice-hook row {mode:?}"))
            .2
    }

    #[test]
    fn kept_sets_match_the_document() {
        assert_eq!(row("create-runtime, poststop"), KEEP);
        let mut standalone = KEEP_STANDALONE.to_vec();
        standalone.sort_by_key(|c| c.index());
        assert_eq!(row("standalone, prestart, mount-slice"), standalone);
    }
}
