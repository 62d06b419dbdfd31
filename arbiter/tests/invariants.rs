//! Property-style test: random sequences of admits, updates and releases on random nodes never
//! over-commit a device, refused operations change nothing, and a refused single-device admit
//! really had no device with room (checked by an independent recount).

use std::collections::BTreeMap;

use gpuslice_api::{DeviceRef, DeviceSelector, MemoryRequest, Owner, Placement, SliceRequest};
use gpuslice_arbiter::{Admission, AdmitError, Change, DeviceInventory, Policy, StaticInventory};

const GI: u64 = 1 << 30;

/// xorshift64*: deterministic, seedable, no dependency.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    fn chance(&mut self, pct: u64) -> bool {
        self.below(100) < pct
    }
}

fn random_request(rng: &mut Rng, ndev: u32) -> SliceRequest {
    let memory = match rng.below(10) {
        0 => None,
        1 | 2 => Some(MemoryRequest::Percent(1 + rng.below(60) as u8)),
        _ => Some(MemoryRequest::Bytes(1 + rng.below(30 * GI))),
    };
    let compute = rng.chance(70).then(|| 1 + rng.below(60) as u8);
    let compute_limit = compute.map(|c| c + rng.below(u64::from(101 - c)) as u8);
    let devices = match rng.below(6) {
        0 => DeviceSelector::List(vec![
            DeviceRef::Index(rng.below(u64::from(ndev) + 1) as u32),
        ]),
        1 => DeviceSelector::Count(2),
        _ => DeviceSelector::Count(1),
    };
    let model = rng
        .chance(15)
        .then(|| ["80GB", "40GB", "H100"][rng.below(3) as usize].to_string());
    SliceRequest {
        memory,
        compute,
        compute_limit,
        devices,
        model,
        ..Default::default()
    }
}

/// Recounts each device's commitments from the slice records alone.
fn recount(a: &Admission) -> Vec<(u64, u32)> {
    let p = a.policy();
    a.devices()
        .iter()
        .map(|d| {
            let mut mem = 0u64;
            let mut cpu = 0u32;
            for s in a.slices() {
                for x in s.devices.iter().filter(|x| x.uuid == d.uuid) {
                    let reserve = p.reserve_on(d.index);
                    mem += x.memory_cap.unwrap_or(0) + reserve;
                    cpu += u32::from(s.request.compute.unwrap_or(0));
                }
            }
            (mem, cpu)
        })
        .collect()
}

fn check_invariants(a: &Admission, overcommit: bool) {
    let counts = recount(a);
    let status = a.status();
    for ((d, (mem, cpu)), st) in a.devices().iter().zip(counts).zip(&status.devices) {
        assert!(cpu <= 100, "device {} guarantees {cpu}%", d.index);
        if !overcommit {
            assert!(
                mem <= d.memory_total,
                "device {} committed {mem} > {}",
                d.index,
                d.memory_total
            );
        }
        assert_eq!(st.memory_committed, mem);
        assert_eq!(st.compute_guaranteed, cpu);
        // Best-effort slices split what no one was promised, equally; capped ones get no share.
        let here: Vec<_> = a
            .slices()
            .flat_map(|s| s.devices.iter().filter(|x| x.uuid == d.uuid))
            .collect();
        let be = here.iter().filter(|x| x.memory_cap.is_none()).count() as u64;
        for x in &here {
            let want = match (x.memory_cap, overcommit) {
                (None, false) => Some(d.memory_total.saturating_sub(mem) / be),
                _ => None,
            };
            assert_eq!(x.memory_best_effort, want, "device {}", d.index);
        }
        if !overcommit && be > 0 {
            let share = d.memory_total.saturating_sub(mem) / be;
            assert!(mem + be * share <= d.memory_total);
        }
    }
    for s in a.slices() {
        // Each slice sits on distinct devices, as many as it asked for.
        let mut uuids: Vec<_> = s.devices.iter().map(|d| &d.uuid).collect();
        uuids.dedup();
        assert_eq!(uuids.len(), s.request.devices.count());
        assert!(s.request.validate().is_ok());
    }
}

