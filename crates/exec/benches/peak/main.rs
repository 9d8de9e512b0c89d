//! GEMM against the core's own peak (issue 38, item 4), all in one run:
//!
//! 1. The FMA peak of one core: 16 independent chains of fused multiply-adds on the widest
//!    vectors the CPU has (AVX-512 through pulp's safe `V4`, else AVX2), f64 and f32.
//! 2. One-thread GEMM `n x n x n`, n = 1024 and 2048, for faer and (in a build with the cargo
//!    feature `blas`) the system CBLAS, in f64, f32, c128 and c64, as GFLOP/s and as a
//!    fraction of the peak of its precision (a complex multiply-add counts 8 real flops).
//! 3. MM 2048 at P = 2 (in-process ranks, one thread each), per library: the median of the
//!    run's contraction times (the slowest rank), as the CLI reports it.
//!
//! Prints one JSON line per row on stdout; `benches/peak/peak.sh` runs it beside NumPy and
//! writes `benches/peak/RESULTS.md`.
//! `cargo bench -p deinsum-exec --features blas --bench peak [-- --quick]`.

use deinsum_exec::gemm::{self, Gemm};
use deinsum_exec::scalar::{Complex32, Complex64};
use deinsum_exec::{execute_measured, ExecOptions, InProcess, Inputs, Scalar, StepKind};
use deinsum_expr::ExtentSpec;
use deinsum_plan::{build, PlanOptions};
use pulp::{Simd, WithSimd};
use std::hint::black_box;
use std::time::Instant;

/// Independent accumulator vectors: enough to cover FMA latency (4 cycles) on two pipes.
const CHAINS: usize = 16;

/// `iters` rounds of one FMA per chain; returns a sum of the chains (kept from the optimizer).
struct Fma64 {
    iters: usize,
}

impl WithSimd for Fma64 {
    type Output = (f64, usize);
    #[inline(always)]
    fn with_simd<S: Simd>(self, simd: S) -> (f64, usize) {
        let x = simd.splat_f64s(black_box(0.999_999_9));
        let y = simd.splat_f64s(black_box(1e-9));
        let mut acc = [simd.splat_f64s(1.0); CHAINS];
        for _ in 0..self.iters {
            for a in &mut acc {
                *a = simd.mul_add_f64s(*a, x, y);
            }
        }
        let s = acc
            .iter()
            .fold(simd.splat_f64s(0.0), |s, &a| simd.add_f64s(s, a));
        let lanes = std::mem::size_of::<S::f64s>() / 8;
        (simd.reduce_sum_f64s(s), lanes)
    }
}

struct Fma32 {
    iters: usize,
}

impl WithSimd for Fma32 {
    type Output = (f32, usize);
    #[inline(always)]
    fn with_simd<S: Simd>(self, simd: S) -> (f32, usize) {
        let x = simd.splat_f32s(black_box(0.999_99));
        let y = simd.splat_f32s(black_box(1e-6));
        let mut acc = [simd.splat_f32s(1.0); CHAINS];
        for _ in 0..self.iters {
            for a in &mut acc {
                *a = simd.mul_add_f32s(*a, x, y);
            }
        }
        let s = acc
            .iter()
            .fold(simd.splat_f32s(0.0), |s, &a| simd.add_f32s(s, a));
        let lanes = std::mem::size_of::<S::f32s>() / 4;
        (simd.reduce_sum_f32s(s), lanes)
    }
}

/// Runs `op` on the widest SIMD level (AVX-512, else AVX2); `None` without either.
fn widest<O: WithSimd>(op: O) -> Option<(O::Output, &'static str)> {
    if let Some(s) = pulp::x86::V4::try_new() {
        return Some((Simd::vectorize(s, op), "avx512"));
    }
    pulp::x86::V3::try_new().map(|s| (Simd::vectorize(s, op), "avx2"))
}

/// Best wall time of `reps` calls of `f` after one warm-up call.
fn best(reps: usize, mut f: impl FnMut()) -> f64 {
    f();
    (0..reps)
        .map(|_| {
            let t0 = Instant::now();
            f();
            t0.elapsed().as_secs_f64()
        })
        .fold(f64::INFINITY, f64::min)
}

