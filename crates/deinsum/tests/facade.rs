//! The library facade over the whole pipeline (parser, path, SOAP, planner, executor):
//! distributed equals serial for every P from 1 to 16, volumes exactly as planned.

use deinsum::exec::reference::{max_error, naive_seeded};
use deinsum::expr::ExtentSpec;
use deinsum::{Einsum, ExecOptions, Inputs, Options};

mod pipeline_support;
use pipeline_support::{check_run, sizes};

fn check(expr: &str, spec: &ExtentSpec, p: usize) {
    let c = Einsum::compile(expr, spec, &Options::procs(p))
        .unwrap_or_else(|e| panic!("{expr} P={p}: {e}"));
    check_run(&c, expr, p, 11);
}

#[test]
fn pipeline_matches_serial_for_p_1_to_16() {
    let cases: Vec<(&str, ExtentSpec)> = vec![
        ("ij,jk->ik", sizes(&[('i', 7), ('j', 5), ('k', 6)])),
        (
            "ij,jk,kl->il",
            sizes(&[('i', 5), ('j', 7), ('k', 3), ('l', 4)]),
        ),
        (
            "ij,jk,kl,lm->im",
            sizes(&[('i', 4), ('j', 5), ('k', 3), ('l', 6), ('m', 5)]),
        ),
        (
            "ijk,ja,ka,al->il",
            sizes(&[('i', 5), ('j', 4), ('k', 3), ('a', 3), ('l', 2)]),
        ),
        (
            "ijk,ja,ka->ia",
            sizes(&[('i', 5), ('j', 4), ('k', 3), ('a', 3)]),
        ),
        (
            "ijk,ia,ka->ja",
            sizes(&[('i', 5), ('j', 4), ('k', 3), ('a', 3)]),
        ),
        (
            "ijk,ia,ja->ka",
            sizes(&[('i', 5), ('j', 4), ('k', 3), ('a', 3)]),
        ),
        (
            "ijk,jb,kc->ibc",
            sizes(&[('i', 4), ('j', 5), ('k', 3), ('b', 2), ('c', 3)]),
        ),
        (
            "bij,bjk->bik",
            sizes(&[('b', 3), ('i', 4), ('j', 5), ('k', 2)]),
        ),
        ("ii,ij->j", sizes(&[('i', 5), ('j', 3)])),
        ("ij,ij->", sizes(&[('i', 5), ('j', 7)])),
        ("i,j->ij", sizes(&[('i', 5), ('j', 7)])),
        ("ij->ji", sizes(&[('i', 5), ('j', 7)])),
    ];
    for (expr, spec) in &cases {
        for p in 1..=16 {
            check(expr, spec, p);
        }
    }
}

#[test]
fn mttkrp_order5_every_mode() {
    let letters = ['i', 'j', 'k', 'l', 'm'];
    let ext = [3usize, 2, 3, 2, 2];
    for mode in 0..5 {
        let mut ops = vec![letters.iter().collect::<String>()];
        for (d, &c) in letters.iter().enumerate() {
            if d != mode {
                ops.push(format!("{c}a"));
            }
        }
        let expr = format!("{}->{}a", ops.join(","), letters[mode]);
        let mut s: Vec<(char, usize)> = letters.iter().copied().zip(ext).collect();
        s.push(('a', 2));
        for p in [1, 2, 3, 5, 8, 13, 16] {
            check(&expr, &sizes(&s), p);
        }
    }
}

#[test]
fn ellipsis_and_broadcast() {
    let spec = ExtentSpec {
        shapes: Some(vec![vec![2, 3, 4, 5], vec![3, 5, 2]]),
        ..ExtentSpec::default()
    };
    for p in [1, 2, 3, 4, 7, 12] {
        check("...ij,...jk->...ik", &spec, p);
    }
    let spec = ExtentSpec {
        shapes: Some(vec![vec![1, 4, 5], vec![3, 5, 2]]),
        ..ExtentSpec::default()
    };
    for p in [1, 2, 5] {
        check("...ij,...jk->...ik", &spec, p);
    }
}

#[test]
fn run_local_returns_the_whole_output() {
    let spec = ExtentSpec {
        default: Some(6),
        ..ExtentSpec::default()
    };
    let mm = Einsum::compile("ij,jk->ik", &spec, &Options::procs(4)).unwrap();
    let a: Vec<f64> = (0..36).map(|x| x as f64).collect();
    let b: Vec<f64> = (0..36).map(|x| (x % 5) as f64).collect();
    let c = mm
        .run_local(&Inputs::Full(vec![a.clone(), b.clone()]))
        .unwrap();
    for i in 0..6 {
        for k in 0..6 {
            let want: f64 = (0..6).map(|j| a[i * 6 + j] * b[j * 6 + k]).sum();
            assert_eq!(c[i * 6 + k], want);
        }
    }
    // Wrong input length: an error, not a panic.
    let e = mm
        .run_local(&Inputs::Full(vec![a, vec![1.0; 5]]))
        .unwrap_err();
    assert!(e.to_string().contains("operand 1"), "{e}");
}

