//! `only=idle`: a tenant going idle and a guarantee resized while running (with the plots).

use super::harness::*;
use super::svg::write_svg;
use crate::bench::loadavg;
use anyhow::Result;
use std::path::Path;
use std::time::{Duration, Instant};
pub(super) fn rolling(samples: &[(f64, Vec<u64>)], i: usize, at: usize, span: f64) -> f64 {
    let (t1, v1) = &samples[at];
    let j = samples[..=at]
        .iter()
        .rposition(|(t, _)| *t <= t1 - span)
        .unwrap_or(0);
    let (t0, v0) = &samples[j];
    if t1 <= t0 {
        return 0.0;
    }
    v1[i].saturating_sub(v0[i]) as f64 / 1e9 / (t1 - t0)
}

pub(super) fn idle_resize(
    c: &Ctx,
    plot_3070: Option<Vec<(f64, Vec<u64>)>>,
    plots: bool,
) -> Result<()> {
    let da = c.arb.admit("a", "\"compute\":30,\"memory\":\"1Gi\"")?;
    let db = c.arb.admit("b", "\"compute\":70,\"memory\":\"1Gi\"")?;
    let ta = tenant(c.node, &da, &saturate(1000, 8.5, 2))?;
    let tb = tenant(c.node, &db, &saturate(1000, 3.0, 2))?;
    let pids = [ta.id(), tb.id()];
    let t0 = Instant::now();
    let sim = c.sim;
    let sampler = std::thread::scope(|s| {
        let h = s.spawn(|| {
            let mut out: Vec<(f64, Vec<u64>)> = Vec::new();
            let mut last_b = 0u64;
            let mut b_pid = pids[1];
            while t0.elapsed() < Duration::from_millis(8300) {
                let t = t0.elapsed().as_secs_f64();
                let a = sim.process_busy_ns(0, pids[0]);
                let b = sim.process_busy_ns(0, b_pid);
                // b's second process starts from 0: keep the series cumulative.
                let b_cum = if b == 0 { last_b } else { b };
                out.push((t, vec![a, b_cum]));
                if let Ok(p) = std::fs::read_to_string(c.node.dir.join("b2.pid")) {
                    if let Ok(p) = p.trim().parse() {
                        if p != b_pid {
                            b_pid = p;
                        }
                    }
                }
                last_b = b_cum;
                std::thread::sleep(Duration::from_millis(2));
            }
            out
        });
        // b restarts at 4.5 s (a new tenant), shares swap at 6.5 s.
        std::thread::sleep(Duration::from_millis(4500).saturating_sub(t0.elapsed()));
        let t_new = t0.elapsed().as_secs_f64();
        let tb2 = tenant(c.node, &db, &saturate(1000, 3.6, 2));
        if let Ok(ch) = &tb2 {
            let _ = std::fs::write(c.node.dir.join("b2.pid"), ch.id().to_string());
        }
        std::thread::sleep(Duration::from_millis(6500).saturating_sub(t0.elapsed()));
        let t_upd = t0.elapsed().as_secs_f64();
        let _ = c.arb.update("b", "\"compute\":30");
        let _ = c.arb.update("a", "\"compute\":70");
        let samples = h.join().unwrap_or_default();
        (samples, t_new, t_upd, tb2)
    });
    let (samples, t_new, t_upd, tb2) = sampler;
    let mut kids = vec![ta, tb];
    if let Ok(ch) = tb2 {
        kids.push(ch);
    }
    wait_all(kids);
    c.arb.release("a");
    c.arb.release("b");
    let _ = std::fs::remove_file(c.node.dir.join("b2.pid"));
    // b's first process stops launching: last sample where its busy time grew before 4 s.
    let idx_b_stop = samples
        .windows(2)
        .rposition(|w| w[1].0 < 4.0 && w[1].1[1] > w[0].1[1])
        .map_or(0, |i| i + 1);
    let t_stop = samples[idx_b_stop].0;
    let t_flow = samples
        .iter()
        .enumerate()
        .skip(idx_b_stop)
        .find(|(k, _)| rolling(&samples, 0, *k, 0.02) > 0.9)
        .map(|(_, (t, _))| t - t_stop);
    // Converged at t when the share over the next 50 ms is within 10 points of the target.
    let conv = |from: f64, i: usize, target: f64| {
        samples
            .iter()
            .enumerate()
            .filter(|(_, (t, _))| *t >= from)
            .find(|(k, (t, _))| {
                let ahead = samples[*k..]
                    .iter()
                    .position(|(u, _)| *u >= t + 0.05)
                    .map(|j| k + j);
                ahead.is_some_and(|a| (rolling(&samples, i, a, 0.05) - target).abs() < 0.1)
            })
            .map(|(_, (t, _))| t - from)
    };
    let ms = |x: Option<f64>| x.map_or("never".into(), |v| format!("{:.0} ms", v * 1e3));
    println!(
        "\n== idle / new tenant / update, {} engine (1 ms kernels, 2 ms samples; converged = \
         share over the next 50 ms within 10 points of the target; load {})",
        c.engine,
        loadavg()
    );
    println!(
        "   B (70) goes idle at {t_stop:.2} s: A (30) above 90 % after {} (quantum 5 ms; \
         includes the 20 ms rolling window)",
        ms(t_flow)
    );
    println!(
        "   B restarts at {t_new:.2} s: B within 10 points of 70 % after {} from its first kernel",
        ms(first_kernel(&samples, 1, t_new).and_then(|t| conv(t, 1, 0.7)))
    );
    println!(
        "   update at {t_upd:.2} s (A 30→70, B 70→30): A within 10 points of 70 % after {}",
        ms(conv(t_upd, 0, 0.7))
    );
    if !plots {
        return Ok(());
    }
    let series = |s: &[(f64, Vec<u64>)], i: usize, step: usize, span: f64| -> Vec<(f64, f64)> {
        (0..s.len())
            .step_by(step)
            .map(|k| (s[k].0, rolling(s, i, k, span)))
            .collect()
    };
    write_svg(
        Path::new("docs/share-idle-resize.svg"),
        "Idle, new tenant and live update (100 ms rolling share)",
        &[
            ("A", series(&samples, 0, 10, 0.1)),
            ("B", series(&samples, 1, 10, 0.1)),
        ],
        &[(t_stop, "B idle"), (t_new, "B back"), (t_upd, "update")],
    )?;
    if let Some(s) = plot_3070 {
        write_svg(
            Path::new("docs/share-30-70.svg"),
            "Guarantees 30/70, 1 ms kernels, A queue depth 64 (100 ms rolling share)",
            &[
                ("A (30)", series(&s, 0, 5, 0.1)),
                ("B (70)", series(&s, 1, 5, 0.1)),
            ],
            &[],
        )?;
    }
    println!(
        "   plots ({} engine): docs/share-30-70.svg, docs/share-idle-resize.svg",
        c.engine
    );
    Ok(())
}

/// Time of the first sample after `from` where tenant `i`'s busy time grew.
pub(super) fn first_kernel(samples: &[(f64, Vec<u64>)], i: usize, from: f64) -> Option<f64> {
    samples
        .windows(2)
        .find(|w| w[0].0 >= from && w[1].1[i] > w[0].1[i])
        .map(|w| w[0].0)
}
