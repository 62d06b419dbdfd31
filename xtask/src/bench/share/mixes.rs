//! `only=three,four,limit`: 20/30/50, four equal tenants, and a compute limit.

use super::harness::*;
use crate::bench::loadavg;
use anyhow::Result;
pub(super) fn three(c: &Ctx) -> Result<()> {
    let (w1, w10, _) = shares_run(
        c,
        &[
            (
                "a",
                "\"compute\":20,\"memory\":\"1Gi\"",
                saturate(1000, 10.8, 2),
            ),
            (
                "b",
                "\"compute\":30,\"memory\":\"1Gi\"",
                saturate(1000, 10.8, 2),
            ),
            (
                "c",
                "\"compute\":50,\"memory\":\"1Gi\"",
                saturate(1000, 10.8, 2),
            ),
        ],
    )?;
    let worst1 = w1
        .iter()
        .flat_map(|w| w.iter().zip([0.2, 0.3, 0.5]).map(|(g, t)| (g - t).abs()))
        .fold(0.0, f64::max);
    println!(
        "   {:<9} 10 s shares {} / {} / {}; worst 1 s deviation {:.1} points (load {})",
        c.engine,
        pct(w10[0]),
        pct(w10[1]),
        pct(w10[2]),
        worst1 * 100.0,
        loadavg()
    );
    Ok(())
}

pub(super) fn four(c: &Ctx) -> Result<()> {
    let four: Vec<(&str, &str, Vec<String>)> = ["a", "b", "c", "d"]
        .into_iter()
        .map(|id| {
            (
                id,
                "\"compute\":25,\"memory\":\"1Gi\"",
                saturate(1000, 10.8, 2),
            )
        })
        .collect();
    let (w1, w10, _) = shares_run(c, &four)?;
    let worst_j = w1.iter().map(|w| jain(w)).fold(1.0, f64::min);
    println!(
        "   {:<9} 10 s shares {} {} {} {}; Jain 10 s {:.4}, worst 1 s {:.4} (load {})",
        c.engine,
        pct(w10[0]),
        pct(w10[1]),
        pct(w10[2]),
        pct(w10[3]),
        jain(&w10),
        worst_j,
        loadavg()
    );
    Ok(())
}

pub(super) fn limit(c: &Ctx) -> Result<()> {
    let (w1, w10, _) = shares_run(
        c,
        &[(
            "a",
            "\"compute_limit\":40,\"memory\":\"1Gi\"",
            saturate(1000, 10.8, 2),
        )],
    )?;
    let max1 = w1.iter().map(|w| w[0]).fold(0.0, f64::max);
    println!(
        "   {:<9} 10 s {} %, highest 1 s window {} % (load {})",
        c.engine,
        pct(w10[0]),
        pct(max1),
        loadavg()
    );
    // Beside an uncapped slice of the same guarantee, spare time is shared by weight up to
    // the ceiling: compute 30 <=60 should get 50 %, compute 30 <=40 its 40 %.
    for (cap, want) in [(60, 50), (40, 40)] {
        let req = format!("\"compute\":30,\"compute_limit\":{cap},\"memory\":\"1Gi\"");
        let (_, w10, _) = shares_run(
            c,
            &[
                ("a", &req, saturate(1000, 10.8, 2)),
                (
                    "b",
                    "\"compute\":30,\"memory\":\"1Gi\"",
                    saturate(1000, 10.8, 2),
                ),
            ],
        )?;
        println!(
            "   {:<9} 30 <={cap} beside 30: {} % (want {want}) and {} %, device {} % (load {})",
            c.engine,
            pct(w10[0]),
            pct(w10[1]),
            pct(w10[0] + w10[1]),
            loadavg()
        );
    }
    Ok(())
}
