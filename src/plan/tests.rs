//! Tests of the planners and of the validator: hand-made instances with known optima, seeded
//! property tests (std-only generator), validator cases, and the real traces of
//! `../shared/real-traces` when that folder is present.

use super::*;
use crate::policy::sim::{self, Policy as Baseline};
use crate::rng::SplitMix64;

use crate::test_support::{self, buffer as b};

fn inst(buffers: Vec<Buffer>) -> Instance {
    Instance::new(buffers).expect("a valid test instance")
}

/// Search budget of the tests that check plans only for validity and order.
const SHORT: u64 = 2_000;

/// Search budget of the tests whose search must meet the lower bound (it stops there, after
/// at most a few hundred thousand steps on the instances below).
const AMPLE: u64 = 10_000_000;

/// Options whose search budget is `steps` steps of work, not time: a test's plan must be the
/// same on a loaded machine as on an idle one.
fn options(alignment: u64, steps: u64) -> PlanOptions {
    PlanOptions {
        alignment: Alignment::new(alignment).expect("non-zero"),
        steps: Some(steps),
        seed: 7,
        ..PlanOptions::default()
    }
}

/// Runs every policy, checks each plan with the validator and the bound, and returns the
/// footprints in `Policy::ALL` order.
fn all_policies(instance: &Instance, opts: &PlanOptions) -> [u64; 4] {
    let mut out = [0; 4];
    for (k, policy) in Policy::ALL.into_iter().enumerate() {
        let r = plan(instance, policy, opts).expect("plannable");
        assert_eq!(validate(instance, &r.plan), Ok(()), "{policy}");
        assert!(
            r.footprint >= r.lower_bound,
            "{policy} below the lower bound"
        );
        assert_eq!(r.footprint, r.plan.footprint);
        assert_eq!(r.plan.offsets.len(), instance.len());
        out[k] = r.footprint;
    }
    let [best_fit, first_fit, best_of, search] = out;
    assert!(
        best_of <= best_fit && best_of <= first_fit,
        "best-of lost: {out:?}"
    );
    assert!(search <= best_of, "search lost to best-of: {out:?}");
    out
}

// ---------------------------------------------------------------- small instances, known optima

#[test]
fn empty_instance_has_an_empty_plan() {
    let i = inst(vec![]);
    let r = plan(&i, Policy::Search, &PlanOptions::default()).unwrap();
    assert_eq!((r.footprint, r.lower_bound, r.ratio), (0, 0, 1.0));
    assert!(r.plan.offsets.is_empty());
    assert_eq!(validate(&i, &r.plan), Ok(()));
}

#[test]
fn one_buffer_is_rounded_up_to_the_alignment() {
    let i = inst(vec![b(1, 0, 1, 1)]);
    let r = plan(&i, Policy::BestFit, &PlanOptions::default()).unwrap();
    assert_eq!(
        (r.footprint, r.lower_bound, r.unaligned_peak),
        (512, 512, 1)
    );
    let r = plan(&i, Policy::BestFit, &options(1, 0)).unwrap();
    assert_eq!((r.footprint, r.lower_bound, r.unaligned_peak), (1, 1, 1));
    let r = plan(&i, Policy::BestFit, &options(3, 0)).unwrap();
    assert_eq!(r.footprint, 3);
}

#[test]
fn half_open_lifetimes_share_memory() {
    // [0,2) and [2,4) never coexist: both at offset 0.
    let i = inst(vec![b(0, 0, 2, 1024), b(1, 2, 4, 1024), b(2, 4, 9, 512)]);
    for policy in Policy::ALL {
        let r = plan(&i, policy, &PlanOptions::default()).unwrap();
        assert_eq!(r.plan.offsets, vec![0, 0, 0], "{policy}");
        assert_eq!(r.footprint, 1024);
    }
}

#[test]
fn aligned_lower_bound_and_unaligned_peak() {
    // Both live at once: 600 + 100 bytes, 1024 + 512 once aligned to 512.
    let i = inst(vec![b(0, 0, 3, 600), b(1, 1, 2, 100)]);
    let r = plan(&i, Policy::BestOf, &PlanOptions::default()).unwrap();
    assert_eq!(
        (r.lower_bound, r.unaligned_peak, r.footprint),
        (1536, 700, 1536)
    );
    assert!(r.plan.offsets.iter().all(|o| o % 512 == 0));
    assert_eq!(
        Bounds::of(&i, Alignment::DEFAULT),
        Some(Bounds {
            alignment: Alignment::DEFAULT,
            aligned_peak: 1536,
            unaligned_peak: 700
        })
    );
}

#[test]
fn best_fit_takes_the_smallest_gap_and_first_fit_the_lowest() {
    // Long buffers (live [0,10)) alternate in memory with short ones (live [0,2)); Q, live
    // [5,9), then sees two holes: [10,16) of 6 bytes and [21,25) of 4.
    let i = inst(vec![
        b(0, 0, 10, 10), // long  → 0..10
        b(1, 0, 2, 6),   // short → 10..16
        b(2, 0, 10, 5),  // long  → 16..21
        b(3, 0, 2, 4),   // short → 21..25
        b(4, 0, 10, 3),  // long  → 25..28
        b(5, 5, 9, 2),   // Q
    ]);
    let bf = place(&i, Order::SizeDesc, Fit::Best, Alignment::NONE).unwrap();
    let ff = place(&i, Order::SizeDesc, Fit::First, Alignment::NONE).unwrap();
    assert_eq!(bf.offsets[..5], [0, 10, 16, 21, 25]);
    assert_eq!(bf.offsets[5], 21, "best fit: the 4-byte hole");
    assert_eq!(ff.offsets[5], 10, "first fit: the lowest hole");
    assert_eq!((bf.footprint, ff.footprint), (28, 28));
    assert_eq!(validate(&i, &bf), Ok(()));
    assert_eq!(validate(&i, &ff), Ok(()));
}

#[test]
fn size_order_breaks_ties_by_longer_lifetime_then_id() {
    // Equal sizes: the longer-lived goes first (offset 0), then the lower id.
    let i = inst(vec![b(9, 0, 2, 512), b(5, 0, 5, 512), b(3, 1, 3, 512)]);
    let p = place(&i, Order::SizeDesc, Fit::Best, Alignment::DEFAULT).unwrap();
    assert_eq!(p.offsets, vec![1024, 0, 512]);
}

#[test]
fn names_round_trip() {
    for policy in Policy::ALL {
        assert_eq!(policy.name().parse::<Policy>(), Ok(policy));
    }
    assert!(
        "worst-fit"
            .parse::<Policy>()
            .unwrap_err()
            .contains("worst-fit")
    );
    let m = Method::Greedy {
        order: Order::SizeDesc,
        fit: Fit::Best,
    };
    assert_eq!(m.to_string(), "best-fit/size");
}

#[test]
fn plan_error_on_overflowing_sizes() {
    let i = inst(vec![b(0, 0, 1, u64::MAX), b(1, 0, 1, 1)]);
    assert_eq!(
        plan(&i, Policy::BestFit, &options(1, 0)).unwrap_err(),
        PlanError::TooLarge
    );
    // One size that cannot be rounded up.
    let i = inst(vec![b(0, 0, 1, u64::MAX)]);
    assert_eq!(
        plan(&i, Policy::Search, &PlanOptions::default()).unwrap_err(),
        PlanError::TooLarge
    );
    assert_eq!(Bounds::of(&i, Alignment::DEFAULT), None);
    assert!(Alignment::new(0).is_none());
}

// ---------------------------------------------------------------- generators

/// Random intervals and sizes: `n` buffers over `horizon` instants.
fn random_intervals(rng: &mut SplitMix64, n: usize, horizon: u64, max_size: u64) -> Instance {
    let buffers = (0..n as u64)
        .map(|id| {
            let lower = rng.below(horizon);
            let len = 1 + rng.below(horizon / 3 + 1);
            b(id, lower, lower + len, 1 + rng.below(max_size))
        })
        .collect();
    inst(buffers)
}

