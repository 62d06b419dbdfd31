//! Property test, over random nodes and random sequences of claims (seeded, reproducible): the
//! consumable-capacity rules the scheduler applies to what this node publishes (per device:
//! Σ consumed memory ≤ `memory`, Σ compute ≤ `compute`, count ≤ `slices`, memory in whole MiB,
//! a claim naming no memory consuming the default = the whole offer) decide exactly what the
//! plugin prepares. Every claim they allow is admitted by the arbiter's own admission on exactly
//! the allocated GPU with exactly the consumed cap; every claim they refuse is refused by the
//! plugin with nothing left behind, and where it would also over-commit the GPU (caps plus
//! context reserves above its memory, or guarantees above 100 %) the arbiter refuses it too.
//! No scheduler runs: the model below is the scheduler's rule; the arbiter is its `Admission`.

mod common;

use std::collections::BTreeMap;

use common::{gpus, ClaimSpec, Node};
use gpuslice_admission::admission::Admission;
use gpuslice_admission::contexts::{policy_for, resolve};
use gpuslice_admission::fit::Policy;
use gpuslice_api::config::AdmissionConfig;
use gpuslice_api::ByteSize;
use gpuslice_api::{DeviceRef, DeviceSelector, MemoryRequest, Owner, SliceRequest};
use gpuslice_kubelet_plugin::capacity::{offer, PublishPolicy, MEMORY_STEP};
use gpuslice_kubelet_plugin::dra::claim::ClaimRef;

const MI: u64 = MEMORY_STEP;

/// SplitMix64: seedable, no dependency.
struct Seq(u64);

