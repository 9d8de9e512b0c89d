//! Whole plans: JSON round trip, errors, budgets, inputs in place, primes, 2^20 ranks, and
//! every step's volume against a per-element brute-force count.

use deinsum_expr::{parse, ExtentSpec, ParsedEinsum};
use deinsum_plan::{build, Distribution, Plan, PlanError, PlanOptions, PlanStep};
use std::collections::BTreeMap;

fn einsum(expr: &str, sizes: Option<&str>, size: usize) -> ParsedEinsum {
    let spec = match sizes {
        Some(s) => ExtentSpec::from_flags(Some(s), None, None).unwrap(),
        None => ExtentSpec {
            default: Some(size),
            ..Default::default()
        },
    };
    parse(expr, &spec).unwrap()
}

fn opts(procs: usize) -> PlanOptions {
    PlanOptions {
        procs,
        ..Default::default()
    }
}

fn grid_of(p: &Plan, g: usize) -> BTreeMap<char, usize> {
    p.groups[g]
        .grid
        .dims
        .iter()
        .map(|d| (d.index, d.size))
        .collect()
}

#[test]
fn json_round_trip() {
    let e = einsum("ijk,ja,ka,al->il", None, 7);
    let p = build(&e, &opts(6)).unwrap();
    let s = serde_json::to_string(&p).unwrap();
    assert!(s.starts_with("{\"version\":3,"));
    let q = Plan::from_json(&s).unwrap();
    assert_eq!(p, q);
    // With per-rank lists, too.
    let mut o = opts(6);
    o.per_rank = true;
    let pr = build(&e, &o).unwrap();
    let q = Plan::from_json(&serde_json::to_string(&pr).unwrap()).unwrap();
    assert_eq!(pr, q);
    // Same input, same bytes.
    let again = serde_json::to_string(&build(&e, &opts(6)).unwrap()).unwrap();
    assert_eq!(s, again);
}

#[test]
fn ellipsis_and_broadcast_survive_the_round_trip() {
    let spec = ExtentSpec::from_flags(None, None, Some("2x1x5x4,2x3x7x4")).unwrap();
    let e = parse("...qd,...kd", &spec).unwrap();
    assert!(e.implicit_output() && !e.ellipsis().is_empty());
    let p = build(&e, &opts(3)).unwrap();
    let q = Plan::from_json(&serde_json::to_string(&p).unwrap()).unwrap();
    assert_eq!(p, q);
    assert_eq!(q.einsum.ellipsis(), e.ellipsis());
}

#[test]
fn edited_plans_are_refused_by_what_is_wrong() {
    let e = einsum("ij,jk,kl->il", None, 4);
    let v: serde_json::Value = serde_json::to_value(build(&e, &opts(4)).unwrap()).unwrap();
    let refuse = |edit: &dyn Fn(&mut serde_json::Value), says: &str| {
        let mut w = v.clone();
        edit(&mut w);
        let err = Plan::from_json(&w.to_string()).unwrap_err();
        assert!(matches!(err, PlanError::Json(_)), "{err}");
        assert!(err.to_string().contains(says), "{err} lacks {says:?}");
    };
    // Extent 0 is an extent (NumPy's empty arrays); a negative one is not.
    refuse(&|w| w["einsum"]["extents"]["j"] = (-1).into(), "-1");
    refuse(
        &|w| w["einsum"]["output"] = serde_json::json!(["i", "i"]),
        "output index 'i' occurs twice",
    );
    refuse(
        &|w| w["einsum"]["inputs"][0]["indices"] = serde_json::json!(["j", "i"]),
        "operand 0",
    );
    refuse(
        &|w| w["tree"]["steps"][0]["operands"] = serde_json::json!([0, 9]),
        "step 0 reads node 9",
    );
    refuse(
        &|w| w["tree"]["leaf_indices"] = serde_json::json!([]),
        "0 leaf index lists for 3 inputs",
    );
}