/// Buffers on a coarser grid (swap mode's blocks, mapped granule by granule) land on it, among
/// buffers of any size, in pools that together need less than giving each of them a granule
/// more so that it could go anywhere: blocks of one to three granules, as `mlp_train --adam`'s
/// 4 MiB weights on 2 MiB granules (padded, its pool's lower bound rose by 21 MB). The
/// search's steps (its exact search with gravity onto the grid) keep them there and place
/// smaller pools than best-of alone, never larger.
#[test]
fn buffers_on_a_grid_land_on_it_in_less_than_a_granule_more_each() {
    const GRID: u64 = 8192;
    let alignment = Alignment::DEFAULT;
    let mut rng = SplitMix64::new(35);
    let (mut best_of, mut searched, mut padded) = (0, 0, 0);
    for _ in 0..30 {
        let mut buffers = random_intervals(&mut rng, 40, 60, 6000).buffers().to_vec();
        let blocks: Vec<usize> = (0..buffers.len()).filter(|i| i % 4 == 0).collect();
        for &i in &blocks {
            buffers[i].size = GRID * (1 + rng.below(3));
        }
        let instance = inst(buffers.clone());
        let bound = Bounds::of(&instance, alignment).unwrap().aligned_peak;
        let mut footprints = [0; 2];
        for (footprint, steps) in footprints.iter_mut().zip([0, 20_000]) {
            let placed = plan_on_grid(&instance, alignment, (&blocks, GRID), (steps, 0))
                .unwrap()
                .plan;
            assert_eq!(validate(&instance, &placed), Ok(()));
            for &i in &blocks {
                assert_eq!(placed.offsets[i] % GRID, 0, "block {i} off its grid");
            }
            assert!(placed.footprint >= bound);
            *footprint = placed.footprint;
        }
        assert!(footprints[1] <= footprints[0], "{footprints:?}");
        best_of += footprints[0];
        searched += footprints[1];
        for &i in &blocks {
            buffers[i].size += GRID;
        }
        let each_a_granule_more = inst(buffers);
        padded += (plan(
            &each_a_granule_more,
            Policy::BestOf,
            &PlanOptions::default(),
        ))
        .unwrap()
        .footprint;
    }
    assert!(best_of < padded, "{best_of} ≥ {padded}");
    assert!(searched < best_of, "{searched} ≥ {best_of}");
}

/// A search asked for a footprint it can reach stops there: the exact search looks for a
/// placement within `enough` first, so a generous target costs no further steps and the
/// placement may exceed the lower bound up to it, but not beyond.
#[test]
fn a_search_on_a_grid_stops_within_enough() {
    const GRID: u64 = 8192;
    let alignment = Alignment::DEFAULT;
    let mut rng = SplitMix64::new(36);
    for _ in 0..10 {
        let mut buffers = random_intervals(&mut rng, 40, 60, 6000).buffers().to_vec();
        let blocks: Vec<usize> = (0..buffers.len()).filter(|i| i % 4 == 0).collect();
        for &i in &blocks {
            buffers[i].size = GRID * (1 + rng.below(3));
        }
        let instance = inst(buffers);
        let alone = plan_on_grid(&instance, alignment, (&blocks, GRID), (0, 0)).unwrap();
        let searched = plan_on_grid(&instance, alignment, (&blocks, GRID), (20_000, 0)).unwrap();
        let enough = searched.footprint + (alone.footprint - searched.footprint) / 2;
        let target = (20_000, enough);
        let stopped = plan_on_grid(&instance, alignment, (&blocks, GRID), target).unwrap();
        assert!(
            stopped.footprint <= enough,
            "{} > {enough}",
            stopped.footprint
        );
        assert!(stopped.footprint <= alone.footprint);
        assert!(stopped.stats.dfs_nodes <= searched.stats.dfs_nodes);
    }
}

/// One buffer born per instant, living 1 + Exp(mean 80) instants, of 512 · 2^U(0, 8) bytes:
/// about 80 live at once, in 512-byte units, the shape on which greedy by size loses most to
/// first-fit and cnmem (issue 13's large instances, scaled down).
fn crowded(rng: &mut SplitMix64, n: usize) -> Instance {
    let buffers = (0..n as u64)
        .map(|t| {
            let len = 1 + (-80.0 * (1.0 - rng.unit()).ln()) as u64;
            let units = 2f64.powf(8.0 * rng.unit()) as u64;
            b(t, t, t + len, 512 * units)
        })
        .collect();
    inst(buffers)
}

/// A "tight" instance whose optimum is its peak: a `horizon × width` box cut recursively
/// (guillotine) into `pieces` rectangles, each a buffer (lifetime = its time span, size = its
/// height). Every instant is covered exactly, so the peak is `width` and the box is a plan.
fn guillotine(rng: &mut SplitMix64, pieces: usize, horizon: u64, width: u64) -> Instance {
    let buffers = guillotine_boxes(rng, pieces, horizon, width)
        .iter()
        .enumerate()
        .map(|(id, &(t0, t1, m0, m1))| b(id as u64, t0, t1, m1 - m0))
        .collect();
    inst(buffers)
}

/// The boxes `(t0, t1, m0, m1)` of [`guillotine`].
fn guillotine_boxes(
    rng: &mut SplitMix64,
    pieces: usize,
    horizon: u64,
    width: u64,
) -> Vec<(u64, u64, u64, u64)> {
    let mut boxes = vec![(0u64, horizon, 0u64, width)];
    while boxes.len() < pieces {
        let k = rng.below(boxes.len() as u64) as usize;
        let (t0, t1, m0, m1) = boxes[k];
        let along_time = rng.below(2) == 0;
        if along_time && t1 - t0 >= 2 {
            let cut = t0 + 1 + rng.below(t1 - t0 - 1);
            boxes[k] = (t0, cut, m0, m1);
            boxes.push((cut, t1, m0, m1));
        } else if m1 - m0 >= 2 {
            let cut = m0 + 1 + rng.below(m1 - m0 - 1);
            boxes[k] = (t0, t1, m0, cut);
            boxes.push((t0, t1, cut, m1));
        } else if boxes.iter().all(|&(a, b, c, d)| b - a < 2 && d - c < 2) {
            break;
        }
    }
    boxes
}

// ---------------------------------------------------------------- property tests

#[test]
fn property_every_plan_is_valid_and_ordered() {
    let mut rng = SplitMix64::new(0xA11CE);
    for round in 0..60 {
        let n = 1 + rng.below(40) as usize;
        let horizon = 2 + rng.below(60);
        let i = random_intervals(&mut rng, n, horizon, 5000);
        let alignment = [1, 512, 3][round % 3];
        all_policies(&i, &options(alignment, SHORT));
    }
}

#[test]
fn property_search_reaches_the_optimum_of_tight_instances() {
    let mut rng = SplitMix64::new(0xB0B);
    for _ in 0..40 {
        let pieces = 2 + rng.below(9) as usize;
        let i = guillotine(&mut rng, pieces, 20, 64);
        let opts = options(1, AMPLE);
        let fp = all_policies(&i, &opts);
        assert_eq!(i.peak_live(), 64);
        assert_eq!(fp[3], 64, "search misses the optimum of {:?}", i.buffers());
    }
}

#[test]
fn search_beats_greedy_where_greedy_misses() {
    // Tight instances on which best-fit misses the optimum exist and the search recovers them.
    let mut rng = SplitMix64::new(0xDEC0DE);
    let mut missed = 0;
    for _ in 0..60 {
        let i = guillotine(&mut rng, 14, 16, 48);
        let opts = options(1, AMPLE);
        let fp = all_policies(&i, &opts);
        if fp[0] > 48 {
            missed += 1;
            assert_eq!(fp[3], 48);
        }
    }
    assert!(missed >= 5, "best-fit missed only {missed} optima");
}

#[test]
fn property_tight_instances_in_aligned_units() {
    // The same with sizes in 512-byte units and the default alignment.
    let mut rng = SplitMix64::new(0xC0FFEE);
    for _ in 0..20 {
        let units = guillotine(&mut rng, 8, 30, 32);
        let scaled: Vec<Buffer> = units
            .buffers()
            .iter()
            .map(|x| b(x.id, x.lower, x.upper, x.size * 512 - rng.below(100)))
            .collect();
        let i = inst(scaled);
        let r = plan(&i, Policy::Search, &options(512, AMPLE)).unwrap();
        assert_eq!(validate(&i, &r.plan), Ok(()));
        assert_eq!((r.footprint, r.lower_bound), (32 * 512, 32 * 512));
        assert!(r.unaligned_peak < r.lower_bound);
    }
}

#[test]
fn search_is_deterministic_for_a_seed_when_it_reaches_the_bound() {
    let mut rng = SplitMix64::new(5);
    let i = guillotine(&mut rng, 12, 40, 100);
    let a = plan(&i, Policy::Search, &options(1, AMPLE)).unwrap();
    let b = plan(&i, Policy::Search, &options(1, AMPLE)).unwrap();
    assert_eq!(a.plan, b.plan);
    assert!(a.is_optimal());
}