/// The FMA peak in GFLOP/s (f64, f32) and the vector level, best of 7 runs of ~0.1 s.
fn peak() -> (f64, f64, &'static str) {
    let iters = 20_000_000;
    let mut level = "none";
    let mut lanes = (0, 0);
    let t64 = best(7, || {
        let ((s, l), lv) = widest(Fma64 { iters }).expect("AVX2 or AVX-512");
        black_box(s);
        (lanes.0, level) = (l, lv);
    });
    let t32 = best(7, || {
        let ((s, l), _) = widest(Fma32 { iters }).expect("AVX2 or AVX-512");
        black_box(s);
        lanes.1 = l;
    });
    let flops = |lanes: usize| 2.0 * (iters * CHAINS * lanes) as f64;
    (
        flops(lanes.0) / t64 / 1e9,
        flops(lanes.1) / t32 / 1e9,
        level,
    )
}

/// One-thread GEMM rate of `T` at `n` through `lib`, in GFLOP/s (real flops).
fn gemm_rate<T: Scalar>(n: usize, lib: Gemm) -> f64 {
    let v = |s: u64| -> Vec<T> {
        (0..(n * n) as u64)
            .map(|x| T::from_parts(deinsum_exec::data::seeded_value(s, 0, x), 0.5))
            .collect()
    };
    let (a, b) = (v(1), v(2));
    let mut c = vec![T::default(); n * n];
    let _g = gemm::enter(lib).expect("library in this build");
    let reps = if n >= 2048 { 3 } else { 5 };
    let t = best(reps, || {
        T::gemm(n, n, n, &a, &b, &mut c, false);
        black_box(&mut c);
    });
    let per_madd = if T::DTYPE.is_complex() { 8.0 } else { 2.0 };
    per_madd * (n * n * n) as f64 / t / 1e9
}

/// MM `n` at P = 2 (one thread per rank) through `lib`: the median contraction seconds.
fn mm_p2(n: usize, lib: Gemm) -> f64 {
    let spec = ExtentSpec {
        sizes: [('i', n), ('j', n), ('k', n)].into_iter().collect(),
        ..ExtentSpec::default()
    };
    let e = deinsum_expr::parse("ij,jk->ik", &spec).expect("parses");
    let opts = PlanOptions {
        procs: 2,
        ..PlanOptions::default()
    };
    let plan = build(&e, &opts).expect("plans");
    let opts = ExecOptions {
        repeat: 7,
        warmup: 1,
        threads: 1,
        gemm: lib,
        ..ExecOptions::default()
    };
    let reports = InProcess::new(2)
        .unwrap()
        .run(|c| {
            execute_measured::<f64, _>(&plan, c, &Inputs::Seeded { seed: 1 }, &opts).map(|(_, r)| r)
        })
        .expect("runs");
    // Per timed run, the slowest rank's steps but the loads (the contraction, as the CLI
    // reports it); then the median over the runs.
    let contraction = |r: &deinsum_exec::RunReport, i: usize| -> f64 {
        r.steps
            .iter()
            .filter(|m| m.kind != StepKind::Load)
            .filter_map(|m| m.samples.get(i))
            .sum()
    };
    let runs = opts.repeat;
    let mut slowest: Vec<f64> = (0..runs)
        .map(|i| {
            reports
                .iter()
                .map(|r| contraction(r, i))
                .fold(0.0, f64::max)
        })
        .collect();
    slowest.sort_by(f64::total_cmp);
    slowest[runs / 2]
}

fn main() {
    let quick = std::env::args().any(|a| a == "--quick");
    let (p64, p32, level) = peak();
    println!("{{\"row\":\"peak\",\"level\":\"{level}\",\"f64_gflops\":{p64:.2},\"f32_gflops\":{p32:.2}}}");
    let libs: Vec<Gemm> = Gemm::ALL.into_iter().filter(|g| g.available()).collect();
    let sizes: &[usize] = if quick { &[256] } else { &[1024, 2048] };
    for &n in sizes {
        for &lib in &libs {
            let rows = [
                ("f64", gemm_rate::<f64>(n, lib), p64),
                ("f32", gemm_rate::<f32>(n, lib), p32),
                ("c128", gemm_rate::<Complex64>(n, lib), p64),
                ("c64", gemm_rate::<Complex32>(n, lib), p32),
            ];
            for (dtype, rate, peak) in rows {
                println!(
                    "{{\"row\":\"gemm\",\"n\":{n},\"lib\":\"{lib}\",\"dtype\":\"{dtype}\",\"gflops\":{rate:.2},\"of_peak\":{:.3}}}",
                    rate / peak
                );
            }
        }
    }
    let n = if quick { 256 } else { 2048 };
    for &lib in &libs {
        let s = mm_p2(n, lib);
        println!("{{\"row\":\"mm_p2\",\"n\":{n},\"lib\":\"{lib}\",\"median_seconds\":{s:.5}}}");
    }
}