#[test]
fn version_2_plans_are_refused_by_name() {
    let e = einsum("ij,jk->ik", None, 4);
    let s = serde_json::to_string(&build(&e, &opts(4)).unwrap()).unwrap();
    let old = s.replacen("\"version\":3", "\"version\":2", 1);
    let err = Plan::from_json(&old).unwrap_err();
    assert!(matches!(err, PlanError::Version { found: 2 }), "{err}");
    let msg = err.to_string();
    assert!(
        msg.contains("version 2") && msg.contains("version 3"),
        "{msg}"
    );
    assert!(matches!(
        Plan::from_json("{\"steps\": []}"),
        Err(PlanError::Version { found: 0 })
    ));
    assert!(matches!(Plan::from_json("[1"), Err(PlanError::Json(_))));
}

#[test]
fn per_rank_lists_only_when_asked() {
    let e = einsum("ij,jk->ik", None, 64);
    let p = build(&e, &opts(16)).unwrap();
    assert!(p.prediction.received.is_empty() && p.prediction.peak_memory.is_empty());
    let mut o = opts(16);
    o.per_rank = true;
    let q = build(&e, &o).unwrap();
    // The same plan, with the lists; every derived per-rank figure matches them.
    assert_eq!(p.prediction.max_per_rank, q.prediction.max_per_rank);
    assert_eq!(p.prediction.max_peak_memory, q.prediction.max_peak_memory);
    for r in 0..16 {
        let (m, mb) = p.peak_of(r);
        assert_eq!(m, q.prediction.peak_memory.get(r));
        assert_eq!(mb, q.prediction.peak_memory_with_buffers.get(r));
        let (mut s, mut w) = (0, 0);
        for (k, st) in q.steps.iter().enumerate() {
            let (ds, dw) = p.step_words(k, r);
            s += ds;
            w += dw;
            if let PlanStep::Redistribute { volume, .. } = st {
                assert_eq!(dw, volume.received.get(r));
                assert_eq!(ds, volume.sent.get(r));
            }
        }
        assert_eq!(w, q.prediction.received.get(r));
        assert_eq!(s, q.prediction.sent.get(r));
    }
}

#[test]
fn zero_procs_is_an_error() {
    let e = einsum("ij,jk->ik", None, 4);
    assert!(matches!(build(&e, &opts(0)), Err(PlanError::ZeroProcs)));
}

#[test]
fn paper_example_end_to_end() {
    let e = einsum("ijk,ja,ka,al->il", None, 10);
    let p = build(&e, &opts(8)).unwrap();
    assert_eq!(p.groups.len(), 2, "MTTKRP fused, then the MM");
    let g0 = grid_of(&p, 0);
    assert_eq!(
        g0,
        [('a', 1), ('i', 2), ('j', 2), ('k', 2)]
            .into_iter()
            .collect()
    );
    assert_eq!(p.groups[1].grid.size(), 8);
    assert!(p.idle.is_none());
    assert_eq!(p.ranks_used, 8);
}

#[test]
fn memory_budget_is_respected_or_reported() {
    let e = einsum("ij,jk->ik", None, 64);
    let free = build(&e, &opts(8)).unwrap();
    let need = free.prediction.max_peak_memory;
    let tight = build(
        &e,
        &PlanOptions {
            procs: 8,
            mem: Some(need),
            ..Default::default()
        },
    )
    .unwrap();
    assert!(tight.prediction.max_peak_memory <= need);
    match build(
        &e,
        &PlanOptions {
            procs: 8,
            mem: Some(100),
            ..Default::default()
        },
    ) {
        Err(PlanError::MemoryTooSmall { budget, needed, .. }) => {
            assert_eq!(budget, 100);
            assert!(needed > 100);
            // The message says how much is needed.
            let err = build(
                &e,
                &PlanOptions {
                    procs: 8,
                    mem: Some(100),
                    ..Default::default()
                },
            )
            .unwrap_err()
            .to_string();
            assert!(err.contains(&needed.to_string()), "{err}");
        }
        other => panic!("expected MemoryTooSmall, got {other:?}"),
    }
}

