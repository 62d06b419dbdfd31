//! Commands reach a device loop however they race with it: a command queued while the loop is
//! between taking its queue and going to sleep must still be applied at once. Before the fix
//! the loop read its control word only when going to sleep, so such a command waited for
//! whatever woke the loop next — for ever on an idle device (seen as a slice never scheduled).

use gpuslice_arbiter::sched::{Params, Scheduler};
use std::time::{Duration, Instant};

mod gate_words;
use gate_words::slice_dir;

fn spin(ns: u64) {
    let t = Instant::now();
    while t.elapsed() < Duration::from_nanos(ns) {
        std::hint::spin_loop();
    }
}

#[test]
fn a_command_sent_while_the_loop_turns_is_not_lost() {
    let dir = slice_dir("gpuslice-wakeup", "s");
    let sched = Scheduler::new(Duration::from_millis(5));
    sched.add(0, "first", &dir, 0, Params::default());
    let mut lost = Vec::new();
    for round in 0..300u64 {
        // Wake the (idle) loop, then queue an add while it is somewhere in its turn: the delay
        // sweeps 0–300 µs so some rounds land between its taking the queue and its sleep.
        sched.update("nobody", Params::default());
        spin((round * 7919) % 300_000);
        let id = format!("s{round}");
        sched.add(0, &id, &dir, 0, Params::default());
        let t0 = Instant::now();
        while sched.status().slice(0, &id).is_none() {
            if t0.elapsed() > Duration::from_secs(2) {
                lost.push(round);
                break;
            }
            std::thread::sleep(Duration::from_micros(200));
        }
        sched.remove(&id);
    }
    assert!(
        lost.is_empty(),
        "adds not applied within 2 s in rounds {lost:?}"
    );
    sched.remove("first");
    let _ = std::fs::remove_dir_all(dir);
}
