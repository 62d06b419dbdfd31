//! The capabilities `gpuslice-arbiter` keeps when started as root: `CAP_SYS_PTRACE`, plus
//! `CAP_NET_BIND_SERVICE` only when metrics are configured on a port below 1024, `CAP_KILL`
//! only when the backstop may signal, `CAP_SYS_NICE` only with `scheduler.realtime_priority`.
//! Reasons per capability below and in `docs/privileges.md` (a test keeps the two in step).
//!
//! Why none of the others is needed (each checked by running the daemon without it):
//! * files: the arbiter creates the state directory, slice directories, region files, records
//!   and the socket itself, as uid 0, so owner permissions suffice (no `CAP_DAC_OVERRIDE`,
//!   `CAP_DAC_READ_SEARCH`, `CAP_FOWNER`, `CAP_CHOWN`: it never chowns).
//! * reclaim: `/proc/<pid>/stat` and `/proc/<pid>/cgroup` are world-readable (the start time is
//!   shown to every reader) and `pidfd_open` makes no permission check, so other users'
//!   processes are watched without `CAP_SYS_PTRACE`. Only the backstop signals processes:
//!   `CAP_KILL` is kept when it is configured to kill or freeze.
//! * futexes on shared region files, NVML queries through `/dev/nvidia*` (mode 0666), the
//!   unix socket (peer credentials need no privilege) and a loopback TCP port ≥ 1024: none.

use std::net::SocketAddr;

use gpuslice_privileges::Capability;

/// Always kept: CAP_SYS_PTRACE — reclaim reads `/proc/<pid>/ns/pid` of tenant processes to
/// tell whether their pids are in its own namespace (measured: without it, a SIGKILLed tenant's
/// memory is never reclaimed; `cli/tests/e2e_sim.rs`).
pub const KEEP: &[Capability] = &[Capability::CAP_SYS_PTRACE];

/// Kept only when `[metrics] listen` names a port below 1024: binding it.
pub const KEEP_LOW_METRICS_PORT: &[Capability] = &[Capability::CAP_NET_BIND_SERVICE];

/// Kept only when the backstop may signal tenants (`[backstop]` with a `kill` or `freeze`
/// action): SIGKILL / SIGSTOP of processes of other uids (user-namespaced or non-root tenants).
pub const KEEP_BACKSTOP_SIGNALS: &[Capability] = &[Capability::CAP_KILL];

/// Kept only when `[scheduler] realtime_priority` is above 0: `sched_setscheduler(SCHED_FIFO)`
/// of the device scheduler threads (`crate::sched::realtime`).
pub const KEEP_REALTIME: &[Capability] = &[Capability::CAP_SYS_NICE];

/// The list for this configuration (`metrics`: the listen address when metrics are enabled).
pub fn keep(metrics: Option<SocketAddr>) -> Vec<Capability> {
    let mut v = KEEP.to_vec();
    if metrics.is_some_and(|a| a.port() != 0 && a.port() < 1024) {
        v.extend_from_slice(KEEP_LOW_METRICS_PORT);
    }
    v
}

/// [`keep`] plus [`KEEP_BACKSTOP_SIGNALS`] when `backstop` is enabled with an action that
/// signals processes.
pub fn keep_with_backstop(
    metrics: Option<SocketAddr>,
    backstop: &gpuslice_api::BackstopConfig,
) -> Vec<Capability> {
    use gpuslice_api::BackstopAction::{Freeze, Kill};
    let mut v = keep(metrics);
    if backstop.enabled
        && [backstop.memory_action, backstop.lease_action]
            .iter()
            .any(|a| matches!(a, Kill | Freeze))
    {
        v.extend_from_slice(KEEP_BACKSTOP_SIGNALS);
    }
    v
}

/// Everything the daemon keeps for `config`: [`keep_with_backstop`] plus [`KEEP_REALTIME`]
/// when the scheduler threads are to run under `SCHED_FIFO`.
pub fn keep_for(config: &gpuslice_api::Config) -> Vec<Capability> {
    let mut v = keep_with_backstop(
        config.metrics.enabled.then_some(config.metrics.listen),
        &config.backstop,
    );
    if config.scheduler.realtime_priority > 0 {
        v.extend_from_slice(KEEP_REALTIME);
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpuslice_privileges::doc_table;

    fn row(mode: &str) -> Vec<Capability> {
        let doc = include_str!("../../docs/privileges.md");
        doc_table(doc)
            .into_iter()
            .find(|(b, m, _)| b == "gpuslice-arbiter" && m == mode)
            .unwrap_or_else(|| panic!("docs/privileges.md has no gpuslice-arbiter row {mode:?}"))
            .2
    }

    #[test]
    fn kept_sets_match_the_document() {
        assert_eq!(row("daemon"), KEEP);
        assert_eq!(row("daemon, metrics port < 1024"), KEEP_LOW_METRICS_PORT);
        assert_eq!(
            row("daemon, backstop kill or freeze"),
            KEEP_BACKSTOP_SIGNALS
        );
        assert_eq!(
            row("daemon, scheduler.realtime_priority > 0"),
            KEEP_REALTIME
        );
    }

    #[test]
    fn realtime_priority_adds_sys_nice_and_only_then() {
        let mut c = gpuslice_api::Config::default();
        assert!(!keep_for(&c).contains(&Capability::CAP_SYS_NICE));
        assert_eq!(
            keep_for(&c),
            vec![Capability::CAP_SYS_PTRACE, Capability::CAP_KILL]
        );
        c.scheduler.realtime_priority = 10;
        assert_eq!(
            keep_for(&c),
            vec![
                Capability::CAP_SYS_PTRACE,
                Capability::CAP_KILL,
                Capability::CAP_SYS_NICE
            ]
        );
    }

    #[test]
    fn backstop_signals_add_kill() {
        let mut b = gpuslice_api::BackstopConfig::default();
        assert_eq!(
            keep_with_backstop(None, &b),
            vec![Capability::CAP_SYS_PTRACE, Capability::CAP_KILL]
        );
        b.memory_action = gpuslice_api::BackstopAction::Log;
        assert_eq!(keep_with_backstop(None, &b), KEEP);
        b.memory_action = gpuslice_api::BackstopAction::Freeze;
        b.enabled = false;
        assert_eq!(keep_with_backstop(None, &b), KEEP);
    }

    #[test]
    fn low_metrics_port_adds_net_bind_service() {
        assert_eq!(keep(None), KEEP);
        assert_eq!(keep(Some("127.0.0.1:9464".parse().unwrap())), KEEP);
        assert_eq!(
            keep(Some("127.0.0.1:80".parse().unwrap())),
            vec![Capability::CAP_SYS_PTRACE, Capability::CAP_NET_BIND_SERVICE]
        );
    }
}