#[test]
fn inputs_in_place_move_nothing_in() {
    let e = einsum("ij,jk->ik", None, 32);
    let p = build(
        &e,
        &PlanOptions {
            procs: 8,
            inputs_in_place: true,
            ..Default::default()
        },
    )
    .unwrap();
    for s in &p.steps {
        if let PlanStep::Redistribute { tensor, .. } = s {
            assert!(*tensor >= 2, "no input is redistributed");
        }
        if let PlanStep::Load { tensor, dist } = s {
            let want: &Distribution = &p.groups[0]
                .inputs
                .iter()
                .find(|x| x.0 == *tensor)
                .unwrap()
                .1;
            assert_eq!(dist, want);
        }
    }
    // With inputs in place a grid that does not split j needs no communication at all.
    assert_eq!(p.prediction.max_per_rank, 0);
    assert_eq!(p.groups[0].grid.dims[1].size, 1, "j not split");
    let canon = build(&e, &opts(8)).unwrap();
    assert!(canon.prediction.max_per_rank > p.prediction.max_per_rank);
}

#[test]
fn prime_procs_use_ranks_well() {
    // At 120 the work, not the moves out of the canonical blocks, decides the grid: at 60 the
    // 11 balanced input blocks no longer nest into a 5 x 2 grid's rows (as 10 ceil blocks of
    // 6 rows did), and the time model prefers 2 x 2 x 2 on 8 of 11 ranks.
    let e = einsum("ij,jk->ik", None, 120);
    for procs in [7, 11, 13] {
        let p = build(&e, &opts(procs)).unwrap();
        assert!(
            p.ranks_used * 4 >= procs * 3,
            "P={procs}: {} ranks used",
            p.ranks_used
        );
        assert!(p.ranks_used <= procs);
        if p.ranks_used < procs {
            let idle = p.idle.as_deref().unwrap();
            assert!(
                idle.starts_with(&format!("{} of {procs} ranks idle", procs - p.ranks_used)),
                "{idle}"
            );
        }
    }
}

#[test]
fn two_to_the_twenty_ranks_with_small_extents() {
    let e = einsum("ijk,ja,ka,al->il", None, 10);
    let p = build(&e, &opts(1 << 20)).unwrap();
    assert!(p.ranks_used <= 10_000);
    let idle = p.idle.as_deref().unwrap();
    assert!(idle.contains("allow at most"), "{idle}");
    // No per-rank lists unless asked: the plan stays small.
    assert!(p.prediction.received.is_empty());
    assert!(serde_json::to_string(&p).unwrap().len() < 100_000);
}

/// Per-element count of what each target rank receives in one step (the brute force).
fn brute_received(
    shape: &[usize],
    from: &Distribution,
    to: &Distribution,
    sum: bool,
) -> BTreeMap<usize, u64> {
    let partials: u64 = if sum {
        from.partial
            .iter()
            .map(|&g| from.grid.dims[g].size as u64)
            .product()
    } else {
        1
    };
    let mut out = BTreeMap::new();
    for d in 0..to.grid.size() {
        let tb = to.block(d, shape).unwrap();
        let own = if d < from.grid.size() {
            from.block(d, shape)
        } else {
            None
        };
        let mut elems: Vec<Vec<usize>> = vec![Vec::new()];
        for &(s, e) in &tb.ranges {
            elems = elems
                .into_iter()
                .flat_map(|p| (s..e).map(move |x| [p.clone(), vec![x]].concat()))
                .collect();
        }
        if tb.is_empty() {
            continue;
        }
        let mut n = 0u64;
        for x in elems {
            let local = own
                .as_ref()
                .is_some_and(|o| o.ranges.iter().zip(&x).all(|(&(s, e), &v)| s <= v && v < e));
            n += partials - u64::from(local);
        }
        if n > 0 {
            out.insert(d, n);
        }
    }
    out
}

