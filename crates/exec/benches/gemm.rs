//! GEMM-shaped steps: deinsum's pairwise kernel against faer's own GEMM on the same shapes
//! (and ndarray's default matrixmultiply for the backend choice). Throughput is in FLOP/s
//! (2 m n k per product): criterion prints it as "elem/s".

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use deinsum_exec::kernels::{contract, LocalTensor};
use deinsum_exec::Scalar;

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

fn gemm(c: &mut Criterion) {
    // (m, n, k): square, the MTTKRP contraction's tile (I x R x J*tile_k), tall-skinny.
    let shapes = [
        (512, 512, 512),
        (1024, 1024, 1024),
        (256, 32, 2048),
        (4096, 64, 64),
    ];
    let mut g = c.benchmark_group("gemm_f64");
    g.sample_size(10);
    for &(m, n, k) in &shapes {
        let id = format!("{m}x{n}x{k}");
        g.throughput(Throughput::Elements(2 * (m * n * k) as u64));
        let a = block("ij", &[m, k]);
        let b = block("jk", &[k, n]);
        let mut out = vec![0.0f64; m * n];
        g.bench_function(BenchmarkId::new("faer", &id), |bch| {
            bch.iter(|| f64::gemm(m, n, k, &a.data, &b.data, &mut out, false))
        });
        g.bench_function(BenchmarkId::new("deinsum_step", &id), |bch| {
            bch.iter(|| contract(&a, &b, &['i', 'k']))
        });
        // Both operands stored transposed (a as j,i and b as k,j): read in place by faer.
        let at = a.permute(&['j', 'i']);
        let bt = b.permute(&['k', 'j']);
        g.bench_function(BenchmarkId::new("deinsum_step_transposed", &id), |bch| {
            bch.iter(|| contract(&at, &bt, &['i', 'k']))
        });
        let aa = ndarray::Array2::from_shape_vec((m, k), a.data.clone()).unwrap();
        let bb = ndarray::Array2::from_shape_vec((k, n), b.data.clone()).unwrap();
        g.bench_function(BenchmarkId::new("matrixmultiply", &id), |bch| {
            bch.iter(|| aa.dot(&bb))
        });
    }
    g.finish();
}

criterion_group!(benches, gemm);
criterion_main!(benches);
