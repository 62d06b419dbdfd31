//! What a kubelet restart and a real API server do to the published pool, with the kubelet
//! stand-in (`common::kubelet`: the start-up wipe and re-registration, NOT a kubelet) and the API
//! stand-in (`common::apiserver`: canonical quantities, DeleteCollection, watches; NOT an API
//! server) around the plugin's real publisher, watch and `kube` client:
//!
//! * quantities the API server returns in canonical form are not a change (no write);
//! * after the wipe, a registration (the publisher woken) or the watch alone brings the pool
//!   back within 5 s, with `--resync` at 600 s and no GPU change to trigger it.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::apienv::{env, publisher, stored, wait_for, Env};
use common::{gpus, kubelet, NODE};
use gpuslice_admission::fit::Policy;
use gpuslice_kubelet_plugin::capacity::{names, offer, PublishPolicy};
use gpuslice_kubelet_plugin::dra::publish::Publisher;
use gpuslice_kubelet_plugin::dra::slicewatch;
use gpuslice_kubelet_plugin::gpu::{Gpu, StaticGpus};
use k8s_openapi::api::resource::v1::ResourceSlice;
use tokio::sync::{oneshot, Notify};

/// How soon the pool must be back.
const BACK_WITHIN: Duration = Duration::from_secs(5);
/// Longer than any test: only a wake or the watch can make the publisher sync.
const POLL: Duration = Duration::from_secs(600);
const RESYNC: Duration = Duration::from_secs(600);

/// The H100-class GPU with its memory changed until the published `memory` is a multiple of
/// 1000 bytes, which the API server writes back with a decimal suffix (`…k`).
fn gpu_with_round_memory() -> Gpu {
    let mut g = gpus().remove(0);
    for _ in 0..1000 {
        let o = offer(&Policy::default(), &PublishPolicy::default(), &g.info);
        if o.memory.is_multiple_of(1000) {
            return g;
        }
        g.info.memory_total += 1 << 20;
    }
    panic!("no GPU size found whose published memory is a multiple of 1000");
}

fn memory_text(s: &ResourceSlice) -> String {
    let d = &s.spec.devices.as_ref().unwrap()[0];
    d.capacity.as_ref().unwrap()[names::MEMORY].value.0.clone()
}

#[test]
fn canonical_quantities_from_the_api_server_are_no_change() {
    let e = env("canonical");
    let gpu = gpu_with_round_memory();
    let p = publisher(&e, Arc::new(StaticGpus(vec![gpu.clone()])));
    let first = e.rt.block_on(p.sync()).unwrap();
    assert_eq!((first.generation, first.created.len()), (0, 1));
    let text = memory_text(&stored(&e)[0]);
    assert!(
        text.ends_with(['k', 'M', 'G']),
        "the stand-in returned {text}: not the canonical form this test is about"
    );
    let writes = e.api.state().slice_writes().len();
    // Resync, then a restarted plugin (a new publisher): nothing written, same generation.
    let again = e.rt.block_on(p.sync()).unwrap();
    let restarted = publisher(&e, Arc::new(StaticGpus(vec![gpu])));
    let after_restart = e.rt.block_on(restarted.sync()).unwrap();
    for (what, r) in [("resync", again), ("restart", after_restart)] {
        assert!(!r.changed(), "{what}: {r:?}");
        assert_eq!(r.generation, 0, "{what}");
    }
    assert_eq!(
        e.api.state().slice_writes().len(),
        writes,
        "{:?}",
        e.api.state().log
    );
}

/// The publisher's run loop, and (when `watch`) the slice watch, on `e`'s runtime until the
/// returned sender is used.
fn run(e: &Env, p: Publisher, wake: Arc<Notify>, watch: bool) -> oneshot::Sender<()> {
    let (tx, rx) = oneshot::channel::<()>();
    let client = e.client.clone();
    e.rt.spawn(async move {
        let stop = async {
            let _ = rx.await;
        };
        let selector = p.field_selector();
        let watching = async {
            if watch {
                slicewatch::watch(client, &selector, &wake, std::future::pending()).await;
            }
        };
        tokio::select! {
            _ = stop => {}
            _ = async { tokio::join!(p.run(POLL, RESYNC, &wake, std::future::pending()), watching) } => {}
        }
    });
    tx
}

fn pool_back(e: &Env, since: Instant) -> Duration {
    wait_for(e, "the pool back", |s| !s.is_empty());
    let took = since.elapsed();
    assert!(took < BACK_WITHIN, "back after {took:?}");
    took
}

#[test]
fn a_registration_after_the_wipe_republishes_within_5_s() {
    let e = env("wake");
    let wake = Arc::new(Notify::new());
    let stop = run(
        &e,
        publisher(&e, Arc::new(StaticGpus(gpus()))),
        wake.clone(),
        false,
    );
    wait_for(&e, "the first publication", |s| !s.is_empty());
    let wiped = Instant::now();
    e.rt.block_on(kubelet::wipe(&e.client, NODE));
    std::thread::sleep(Duration::from_millis(500));
    assert!(stored(&e).is_empty(), "nothing but the wake brings it back");
    // What NotifyRegistrationStatus(registered) does in the plugin.
    wake.notify_one();
    let took = pool_back(&e, wiped);
    eprintln!("pool back {took:?} after the wipe (woken 500 ms after it)");
    assert_eq!(stored(&e)[0].spec.pool.generation, 1);
    let _ = stop.send(());
}

#[test]
fn the_watch_alone_republishes_a_wiped_pool_within_5_s_and_then_writes_nothing() {
    let e = env("watch");
    let stop = run(
        &e,
        publisher(&e, Arc::new(StaticGpus(vec![gpu_with_round_memory()]))),
        Arc::new(Notify::new()),
        true,
    );
    wait_for(&e, "the first publication", |s| !s.is_empty());
    let deadline = Instant::now() + Duration::from_secs(5);
    while e.api.state().watches() == 0 {
        assert!(Instant::now() < deadline, "no watch opened");
        std::thread::sleep(Duration::from_millis(20));
    }
    for round in 1..=2 {
        let wiped = Instant::now();
        e.rt.block_on(kubelet::wipe(&e.client, NODE));
        let took = pool_back(&e, wiped);
        eprintln!("wipe {round}: pool back after {took:?}");
        assert_eq!(stored(&e)[0].spec.pool.generation, round);
    }
    // The watch sees the plugin's own writes too; the syncs they wake find the pool (with its
    // canonical quantities) as it should be and write nothing.
    let writes = e.api.state().slice_writes().len();
    std::thread::sleep(Duration::from_secs(1));
    assert_eq!(
        e.api.state().slice_writes().len(),
        writes,
        "{:?}",
        e.api.state().log
    );
    let _ = stop.send(());
}
