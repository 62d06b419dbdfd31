//! The backstop: a check that needs no cooperation from the tenant. Every period (≤ 250 ms) it
//! asks NVML which host processes use each device and how much memory and device time they
//! take, maps each process to a slice from the **host's** view (the slice's cgroup, or descent
//! from the slice's owner process, checked by pid and start time — never the tenant's own files
//! or environment), and compares:
//!
//! * **memory**: the slice's processes together hold more than its cap plus
//!   `context_allowance` per slice → `memory_action` (default `kill`: SIGKILL the largest
//!   offenders until the rest fit);
//! * **lease**: over the last second the slice's processes ran more device time than the
//!   scheduler charged it (lease time plus overrun) by more than `lease_tolerance` — they
//!   launched kernels without holding the lease (the interposer's gate was bypassed) →
//!   `lease_action` (default `log`).
//!
//! Each action is logged (tracing); the loop hands the events to the state, which counts them
//! (`gpuslice_backstop_actions_total` and per slice) and keeps a short per-slice history that
//! `status` returns (`gpuslice status`). Every device, with slices or without, is also checked
//! for **foreign** processes — CUDA processes in no slice and without the interposer, a
//! whole-GPU tenant — which the state records: such a device takes no new slice
//! ([`crate::state::State::set_foreign`]). An episode is
//! acted on once: a slice that stays over (a frozen one, or one only logged) is not acted on
//! again until it has been back within bounds.
//!
//! One job per file: the decision logic is [`Backstop::tick`] (`engine.rs`) over two traits,
//! [`GpuSource`] (NVML; [`NvmlSource`] in `nvml.rs`) and [`Host`] (`/proc`, signals, cgroup
//! freezer; [`RealHost`] in `host.rs`), so it is tested without root or a GPU; this file only
//! runs it on a thread over the arbiter's state. Design and limits: `docs/threat-model.md`.

mod engine;
mod host;
mod ledger;
mod nvml;

use std::path::Path;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use gpuslice_api::{BackstopConfig, SliceStatus};

pub use engine::{Backstop, Counted, GpuProcess, GpuSource, Host, HostProc};
pub use host::RealHost;
pub use nvml::NvmlSource;

use crate::state::State;

/// Starts the backstop loop on its own thread: every `cfg.period`, a tick over the admitted
/// slices and the scheduler's status.
pub fn spawn(
    state: Arc<Mutex<State>>,
    cfg: BackstopConfig,
    nvml_library: Option<&Path>,
    state_dir: &Path,
) -> Result<std::thread::JoinHandle<()>, String> {
    let gpu = NvmlSource::open(nvml_library)?;
    let period = cfg.period.max(Duration::from_millis(10));
    let host = RealHost {
        state_dir: Some(state_dir.to_path_buf()),
        ..RealHost::default()
    };
    let mut b = Backstop::new(cfg, gpu, host, Some(state_dir.to_path_buf()));
    {
        let st = state.lock().unwrap_or_else(PoisonError::into_inner);
        let policy = st.admission().policy();
        b = b.with_slice_reserve(
            policy
                .context_reserve
                .saturating_mul(u64::from(policy.processes_per_slice)),
        );
        let devices = st.admission().status().devices;
        b = b.with_devices(devices.iter().map(|d| d.index).collect());
        for d in devices {
            b = b.with_device_reserve(d.index, policy.reserve_on(d.index));
        }
    }
    std::thread::Builder::new()
        .name("backstop".into())
        .spawn(move || loop {
            let (slices, sched) = {
                let st = state.lock().unwrap_or_else(PoisonError::into_inner);
                let slices: Vec<SliceStatus> = st.admission().slices().cloned().collect();
                (slices, st.scheduler().cloned())
            };
            let events = b.tick_with(&slices, || sched.map(|s| s.status()));
            let mut st = state.lock().unwrap_or_else(PoisonError::into_inner);
            st.set_foreign(b.foreign().to_vec());
            if !events.is_empty() {
                st.events()
                    .record_backstop(&events, |id| st.admission().slice(id).is_some());
            }
            st.events().set_footprints(b.footprints().to_vec());
            drop(st);
            std::thread::sleep(period);
        })
        .map_err(|e| e.to_string())
}
