//! `cargo xtask bench share`: compute shares through the real arbiter and interposer on the
//! simulated GPU. Tenants are `gpuslice-workload` processes under `LD_PRELOAD=libgpuslice.so` in
//! slices admitted over the control socket; achieved share = each tenant's engine time (the
//! simulator's ground truth, `Node::process_busy_ns`) / wall time. Prints one table per scenario
//! and writes the SVG plots under `docs/`.

mod harness;
mod idle;
mod mixes;
mod priority;
mod scale;
mod serving;
mod shapes;
mod svg;
mod sweep;
mod thirty_seventy;

use super::ENGINES;
use anyhow::{bail, Context, Result};
pub(super) use harness::build_tree;
use harness::{node, start_arbiter, Ctx, ADMISSION, DEVICES};
use idle::idle_resize;
use mixes::{four, limit, three};
use priority::priority;
use scale::scale;
use shapes::{shapes, utilisation};
use sweep::sweep;
use thirty_seventy::thirty_seventy;

/// Options: `only=30-70,shapes,util,three,four,limit,idle,priority,serving,scale,sweep` runs those scenarios
/// (default all); `kernels=50,1000,20000` the 30/70 kernel sizes; `procs=N` the processes of
/// the scale run (default 1024: 256 slices × 4); `rt=0,10` runs the scale scenario once per
/// `[scheduler] realtime_priority` listed, one after the other (default `0`);
/// `engines=timeslice,kernel` the simulator's engine models every scenario runs under, one
/// after the other, printed side by side (default both); `trainer=N` the guarantee of the
/// trainer beside the server in the two-tenant serving rows (default 50; 0: best effort);
/// `high_linger=DUR` the arbiter's `scheduler.high_linger` (`250us`, `1ms`; default its own).
struct Opts {
    only: Option<Vec<String>>,
    kernels: Vec<u64>,
    procs: usize,
    rt: Vec<u32>,
    engines: Vec<&'static str>,
    trainer: u32,
    high_linger: Option<String>,
}

impl Opts {
    fn parse(args: &[String]) -> Result<Opts> {
        let mut o = Opts {
            only: None,
            kernels: vec![50, 1000, 20_000],
            procs: 1024,
            rt: vec![0],
            engines: ENGINES.to_vec(),
            trainer: 50,
            high_linger: None,
        };
        for a in args {
            match a.split_once('=') {
                Some(("only", v)) => {
                    let names: Vec<String> = v.split(',').map(String::from).collect();
                    for n in &names {
                        if !SCENARIOS.contains(&n.as_str()) {
                            bail!(
                                "unknown scenario {n:?} in {a:?}; scenarios: {}",
                                SCENARIOS.join(",")
                            );
                        }
                    }
                    o.only = Some(names);
                }
                Some(("kernels", v)) => {
                    o.kernels = v
                        .split(',')
                        .map(|k| {
                            k.parse().with_context(|| {
                                format!("kernel size {k:?} in {a:?} is not a number of µs")
                            })
                        })
                        .collect::<Result<_>>()?;
                    if let Some(k) = o.kernels.iter().find(|k| ![50, 1000, 20_000].contains(*k)) {
                        bail!("kernel size {k} in {a:?}: the runs are defined for 50, 1000 and 20000 µs");
                    }
                }
                Some(("procs", v)) => {
                    o.procs = v
                        .parse()
                        .ok()
                        .filter(|n| (4..=1024).contains(n))
                        .with_context(|| format!("{a:?}: procs must be a number from 4 to 1024"))?;
                }
                Some(("rt", v)) => {
                    o.rt = v
                        .split(',')
                        .map(|p| {
                            p.parse().ok().filter(|p| *p <= 99).with_context(|| {
                                format!("{a:?}: realtime priority {p:?} must be a number from 0 (off) to 99")
                            })
                        })
                        .collect::<Result<_>>()?;
                }
                Some(("engines", v)) => {
                    o.engines = v
                        .split(',')
                        .map(|e| {
                            ENGINES.iter().copied().find(|k| *k == e).with_context(|| {
                                format!("{a:?}: engine {e:?} is not one of {}", ENGINES.join(","))
                            })
                        })
                        .collect::<Result<_>>()?;
                }
                Some(("trainer", v)) => {
                    o.trainer = v
                        .parse()
                        .ok()
                        .filter(|n| *n <= 80)
                        .with_context(|| format!("{a:?}: the trainer's guarantee must be a percentage from 0 (best effort) to 80"))?;
                }
                Some(("high_linger", v)) => {
                    let digits = v.trim_end_matches(|c: char| c.is_ascii_alphabetic());
                    let unit = &v[digits.len()..];
                    if digits.is_empty()
                        || !digits.bytes().all(|b| b.is_ascii_digit())
                        || !["us", "ms", "s"].contains(&unit)
                    {
                        bail!("{a:?}: high_linger must be a whole number of us, ms or s (1ms)");
                    }
                    o.high_linger = Some(v.to_string());
                }
                _ => bail!(
                    "unknown option {a:?}; options: only=LIST kernels=LIST procs=N rt=LIST engines=LIST trainer=N high_linger=DUR"
                ),
            }
        }
        Ok(o)
    }

    /// What the options add to the arbiter's `[scheduler]` section.
    fn scheduler_lines(&self) -> String {
        self.high_linger
            .as_ref()
            .map_or_else(String::new, |l| format!("high_linger = \"{l}\"\n"))
    }

