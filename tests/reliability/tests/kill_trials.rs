//! Trial 3: SIGKILL at random moments of allocation, free and launch loops.
//!
//! A batch runs `SLICES` trials at once, one per slice (256 MiB cap each): four `churn` tenants
//! per slice allocate (2–32 MiB), free and launch at random; once all are in their loops, one
//! random tenant of each slice is SIGKILLed after a random 0–20 ms. Then the survivors are told to
//! stop and report what they hold, and, once the killed process is reaped:
//! * every survivor answered within a bound (nobody waits forever);
//! * each slice's usage equals the sum of its survivors' holdings (reclaim of the killed one's
//!   charges, by the arbiter or the interposer) — the time it took is measured;
//! * the simulator's ground truth (device memory in use) equals the sum over all survivors;
//! * survivors exit (half freeing, half holding their memory): usage and ground truth return to 0;
//! * a next tenant in every slice starts normally and gets exactly the cap (`fill`).
//!
//! Full run: 1000 trials (`GPUSLICE_TRIALS_SCALE` scales it down for CI).

use gpuslice_reliability::node::{profile_dir, wait_until};
use gpuslice_reliability::{field, scaled, seed, Node, Rng, Tenant};
use std::time::{Duration, Instant};

const SLICES: usize = 10;
const PER_TRIAL: usize = 4;
const CAP: u64 = 256 << 20;
const BOUND: Duration = Duration::from_secs(20);