#[test]
fn a_spent_wall_budget_returns_the_floor() {
    // With no time left, best-fit and every later candidate (the DFS, the online placements,
    // best-of, the budgeted search) are cut before they start: the plan is the floor's
    // (best-fit in birth order, `floor.rs`), whatever the machine's speed. (The wall itself is
    // measured by `itermem bench plan --budget-ms`, never asserted here.)
    let mut rng = SplitMix64::new(1);
    let i = random_intervals(&mut rng, 80, 40, 5000);
    let wall = PlanOptions {
        budget: std::time::Duration::ZERO,
        steps: None,
        ..options(1, 0)
    };
    let best_fit = plan(&i, Policy::BestFit, &wall).unwrap();
    let floor = place(&i, Order::Birth, Fit::Best, Alignment::NONE).unwrap();
    assert!(
        best_fit.footprint < floor.footprint,
        "pick an instance on which best-fit beats the floor"
    );
    let search = plan(&i, Policy::Search, &wall).unwrap();
    assert_eq!(validate(&i, &search.plan), Ok(()));
    assert_eq!((&search.plan, search.method), (&floor, Method::Floor));
    assert_eq!(search.stats, SearchStats::default());
    // Counted in steps nothing before the search is cut: the same zero budget runs best-fit
    // and the candidates after it.
    let steps = plan(&i, Policy::Search, &options(1, 0)).unwrap();
    assert!(steps.footprint < best_fit.footprint, "{}", steps.method);
}

#[test]
fn property_the_floor_is_best_fit_in_birth_order() {
    // The free list makes the greedy run's choice (`floor::RUN`) without a timeline: same
    // offsets, on instances with ties at births and deaths and at several alignments.
    let mut rng = SplitMix64::new(0xF100);
    for round in 0..120 {
        let (n, horizon) = (1 + rng.below(120) as usize, 4 + rng.below(80));
        let i = if round % 2 == 0 {
            random_intervals(&mut rng, n, horizon, 5000)
        } else {
            crowded(&mut rng, n)
        };
        let alignment = Alignment::new([1, 512, 3][round % 3]).unwrap();
        let prep = greedy::Prepared::new(&i, alignment).unwrap();
        let floor = floor::place(&i, &prep);
        let (order, fit) = floor::RUN;
        let run = greedy::run(&i, &prep, order, fit);
        assert_eq!(
            (&floor.offsets, floor.footprint),
            (&run.offsets, run.footprint),
            "round {round}"
        );
    }
}

#[test]
fn property_the_floor_keeps_whole_lifetimes_through_absences() {
    // A swapped buffer keeps its range through its windows in the floor: the placement of the
    // instance without windows, valid for the one with them.
    let mut rng = SplitMix64::new(0xF101);
    let mut holed_instances = 0;
    for round in 0..60 {
        let (n, horizon) = (1 + rng.below(60) as usize, 4 + rng.below(60));
        let whole = random_intervals(&mut rng, n, horizon, 5000);
        let absences = random_absences(&mut rng, whole.buffers());
        holed_instances += usize::from(!absences.is_empty());
        let holed = inst_out(whole.buffers().to_vec(), absences);
        let alignment = Alignment::new([1, 512, 3][round % 3]).unwrap();
        let floor = |i: &Instance| floor::place(i, &greedy::Prepared::new(i, alignment).unwrap());
        let (with, without) = (floor(&holed), floor(&whole));
        assert_eq!(with.offsets, without.offsets, "round {round}");
        let plan = Plan {
            offsets: with.offsets,
            footprint: with.footprint,
            alignment,
        };
        assert_eq!(validate(&holed, &plan), Ok(()), "round {round}");
    }
    assert!(
        holed_instances > 30,
        "{holed_instances} instances with windows"
    );
}

#[test]
fn a_search_counted_in_steps_does_the_same_work_under_load() {
    // A box cut into 200 pieces: the exact search (`exact.rs`) places random intervals at
    // their lower bound within a few thousand steps, but not this one within the budget, which
    // it then spends whole.
    let mut rng = SplitMix64::new(1);
    let i = guillotine(&mut rng, 200, 60, 1 << 20);
    let steps = 50_000;
    let opts = options(1, steps);
    let idle = plan(&i, Policy::Search, &opts).unwrap();
    assert!(
        !idle.is_optimal(),
        "pick an instance the search cannot solve"
    );
    // The budget is spent, and overrun by less than one greedy run or one DFS check interval.
    let work = idle.stats.greedy_runs * i.len() as u64 + idle.stats.dfs_nodes;
    assert!(
        (steps..steps + 256 + i.len() as u64).contains(&work),
        "{work} steps: {:?}",
        idle.stats
    );
    // Busy threads beside it change nothing: not the plan, not the work done.
    let stop = std::sync::atomic::AtomicBool::new(false);
    let loaded = std::thread::scope(|scope| {
        for _ in 0..2 {
            scope.spawn(|| {
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    std::hint::spin_loop();
                }
            });
        }
        let r = plan(&i, Policy::Search, &opts).unwrap();
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        r
    });
    assert_eq!((&loaded.plan, loaded.stats), (&idle.plan, idle.stats));
}

#[test]
fn scaling_instance_is_seeded() {
    let a = random_instance(2_000, 3);
    let b = random_instance(2_000, 3);
    assert_eq!(a, b);
    assert_eq!(a.len(), 2_000);
    assert_ne!(a, random_instance(2_000, 4));
    let r = bench_scaling(2_000, 3).unwrap();
    assert!(r.valid);
    assert_eq!(r.buffers, 2_000);
    assert!(r.footprint >= r.lower_bound && r.ratio < 1.05, "{r:?}");
}

/// Every family of `bench plan --family` is a function of its seed with exactly `n` buffers;
/// the somas family's weights live throughout and the rest splits into steps, the iopddl
/// family is one part of time (what `decompose.rs` relies on and leaves alone).
#[test]
fn family_instances_are_seeded_and_shaped() {
    for family in [Family::Training, Family::Somas, Family::Iopddl] {
        let a = family_instance(family, 5_000, 3);
        assert_eq!(a, family_instance(family, 5_000, 3), "{}", family.name());
        assert_ne!(a, family_instance(family, 5_000, 4), "{}", family.name());
        assert_eq!(a.len(), 5_000, "{}", family.name());
    }
    let somas = somas_instance(5_000, 1);
    let end = somas.buffers().iter().map(|b| b.upper).max().unwrap_or(0);
    let globals = somas
        .buffers()
        .iter()
        .filter(|b| b.lower == 0 && b.upper == end)
        .count();
    assert_eq!(globals, 160);
    let iopddl = iopddl_instance(5_000, 1);
    let prep = greedy::Prepared::new(&iopddl, Alignment::default()).unwrap();
    let segs: Vec<(usize, usize)> = (0..prep.len()).map(|i| prep.segs[i]).collect();
    assert_eq!(greedy::parts(&segs, prep.segments).len(), 1);
}

// ---------------------------------------------------------------- windows of time (window.rs)

/// Every buffer stacked on the ones before it: a valid plan, as bad as plans get (what the
/// window search must improve on).
fn stacked(prep: &greedy::Prepared) -> Outcome {
    let mut top = 0;
    let offsets = (prep.sizes.iter())
        .map(|&s| {
            top += s;
            top - s
        })
        .collect();
    Outcome {
        offsets,
        footprint: top,
        method: Method::Floor,
    }
}

/// The window search from a given incumbent, with a budget of `steps` (buffers freed).
fn windows(prep: &greedy::Prepared, incumbent: Outcome, steps: u64, seed: u64) -> Outcome {
    windows_until(prep, incumbent, (steps, steps), seed).0
}

/// [`windows`], giving up at `first` steps if nothing was found by then; with the steps spent.
fn windows_until(
    prep: &greedy::Prepared,
    incumbent: Outcome,
    (first, steps): (u64, u64),
    seed: u64,
) -> (Outcome, u64) {
    let clock = search::Clock::Steps {
        per_greedy_run: prep.len() as u64,
    };
    let mut stats = SearchStats::default();
    let out = window::improve(prep, incumbent, (clock, first, steps), seed, &mut stats);
    assert!(
        stats.window_buffers <= steps.saturating_add(4096),
        "{stats:?}"
    );
    (out, stats.window_buffers)
}

