//! GEMM-shaped steps and the fused MTTKRP against the machine's own rates, all measured in one
//! run on one thread (issue 12, item 5).
//!
//! 1. Per shape `m x n x k`: faer's GEMM on row-major operands as the executor calls it, over
//!    cache-sized panels (the rate to match), faer in one call on the same operands and on
//!    operands stored transposed (to show what faer's strided path costs), and deinsum's
//!    pairwise step [`contract`] for the four storages `ij|ji` x `jk|kj`. The ratio is the
//!    plain time over the other's (target for the steps >= 0.90).
//! 2. The stream-copy bandwidth (a copy between two pre-touched buffers; read + write bytes per
//!    second) and the fused MTTKRP `ijk,ja,ka->ia` as the executor runs it (P = 1, one thread,
//!    the compute step's best time) against its roofline: the larger of its flops (2 I J K R) at
//!    faer's rate for its GEMM shape `I x R x JK` and its compulsory bytes (X, A, B read once,
//!    the output written) at the copy bandwidth (target: at most 1.6x).
//!
//! Times are the best of several runs. `cargo bench -p deinsum-exec --bench gemm [-- --quick]`
//! prints a Markdown table and one JSON line per row.

use deinsum_exec::buffers::RankContext;
use deinsum_exec::kernels::{contract, LocalTensor};
use deinsum_exec::scalar::Layout;
use deinsum_exec::{execute_measured, ExecOptions, InProcess, Inputs, Scalar, StepKind};
use deinsum_expr::ExtentSpec;
use deinsum_plan::{build, PlanOptions};
use std::collections::BTreeMap;
use std::hint::black_box;
use std::time::Instant;

