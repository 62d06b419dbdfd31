//! Monotonic time: the one clock every process of the machine shares, and precise sleeping.

/// CLOCK_MONOTONIC in nanoseconds (comparable across the processes of one machine).
pub fn now_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; CLOCK_MONOTONIC always exists on Linux.
    unsafe {
        libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts);
    }
    (ts.tv_sec as u64)
        .saturating_mul(1_000_000_000)
        .saturating_add(ts.tv_nsec as u64)
}

/// Longest final busy-wait before a deadline, after the absolute sleep.
const SPIN_NS: u64 = 20_000;

/// Blocks the calling thread until CLOCK_MONOTONIC reaches `deadline_ns`.
///
/// Sleeps with `clock_nanosleep(TIMER_ABSTIME)` until shortly before the deadline, then spins
/// for at most [`SPIN_NS`] so that short kernels (tens of µs) take their real duration.
pub fn sleep_until(deadline_ns: u64) {
    precise_timers();
    loop {
        let now = now_ns();
        if now >= deadline_ns {
            return;
        }
        if deadline_ns - now > SPIN_NS {
            let target = deadline_ns - SPIN_NS;
            let ts = libc::timespec {
                tv_sec: (target / 1_000_000_000) as libc::time_t,
                tv_nsec: (target % 1_000_000_000) as libc::c_long,
            };
            // SAFETY: `ts` is a valid timespec; the remaining-time pointer may be null with
            // TIMER_ABSTIME. An EINTR simply loops.
            unsafe {
                libc::clock_nanosleep(
                    libc::CLOCK_MONOTONIC,
                    libc::TIMER_ABSTIME,
                    &ts,
                    std::ptr::null_mut(),
                );
            }
        } else {
            std::hint::spin_loop();
        }
    }
}

/// Sets this thread's timer slack to 1 ns, once per thread: with Linux's default of 50 µs an
/// absolute sleep ends up to 50 µs late, past [`SPIN_NS`], and every kernel the thread times
/// would end late on the host (the device's own clock does not slip like that).
pub(crate) fn precise_timers() {
    thread_local!(static DONE: std::cell::Cell<bool> = const { std::cell::Cell::new(false) });
    DONE.with(|d| {
        if !d.get() {
            // SAFETY: PR_SET_TIMERSLACK takes one integer argument and changes only this thread.
            unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong) };
            d.set(true);
        }
    });
}