#[test]
fn run_local_refuses_a_plan_that_cannot_fit_before_allocating() {
    let spec = deinsum::expr::ExtentSpec {
        default: Some(100_000),
        ..Default::default()
    };
    let mm = deinsum::Einsum::compile("ij,jk->ik", &spec, &deinsum::Options::procs(2)).unwrap();
    match mm.run_local::<f64>(&deinsum::Inputs::Seeded { seed: 1 }) {
        Err(deinsum::Error::Preflight(e)) => assert!(e.to_string().contains("available"), "{e}"),
        other => panic!(
            "expected a preflight refusal, got {:?}",
            other.map(|v| v.len())
        ),
    }
}

#[test]
fn run_local_borrowed_equals_serial_for_many_p() {
    // Diagonal, broadcast and ellipsis operands, extents that no P divides evenly.
    let cases: [(&str, Vec<Vec<usize>>); 3] = [
        (
            "ijk,ja,ka,al->il",
            vec![vec![7, 5, 3], vec![5, 4], vec![3, 4], vec![4, 6]],
        ),
        ("iij,jk->ik", vec![vec![5, 5, 3], vec![3, 7]]),
        ("...ij,jk->...ik", vec![vec![2, 1, 5, 3], vec![3, 4]]),
    ];
    for (expr, shapes) in cases {
        let (spec, ops) = seeded_operands(&shapes, 5);
        let lent: Vec<&[f64]> = ops.iter().map(|v| v.as_slice()).collect();
        for p in [1, 2, 3, 5, 7] {
            let c = Einsum::compile(expr, &spec, &Options::procs(p)).unwrap();
            let want = naive_seeded(&c.plan().einsum, 5);
            for threads in [1, 2] {
                let got = c.run_local_borrowed(&lent, &threads_opt(threads)).unwrap();
                let (abs, rel) = max_error(&got, &want);
                assert!(rel < 1e-12, "{expr} P={p}: abs {abs} rel {rel}");
            }
        }
        // Too few operands: an error, not a panic.
        let c = Einsum::compile(expr, &spec, &Options::procs(2)).unwrap();
        let e = c
            .run_local_borrowed(&lent[1..], &threads_opt(1))
            .unwrap_err();
        assert!(e.to_string().contains("operands given"), "{e}");
    }
}

#[test]
fn run_local_borrowed_assembles_every_output_layout_for_p_1_to_8() {
    // Plain operands (cut out run by run) with extents no P divides evenly; outputs split on
    // their leading index (slabs, appended), on a later one or replicated (boxes, copied),
    // permuted, and a scalar.
    let cases: [(&str, Vec<Vec<usize>>); 6] = [
        ("ij,jk->ik", vec![vec![11, 7], vec![7, 13]]),
        ("ij,jk->ki", vec![vec![11, 7], vec![7, 13]]),
        ("ijk,ja,ka->ia", vec![vec![9, 5, 7], vec![5, 3], vec![7, 3]]),
        ("ijk->kji", vec![vec![5, 3, 7]]),
        ("ij,ij->", vec![vec![6, 5], vec![6, 5]]),
        ("ik,jk->ijk", vec![vec![3, 5], vec![4, 5]]),
    ];
    // Runs whose ranks copied their blocks into the whole themselves, and runs put together
    // after the run: both ways must be taken.
    let (mut tiled, mut put_together) = (0, 0);
    for (expr, shapes) in cases {
        let (spec, ops) = seeded_operands(&shapes, 3);
        let lent: Vec<&[f64]> = ops.iter().map(|v| v.as_slice()).collect();
        for p in 1..=8 {
            let c = Einsum::compile(expr, &spec, &Options::procs(p)).unwrap();
            let plan = c.plan();
            let out_t = plan.tensor(plan.output.0).unwrap();
            match deinsum::exec::primary_slabs(out_t, &plan.output.1, p) {
                Some(_) => tiled += 1,
                None => put_together += 1,
            }
            let want = naive_seeded(&c.plan().einsum, 3);
            let got = c.run_local_borrowed(&lent, &threads_opt(2)).unwrap();
            let (abs, rel) = max_error(&got, &want);
            assert!(rel < 1e-12, "{expr} P={p}: abs {abs} rel {rel}");
            // The gathered run (messages to rank 0) gives the same values.
            let gathered = c.run_local(&Inputs::Full(ops.clone())).unwrap();
            assert_eq!(got, gathered, "{expr} P={p}");
        }
    }
    assert!(
        tiled > 0 && put_together > 0,
        "{tiled} tiled, {put_together} put together"
    );
}