#[test]
fn predicted_volumes_equal_brute_force() {
    for (expr, sizes, procs) in [
        ("ij,jk->ik", "i=5,j=7,k=3", 6),
        ("ijk,ja,ka,al->il", "i=4,j=5,k=3,a=2,l=3", 5),
        ("ijk,ja,ka->ia", "i=3,j=4,k=5,a=3", 8),
        ("ij,jk,kl->il", "i=6,j=2,k=5,l=4", 7),
        ("ij->", "i=5,j=4", 3),
    ] {
        let e = einsum(expr, Some(sizes), 0);
        let mut o = opts(procs);
        o.per_rank = true;
        let p = build(&e, &o).unwrap();
        let mut total: BTreeMap<usize, u64> = BTreeMap::new();
        for s in &p.steps {
            if let PlanStep::Redistribute {
                tensor,
                from,
                to,
                sum,
                volume,
                ..
            } = s
            {
                let shape = &p.tensor(*tensor).unwrap().shape;
                let b = brute_received(shape, from, to, *sum);
                let got: BTreeMap<usize, u64> = volume.received.iter().collect();
                assert_eq!(got, b, "{expr} P={procs}: step on tensor {tensor}");
                for (r, w) in b {
                    *total.entry(r).or_default() += w;
                }
            }
        }
        let pred: BTreeMap<usize, u64> = p.prediction.received.iter().collect();
        assert_eq!(pred, total, "{expr}: totals");
        assert_eq!(
            p.prediction.max_per_rank,
            total.values().copied().max().unwrap_or(0)
        );
        assert_eq!(p.prediction.total, total.values().sum::<u64>());
        // The output ends complete (not partial).
        assert!(!p.output.1.is_partial());
    }
}

/// Size of the grid dim of `index` in group 0 (1 when the index is not split).
fn dim_of(p: &Plan, index: char) -> usize {
    p.groups[0]
        .grid
        .dims
        .iter()
        .find(|d| d.index == index)
        .map_or(1, |d| d.size)
}

#[test]
fn matmul_under_a_budget_takes_fewer_copies() {
    // The 2.5D behaviour: the cube replicates blocks P^(1/3) times; a budget below its memory
    // splits the summed index fewer ways (fewer copies of partial sums) and walks it in phases.
    let spec = ExtentSpec::from_flags(Some("i=512,j=512,k=512"), None, None).unwrap();
    let e = parse("ij,jk->ik", &spec).unwrap();
    let plan_with = |mem: Option<u64>| {
        build(
            &e,
            &PlanOptions {
                procs: 512,
                mem,
                ..Default::default()
            },
        )
    };
    let free = plan_with(None).unwrap();
    assert_eq!(dim_of(&free, 'j'), 8);
    assert!(free.groups[0].phases.is_none());
    let cube_mem = free.prediction.max_peak_memory;
    let mut copies = vec![8];
    let mut words = vec![free.prediction.max_per_rank];
    for s in [cube_mem / 3, cube_mem / 5] {
        let p = plan_with(Some(s)).unwrap();
        assert!(p.prediction.max_peak_memory <= s);
        let ph = p.groups[0]
            .phases
            .as_ref()
            .expect("phased under the budget");
        assert_eq!(ph.index, 'j');
        assert!(ph.count >= 2);
        copies.push(dim_of(&p, 'j'));
        words.push(p.prediction.max_per_rank);
    }
    // Fewer copies as the budget shrinks, and more words moved: the 2.5D trade-off.
    assert!(copies.windows(2).all(|w| w[1] < w[0]), "copies {copies:?}");
    assert!(words.windows(2).all(|w| w[1] > w[0]), "words {words:?}");
    // A budget below any plan is still a clear error.
    assert!(matches!(
        plan_with(Some(100)),
        Err(PlanError::MemoryTooSmall { .. })
    ));
}

