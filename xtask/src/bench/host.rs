//! What the host did during a run, printed beside each figure: load average and steal.

/// The 1-minute load average, for the record beside each figure.
pub(crate) fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|s| s.split_whitespace().next().map(String::from))
        .unwrap_or_else(|| "?".into())
}

/// Host CPU time from `/proc/stat`, to report the hypervisor's **steal** over a scenario: the
/// share of CPU time this VM's cores were runnable but given to other guests. Every lease
/// hand-off is a chain of host thread wake-ups, and under steal each waits for a core the host
/// took away (10–20 % steal measured several 1 s utilisation windows at 77–90 %), so a figure
/// is only comparable with the others at a similar steal.
#[derive(Clone, Copy)]
pub(crate) struct HostCpu {
    steal: u64,
    total: u64,
}

impl HostCpu {
    pub(crate) fn now() -> HostCpu {
        let s = std::fs::read_to_string("/proc/stat").unwrap_or_default();
        let f: Vec<u64> = s
            .lines()
            .next()
            .unwrap_or("")
            .split_whitespace()
            .skip(1)
            .filter_map(|v| v.parse().ok())
            .collect();
        // user nice system idle iowait irq softirq steal (guest times are inside user/nice).
        HostCpu {
            steal: f.get(7).copied().unwrap_or(0),
            total: f.iter().take(8).sum(),
        }
    }

    /// Steal since `self`, in percent of all CPU time, for the record beside each figure.
    pub(crate) fn steal_since(self) -> String {
        let n = HostCpu::now();
        let t = n.total.saturating_sub(self.total);
        if t == 0 {
            return "?".into();
        }
        format!(
            "{:.1}",
            n.steal.saturating_sub(self.steal) as f64 * 100.0 / t as f64
        )
    }
}

/// `/proc/loadavg`'s three load averages.
pub(crate) fn uptime() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "?".into())
}