#[test]
fn kept_buffers_serve_later_calls_of_other_plans_for_many_p() {
    use deinsum::exec::buffers::KeptBuffers;
    // Blocks above the pool's threshold (16 Ki words) at small P; a large plan, then smaller
    // ones, then the large one again, all on one set of kept buffers, from 8 ranks down to 1.
    let cases: [(&str, Vec<Vec<usize>>); 3] = [
        ("ij,jk->ik", vec![vec![181, 163], vec![163, 177]]),
        (
            "ijk,ja,ka->ia",
            vec![vec![37, 29, 31], vec![29, 5], vec![31, 5]],
        ),
        ("ij,jk->ik", vec![vec![13, 7], vec![7, 11]]),
    ];
    let kept = KeptBuffers::new();
    for p in [8, 5, 3, 2, 1] {
        for (expr, shapes) in cases.iter().chain(&cases[..1]) {
            let (spec, ops) = seeded_operands(shapes, 9);
            let lent: Vec<&[f64]> = ops.iter().map(|v| v.as_slice()).collect();
            let c = Einsum::compile(expr, &spec, &Options::procs(p)).unwrap();
            let want = naive_seeded(&c.plan().einsum, 9);
            for threads in [1, 2] {
                let opts = ExecOptions {
                    threads,
                    kept: Some(kept.clone()),
                    ..ExecOptions::default()
                };
                let got = c.run_local_borrowed(&lent, &opts).unwrap();
                let (abs, rel) = max_error(&got, &want);
                assert!(rel < 1e-12, "{expr} P={p}: abs {abs} rel {rel}");
                // What is kept stays within the plan's predicted peaks.
                let bound: u64 = (0..p).map(|r| c.plan().peak_of(r).1).sum();
                assert!(kept.words() as u64 <= bound, "{expr} P={p}");
            }
        }
    }
    // The large plan on three ranks leaves buffers behind (on one, it now allocates only its
    // output, the lent operands being read in place); clearing frees them.
    let (spec, ops) = seeded_operands(&cases[0].1, 9);
    let lent: Vec<&[f64]> = ops.iter().map(|v| v.as_slice()).collect();
    // Its ranks' two-thread pools are kept too, and serve the next call.
    // Canonical inputs: their moves leave buffers (read in place, nothing would be kept).
    let o = Options {
        inputs_anywhere: false,
        ..Options::procs(3)
    };
    let c = Einsum::compile(cases[0].0, &spec, &o).unwrap();
    let opts = ExecOptions {
        threads: 2,
        kept: Some(kept.clone()),
        ..ExecOptions::default()
    };
    for _ in 0..2 {
        let got = c.run_local_borrowed(&lent, &opts).unwrap();
        let (abs, rel) = max_error(&got, &naive_seeded(&c.plan().einsum, 9));
        assert!(rel < 1e-12, "P=3 again: abs {abs} rel {rel}");
        assert_eq!(kept.pools(), 3);
    }
    assert!(kept.words() > 0);
    kept.clear();
    assert_eq!((kept.words(), kept.pools()), (0, 0));
}

#[test]
fn lent_operands_serve_one_run_and_repeated_runs_alike() {
    // One run hands the rank's blocks over to the executor; repeated runs keep them, since
    // an input that is also the output (`ij->ij`) is read again by each run.
    for expr in ["ij->ij", "ij->ji", "ij,jk->ik"] {
        let spec = if expr.contains('k') {
            sizes(&[('i', 7), ('j', 5), ('k', 3)])
        } else {
            sizes(&[('i', 7), ('j', 5)])
        };
        let a: Vec<f64> = (0..35).map(f64::from).collect();
        let b: Vec<f64> = (0..15).map(|x| f64::from(x) - 4.0).collect();
        let lent: Vec<&[f64]> = if expr.contains(',') {
            vec![&a, &b]
        } else {
            vec![&a]
        };
        for p in [1, 2, 3] {
            let c = Einsum::compile(expr, &spec, &Options::procs(p)).unwrap();
            let once = c.run_local_borrowed(&lent, &threads_opt(1)).unwrap();
            let opts = ExecOptions {
                repeat: 2,
                warmup: 1,
                ..ExecOptions::default()
            };
            let again = c.run_local_borrowed(&lent, &opts).unwrap();
            assert_eq!(once, again, "{expr} P={p}");
            let serial = Einsum::compile(expr, &spec, &Options::procs(1)).unwrap();
            let want = serial.run_local_borrowed(&lent, &threads_opt(1)).unwrap();
            assert_eq!(once, want, "{expr} P={p}");
            if expr == "ij->ij" {
                assert_eq!(once, a, "{expr} P={p}");
            }
        }
    }
}