fn block(idx: &str, shape: &[usize]) -> LocalTensor<f64> {
    let n: usize = shape.iter().product();
    LocalTensor {
        indices: idx.chars().collect(),
        ranges: shape.iter().map(|&s| (0, s)).collect(),
        data: (0..n as u64)
            .map(|x| deinsum_exec::data::seeded_value(1, 0, x))
            .collect(),
    }
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

/// Repetitions giving about `target` seconds of work for a call taking about `once` seconds.
fn reps_for(once: f64, target: f64) -> usize {
    ((target / once.max(1e-9)) as usize).clamp(3, 50)
}

fn gemm_rows(quick: bool) {
    let shapes: &[(usize, usize, usize)] = if quick {
        &[(256, 256, 256), (128, 16, 1024)]
    } else {
        &[
            (512, 512, 512),
            (1024, 1024, 1024),
            (256, 32, 2048),
            (4096, 64, 64),
            (128, 32, 65536),
            (32, 128, 65536),
        ]
    };
    println!("| shape m x n x k | faer GFLOP/s | faer 1 call | faer A^T | faer B^T | faer both^T | step ij,jk | step ji,jk | step ij,kj | step ji,kj |");
    println!("|---|---|---|---|---|---|---|---|---|---|");
    for &(m, n, k) in shapes {
        let flops = 2.0 * (m * n * k) as f64;
        let a = block("ij", &[m, k]);
        let b = block("jk", &[k, n]);
        let at = a.permute(&['j', 'i']).expect("memory for the bench");
        let bt = b.permute(&['k', 'j']).expect("memory for the bench");
        let mut out = vec![0.0f64; m * n];
        let faer = |ad: &[f64], bd: &[f64], l: Layout, out: &mut [f64]| {
            f64::gemm_layout(m, n, k, ad, bd, out, false, l)
        };
        let lay = |a_trans, b_trans| Layout { a_trans, b_trans };
        // faer itself in one call, on views of the operands as stored.
        let raw = |ad: &[f64], bd: &[f64], l: Layout, out: &mut [f64]| {
            let a = if l.a_trans {
                faer::MatRef::from_row_major_slice(ad, k, m).transpose()
            } else {
                faer::MatRef::from_row_major_slice(ad, m, k)
            };
            let b = if l.b_trans {
                faer::MatRef::from_row_major_slice(bd, n, k).transpose()
            } else {
                faer::MatRef::from_row_major_slice(bd, k, n)
            };
            let c = faer::MatMut::from_row_major_slice_mut(out, m, n);
            faer::linalg::matmul::matmul(c, faer::Accum::Replace, a, b, 1.0, faer::Par::Seq);
        };
        // The steps run as in a repeated run of the executor: in a rank context whose pool
        // takes their results back, so that, like faer's, their output is not fresh memory.
        let ctx = RankContext::new(1 << 26, 1, 0).expect("a context");
        let _in = ctx.enter();
        let step = |x: &LocalTensor<f64>, y: &LocalTensor<f64>| {
            deinsum_exec::buffers::give(
                black_box(contract(x, y, &['i', 'k']).expect("memory for the bench"))
                    .data
                    .into_vec(),
            )
        };
        let once = best(1, || faer(&a.data, &b.data, Layout::default(), &mut out));
        let reps = reps_for(once, 0.2);
        // One call of each in turn per repetition, so that a burst of load hits all alike.
        let mut t = [f64::INFINITY; 9];
        let mut outs: [Vec<f64>; 5] = std::array::from_fn(|_| vec![0.0f64; m * n]);
        for _ in 0..=reps {
            let [o0, o1, o2, o3, o4] = &mut outs;
            let runs: [&mut dyn FnMut(); 9] = [
                &mut || faer(&a.data, &b.data, Layout::default(), o0),
                &mut || raw(&a.data, &b.data, Layout::default(), o4),
                &mut || raw(&at.data, &b.data, lay(true, false), o1),
                &mut || raw(&a.data, &bt.data, lay(false, true), o2),
                &mut || raw(&at.data, &bt.data, lay(true, true), o3),
                &mut || step(&a, &b),
                &mut || step(&at, &b),
                &mut || step(&a, &bt),
                &mut || step(&at, &bt),
            ];
            for (ti, f) in t.iter_mut().zip(runs) {
                let t0 = Instant::now();
                f();
                *ti = ti.min(t0.elapsed().as_secs_f64());
            }
        }
        let [plain, f_one, f_at, f_bt, f_tt, s0, s1, s2, s3] = t;
        let s = [s0, s1, s2, s3];
        let r = |t: f64| plain / t;
        println!(
            "| {m} x {n} x {k} | {:.1} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2} |",
            flops / plain / 1e9,
            r(f_one),
            r(f_at),
            r(f_bt),
            r(f_tt),
            r(s[0]),
            r(s[1]),
            r(s[2]),
            r(s[3])
        );
        eprintln!(
            "{{\"case\":\"gemm\",\"m\":{m},\"n\":{n},\"k\":{k},\"faer_seconds\":{plain:.6},\"step_ratio\":[{:.3},{:.3},{:.3},{:.3}]}}",
            r(s[0]),
            r(s[1]),
            r(s[2]),
            r(s[3])
        );
    }
}

/// Read + write bandwidth of a copy of `words` f64 between two pre-touched buffers (bytes/s).
fn copy_bandwidth(words: usize) -> f64 {
    let src: Vec<f64> = (0..words).map(|x| x as f64).collect();
    let mut dst = vec![1.0f64; words];
    let t = best(10, || {
        dst.copy_from_slice(black_box(&src));
        black_box(&mut dst);
    });
    2.0 * (words * 8) as f64 / t
}

fn mttkrp_row(quick: bool) {
    let (n, r) = if quick { (64, 8) } else { (256, 32) };
    let bw = copy_bandwidth(if quick { 1 << 20 } else { 1 << 24 });
    // faer's rate for the MTTKRP's GEMM, X (I x JK) times the Khatri-Rao product (JK x R).
    let (m, nn, k) = (n, r, n * n);
    let x = block("ij", &[m, k]);
    let kr = block("jk", &[k, nn]);
    let mut out = vec![0.0f64; m * nn];
    let g = best(5, || {
        f64::gemm(m, nn, k, &x.data, &kr.data, &mut out, false);
        black_box(&mut out);
    });
    let flops = 2.0 * (n * n * n * r) as f64;
    let rate = 2.0 * (m * nn * k) as f64 / g;
    let bytes = 8.0 * (n * n * n + 2 * n * r + n * r) as f64;
    let roof = (flops / rate).max(bytes / bw);
    let spec = ExtentSpec {
        sizes: [('i', n), ('j', n), ('k', n), ('a', r)]
            .into_iter()
            .collect::<BTreeMap<_, _>>(),
        ..ExtentSpec::default()
    };
    let e = deinsum_expr::parse("ijk,ja,ka->ia", &spec).expect("parses");
    let plan = build(&e, &PlanOptions::default()).expect("plans");
    let reps = 7;
    let opts = ExecOptions {
        repeat: reps,
        warmup: 1,
        threads: 1,
        ..ExecOptions::default()
    };
    let reports = InProcess::new(1)
        .unwrap()
        .run(|c| {
            execute_measured::<f64, _>(&plan, c, &Inputs::Seeded { seed: 1 }, &opts).map(|(_, r)| r)
        })
        .expect("runs");
    let fused = reports[0]
        .steps
        .iter()
        .filter(|s| s.kind == StepKind::Compute)
        .map(|s| s.samples.iter().copied().fold(f64::INFINITY, f64::min))
        .sum::<f64>();
    println!();
    println!("| MTTKRP n^3, R | copy GB/s (r+w) | GEMM GFLOP/s (I x R x JK) | roofline s | fused s | fused / roofline |");
    println!("|---|---|---|---|---|---|");
    println!(
        "| {n}^3, {r} | {:.1} | {:.1} | {roof:.5} | {fused:.5} | {:.2} |",
        bw / 1e9,
        rate / 1e9,
        fused / roof
    );
    eprintln!(
        "{{\"case\":\"mttkrp\",\"n\":{n},\"r\":{r},\"copy_gb_s\":{:.2},\"gemm_gflops\":{:.2},\"roofline_seconds\":{roof:.6},\"fused_seconds\":{fused:.6},\"ratio\":{:.3}}}",
        bw / 1e9,
        rate / 1e9,
        fused / roof
    );
}

fn main() {
    let quick = std::env::args().any(|a| a == "--quick");
    // `cargo bench` passes `--bench`; nothing else is expected.
    gemm_rows(quick);
    mttkrp_row(quick);
}