#[test]
fn sigkill_at_random_moments_leaves_accounting_exact() {
    let trials = scaled(1000, SLICES as u64);
    let batches = trials.div_ceil(SLICES as u64);
    let seed = seed();
    println!("kill trials: {trials} trials in {batches} batches of {SLICES}, seed {seed}");
    let mut rng = Rng::new(seed);
    let n = Node::start("kill").expect("node");
    let slices: Vec<_> = (0..SLICES)
        .map(|i| {
            let id = format!("k{i}");
            let dir = n.admit(&id, "\"memory\":\"256Mi\"");
            (id, dir)
        })
        .collect();
    let tenant = profile_dir().join("gpuslice-trial-tenant");
    let workload = profile_dir().join("gpuslice-workload");
    let t_start = Instant::now();
    let (mut max_reclaim, mut max_stop, mut max_drain) =
        (Duration::ZERO, Duration::ZERO, Duration::ZERO);
    let (mut max_one_stop, mut slow_stops) = (Duration::ZERO, 0u64);
    let (mut kills, mut ops_allocs, mut ops_ooms, mut ops_launches) = (0u64, 0u64, 0u64, 0u64);
    for batch in 0..batches {
        // Start every tenant of the batch.
        let mut groups: Vec<Vec<Tenant>> = slices
            .iter()
            .map(|(_, dir)| {
                (0..PER_TRIAL)
                    .map(|_| {
                        let mut c = n.tenant_command(&tenant, dir);
                        c.args([
                            "churn",
                            "--seed",
                            &rng.next().to_string(),
                            "--max-units",
                            "16",
                            "--kernel-us",
                            "50",
                        ]);
                        Tenant::spawn(c).expect("tenant")
                    })
                    .collect()
            })
            .collect();
        for g in groups.iter_mut() {
            for t in g.iter_mut() {
                t.expect("ready", BOUND).expect("tenant ready");
            }
        }
        // One kill per slice at a random moment 0–20 ms from now.
        let t0 = Instant::now();
        let mut plan: Vec<(Duration, usize, usize)> = (0..SLICES)
            .map(|s| {
                (
                    Duration::from_micros(rng.below(20_000)),
                    s,
                    rng.below(PER_TRIAL as u64) as usize,
                )
            })
            .collect();
        plan.sort();
        for &(at, s, victim) in &plan {
            let now = t0.elapsed();
            if at > now {
                std::thread::sleep(at - now);
            }
            let pid = groups[s][victim].pid();
            let st = groups[s][victim].kill().expect("kill");
            assert_eq!(
                std::os::unix::process::ExitStatusExt::signal(&st),
                Some(libc::SIGKILL),
                "tenant {pid} of slice {s} had exited before its kill: {:?}",
                groups[s][victim].output
            );
            kills += 1;
        }
        // Survivors stop and report within the bound.
        let t_stop = Instant::now();
        let mut held = vec![0u64; SLICES];
        for &(_, s, victim) in &plan {
            for (i, t) in groups[s].iter_mut().enumerate() {
                if i != victim {
                    t.send("stop").expect("stop");
                }
            }
        }
        for &(_, s, victim) in &plan {
            for (i, t) in groups[s].iter_mut().enumerate() {
                if i == victim {
                    continue;
                }
                let ts = t_stop;
                let line = match t.expect("held=", Duration::from_millis(400)) {
                    Ok(l) => l,
                    Err(_) if std::env::var_os("GPUSLICE_TRIALS_GDB").is_some() => {
                        let o = std::process::Command::new("gdb")
                            .args([
                                "-p",
                                &t.pid().to_string(),
                                "-batch",
                                "-ex",
                                "thread apply all bt",
                            ])
                            .output()
                            .expect("gdb");
                        println!("{}", String::from_utf8_lossy(&o.stdout));
                        t.expect("held=", BOUND).expect("survivor report")
                    }
                    Err(_) => t.expect("held=", BOUND).expect("survivor report"),
                };
                let took = ts.elapsed();
                max_one_stop = max_one_stop.max(took);
                if took > Duration::from_millis(500) {
                    slow_stops += 1;
                    println!(
                        "  slow stop: batch {batch} slice {s} tenant {} took {:.1} ms",
                        t.pid(),
                        took.as_secs_f64() * 1e3
                    );
                }
                held[s] += field::<u64>(&line, "held").expect("held");
                ops_allocs += field::<u64>(&line, "allocs").unwrap_or(0);
                ops_ooms += field::<u64>(&line, "ooms").unwrap_or(0);
                ops_launches += field::<u64>(&line, "launches").unwrap_or(0);
            }
        }
        max_stop = max_stop.max(t_stop.elapsed());
        // Reclaim: each slice's usage = its survivors' holdings; ground truth = all survivors.
        let exact = wait_until(BOUND, || {
            slices
                .iter()
                .zip(&held)
                .all(|((id, _), h)| n.slice_used(id) == *h && n.slice_total_raw(id) == *h)
        });
        let want: u64 = held.iter().sum();
        let truth = n.sim_used();
        let dt = exact.unwrap_or_else(|| {
            let got: Vec<_> = slices.iter().map(|(id, _)| n.slice_total_raw(id)).collect();
            panic!(
                "batch {batch}: slice usage {got:?} != survivors' holdings {held:?} after \
                 {BOUND:?}; simulator {truth}; arbiter log:\n{}",
                n.log()
            )
        });
        max_reclaim = max_reclaim.max(dt);
        assert_eq!(
            truth, want,
            "batch {batch}: simulator ground truth {truth} != survivors' holdings {want}"
        );
        // Survivors exit: even slices free first, odd ones exit holding their memory.
        for (s, g) in groups.iter_mut().enumerate() {
            for t in g.iter_mut() {
                if t.output.iter().any(|l| l.starts_with("held=")) {
                    if s % 2 == 0 {
                        t.send("free").expect("free");
                    } else {
                        t.close_stdin();
                    }
                }
            }
        }
        for g in groups.iter_mut() {
            for t in g.iter_mut() {
                if t.output.iter().any(|l| l.starts_with("held=")) {
                    let st = t.finish(BOUND).expect("survivor exits");
                    assert!(st.success(), "survivor failed: {:?}", t.output);
                }
            }
        }
        let drained = wait_until(BOUND, || {
            slices.iter().all(|(id, _)| n.slice_total_raw(id) == 0) && n.sim_used() == 0
        });
        let dt = drained.unwrap_or_else(|| {
            let got: Vec<_> = slices.iter().map(|(id, _)| n.slice_total_raw(id)).collect();
            let dumps: Vec<_> = slices
                .iter()
                .filter(|(id, _)| n.slice_total_raw(id) != 0)
                .map(|(id, _)| format!("{id}: {}", n.usage_dump(id)))
                .collect();
            panic!(
                "batch {batch}: after every tenant exited usage is {got:?}, simulator {}; \
                 {dumps:?}; survivors' reports: {:?}",
                n.sim_used(),
                groups
                    .iter()
                    .map(|g| g.iter().map(|t| t.output.clone()).collect::<Vec<_>>())
                    .collect::<Vec<_>>()
            )
        });
        max_drain = max_drain.max(dt);
        // The next tenant of every slice starts normally and gets exactly the cap.
        let mut next: Vec<_> = slices
            .iter()
            .map(|(_, dir)| {
                let mut c = n.tenant_command(&workload, dir);
                c.args(["--via", "dlsym", "fill", "--chunk", "2Mi"]);
                Tenant::spawn(c).expect("next tenant")
            })
            .collect();
        for t in next.iter_mut() {
            let line = t.expect("allocations=", BOUND).expect("fill report");
            let st = t.finish(BOUND).expect("next tenant exits");
            assert!(st.success(), "next tenant failed: {:?}", t.output);
            assert_eq!(field::<u64>(&line, "bytes"), Some(CAP), "{line}");
        }
        if batch % 10 == 9 || batch + 1 == batches {
            println!(
                "  batch {}/{batches}: {kills} kills, max reclaim {:.1} ms, max stop {:.1} ms, \
                 elapsed {:.1} s",
                batch + 1,
                max_reclaim.as_secs_f64() * 1e3,
                max_stop.as_secs_f64() * 1e3,
                t_start.elapsed().as_secs_f64()
            );
        }
    }
    // The arbiter answered throughout and still lists every slice once.
    let st = n.status();
    let ids: Vec<_> = st["slices"]
        .as_array()
        .expect("slices")
        .iter()
        .map(|s| s["slice_id"].as_str().unwrap_or("").to_string())
        .collect();
    assert_eq!(ids.len(), SLICES, "{st}");
    println!(
        "kill trials: {trials} trials, {kills} SIGKILLs, survivors made {ops_allocs} allocations \
         ({ops_ooms} refused at the cap) and {ops_launches} launches; max time to exact usage \
         after the kills {:.1} ms, max stop of one survivor {:.1} ms ({slow_stops} over 500 ms), \
         of a batch {:.1} ms, max drain to zero {:.1} ms; {batches} next tenants x {SLICES} got \
         exactly the cap; total {:.1} s",
        max_reclaim.as_secs_f64() * 1e3,
        max_one_stop.as_secs_f64() * 1e3,
        max_stop.as_secs_f64() * 1e3,
        max_drain.as_secs_f64() * 1e3,
        t_start.elapsed().as_secs_f64()
    );
}
