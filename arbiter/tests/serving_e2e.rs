//! Issue #36 on the simulated GPU, both engine models: an LLM server's shape
//! (`gpuslice-workload serve`: Poisson requests, a prefill kernel each, decode steps of one graph
//! replay of 8 × 30 µs kernels) beside a trainer saturating the device with 1.4 ms kernels,
//! 8 queued, through the real arbiter and interposer.
//!
//! The server runs in a slice on device 0 and its twin, the same server alone, on device 1 in
//! the same span, so a stall of the shared 2-core host hits both and the latency is judged
//! against the twin. CI bounds are loose (the goal, alone + 0.5 ms, is the benchmark's and the
//! real GPU's: `cargo xtask bench share only=serving`, docs/benchmarks.md): at `priority: high`
//! the server serves every request of the trace, its p99 inter-token latency is below what it is
//! at normal priority and within `BOUND_MS` of the twin's, and the trainer keeps most of the
//! device the server leaves.
//!
//! Needs `cargo build -p gpuslice-sim-cuda -p gpuslice-sim-nvml -p gpuslice-interposer
//! -p gpuslice-workloads -p gpuslice-arbiter` in the same target directory.

use gpuslice_test_support::sim_tenants;
use gpuslice_test_support::SimNode;
use sim_tenants::{admit, field, output, release, tenant, ENGINES};
use std::path::Path;

const SECS: &str = "4";
/// The server's host work between decode steps, µs (a Python server's, issue #36).
const HOST_US: &str = "80";
/// The CI bound on the high-priority server's p99 inter-token latency above its twin's. Loose:
/// debug builds on a shared 2-core host (measured 7.8–8.3 ms against 1.0–3.4 alone, and 11.7–16
/// at normal priority, at load 9–11); the
/// release benchmark on a quiet host and the real GPU are held to issue #36's 0.5 ms.
const BOUND_MS: f64 = 8.0;

fn node(engine: &'static str) -> SimNode {
    sim_tenants::node(
        "serve",
        engine,
        Some("name=Test GPU 8G,mem=8Gi,sms=16,cc=9.0;name=Test GPU 8G,mem=8Gi,sms=16,cc=9.0"),
    )
}

/// The server (slice request `request`) beside the trainer on device 0, its twin alone on
/// device 1: (server, twin, trainer) outputs.
fn run(n: &SimNode, request: &str) -> (String, String, String) {
    let t = admit(n, "train", "\"compute\":50");
    let trainer = tenant(
        n,
        &t,
        &[
            "saturate",
            "--kernel-us",
            "1400",
            "--depth",
            "8",
            "--seconds",
            "5",
        ],
    );
    std::thread::sleep(std::time::Duration::from_millis(300));
    let s = admit(n, "server", request);
    let w = admit(
        n,
        "twin",
        &format!("{request},\"devices\":{{\"list\":[{{\"index\":1}}]}}"),
    );
    let serve = |slice: &Path, dev: &str| {
        tenant(
            n,
            slice,
            &[
                "--device",
                dev,
                "serve",
                "--rate",
                "20",
                "--seconds",
                SECS,
                "--host-us",
                HOST_US,
            ],
        )
    };
    let (sc, wc) = (serve(&s, "0"), serve(&w, "1"));
    let (so, wo, to) = (output(sc), output(wc), output(trainer));
    for id in ["server", "twin", "train"] {
        release(n, id);
    }
    (so, wo, to)
}

#[test]
fn a_high_priority_server_keeps_its_token_latency_beside_a_trainer() {
    for engine in ENGINES {
        let n = node(engine);
        let (normal, _, _) = run(&n, "\"priority\":\"normal\"");
        let (high, twin, trainer) = run(&n, "\"priority\":\"high\"");
        let p = |o: &str| field(o, "itl_p99_ms");
        let max = |o: &str| field(o, "itl_max_ms");
        eprintln!(
            "{engine}: ITL p99 normal {:.2} ms, high {:.2} ms, twin alone {:.2} ms; max high \
             {:.2} ms, twin {:.2} ms; trainer share {:.3}; server busy {:.3}",
            p(&normal),
            p(&high),
            p(&twin),
            max(&high),
            max(&twin),
            field(&trainer, "share"),
            field(&twin, "busy_frac")
        );
        assert_eq!(
            field(&high, "requests"),
            field(&twin, "requests"),
            "{engine}: the server beside the trainer left requests unserved: {high} / twin {twin}"
        );
        // At normal priority a token waits behind the trainer's queue (8 × 1.4 ms); at high
        // priority for at most the kernel on the device and the hand-over.
        assert!(
            p(&high) < p(&normal),
            "{engine}: high priority did not help: p99 {:.2} against {:.2} ms at normal",
            p(&high),
            p(&normal)
        );
        assert!(
            p(&high) <= p(&twin) + BOUND_MS,
            "{engine}: high-priority p99 {:.2} ms, alone {:.2} ms (CI bound: alone + {BOUND_MS})",
            p(&high),
            p(&twin)
        );
        let left = 1.0 - field(&twin, "busy_frac");
        let share = field(&trainer, "share");
        assert!(
            share >= 0.6 * left,
            "{engine}: the trainer got {share:.3} of the device, the server left {left:.3}"
        );
    }
}