/// The windows give their time back at their first deadline when they have found nothing by
/// then and the buffers at the top live too long for any window (real operator graphs:
/// docs/BENCHMARKS.md), and only then.
#[test]
fn window_moves_give_their_time_back_when_the_top_is_too_wide_for_them() {
    // 5,000 short buffers side by side at offset 0, and above them one that lives across all
    // of them: every move is around it, and no window frees it.
    let n = 5_000u64;
    let mut buffers: Vec<_> = (0..n).map(|k| b(k, k, k + 1, 512)).collect();
    buffers.push(b(n, 0, n, 512));
    let instance = Instance::new(buffers).unwrap();
    let prep = greedy::Prepared::new(&instance, Alignment::default()).unwrap();
    let mut offsets = vec![0; n as usize];
    offsets.push(4096);
    let incumbent = Outcome {
        offsets,
        footprint: 4608,
        method: Method::Floor,
    };
    let steps = |first: u64| {
        let (out, spent) = windows_until(&prep, incumbent.clone(), (first, u64::MAX), 1);
        assert_eq!(out.footprint, incumbent.footprint);
        spent
    };
    // A move counts at most 4096 steps.
    assert!(steps(100_000) <= 100_000 + 4096);
    assert!(steps(u64::MAX) > 1_000_000);

    // Where no move is too wide (one operator graph of the `iopddl` family, from best-fit,
    // whose first plan takes 30k–100k steps), the first deadline changes nothing.
    let instance = iopddl_instance(5_000, 1);
    let prep = greedy::Prepared::new(&instance, Alignment::default()).unwrap();
    let order = greedy::order_indices(&instance, &prep, Order::SizeDesc);
    let (offsets, footprint) = greedy::place(&prep, &order, Fit::Best);
    let best_fit = Outcome {
        offsets,
        footprint,
        method: Method::Floor,
    };
    let (first_deadline, _) = windows_until(&prep, best_fit.clone(), (30_000, 1_000_000), 1);
    let without = windows(&prep, best_fit.clone(), 1_000_000, 1);
    assert_eq!(first_deadline.offsets, without.offsets);
    assert!(without.footprint < best_fit.footprint);
}

/// From the worst incumbent, on crowded instances (~80 live): every plan the window search
/// returns is valid whatever its budget, more steps never give a larger plan (the same seeded
/// moves, continued), and a few hundred moves cut the footprint far below the incumbent's.
#[test]
fn window_moves_keep_plans_valid_and_lower_a_bad_incumbent() {
    let mut rng = SplitMix64::new(0x3D0);
    for seed in 1..=3 {
        let instance = crowded(&mut rng, 1_500);
        let prep = greedy::Prepared::new(&instance, Alignment::default()).unwrap();
        let incumbent = stacked(&prep);
        let mut last = incumbent.footprint;
        for steps in [0, 1_000, 30_000, 300_000] {
            let out = windows(&prep, incumbent.clone(), steps, seed);
            let valid =
                check::validate_parts(&instance, &out.offsets, out.footprint, prep.alignment);
            assert_eq!(valid, Ok(()), "seed {seed}, {steps} steps");
            assert!(
                out.footprint <= last,
                "seed {seed}: more steps, larger plan"
            );
            last = out.footprint;
        }
        assert!(
            last * 4 < incumbent.footprint,
            "seed {seed}: {last} from {}",
            incumbent.footprint
        );
        assert!(last >= prep.lower_bound);
    }
}

/// Tight instances (a box cut into rectangles: the optimum is the peak) from the worst
/// incumbent: the window search reaches the optimum, and stops there.
#[test]
fn window_moves_reach_the_optimum_of_tight_instances() {
    let mut rng = SplitMix64::new(0x71D0);
    for round in 0..20 {
        let instance = guillotine(&mut rng, 12, 40, 64);
        let prep = greedy::Prepared::new(&instance, Alignment::NONE).unwrap();
        let out = windows(&prep, stacked(&prep), AMPLE, round);
        let valid = check::validate_parts(&instance, &out.offsets, out.footprint, prep.alignment);
        assert_eq!(valid, Ok(()), "round {round}");
        assert_eq!(out.footprint, 64, "round {round}: {:?}", instance.buffers());
    }
}

/// One operator graph above the exact search's size is one part of time, which the
/// decomposition leaves alone: the search's steps for one part (the large buffers first, then
/// the windows) place it, validly, below best-fit (4.48 GB).
#[test]
fn search_moves_windows_where_nothing_decomposes() {
    let instance = iopddl_instance(exact::MAX_BUFFERS + 500, 1);
    let opts = options(512, 400_000);
    let best_fit = plan(&instance, Policy::BestFit, &opts).unwrap();
    let search = plan(&instance, Policy::Search, &opts).unwrap();
    assert_eq!(validate(&instance, &search.plan), Ok(()));
    assert!(
        search.footprint < best_fit.footprint,
        "{} not below best-fit's {}",
        search.footprint,
        best_fit.footprint
    );
    // Best-of's other orders and the online placements, offered after them, did not beat them
    // here.
    assert!(
        matches!(
            search.method,
            Method::Windows { .. } | Method::Layers { .. }
        ),
        "{}",
        search.method
    );
}

/// Where the windows apply and best-fit fragments (1.0348 of `LB`), the search places the
/// large buffers first (`layers.rs`), and nothing after does better.
#[test]
fn search_places_large_buffers_first_on_an_operator_graph() {
    let instance = iopddl_instance(5000, 2);
    let search = plan(&instance, Policy::Search, &options(512, 100_000)).unwrap();
    assert_eq!(validate(&instance, &search.plan), Ok(()));
    assert!(
        matches!(search.method, Method::Layers { .. }),
        "{}",
        search.method
    );
    let lb = search.lower_bound;
    assert!(
        search.footprint <= lb + lb / 500,
        "{} vs {lb}",
        search.footprint
    );
}

// ---------------------------------------------------------------- the validator

fn plan_of(offsets: Vec<u64>, footprint: u64, alignment: u64) -> Plan {
    Plan {
        offsets,
        footprint,
        alignment: Alignment::new(alignment).unwrap(),
    }
}

#[test]
fn validator_catches_each_kind_of_conflict() {
    let i = inst(vec![b(10, 0, 4, 100), b(11, 2, 6, 100), b(12, 4, 8, 100)]);
    // A valid plan: 10 and 12 share offset 0 (10 dies at 4 when 12 is born).
    assert_eq!(validate(&i, &plan_of(vec![0, 100, 0], 200, 1)), Ok(()));

    assert_eq!(
        validate(&i, &plan_of(vec![0, 100], 200, 1)),
        Err(Conflict::WrongLength {
            offsets: 2,
            buffers: 3
        })
    );
    assert_eq!(
        validate(&i, &plan_of(vec![0, 100, 0], 199, 1)),
        Err(Conflict::OutOfBounds {
            a: 1,
            a_id: 11,
            end: 200,
            footprint: 199
        })
    );
    assert_eq!(
        validate(&i, &plan_of(vec![0, 100, 0], 300, 1)),
        Err(Conflict::SlackFootprint {
            claimed: 300,
            used: 200
        })
    );
    assert_eq!(
        validate(&i, &plan_of(vec![0, 100, 0], 1024, 512)),
        Err(Conflict::Misaligned {
            a: 1,
            a_id: 11,
            offset: 100,
            alignment: 512
        })
    );
    assert_eq!(
        validate(&i, &plan_of(vec![0, u64::MAX - 10, 0], u64::MAX, 1)),
        Err(Conflict::Overflow {
            a: 1,
            a_id: 11,
            offset: u64::MAX - 10
        })
    );
    // 10 and 11 overlap in time [2,4) and in memory [50,100).
    let err = validate(&i, &plan_of(vec![0, 50, 150], 250, 1)).unwrap_err();
    assert_eq!(err.pair(), Some((0, 1)));
    assert_eq!(
        err,
        Conflict::Overlap {
            a: 0,
            b: 1,
            a_id: 10,
            b_id: 11,
            time: 2,
            a_range: (0, 100),
            b_range: (50, 150)
        }
    );
    assert!(
        err.to_string()
            .contains("buffers 10 [0, 100) and 11 [50, 150)")
    );
}

#[test]
fn validator_uses_aligned_sizes() {
    // 100 bytes occupy 512 once aligned: offsets 0 and 256 collide at alignment 256 …
    let i = inst(vec![b(0, 0, 2, 300), b(1, 0, 2, 100)]);
    let err = validate(&i, &plan_of(vec![0, 256], 512, 256)).unwrap_err();
    assert_eq!(err.pair(), Some((0, 1)));
    // … but not at alignment 1.
    assert_eq!(validate(&i, &plan_of(vec![0, 300], 400, 1)), Ok(()));
}

#[test]
fn validator_finds_overlaps_beyond_the_adjacent_range() {
    // A long range under two short ones: the new buffer lands inside the long one.
    let i = inst(vec![
        b(0, 0, 10, 100), // [0,100)
        b(1, 0, 10, 10),  // [100,110)
        b(2, 5, 6, 5),    // [40,45): inside buffer 0
    ]);
    let err = validate(&i, &plan_of(vec![0, 100, 40], 110, 1)).unwrap_err();
    assert_eq!(err.pair(), Some((0, 2)));
    // Equal offsets at the same time.
    let i = inst(vec![b(0, 0, 3, 8), b(1, 1, 2, 8)]);
    let err = validate(&i, &plan_of(vec![0, 0], 8, 1)).unwrap_err();
    assert_eq!(err.pair(), Some((0, 1)));
}