fn run(seed: u64, overcommit: bool, placement: Placement) {
    let mut rng = Rng(seed | 1);
    let ndev = 1 + rng.below(4) as u32;
    let sizes = [("NVIDIA H100 80GB", 80 * GI), ("NVIDIA A100 40GB", 40 * GI)];
    let devs: Vec<(&str, u64)> = (0..ndev).map(|_| sizes[rng.below(2) as usize]).collect();
    let policy = Policy {
        placement,
        overcommit_memory: overcommit,
        ..Policy::default()
    };
    let mut a = Admission::new(StaticInventory::fake(&devs).devices().unwrap(), policy);
    let mut ids: Vec<String> = Vec::new();
    let mut refusals = 0;
    for step in 0..300 {
        let before = a.status();
        let op = rng.below(10);
        if op < 5 || ids.is_empty() {
            let id = format!("s{step}");
            let req = random_request(&mut rng, ndev);
            match a.admit(&id, req.clone(), Owner::default()) {
                Ok(got) => {
                    assert!(!got.existing);
                    ids.push(id);
                }
                Err(e) => {
                    refusals += 1;
                    assert_eq!(a.status(), before, "refused admit changed state: {e}");
                    if let (AdmitError::Refused { .. }, DeviceSelector::Count(1), false) =
                        (&e, &req.devices, overcommit)
                    {
                        // Independent check: no device had room.
                        let counts = recount(&a);
                        for (d, (mem, cpu)) in a.devices().iter().zip(counts) {
                            let cap = req.memory.map(|m| m.resolve(d.memory_total));
                            let need = match cap {
                                Some(c) => c + a.policy().reserve_on(d.index),
                                None => d.memory_total,
                            };
                            let model_ok = req
                                .model
                                .as_ref()
                                .is_none_or(|m| d.name.to_lowercase().contains(&m.to_lowercase()));
                            let fits = model_ok
                                && mem + need <= d.memory_total
                                && cpu + u32::from(req.compute.unwrap_or(0)) <= 100;
                            assert!(!fits, "refused although device {} fits: {e}", d.index);
                        }
                    }
                }
            }
        } else if op < 8 {
            let id = ids[rng.below(ids.len() as u64) as usize].clone();
            let change = Change {
                memory: rng
                    .chance(50)
                    .then(|| MemoryRequest::Bytes(1 + rng.below(40 * GI))),
                compute: rng.chance(50).then(|| rng.below(80) as u8),
                compute_limit: rng.chance(30).then(|| 1 + rng.below(100) as u8),
                priority: None,
            };
            if a.update(&id, &change, &BTreeMap::new()).is_err() {
                assert_eq!(a.status(), before, "refused update changed state");
            }
        } else {
            let i = rng.below(ids.len() as u64) as usize;
            let id = ids.swap_remove(i);
            a.release(&id).unwrap();
        }
        check_invariants(&a, overcommit);
    }
    // Release everything: the node is empty again.
    for id in ids {
        a.release(&id).unwrap();
    }
    assert!(a
        .status()
        .devices
        .iter()
        .all(|d| d.memory_committed == 0 && d.compute_guaranteed == 0));
    assert!(refusals > 0, "seed {seed}: the sequence never hit a limit");
}

#[test]
fn no_sequence_overcommits_binpack() {
    for seed in 0..200 {
        run(0x9E37_79B9_7F4A_7C15 ^ seed, false, Placement::Binpack);
    }
}

#[test]
fn no_sequence_overcommits_spread() {
    for seed in 0..200 {
        run(0xD1B5_4A32_D192_ED03 ^ seed, false, Placement::Spread);
    }
}

#[test]
fn overcommit_never_overcommits_compute() {
    for seed in 0..100 {
        run(0x1234_5678 ^ seed, true, Placement::Binpack);
    }
}
