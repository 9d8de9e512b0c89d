//! One copy per move: the largest redistribution of `ij,jk->ik` (n = 2048, 16 MB received per
//! rank at P = 2) between in-process ranks, against a plain memcpy of the same bytes, in the
//! same run. Prints one JSON line; `ratio` is memcpy time / move time (the target:
//! >= 0.5).
//!
//! What each side includes. The move (the step's best time over 7 repeated runs, the slowest
//! rank): deriving the transfers, the peer lending its 16 MB half (its source block, not
//! packed), and one rank assembling the 32 MB target block that both ranks then share: its
//! own half and the peer's copied in, on its thread and a helper standing for the waiting
//! peer's core (32 MB written over two threads, as the memcpy writes); after two warm-up
//! runs the target comes from the builder's pool, already touched. The memcpy: one 16 MB
//! copy per rank, both ranks at once, into a buffer touched before (`memcpy_seconds`, the
//! baseline of `ratio`), and into a fresh buffer (`memcpy_fresh_seconds`, which pays the page
//! faults).
//!
//! `cargo bench -p deinsum-exec --bench moves [-- --quick]`

use deinsum_exec::{execute_measured, ExecOptions, InProcess, Inputs};
use deinsum_expr::ExtentSpec;
use deinsum_plan::{build, PlanOptions, PlanStep};
use std::collections::BTreeMap;
use std::time::Instant;

fn main() {
    let quick = std::env::args().any(|a| a == "--quick");
    let n = if quick { 512 } else { 2048 };
    let p = 2;
    let spec = ExtentSpec {
        sizes: [('i', n), ('j', n), ('k', n)]
            .into_iter()
            .collect::<BTreeMap<_, _>>(),
        ..ExtentSpec::default()
    };
    let e = deinsum_expr::parse("ij,jk->ik", &spec).expect("parses");
    let plan = build(
        &e,
        &PlanOptions {
            procs: p,
            // Unpipelined, so B's half arrives by one redistribution (not by phase fetches).
            overlap: false,
            ..PlanOptions::default()
        },
    )
    .expect("plans");
    // The move with the most words received by one rank.
    let (step, words) = plan
        .steps
        .iter()
        .enumerate()
        .filter_map(|(i, s)| match s {
            PlanStep::Redistribute { volume, .. } => Some((i, volume.max_per_rank)),
            _ => None,
        })
        .max_by_key(|&(_, w)| w)
        .expect("the plan moves data");
    let reps = 7;
    let opts = ExecOptions {
        repeat: reps,
        warmup: 2,
        threads: 1,
        ..ExecOptions::default()
    };
    let reports = InProcess::new(p)
        .unwrap()
        .run(|c| {
            execute_measured::<f64, _>(&plan, c, &Inputs::Seeded { seed: 1 }, &opts).map(|(_, r)| r)
        })
        .expect("runs");
    // Per run the slowest rank; the best run.
    let moved = (0..reps)
        .map(|r| {
            reports
                .iter()
                .map(|rep| rep.steps[step].samples[r])
                .fold(0.0, f64::max)
        })
        .fold(f64::INFINITY, f64::min);
    // The same bytes copied once per rank, both ranks at once as the move does (one copy per
    // rank, on its own thread), into a buffer touched before (as the move's target block and
    // message buffers are from the second run on: they come from the rank's buffer pool), and
    // for reference into a fresh buffer (whose first-touch page faults the copy pays).
    let src: Vec<f64> = (0..words).map(|x| x as f64).collect();
    let mut dsts: Vec<Vec<f64>> = (0..p).map(|_| vec![1.0f64; words as usize]).collect();
    let (mut copy, mut fresh) = (f64::INFINITY, f64::INFINITY);
    for _ in 0..reps {
        let t0 = Instant::now();
        std::thread::scope(|s| {
            for dst in dsts.iter_mut() {
                let src = &src;
                s.spawn(move || {
                    dst.copy_from_slice(src);
                    std::hint::black_box(dst);
                });
            }
        });
        copy = copy.min(t0.elapsed().as_secs_f64());
        let t0 = Instant::now();
        std::thread::scope(|s| {
            for _ in 0..p {
                s.spawn(|| {
                    let mut dst = vec![0.0f64; src.len()];
                    dst.copy_from_slice(&src);
                    std::hint::black_box(&dst);
                });
            }
        });
        fresh = fresh.min(t0.elapsed().as_secs_f64());
    }
    let mb = words as f64 * 8.0 / 1e6;
    println!(
        "{{\"case\":\"move\",\"expr\":\"ij,jk->ik\",\"n\":{n},\"procs\":{p},\"step\":{step},\"mb_per_rank\":{mb:.1},\"move_seconds\":{moved:.5},\"memcpy_seconds\":{copy:.5},\"memcpy_fresh_seconds\":{fresh:.5},\"move_gb_s\":{:.2},\"memcpy_gb_s\":{:.2},\"ratio\":{:.2}}}",
        mb / 1e3 / moved,
        mb / 1e3 / copy,
        copy / moved
    );
}