#[test]
fn validator_agrees_with_the_pairwise_definition() {
    let mut rng = SplitMix64::new(99);
    let mut rejected = 0;
    for _ in 0..400 {
        let n = 1 + rng.below(12) as usize;
        let i = random_intervals(&mut rng, n, 12, 8);
        let offsets: Vec<u64> = (0..n).map(|_| rng.below(24)).collect();
        let sizes: Vec<u64> = i.buffers().iter().map(|x| x.size).collect();
        let footprint = offsets
            .iter()
            .zip(&sizes)
            .map(|(o, s)| o + s)
            .max()
            .unwrap();
        let conflicting = |a: usize, b: usize| {
            let (x, y) = (&i.buffers()[a], &i.buffers()[b]);
            x.overlaps_in_time(y)
                && offsets[a] < offsets[b] + sizes[b]
                && offsets[b] < offsets[a] + sizes[a]
        };
        let any = (0..n).any(|a| (a + 1..n).any(|b| conflicting(a, b)));
        match validate(&i, &plan_of(offsets.clone(), footprint, 1)) {
            Ok(()) => assert!(!any),
            Err(e) => {
                let (a, b) = e.pair().expect("only overlaps are possible here");
                assert!(a < b && conflicting(a, b), "{e}");
                rejected += 1;
            }
        }
    }
    assert!(rejected > 50, "the generator should produce conflicts too");
}

// ---------------------------------------------------------------- absences (AutoSwap holes)

fn out(id: u64, from: u64, to: u64) -> Absence {
    Absence { id, from, to }
}

fn inst_out(buffers: Vec<Buffer>, absences: Vec<Absence>) -> Instance {
    Instance::with_absences(buffers, absences).expect("a valid test instance")
}

#[test]
fn a_buffer_inside_the_hole_shares_the_range() {
    // 0 is swapped out during [3,7); 1 lives inside the window: one range for both.
    let i = inst_out(
        vec![b(0, 0, 10, 1024), b(1, 4, 6, 1024)],
        vec![out(0, 3, 7)],
    );
    assert_eq!(i.peak_live(), 1024);
    let fp = all_policies(&i, &options(512, SHORT));
    assert_eq!(fp, [1024; 4]);
    for policy in Policy::ALL {
        let r = plan(&i, policy, &options(512, SHORT)).unwrap();
        assert_eq!(r.plan.offsets, vec![0, 0], "{policy}");
        assert_eq!((r.lower_bound, r.unaligned_peak), (1024, 1024));
    }
    // Without the window both are needed at once.
    let whole = inst(i.buffers().to_vec());
    assert_eq!(all_policies(&whole, &options(512, SHORT)), [2048; 4]);
}

#[test]
fn a_swapped_buffer_fits_under_a_larger_one_placed_first() {
    // The larger buffer 1 goes first (size order) at 0; 0 is absent for all of 1's life, so it
    // takes offset 0 too although its lifetime contains 1's. Then 2, resident with both, goes
    // above, and 3 fills 0's hole next to 1.
    let i = inst_out(
        vec![
            b(0, 0, 10, 1024),
            b(1, 3, 6, 2048),
            b(2, 0, 10, 512),
            b(3, 2, 8, 1024),
        ],
        vec![out(0, 2, 8)],
    );
    let p = place(&i, Order::SizeDesc, Fit::Best, Alignment::DEFAULT).unwrap();
    assert_eq!(validate(&i, &p), Ok(()));
    assert_eq!(p.offsets, vec![0, 0, 3072, 2048]);
    assert_eq!(p.footprint, 3584);
    let fp = all_policies(&i, &options(512, SHORT));
    assert_eq!(
        plan(&i, Policy::BestFit, &options(512, 0))
            .unwrap()
            .lower_bound,
        3584
    );
    assert_eq!(fp[3], 3584);
}

#[test]
fn a_buffer_with_two_windows_lends_its_range_twice() {
    // Weights-like: 0 is resident at the start, in the middle and at the end; 1 and 2 use its
    // range in its two absences, 3 is resident with it in the middle and must go elsewhere.
    let i = inst_out(
        vec![
            b(0, 0, 20, 4096),
            b(1, 2, 8, 4096),
            b(2, 12, 18, 4096),
            b(3, 9, 11, 512),
        ],
        vec![out(0, 2, 8), out(0, 12, 18)],
    );
    assert_eq!(
        i.resident(0).collect::<Vec<_>>(),
        [(0, 2), (8, 12), (18, 20)]
    );
    let fp = all_policies(&i, &options(512, SHORT));
    assert_eq!(fp, [4608; 4]);
    let r = plan(&i, Policy::BestFit, &options(512, 0)).unwrap();
    assert_eq!(r.plan.offsets[..3], [0, 0, 0]);
    assert_eq!(r.lower_bound, 4608);
}

#[test]
fn validator_counts_only_resident_intervals() {
    // 0 lives [0,10) at offset 0 and is out during [3,7).
    let i = |other: Buffer| inst_out(vec![b(0, 0, 10, 100), other], vec![out(0, 3, 7)]);
    // Exactly the window: no conflict (half-open at both ends).
    assert_eq!(
        validate(&i(b(1, 3, 7, 100)), &plan_of(vec![0, 50], 150, 1)),
        Ok(())
    );
    // Still resident when 0 swaps back in at 7: conflict at 7.
    assert_eq!(
        validate(&i(b(1, 5, 8, 100)), &plan_of(vec![0, 50], 150, 1)),
        Err(Conflict::Overlap {
            a: 0,
            b: 1,
            a_id: 0,
            b_id: 1,
            time: 7,
            a_range: (0, 100),
            b_range: (50, 150)
        })
    );
    // Born before 0 leaves, at 2: conflict at 2.
    let err = validate(&i(b(1, 2, 5, 100)), &plan_of(vec![0, 99], 199, 1)).unwrap_err();
    assert_eq!(err.pair(), Some((0, 1)));
    assert!(matches!(err, Conflict::Overlap { time: 2, .. }), "{err}");
    assert!(err.to_string().contains("both resident at 2"), "{err}");
    // One offset for the whole life: 0 comes back to the range 1 now holds, which a plan
    // cannot dodge by moving 0 (the plan has one offset per buffer).
    let j = inst_out(vec![b(0, 0, 10, 100), b(1, 4, 10, 100)], vec![out(0, 3, 7)]);
    let err = validate(&j, &plan_of(vec![0, 0], 100, 1)).unwrap_err();
    assert!(
        matches!(
            err,
            Conflict::Overlap {
                a: 0,
                b: 1,
                time: 7,
                ..
            }
        ),
        "{err}"
    );
    // Two swapped buffers: 0 resident [0,2) [8,10), 1 resident [1,2) [11,12): they meet only
    // during [1,2).
    let k = inst_out(
        vec![b(0, 0, 10, 100), b(1, 1, 12, 100)],
        vec![out(0, 2, 8), out(1, 2, 11)],
    );
    assert_eq!(k.resident_overlap(0, 1), Some(1));
    let err = validate(&k, &plan_of(vec![0, 0], 100, 1)).unwrap_err();
    assert!(matches!(err, Conflict::Overlap { time: 1, .. }), "{err}");
    let k = inst_out(
        vec![b(0, 0, 10, 100), b(1, 2, 12, 100)],
        vec![out(0, 2, 8), out(1, 3, 11)],
    );
    // 1 resident [2,3) [11,12): never with 0, so one range serves both.
    assert_eq!(k.resident_overlap(0, 1), None);
    assert_eq!(validate(&k, &plan_of(vec![0, 0], 100, 1)), Ok(()));
}

/// Random absence windows for `instance`'s buffers: about half of the buffers long enough get
/// one or two windows strictly inside their lifetime (sometimes touching, to be joined).
fn random_absences(rng: &mut SplitMix64, buffers: &[Buffer]) -> Vec<Absence> {
    let mut absences = Vec::new();
    for x in buffers {
        if x.upper - x.lower < 3 || rng.below(2) == 0 {
            continue;
        }
        // Cut points strictly inside: lower < p1 < p2 (< p3) < upper.
        let mut cuts: Vec<u64> = (0..3).map(|_| rng.range(x.lower + 1, x.upper)).collect();
        cuts.sort_unstable();
        cuts.dedup();
        match cuts[..] {
            [p, q] => absences.push(out(x.id, p, q)),
            [p, q, r] => {
                absences.push(out(x.id, p, q));
                if rng.below(2) == 0 {
                    absences.push(out(x.id, q, r)); // touching: joined
                }
            }
            _ => {}
        }
    }
    absences
}