    fn wants(&self, scenario: &str) -> bool {
        self.only
            .as_ref()
            .is_none_or(|v| v.iter().any(|s| s == scenario))
    }
}

const SCENARIOS: &[&str] = &[
    "30-70", "shapes", "util", "three", "four", "limit", "idle", "priority", "serving", "scale",
    "sweep",
];

pub fn run(args: &[String]) -> Result<()> {
    let opts = Opts::parse(args)?;
    let dist = build_tree()?;
    let mut nodes = Vec::new();
    for &engine in &opts.engines {
        let node = node(&dist, &format!("share-{engine}"), DEVICES, engine);
        let sim = node.open_sim()?;
        let arb = start_arbiter(&node, "5ms", ADMISSION, 0, &opts.scheduler_lines())?;
        nodes.push((engine, node, sim, arb));
    }
    let ctxs: Vec<Ctx> = nodes
        .iter()
        .map(|(engine, node, sim, arb)| Ctx {
            node,
            arb,
            sim,
            engine,
        })
        .collect();
    println!(
        "command: cargo xtask bench share {}  (simulated H100 ×2, quantum 5 ms)",
        args.join(" ")
    );
    println!("achieved share = engine time of the tenant (simulator ground truth) / wall time");
    // Every process of the run inherits the simulator's settings from this environment.
    let slice_us = std::env::var("GPUSLICE_SIM_TIMESLICE_US").unwrap_or_else(|_| "2000".into());
    println!(
        "engine = the simulator's model: timeslice (preemptive {slice_us} µs slices between \
         contexts, as the GPU driver does; GPUSLICE_SIM_TIMESLICE_US) or kernel (whole kernels \
         in turn)"
    );
    println!("load = the host's 1-minute load average when the run ended");
    println!(
        "steal = % of the host's CPU time the hypervisor gave other guests during the run \
         (/proc/stat): hand-offs wait for host threads, so figures under steal are not comparable\n"
    );

    let mut plot_3070 = None;
    if opts.wants("30-70") {
        plot_3070 = thirty_seventy(&ctxs, &opts.kernels)?;
    }
    if opts.wants("shapes") {
        shapes(&ctxs)?;
    }
    if opts.wants("util") {
        utilisation(&ctxs)?;
    }
    let each = |f: fn(&Ctx) -> Result<()>| ctxs.iter().try_for_each(f);
    if opts.wants("three") {
        println!("\n== 20/30/50, 1 ms kernels");
        each(three)?;
    }
    if opts.wants("four") {
        println!("== four equal tenants, 1 ms");
        each(four)?;
    }
    if opts.wants("limit") {
        println!("== compute-limit 40 alone, and capped beside uncapped, 1 ms");
        each(limit)?;
    }
    if opts.wants("idle") {
        // the plots come from the first engine listed (the simulator's default unless told)
        for (i, c) in ctxs.iter().enumerate() {
            idle_resize(c, if i == 0 { plot_3070.take() } else { None }, i == 0)?;
        }
    }
    if opts.wants("priority") {
        each(priority)?;
    }
    if opts.wants("serving") {
        ctxs.iter()
            .try_for_each(|c| serving::serving(c, opts.trainer))?;
    }
    drop(ctxs);
    let mut kept = Vec::new();
    for (engine, node, sim, arb) in nodes {
        drop(arb);
        kept.push((engine, node, sim));
    }
    if opts.wants("scale") {
        for &(engine, _, _) in &kept {
            for &rt in &opts.rt {
                scale(&dist, opts.procs, rt, engine)?;
            }
        }
    }
    if opts.wants("sweep") {
        for (engine, node, sim) in &kept {
            sweep(node, sim, engine)?;
        }
    }
    println!("\nload average at the end: {}", crate::bench::uptime());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::Opts;

    fn parse(args: &[&str]) -> anyhow::Result<Opts> {
        Opts::parse(&args.iter().map(|a| a.to_string()).collect::<Vec<_>>())
    }

    #[test]
    fn trainer_and_high_linger_are_checked_and_named() {
        let o = parse(&[]).unwrap();
        assert_eq!((o.trainer, o.scheduler_lines()), (50, String::new()));
        let o = parse(&["trainer=30", "high_linger=1ms"]).unwrap();
        assert_eq!(o.trainer, 30);
        assert_eq!(o.scheduler_lines(), "high_linger = \"1ms\"\n");
        for (bad, why) in [
            ("trainer=81", "0 (best effort) to 80"),
            ("trainer=x", "0 (best effort) to 80"),
            ("high_linger=1", "us, ms or s"),
            ("high_linger=ms", "us, ms or s"),
            ("high_linger=1min", "us, ms or s"),
            ("high_linger=1.5ms", "us, ms or s"),
        ] {
            let e = format!("{:#}", parse(&[bad]).err().unwrap());
            assert!(e.contains(bad) && e.contains(why), "{e}");
        }
    }

    #[test]
    fn rt_lists_priorities_and_names_a_bad_one() {
        assert_eq!(parse(&[]).unwrap().rt, vec![0]);
        assert_eq!(parse(&["rt=0,10"]).unwrap().rt, vec![0, 10]);
        for bad in ["rt=100", "rt=x", "rt=0,,10"] {
            let e = format!("{:#}", parse(&[bad]).err().unwrap());
            assert!(e.contains(bad) && e.contains("0 (off) to 99"), "{e}");
        }
    }
}
