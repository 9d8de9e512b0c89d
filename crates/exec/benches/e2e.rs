//! End-to-end runs of the whole pipeline on P in-process ranks, for comparison with numpy's
//! `einsum(..., optimize=True)` (benches/numpy_baseline.py; benches/e2e.sh runs both).
//!
//! Prints one JSON line per case: wall time of the run (min over repetitions) with and without
//! the Load steps (input generation), and GFLOP/s of the run without loads.

use deinsum_exec::{execute_measured, ExecOptions, InProcess, Inputs};
use deinsum_expr::ExtentSpec;
use deinsum_plan::{build, PlanOptions};
use std::collections::BTreeMap;
use std::time::Instant;

/// A case: name, expression, extents.
type Case = (&'static str, String, Vec<(char, usize)>);

fn main() {
    let quick = std::env::args().any(|a| a == "--quick");
    let (n, t, r) = if quick { (256, 64, 8) } else { (2048, 256, 32) };
    let cases: Vec<Case> = vec![
        ("mm", "ij,jk->ik".into(), vec![('i', n), ('j', n), ('k', n)]),
        (
            "mttkrp3",
            "ijk,ja,ka->ia".into(),
            vec![('i', t), ('j', t), ('k', t), ('a', r)],
        ),
    ];
    let reps = if quick { 1 } else { 3 };
    for (name, expr, ext) in &cases {
        for p in [1usize, 2] {
            let spec = ExtentSpec {
                sizes: ext.iter().copied().collect::<BTreeMap<_, _>>(),
                ..ExtentSpec::default()
            };
            let e = deinsum_expr::parse(expr, &spec).expect("parses");
            let plan = build(
                &e,
                &PlanOptions {
                    procs: p,
                    ..PlanOptions::default()
                },
            )
            .expect("plans");
            let world = InProcess::new(p).unwrap();
            let mut best_total = f64::INFINITY;
            let mut best_compute = f64::INFINITY;
            let mut madds = 0.0;
            for _ in 0..reps {
                let t0 = Instant::now();
                let reps = world
                    .run(|c| {
                        execute_measured::<f64, _>(
                            &plan,
                            c,
                            &Inputs::Seeded { seed: 1 },
                            &ExecOptions::default(),
                        )
                        .map(|(_, r)| r)
                    })
                    .expect("runs");
                let total = t0.elapsed().as_secs_f64();
                // Per step the slowest rank; loads (generation) left out.
                let steps = reps[0].steps.len();
                let compute: f64 = (0..steps)
                    .filter(|&s| reps[0].steps[s].kind != deinsum_exec::StepKind::Load)
                    .map(|s| reps.iter().map(|r| r.steps[s].seconds).fold(0.0, f64::max))
                    .sum();
                madds = reps.iter().map(|r| r.madds).sum();
                best_total = best_total.min(total);
                best_compute = best_compute.min(compute);
            }
            println!(
                "{{\"case\":\"{name}\",\"expr\":\"{expr}\",\"procs\":{p},\"seconds_total\":{best_total:.4},\"seconds_without_load\":{best_compute:.4},\"gflops\":{:.2},\"words_moved\":{}}}",
                2.0 * madds / best_compute / 1e9,
                plan.prediction.total
            );
        }
    }
}