/// A plan records the element type it was built for: f32 moves and holds the same words as
/// f64 in half the bytes, its JSON says `"dtype": "f32"`, and an f64 plan's JSON has no
/// `dtype` field (so it reads and writes as before the field existed) and reads back as f64.
#[test]
fn plan_records_its_dtype_and_sizes_bytes_by_it() {
    use deinsum_plan::DType;
    let e = einsum("ij,jk->ik", None, 96);
    let f64_plan = build(&e, &opts(4)).unwrap();
    let f32_plan = build(
        &e,
        &PlanOptions {
            dtype: DType::F32,
            ..opts(4)
        },
    )
    .unwrap();
    assert_eq!(f64_plan.dtype, DType::F64);
    assert_eq!(f32_plan.dtype, DType::F32);
    // The same geometry and words...
    assert_eq!(f32_plan.steps, f64_plan.steps);
    let (w32, w64) = (&f32_plan.prediction, &f64_plan.prediction);
    assert_eq!(
        w32.max_peak_memory_with_buffers,
        w64.max_peak_memory_with_buffers
    );
    assert_eq!(w32.max_per_rank, w64.max_per_rank);
    assert!(w64.max_peak_memory_with_buffers > 0 && w64.max_per_rank > 0);
    // ...in half the bytes.
    for words in [w64.max_peak_memory_with_buffers, w64.max_per_rank] {
        assert_eq!(2 * f32_plan.bytes(words), f64_plan.bytes(words));
        assert_eq!(f64_plan.bytes(words), 8 * u128::from(words));
    }
    // Fewer bytes to move and copy: predicted no slower.
    assert!(
        w32.seconds <= w64.seconds,
        "{} > {}",
        w32.seconds,
        w64.seconds
    );

    let s32 = serde_json::to_string(&f32_plan).unwrap();
    assert!(s32.contains("\"dtype\":\"f32\""), "{s32}");
    assert_eq!(Plan::from_json(&s32).unwrap(), f32_plan);
    let s64 = serde_json::to_string(&f64_plan).unwrap();
    assert!(!s64.contains("\"dtype\""));
    assert_eq!(Plan::from_json(&s64).unwrap().dtype, DType::F64);
}

/// A c128 plan moves the words of an f64 plan at 16 bytes each and counts 8 flops per
/// multiply-add, so its predicted compute takes 4 times the f64 plan's; the JSON names it and
/// reads back.
#[test]
fn complex_plans_size_words_and_flops_by_their_dtype() {
    use deinsum_plan::time::TimeModel;
    use deinsum_plan::{DType, PlanStep};
    let e = einsum("ij,jk->ik", None, 96);
    let real = build(&e, &opts(4)).unwrap();
    for (dtype, bytes) in [(DType::C128, 16), (DType::C64, 8)] {
        let z = build(&e, &PlanOptions { dtype, ..opts(4) }).unwrap();
        assert_eq!(z.dtype, dtype);
        assert_eq!(z.steps, real.steps);
        let words = real.prediction.max_per_rank;
        assert_eq!(z.bytes(words), bytes * u128::from(words));
        let s = serde_json::to_string(&z).unwrap();
        assert!(
            s.contains(&format!("\"dtype\":\"{}\"", dtype.name())),
            "{s}"
        );
        assert_eq!(Plan::from_json(&s).unwrap(), z);
    }
    let m = deinsum_plan::Machine::default();
    let step_secs = |d: DType| TimeModel::new(&m, 4, d).step_seconds(&real);
    let (f, c) = (step_secs(DType::F64), step_secs(DType::C128));
    let computes: Vec<usize> = (0..real.steps.len())
        .filter(|&i| matches!(real.steps[i], PlanStep::Compute { .. }))
        .collect();
    assert!(!computes.is_empty());
    for i in computes {
        assert!(
            f[i] > 0.0 && (c[i] / f[i] - 4.0).abs() < 1e-9,
            "step {i}: {} vs {}",
            c[i],
            f[i]
        );
    }
}