/// Whether buffer `x` is resident at `t` under the raw windows (independent of `Instance`).
fn resident_at(x: &Buffer, absences: &[Absence], t: u64) -> bool {
    x.lower <= t
        && t < x.upper
        && !absences
            .iter()
            .any(|a| a.id == x.id && a.from <= t && t < a.to)
}

#[test]
fn property_plans_with_absences_are_valid_and_holes_only_help() {
    let mut rng = SplitMix64::new(0x5_0A9);
    let mut helped = 0;
    for round in 0..60 {
        let n = 1 + rng.below(40) as usize;
        let horizon = 4 + rng.below(60);
        let whole = random_intervals(&mut rng, n, horizon, 5000);
        let absences = random_absences(&mut rng, whole.buffers());
        let holed = inst_out(whole.buffers().to_vec(), absences.clone());
        let opts = options([1, 512, 3][round % 3], SHORT);
        // Validity, footprint ≥ resident peak, best-of ≤ best-fit, search ≤ best-of.
        let fp = all_policies(&holed, &opts);
        // The resident peak, brute force from the raw windows.
        let peak = (0..horizon * 2)
            .map(|t| {
                holed
                    .buffers()
                    .iter()
                    .filter(|x| resident_at(x, &absences, t))
                    .map(|x| x.size)
                    .sum::<u64>()
            })
            .max()
            .unwrap_or(0);
        assert_eq!(holed.peak_live(), peak);
        let with = plan(&holed, Policy::BestFit, &opts).unwrap();
        let without = plan(&whole, Policy::BestFit, &opts).unwrap();
        assert!(fp[0] >= with.lower_bound && with.unaligned_peak == peak);
        // Holes can only lower the bound, and every plan of the whole instance stays valid.
        assert!(with.lower_bound <= without.lower_bound);
        assert_eq!(validate(&holed, &without.plan), Ok(()));
        if with.lower_bound < without.lower_bound {
            helped += 1;
        }
    }
    assert!(
        helped > 10,
        "the windows lowered the bound only {helped} times"
    );
}

#[test]
fn validator_with_absences_agrees_with_the_pairwise_definition() {
    let mut rng = SplitMix64::new(0xAB5);
    let mut rejected = 0;
    for _ in 0..400 {
        let n = 1 + rng.below(12) as usize;
        let whole = random_intervals(&mut rng, n, 12, 8);
        let absences = random_absences(&mut rng, whole.buffers());
        let i = inst_out(whole.buffers().to_vec(), absences.clone());
        let offsets: Vec<u64> = (0..n).map(|_| rng.below(24)).collect();
        let sizes: Vec<u64> = i.buffers().iter().map(|x| x.size).collect();
        let footprint = offsets
            .iter()
            .zip(&sizes)
            .map(|(o, s)| o + s)
            .max()
            .unwrap();
        let meet = |a: usize, b: usize| {
            (0..40).find(|&t| {
                resident_at(&i.buffers()[a], &absences, t)
                    && resident_at(&i.buffers()[b], &absences, t)
            })
        };
        let conflicting = |a: usize, b: usize| {
            meet(a, b).is_some()
                && offsets[a] < offsets[b] + sizes[b]
                && offsets[b] < offsets[a] + sizes[a]
        };
        for a in 0..n {
            for c in 0..n {
                if a != c {
                    assert_eq!(i.resident_overlap(a, c), meet(a, c));
                }
            }
        }
        let any = (0..n).any(|a| (a + 1..n).any(|c| conflicting(a, c)));
        match validate(&i, &plan_of(offsets.clone(), footprint, 1)) {
            Ok(()) => assert!(!any),
            Err(e) => {
                let Conflict::Overlap { a, b, time, .. } = e else {
                    panic!("only overlaps are possible here: {e}");
                };
                assert!(a < b && conflicting(a, b), "{e}");
                let (x, y) = (&i.buffers()[a], &i.buffers()[b]);
                assert!(resident_at(x, &absences, time) && resident_at(y, &absences, time));
                rejected += 1;
            }
        }
    }
    assert!(rejected > 50, "the generator should produce conflicts too");
}

/// A tight instance with holes: a guillotine cut ([`guillotine_boxes`]), then, for every run of
/// three boxes with the same byte range back to back in time (X, Y, Z), X and Z become one
/// buffer absent during Y. Every instant is still covered exactly and the box is still a plan
/// (X keeps its range), so the optimum is `width`. Also returns the number of merges.
fn guillotine_with_holes(
    rng: &mut SplitMix64,
    pieces: usize,
    horizon: u64,
    width: u64,
) -> (Instance, usize) {
    let mut boxes = guillotine_boxes(rng, pieces, horizon, width);
    let mut absences = Vec::new();
    let mut gone = vec![false; boxes.len()];
    let mut merged = 0;
    for x in 0..boxes.len() {
        for y in 0..boxes.len() {
            for z in 0..boxes.len() {
                if gone[x] || gone[y] || gone[z] || x == y || y == z || x == z {
                    continue;
                }
                let (bx, by, bz) = (boxes[x], boxes[y], boxes[z]);
                let same_range = (bx.2, bx.3) == (by.2, by.3) && (by.2, by.3) == (bz.2, bz.3);
                if same_range && bx.1 == by.0 && by.1 == bz.0 {
                    boxes[x].1 = bz.1;
                    gone[z] = true;
                    absences.push(out(x as u64, by.0, by.1));
                    merged += 1;
                }
            }
        }
    }
    let buffers = boxes
        .iter()
        .enumerate()
        .filter(|&(k, _)| !gone[k])
        .map(|(k, &(t0, t1, m0, m1))| b(k as u64, t0, t1, m1 - m0))
        .collect();
    (inst_out(buffers, absences), merged)
}

#[test]
fn property_search_reaches_the_optimum_of_tight_instances_with_holes() {
    let mut rng = SplitMix64::new(0x401E);
    let mut holes = 0;
    for _ in 0..80 {
        let pieces = 4 + rng.below(12) as usize;
        let (i, merged) = guillotine_with_holes(&mut rng, pieces, 20, 64);
        holes += merged;
        let fp = all_policies(&i, &options(1, AMPLE));
        assert_eq!(i.peak_live(), 64);
        assert_eq!(fp[3], 64, "search misses the optimum of {i:?}");
    }
    assert!(holes >= 20, "only {holes} holes generated");
}

// ---------------------------------------------------------------- the online policies as candidates

/// What `Policy::Search` must never exceed on `instance` (issue 13), by name: the greedy
/// columns of `itermem compare` (best-fit and first-fit by size), the online best-fit and
/// first-fit in allocation order ([`Order::Birth`]), and, when the alignment divides their
/// 512-byte unit, the footprints `itermem compare` reports for cnmem (tuned and grown) and
/// PyTorch's caching allocator.
fn online_footprints(instance: &Instance, opts: &PlanOptions) -> Vec<(&'static str, u64)> {
    let mut out = Vec::new();
    for (name, policy) in [("bestfit", Policy::BestFit), ("firstfit", Policy::FirstFit)] {
        out.push((name, plan(instance, policy, opts).unwrap().footprint));
    }
    for (name, fit) in [
        ("online best-fit", Fit::Best),
        ("online first-fit", Fit::First),
    ] {
        let online = place(instance, Order::Birth, fit, opts.alignment).unwrap();
        out.push((name, online.footprint));
    }
    if 512 % opts.alignment.get() == 0 {
        for policy in [Baseline::Cnmem, Baseline::CnmemGrow, Baseline::Caching] {
            let simulation = sim::simulate(instance, policy).unwrap();
            out.push((policy.name(), simulation.footprint));
        }
    }
    out
}

/// Plans `instance` with `Policy::Search`, checks the plan, and asserts that it needs no more
/// than any of [`online_footprints`]; returns the report.
fn assert_search_beats_online(instance: &Instance, opts: &PlanOptions, what: &str) -> PlanReport {
    let best = plan(instance, Policy::Search, opts).unwrap();
    assert_eq!(validate(instance, &best.plan), Ok(()), "{what}");
    for (name, footprint) in online_footprints(instance, opts) {
        assert!(
            best.footprint <= footprint,
            "{what}: best {} > {name} {footprint} (alignment {})",
            best.footprint,
            opts.alignment.get()
        );
    }
    best
}