impl Seq {
    fn below(&mut self, n: u64) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let z = (self.0 ^ (self.0 >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        let z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        (z ^ (z >> 31)) % n
    }
}

/// What the scheduler has allocated on one device.
#[derive(Clone, Copy, Debug, Default)]
struct Used {
    memory: u64,
    compute: u64,
    count: u32,
}

fn claim_ref(uid: &str) -> ClaimRef {
    ClaimRef {
        namespace: "default".into(),
        name: uid.into(),
        uid: uid.into(),
    }
}

#[test]
fn claims_the_consumable_capacity_rules_allow_are_admitted_and_no_others() {
    let (mut allowed_seen, mut refused_seen, mut arbiter_refusals) = (0, 0, 0);
    for seed in 0..120u64 {
        let mut rng = Seq(seed);
        // The arbiter's policy as it makes it: the configured reserve raised to a context
        // footprint it measured (H200 bare, a smaller device, PyTorch with eager loading) plus
        // the module allowance (issue 32).
        let config = AdmissionConfig {
            context_reserve: ByteSize([128, 512, 1024][rng.below(3) as usize] * MI),
            processes_per_slice: 1 + rng.below(2) as u32,
            ..AdmissionConfig::default()
        };
        // A mixed node: each GPU its own measured footprint, so its own charge (issue 32).
        let infos: Vec<_> = gpus().into_iter().map(|g| g.info).collect();
        let measured: Vec<(u32, u64)> = infos
            .iter()
            .map(|i| (i.index, [300, 518, 1252][rng.below(3) as usize] * MI))
            .collect();
        let (footprints, _) = resolve(&infos, "580", Ok(measured.clone()), None);
        let policy: Policy = policy_for(&config, &footprints);
        for (index, m) in &measured {
            assert_eq!(
                policy.charge_on(*index),
                config.context_reserve.0.max(m + config.module_allowance.0)
            );
        }
        let publish = PublishPolicy {
            slices_per_gpu: 1 + rng.below(8) as u32,
        };
        let mut node = Node::new(&format!("prop{seed}"));
        node.policy = policy.clone();
        node.publish = publish;
        *node.arbiter.admission.lock().unwrap() = Admission::new(infos.clone(), policy.clone());
        let driver = node.driver();
        let offers: Vec<_> = infos.iter().map(|i| offer(&policy, &publish, i)).collect();
        let mut used = [Used::default(); 2];
        let mut live: BTreeMap<String, (usize, u64, u64)> = BTreeMap::new();
        let mut log = Vec::new();
        for step in 0..24u64 {
            if rng.below(4) == 0 && !live.is_empty() {
                let k = rng.below(live.len() as u64) as usize;
                let uid = live.keys().nth(k).cloned().unwrap();
                let (d, m, c) = live.remove(&uid).unwrap();
                log.push(format!("release {uid}"));
                driver.unprepare(&[claim_ref(&uid)])[&uid]
                    .clone()
                    .unwrap_or_else(|e| panic!("seed {seed} {log:?}: {e}"));
                used[d].memory -= m;
                used[d].compute -= c;
                used[d].count -= 1;
                continue;
            }
            let d = rng.below(2) as usize;
            let o = offers[d];
            // Whole MiB (the scheduler rounds to the policy's step); a tenth name no memory and
            // get the policy's default, the whole offer; sizes around a fair share and above.
            let memory = if rng.below(10) == 0 {
                o.memory
            } else {
                let share = o.memory / u64::from(o.slices) / MI;
                MI * (1 + rng.below(share * 2 + 1))
            };
            let compute = rng.below(61);
            let u = used[d];
            let allowed = u.memory + memory <= o.memory
                && u.compute + compute <= o.compute
                && u.count < o.slices;
            let uid = format!("{seed:08x}-0000-4000-8000-{step:012x}");
            log.push(format!(
                "claim {uid} gpu-{d} {memory} {compute} allowed={allowed}"
            ));
            let before = node.arbiter.slices().len();
            let snapshot = node.arbiter.admission.lock().unwrap().clone();
            node.claims
                .put(ClaimSpec::new(&uid, &format!("gpu-{d}"), memory, compute).build());
            let r = driver.prepare(&[claim_ref(&uid)]).remove(&uid).unwrap();
            let ctx = || format!("seed {seed} policy {policy:?} {publish:?} {log:#?}");
            if allowed {
                allowed_seen += 1;
                r.unwrap_or_else(|e| panic!("{}: allowed but refused: {e}", ctx()));
                let slice = node
                    .arbiter
                    .slices()
                    .into_iter()
                    .find(|s| s.slice_id == format!("dra-{uid}"))
                    .unwrap_or_else(|| panic!("{}: no slice", ctx()));
                assert_eq!(slice.devices.len(), 1, "{}", ctx());
                assert_eq!(slice.devices[0].uuid, infos[d].uuid, "{}", ctx());
                assert_eq!(slice.devices[0].memory_cap, Some(memory), "{}", ctx());
                used[d].memory += memory;
                used[d].compute += compute;
                used[d].count += 1;
                live.insert(uid, (d, memory, compute));
            } else {
                refused_seen += 1;
                let e = r
                    .err()
                    .unwrap_or_else(|| panic!("{}: refused but prepared", ctx()));
                assert!(
                    matches!(
                        e,
                        gpuslice_kubelet_plugin::dra::driver::ClaimError::Capacity(_)
                            | gpuslice_kubelet_plugin::dra::driver::ClaimError::Plan(_)
                    ),
                    "{}: {e:?}",
                    ctx()
                );
                let e = e.to_string();
                assert!(e.contains(&format!("device gpu-{d}")), "{}: {e}", ctx());
                assert!(
                    e.contains("capacity") || e.contains("published"),
                    "{}: {e}",
                    ctx()
                );
                assert_eq!(
                    node.arbiter.slices().len(),
                    before,
                    "{}: slice leaked",
                    ctx()
                );
                assert!(!driver.checkpoint().claims.contains_key(&uid), "{}", ctx());
                // Over-committing the GPU itself: the arbiter, asked directly, refuses too.
                let reserves = u64::from(u.count + 1) * policy.reserve_on(infos[d].index);
                if u.memory + memory + reserves > infos[d].memory_total || u.compute + compute > 100
                {
                    arbiter_refusals += 1;
                    let mut a = snapshot;
                    let direct = a.admit(
                        &format!("dra-{uid}"),
                        SliceRequest {
                            memory: Some(MemoryRequest::Bytes(memory)),
                            compute: u8::try_from(compute).ok().filter(|c| *c > 0),
                            devices: DeviceSelector::List(vec![DeviceRef::Uuid(
                                infos[d].uuid.clone(),
                            )]),
                            ..Default::default()
                        },
                        Owner::default(),
                    );
                    assert!(
                        direct.is_err(),
                        "{}: the arbiter admitted an over-commit",
                        ctx()
                    );
                }
            }
            for dev in node.arbiter.admission.lock().unwrap().status().devices {
                assert!(dev.memory_committed <= dev.memory_total, "{}", ctx());
                assert!(dev.compute_guaranteed <= 100, "{}", ctx());
            }
        }
    }
    // The sequences exercised both sides, and the over-commit check.
    assert!(allowed_seen > 500, "{allowed_seen} allowed");
    assert!(refused_seen > 200, "{refused_seen} refused");
    assert!(arbiter_refusals > 20, "{arbiter_refusals} arbiter refusals");
    println!(
        "{allowed_seen} allowed, {refused_seen} refused ({arbiter_refusals} by the arbiter too)"
    );
}
