//! A matrix chain `A B C D` ("ij,jk,kl,lm->im") with uneven sizes, where the order of the
//! products matters: deinsum picks the path and a grid per product.
//!
//! `cargo run --example matrix_chain -- [--procs P] [--size N]`, or with `--features mpi`
//! under `mpirun -n P`. Prints the check against a serial left-to-right product.

mod common;

use common::{arg, main_for, Example};
use std::collections::BTreeMap;
use std::process::ExitCode;

struct Chain {
    dims: [usize; 5],
}

/// `C = A B` for row-major `A` (n×k) and `B` (k×m).
fn matmul(a: &[f64], b: &[f64], n: usize, k: usize, m: usize) -> Vec<f64> {
    let mut c = vec![0.0; n * m];
    for i in 0..n {
        for l in 0..k {
            let av = a[i * k + l];
            for j in 0..m {
                c[i * m + j] += av * b[l * m + j];
            }
        }
    }
    c
}

impl Example for Chain {
    fn name(&self) -> &str {
        "matrix_chain"
    }
    fn flags(&self) -> Vec<(&'static str, &'static str)> {
        vec![("size", "base extent of the chain (default 10)")]
    }
    fn expr(&self) -> &str {
        "ij,jk,kl,lm->im"
    }
    fn sizes(&self) -> BTreeMap<char, usize> {
        let d = self.dims;
        [
            ('i', d[0]),
            ('j', d[1]),
            ('k', d[2]),
            ('l', d[3]),
            ('m', d[4]),
        ]
        .into()
    }
    fn serial(&self, x: &dyn Fn(usize, usize) -> f64) -> Vec<f64> {
        let d = self.dims;
        let mat = |k: usize, r: usize, c: usize| (0..r * c).map(|e| x(k, e)).collect::<Vec<f64>>();
        let ab = matmul(&mat(0, d[0], d[1]), &mat(1, d[1], d[2]), d[0], d[1], d[2]);
        let abc = matmul(&ab, &mat(2, d[2], d[3]), d[0], d[2], d[3]);
        matmul(&abc, &mat(3, d[3], d[4]), d[0], d[3], d[4])
    }
}

fn main() -> ExitCode {
    let n = arg("size").unwrap_or(10);
    main_for(Chain {
        dims: [4 * n, n, 5 * n, n - n / 5, 3 * n],
    })
}