/// Sizes in 512-byte units; the peak is 28. cnmem's address-ordered best fit packs it at 28,
/// best-of (every greedy order, the peak-first ones included) does not.
fn cnmem_packs_what_best_of_does_not() -> Instance {
    let units: [(u64, u64, u64, u64); 15] = [
        (0, 8, 11, 7),
        (1, 3, 8, 5),
        (2, 8, 10, 1),
        (3, 2, 5, 2),
        (4, 7, 9, 1),
        (5, 5, 10, 3),
        (6, 4, 9, 3),
        (7, 11, 13, 8),
        (8, 9, 10, 7),
        (9, 8, 11, 7),
        (10, 5, 6, 7),
        (11, 4, 9, 1),
        (12, 4, 5, 8),
        (13, 4, 6, 8),
        (14, 2, 5, 1),
    ];
    inst(
        units
            .iter()
            .map(|&(id, l, u, s)| b(id, l, u, s * 512))
            .collect(),
    )
}

#[test]
fn search_takes_the_cnmem_placement_where_greedy_and_the_dive_miss() {
    // With no budget the search has only its first dive and the peak-first orders, which
    // miss here, and the candidates: cnmem's, offered before best-of, meets the bound.
    let i = cnmem_packs_what_best_of_does_not();
    let no_budget = options(512, 0);
    assert!(plan(&i, Policy::BestOf, &no_budget).unwrap().footprint > 28 * 512);
    assert_eq!(
        sim::simulate(&i, Baseline::Cnmem).unwrap().footprint,
        28 * 512
    );
    let r = assert_search_beats_online(&i, &no_budget, "hand-made");
    assert_eq!((r.footprint, r.lower_bound), (28 * 512, 28 * 512));
    assert_eq!(
        r.method,
        Method::Online {
            policy: Baseline::Cnmem
        }
    );
    assert_eq!(r.method.to_string(), "online-cnmem");
}

#[test]
fn a_passed_cutoff_drops_the_online_candidates() {
    // A replay cut short is no candidate: the incumbent stays.
    let i = cnmem_packs_what_best_of_does_not();
    let prep = greedy::Prepared::new(&i, Alignment::DEFAULT).unwrap();
    let floor = greedy::run(&i, &prep, Order::SizeDesc, Fit::Best);
    let passed = Cutoff::at(std::time::Instant::now());
    let kept = online::best_of_online(&i, &prep, floor.clone(), (passed, Duration::ZERO));
    assert_eq!((&kept.offsets, kept.method), (&floor.offsets, floor.method));
    let taken = online::best_of_online(&i, &prep, floor, (Cutoff::NEVER, Duration::ZERO));
    let cnmem = Method::Online {
        policy: Baseline::Cnmem,
    };
    assert_eq!((taken.footprint, taken.method), (28 * 512, cnmem));
}

#[test]
fn online_placements_end_to_end_need_what_compare_reports() {
    // Laid end to end, a simulation needs at most Σ regions, its reported footprint; exactly
    // that for cnmem grown, whose last region is made for one request and taken whole.
    let mut rng = SplitMix64::new(0x0E2E);
    for round in 0..60 {
        let n = 1 + rng.below(80) as usize;
        let horizon = 2 + rng.below(100);
        let i = random_intervals(&mut rng, n, horizon, [5000, 1 << 22][round % 2]);
        let sizes = align::aligned_sizes(&i, Alignment::DEFAULT).unwrap();
        for policy in [Baseline::Cnmem, Baseline::CnmemGrow, Baseline::Caching] {
            let simulation = sim::simulate(&i, policy).unwrap();
            let offsets = online::end_to_end(&simulation);
            let footprint = offsets
                .iter()
                .zip(&sizes)
                .map(|(o, s)| o + s)
                .max()
                .unwrap();
            let p = plan_of(offsets, footprint, 512);
            assert_eq!(validate(&i, &p), Ok(()), "round {round} {policy}");
            assert!(footprint <= simulation.footprint, "round {round} {policy}");
            if policy == Baseline::CnmemGrow {
                assert_eq!(footprint, simulation.footprint, "round {round}");
            }
        }
    }
}

#[test]
fn property_search_never_loses_to_an_online_policy() {
    // Small and larger random instances, tight ones in 512-byte units and crowded ones (many
    // long lifetimes, where greedy fragments most), every alignment kind (dividing 512 or
    // not), with no search budget (only the candidates can help) and with some.
    let mut rng = SplitMix64::new(0x0041_113E);
    for round in 0..300 {
        let i = match round % 4 {
            0 => {
                let (n, horizon) = (1 + rng.below(60) as usize, 2 + rng.below(80));
                random_intervals(&mut rng, n, horizon, 5000)
            }
            1 => {
                let pieces = 4 + rng.below(30) as usize;
                let units = guillotine(&mut rng, pieces, 30, 32);
                let bytes = units
                    .buffers()
                    .iter()
                    .map(|x| b(x.id, x.lower, x.upper, x.size * 512));
                inst(bytes.collect())
            }
            2 => {
                let (n, horizon) = (100 + rng.below(200) as usize, 2 + rng.below(300));
                random_intervals(&mut rng, n, horizon, 1 << 20)
            }
            _ => {
                let n = 200 + rng.below(200) as usize;
                crowded(&mut rng, n)
            }
        };
        let alignment = [512, 1, 256, 3, 4096][round % 5];
        for steps in [0, SHORT] {
            let what = format!("round {round}, {steps} steps");
            assert_search_beats_online(&i, &options(alignment, steps), &what);
        }
    }
    // Since the peak-first orders, best-of alone needs no more than any online placement on
    // every instance here (measured: none of the 600 plans); the hand-made instance of
    // `search_takes_the_cnmem_placement_where_greedy_and_the_dive_miss` is one where only the
    // candidates keep the property.
}

// ---------------------------------------------------------------- real traces

/// Every DSA CSV of the shared folder with its expectation: `real` traces must reach a ratio
/// ≤ 1.02 with best-of; `optimum` names the policies proved to reach the lower bound (within
/// [`AMPLE`] steps for the search, so in every build and under any load).
struct Trace {
    path: &'static str,
    real: bool,
    /// Policies that meet the lower bound (asserted as regression protection).
    optimum: &'static [Policy],
}

const TRACES: &[Trace] = &[
    Trace {
        path: "dsa-benchmarks/iopddl/G_1.csv",
        real: true,
        optimum: &[Policy::BestOf, Policy::Search],
    },
    Trace {
        path: "dsa-benchmarks/somas_tensors/resnet50.csv",
        real: true,
        optimum: &[Policy::Search],
    },
    Trace {
        path: "derived-dsa-csv/cs336_lm2.7b_b4_ctx128_fp32_fullstep_dev0.csv",
        real: true,
        optimum: &[Policy::BestOf, Policy::Search],
    },
    Trace {
        path: "derived-dsa-csv/cs336_lm_small_b32_ctx256_fp32_fwdbwd_dev0.csv",
        real: true,
        optimum: &[Policy::Search],
    },
    Trace {
        path: "derived-dsa-csv/hta_v100_ddp_rank1_profile_memory_gpu1.csv",
        real: true,
        optimum: &[Policy::Search],
    },
    Trace {
        path: "derived-dsa-csv/vit_l16_b1_adam_3steps_dev0.csv",
        real: true,
        optimum: &[
            Policy::BestFit,
            Policy::FirstFit,
            Policy::BestOf,
            Policy::Search,
        ],
    },
    Trace {
        path: "derived-dsa-csv/tiny_linear10kx50k_3fwd_dev0.csv",
        real: true,
        optimum: &[
            Policy::BestFit,
            Policy::FirstFit,
            Policy::BestOf,
            Policy::Search,
        ],
    },
    Trace {
        path: "dsa-benchmarks/minimalloc-challenging/A.1048576.csv",
        real: false,
        optimum: &[Policy::Search],
    },
    Trace {
        path: "dsa-benchmarks/minimalloc-challenging/B.1048576.csv",
        real: false,
        optimum: &[],
    },
    Trace {
        path: "dsa-benchmarks/minimalloc-challenging/C.1048576.csv",
        real: false,
        optimum: &[Policy::Search],
    },
    Trace {
        path: "dsa-benchmarks/minimalloc-challenging/D.1048576.csv",
        real: false,
        optimum: &[],
    },
    Trace {
        path: "dsa-benchmarks/minimalloc-challenging/E.1048576.csv",
        real: false,
        optimum: &[],
    },
    Trace {
        path: "dsa-benchmarks/minimalloc-challenging/F.1048576.csv",
        real: false,
        optimum: &[Policy::Search],
    },
    Trace {
        path: "dsa-benchmarks/minimalloc-challenging/G.1048576.csv",
        real: false,
        optimum: &[],
    },
];