/// The extents of operands of `shapes` and their values from `seed` (as `Inputs::Seeded`
/// makes them, so `naive_seeded(.., seed)` is the reference).
fn seeded_operands(shapes: &[Vec<usize>], seed: u64) -> (ExtentSpec, Vec<Vec<f64>>) {
    use deinsum::exec::data::seeded_value;
    let spec = ExtentSpec {
        shapes: Some(shapes.to_vec()),
        ..ExtentSpec::default()
    };
    let ops = shapes
        .iter()
        .enumerate()
        .map(|(k, s)| {
            let n: usize = s.iter().product();
            (0..n as u64).map(|x| seeded_value(seed, k, x)).collect()
        })
        .collect();
    (spec, ops)
}

/// Executor options with `threads` threads per rank.
fn threads_opt(threads: usize) -> ExecOptions {
    ExecOptions {
        threads,
        ..ExecOptions::default()
    }
}

#[test]
fn a_cancelled_run_stops_with_cancelled_on_every_rank() {
    let spec = sizes(&[('i', 9), ('j', 7), ('k', 5)]);
    let c = Einsum::compile("ij,jk->ik", &spec, &Options::procs(3)).unwrap();
    let a: Vec<f64> = (0..63).map(f64::from).collect();
    let b: Vec<f64> = (0..35).map(f64::from).collect();
    let opts = ExecOptions {
        cancel: Some(std::sync::Arc::new(std::sync::atomic::AtomicBool::new(
            true,
        ))),
        ..ExecOptions::default()
    };
    let e = c.run_local_borrowed(&[&a[..], &b[..]], &opts).unwrap_err();
    assert!(e.to_string().contains("cancelled before step 0"), "{e}");
    // The same plan runs to the end when nobody asks it to stop.
    let ok = c
        .run_local_borrowed(&[&a[..], &b[..]], &threads_opt(1))
        .unwrap();
    assert_eq!(ok.len(), 45);
}

/// The facade's `Options::dtype` reaches the plan: an f32 plan records it and holds its
/// words in half the bytes of the same f64 plan.
#[test]
fn options_dtype_reaches_the_plan() {
    use deinsum::DType;
    let spec = deinsum::expr::ExtentSpec {
        default: Some(24),
        ..Default::default()
    };
    let f64_mm = deinsum::Einsum::compile("ij,jk->ik", &spec, &deinsum::Options::procs(2)).unwrap();
    let f32_opts = deinsum::Options {
        dtype: DType::F32,
        ..deinsum::Options::procs(2)
    };
    let f32_mm = deinsum::Einsum::compile("ij,jk->ik", &spec, &f32_opts).unwrap();
    assert_eq!(f64_mm.plan().dtype, DType::F64);
    assert_eq!(f32_mm.plan().dtype, DType::F32);
    let words = f64_mm.plan().prediction.max_peak_memory_with_buffers;
    assert_eq!(words, f32_mm.plan().prediction.max_peak_memory_with_buffers);
    assert_eq!(2 * f32_mm.plan().bytes(words), f64_mm.plan().bytes(words));
}

/// `TreeSearch::WhenItPays` (Python's `einsum`): an einsum predicted under `SEARCH_PAYS`
/// gets the path search's tree alone, planned once, and runs equal to serial; a larger one
/// gets exactly the full search's plan (byte-identical JSON).
#[test]
fn quick_tree_search_is_correct_and_leaves_larger_plans_alone() {
    use deinsum::plan::{TreeSearch, SEARCH_PAYS};
    let quick = |p: usize| Options {
        tree_search: TreeSearch::WhenItPays,
        ..Options::procs(p)
    };
    let tiny = (
        "ij,jk,kl,lm->im",
        sizes(&[('i', 4), ('j', 5), ('k', 3), ('l', 6), ('m', 5)]),
    );
    for p in 1..=4 {
        let c = Einsum::compile(tiny.0, &tiny.1, &quick(p)).expect("quick plan");
        assert!(c.plan().prediction.seconds < SEARCH_PAYS);
        check_run(&c, tiny.0, p, 3);
    }
    let large = (
        "ij,jk,kl->il",
        sizes(&[('i', 512), ('j', 512), ('k', 512), ('l', 512)]),
    );
    for p in [1, 2, 4] {
        let full = Einsum::compile(large.0, &large.1, &Options::procs(p)).expect("full plan");
        assert!(full.plan().prediction.seconds >= SEARCH_PAYS);
        let q = Einsum::compile(large.0, &large.1, &quick(p)).expect("quick plan");
        assert_eq!(
            serde_json::to_string(q.plan()).expect("json"),
            serde_json::to_string(full.plan()).expect("json")
        );
    }
}
