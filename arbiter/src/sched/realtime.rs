//! Real-time scheduling of the device scheduler threads (`[scheduler] realtime_priority`): puts
//! the calling thread under `SCHED_FIFO`, reads a thread's policy back, and says why it failed
//! (no `CAP_SYS_NICE`, `RLIMIT_RTPRIO` too low, an RT cgroup without budget) in one warning.
//! The threads it is used on block in futex waits and never busy-wait (`docs/scheduling.md`).

use std::sync::atomic::{AtomicBool, Ordering};

/// Why `SCHED_FIFO` could not be set.
#[derive(Debug, thiserror::Error)]
pub enum RealtimeError {
    /// The kernel refused (`EPERM`: no `CAP_SYS_NICE` and `RLIMIT_RTPRIO` below the priority,
    /// or a cgroup without real-time budget) or the priority is invalid (`EINVAL`).
    #[error(
        "cannot run the scheduler thread under SCHED_FIFO priority {priority}: {source} \
         (needs CAP_SYS_NICE, or RLIMIT_RTPRIO >= {priority}: soft limit now {rlimit}; \
         on kernels with CONFIG_RT_GROUP_SCHED also a real-time budget for the arbiter's cgroup); \
         it runs with normal priority (set [scheduler] realtime_priority = 0 to silence this)"
    )]
    Refused {
        /// The priority asked for.
        priority: u32,
        /// `RLIMIT_RTPRIO`'s soft limit (`unlimited` or a number).
        rlimit: String,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
}

/// `RLIMIT_RTPRIO`'s soft limit, for messages.
fn rtprio_limit() -> String {
    let mut r = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `r` is a valid, writable rlimit for the call.
    if unsafe { libc::getrlimit(libc::RLIMIT_RTPRIO, &mut r) } != 0 {
        return "unknown".into();
    }
    if r.rlim_cur == libc::RLIM_INFINITY {
        "unlimited".into()
    } else {
        r.rlim_cur.to_string()
    }
}

/// Puts the calling thread under `SCHED_FIFO` at `priority` (1–99).
pub fn set_current_thread_fifo(priority: u32) -> Result<(), RealtimeError> {
    let param = libc::sched_param {
        sched_priority: i32::try_from(priority).unwrap_or(i32::MAX),
    };
    // SAFETY: `pthread_self()` is the calling thread, alive for the call; `param` is valid.
    let rc = unsafe { libc::pthread_setschedparam(libc::pthread_self(), libc::SCHED_FIFO, &param) };
    if rc == 0 {
        Ok(())
    } else {
        Err(RealtimeError::Refused {
            priority,
            rlimit: rtprio_limit(),
            source: std::io::Error::from_raw_os_error(rc),
        })
    }
}

/// The policy and priority of the calling thread (`libc::SCHED_*`, priority).
pub fn current_thread_policy() -> std::io::Result<(i32, i32)> {
    let mut policy = 0;
    let mut param = libc::sched_param { sched_priority: 0 };
    // SAFETY: `pthread_self()` is alive; both out-pointers are valid for the call.
    let rc = unsafe { libc::pthread_getschedparam(libc::pthread_self(), &mut policy, &mut param) };
    if rc == 0 {
        Ok((policy, param.sched_priority))
    } else {
        Err(std::io::Error::from_raw_os_error(rc))
    }
}

/// For a device loop at start: applies `priority` (0 = nothing) and returns the priority in
/// effect (0 when off or refused). A refusal is logged as a warning once per process (every
/// device thread would fail the same way), later ones at debug level.
pub fn apply(priority: u32, device: u32) -> u32 {
    if priority == 0 {
        return 0;
    }
    static WARNED: AtomicBool = AtomicBool::new(false);
    match set_current_thread_fifo(priority) {
        Ok(()) => {
            tracing::debug!("scheduler of device {device}: SCHED_FIFO priority {priority}");
            priority
        }
        Err(e) => {
            if WARNED.swap(true, Ordering::Relaxed) {
                tracing::debug!("device {device}: {e}");
            } else {
                tracing::warn!("device {device}: {e}");
            }
            0
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_invalid_priority_is_refused_with_the_reason() {
        // 100 is no SCHED_FIFO priority for anyone (root included): EINVAL, thread unchanged.
        let e = std::thread::spawn(|| {
            let before = current_thread_policy().unwrap();
            let e = set_current_thread_fifo(100).unwrap_err();
            assert_eq!(current_thread_policy().unwrap(), before);
            e
        })
        .join()
        .unwrap();
        let RealtimeError::Refused {
            priority, source, ..
        } = &e;
        assert_eq!(*priority, 100);
        assert_eq!(source.raw_os_error(), Some(libc::EINVAL));
        let msg = e.to_string();
        assert!(
            msg.contains("SCHED_FIFO priority 100")
                && msg.contains("CAP_SYS_NICE")
                && msg.contains("RLIMIT_RTPRIO")
                && msg.contains("realtime_priority = 0"),
            "{msg}"
        );
        // Off: nothing is tried, nothing is in effect.
        assert_eq!(apply(0, 0), 0);
    }
}