/// Every instance of [`TRACES`], read; None (after saying the test is skipped) when the shared
/// folder is absent.
fn real_instances() -> Option<Vec<(&'static Trace, Instance)>> {
    let root = test_support::real_traces()?;
    let read = |trace: &'static Trace| {
        let path = root.join(trace.path);
        let instance = crate::import::read_dsa_csv(&path)
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        (trace, instance)
    };
    Some(TRACES.iter().map(read).collect())
}

#[test]
fn real_traces() {
    let Some(instances) = real_instances() else {
        return;
    };
    for (trace, instance) in instances {
        let mut footprints = Vec::new();
        for policy in Policy::ALL {
            let expect_optimum = trace.optimum.contains(&policy);
            // A search that must meet the bound stops there; otherwise keep it short.
            let steps = if expect_optimum { AMPLE } else { SHORT };
            let r = plan(&instance, policy, &options(512, steps)).unwrap();
            assert_eq!(
                validate(&instance, &r.plan),
                Ok(()),
                "{} {policy}",
                trace.path
            );
            assert!(r.footprint >= r.lower_bound);
            if trace.real && policy == Policy::BestOf {
                assert!(r.ratio <= 1.02, "{} best-of ratio {}", trace.path, r.ratio);
            }
            if expect_optimum {
                assert!(r.is_optimal(), "{} {policy}: ratio {}", trace.path, r.ratio);
            }
            footprints.push(r.footprint);
        }
        assert!(
            footprints[2] <= footprints[0].min(footprints[1]),
            "{}",
            trace.path
        );
        assert!(footprints[3] <= footprints[2], "{}", trace.path);
    }
}

/// MiniMalloc's challenging instances fit the set's capacity of 2^20 bytes (issue 13), each
/// within a budget of steps, so in every build and under any load: the exact search of
/// `exact.rs` meets the peak on A, B, E, F, G (E needs about 1.9 M nodes, and the search gives
/// the lower bound 5/8 of its budget) and on C; on D, whose peak is 6 % below 2^20, it
/// closes in from above after 5/8 of the budget at the peak (its slowest: a few seconds in a
/// release build). Times are reported in docs/BENCHMARKS.md, not asserted.
#[test]
fn minimalloc_challenging_instances_fit_two_to_the_twenty() {
    let Some(root) = test_support::real_traces() else {
        return;
    };
    for (name, steps) in [
        ("A", 4_000_000),
        ("B", 4_000_000),
        ("C", 4_000_000),
        ("D", 2_000_000),
        ("E", 4_000_000),
        ("F", 4_000_000),
        ("G", 4_000_000),
    ] {
        let path = root.join(format!(
            "dsa-benchmarks/minimalloc-challenging/{name}.1048576.csv"
        ));
        let instance = crate::import::read_dsa_csv(&path)
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let r = plan(&instance, Policy::Search, &options(1, steps)).unwrap();
        assert_eq!(validate(&instance, &r.plan), Ok(()), "{name}");
        assert!(r.footprint <= 1 << 20, "{name}: {} bytes", r.footprint);
    }
}

#[test]
fn real_traces_search_beats_every_online_policy() {
    let Some(instances) = real_instances() else {
        return;
    };
    for (trace, instance) in instances {
        for steps in [0, SHORT] {
            let what = format!("{}, {steps} steps", trace.path);
            assert_search_beats_online(&instance, &options(512, steps), &what);
        }
    }
}

/// The recordings of the `itermem compare` table of docs/BENCHMARKS.md (its two DSA files are
/// in [`TRACES`]).
const RECORDINGS: [&str; 4] = [
    "pytorch-snapshots/cs336_lm2.7b_b4_ctx128_fp32_fullstep.pickle",
    "pytorch-snapshots/cs336_lm_small_b32_ctx256_fp32_fwdbwd.pickle",
    "pytorch-snapshots/vit_l16_b1_adam_3steps.pickle",
    "kineto/hta_v100_ddp_rank1_profile_memory.json.gz",
];

#[test]
fn real_recordings_search_beats_every_online_policy() {
    // Each recording as `itermem compare` forms it: whole, and its iteration when one is found.
    let Some(root) = test_support::real_traces() else {
        return;
    };
    let mut iterations = 0;
    for file in RECORDINGS {
        let loaded = crate::import::load(root.join(file)).unwrap();
        let crate::import::Loaded::Recording(recording) = loaded else {
            panic!("{file} is not a recording");
        };
        let mut instances = vec![("whole", recording.to_instance(None).unwrap())];
        let config = crate::detect::DetectorConfig::for_cuda_events();
        if let Some(it) = recording.iteration(&config).unwrap() {
            instances.push(("one iteration", recording.iteration_instance(&it)));
            iterations += 1;
        }
        for (which, instance) in &instances {
            for steps in [0, SHORT] {
                let what = format!("{file}, {which}, {steps} steps");
                assert_search_beats_online(instance, &options(512, steps), &what);
            }
        }
    }
    assert_eq!(iterations, 2, "the table's ViT and V100 iterations");
}

// ---------------------------------------------------------------- timing (manual)

/// Best-fit on `bench_scaling(100_000, 1)`, 7 runs, median: run in release with
/// `cargo test --release -p itermem --lib plan::tests::bench_best_fit_100k -- --ignored
/// --nocapture` to compare planner changes on instances without absences.
#[test]
#[ignore]
fn bench_best_fit_100k() {
    let mut times: Vec<f64> = (0..7)
        .map(|_| {
            let r = bench_scaling(100_000, 1).unwrap();
            assert!(r.valid);
            r.plan_elapsed.as_secs_f64() * 1e3
        })
        .collect();
    times.sort_by(f64::total_cmp);
    println!(
        "best-fit 100k seed 1: median {:.1} ms (min {:.1}, max {:.1})",
        times[3], times[0], times[6]
    );
}

/// What the online candidates cost at most on the largest shared trace (the V100 DDP trace,
/// 13,385 buffers): every policy simulated, laid end to end and validated, 7 runs, median. Run
/// in release with `cargo test --release -p itermem --lib
/// plan::tests::bench_online_candidates -- --ignored --nocapture`.
#[test]
#[ignore]
fn bench_online_candidates() {
    let Some(path) =
        test_support::real_trace("derived-dsa-csv/hta_v100_ddp_rank1_profile_memory_gpu1.csv")
    else {
        return;
    };
    let instance = crate::import::read_dsa_csv(&path).unwrap();
    let prep = greedy::Prepared::new(&instance, Alignment::DEFAULT).unwrap();
    let mut times: Vec<f64> = (0..7)
        .map(|_| {
            // An incumbent every candidate beats, so that each is validated too.
            let worst = Outcome {
                offsets: Vec::new(),
                footprint: u64::MAX,
                method: Method::Dfs { capacity: 0 },
            };
            let start = std::time::Instant::now();
            let best =
                online::best_of_online(&instance, &prep, worst, (Cutoff::NEVER, Duration::ZERO));
            assert!(matches!(best.method, Method::Online { .. }));
            start.elapsed().as_secs_f64() * 1e3
        })
        .collect();
    times.sort_by(f64::total_cmp);
    println!(
        "online candidates, {} buffers: median {:.1} ms (min {:.1}, max {:.1})",
        instance.len(),
        times[3],
        times[0],
        times[6]
    );
}

/// The floor (`floor.rs`) on `random_instance(n, 1)` for 20k, 50k and 100k buffers, 9 runs,
/// median, beside the instance's preparation (what the search does before it): run in release
/// with `cargo test --release -p itermem --lib plan::tests::bench_floor -- --ignored
/// --nocapture`.
#[test]
#[ignore]
fn bench_floor() {
    for n in [20_000, 50_000, 100_000] {
        let instance = random_instance(n, 1);
        let mut times: Vec<(f64, f64)> = (0..9)
            .map(|_| {
                let start = std::time::Instant::now();
                let prep = greedy::Prepared::new(&instance, Alignment::DEFAULT).unwrap();
                let prepared = start.elapsed().as_secs_f64() * 1e3;
                floor::place(&instance, &prep);
                (prepared, start.elapsed().as_secs_f64() * 1e3 - prepared)
            })
            .collect();
        let median = |times: &mut Vec<(f64, f64)>, key: fn(&(f64, f64)) -> f64| {
            times.sort_by(|a, b| key(a).total_cmp(&key(b)));
            key(&times[4])
        };
        println!(
            "{n} buffers: preparation {:.1} ms, floor {:.1} ms (medians of 9)",
            median(&mut times, |t| t.0),
            median(&mut times, |t| t.1)
        );
    }
}
