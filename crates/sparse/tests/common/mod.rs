//! Helpers shared by the sparse crate's test binaries.

#![allow(dead_code)]

use deinsum_sparse::io::read_mtx;
use deinsum_sparse::SparseTensor;

/// Asserts `got` equals `want` element by element to 1e-12 relative (plus 1e-12 absolute).
pub fn close(got: &[f64], want: &[f64], what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: lengths");
    for (x, (g, w)) in got.iter().zip(want).enumerate() {
        assert!(
            (g - w).abs() <= 1e-12 * (1.0 + w.abs()),
            "{what}: element {x}: {g} vs {w}"
        );
    }
}

/// `n` reproducible values in [-0.5, 0.5), a different sequence per `salt`.
pub fn dense(n: usize, salt: usize) -> Vec<f64> {
    (0..n)
        .map(|x| ((x * 7919 + salt * 104_729) % 113) as f64 / 113.0 - 0.5)
        .collect()
}

/// Dense row-major product of `a` (m x n) and `b` (n x k).
pub fn dense_mm(a: &[f64], b: &[f64], m: usize, n: usize, k: usize) -> Vec<f64> {
    let mut c = vec![0.0; m * k];
    for i in 0..m {
        for j in 0..n {
            for l in 0..k {
                c[i * k + l] += a[i * n + j] * b[j * k + l];
            }
        }
    }
    c
}

/// A `side x side` matrix (side >= 30) with an entry on every third row of the first 30,
/// at column 7i mod 30 (not symmetric); rows and columns past 30, and the others, empty.
pub fn every_third_row(side: usize) -> SparseTensor<f64> {
    let mut coords = Vec::new();
    let mut vals = Vec::new();
    for i in (0..30).step_by(3) {
        coords.extend([i, (i * 7) % 30]);
        vals.push(1.0 + i as f64);
    }
    SparseTensor::from_entries(vec![side, side], coords, vals).unwrap()
}

/// A 6 x 6 matrix with (2,1) three times (summed), (0,3) an explicit zero and (4,4) twice.
pub fn duplicates() -> SparseTensor<f64> {
    SparseTensor::from_entries(
        vec![6, 6],
        vec![2, 1, 0, 3, 2, 1, 4, 4, 2, 1, 4, 4, 5, 0],
        vec![1.0, 0.0, 2.0, -1.5, 0.25, 2.0, 3.0],
    )
    .unwrap()
}

/// A symmetric 7 x 7 Matrix Market file (lower triangle given, one explicit zero), written to
/// a folder of the system's temporary directory named after `tag` and this process, and read.
pub fn symmetric_mtx(tag: &str) -> SparseTensor<f64> {
    let dir = std::env::temp_dir().join(format!("deinsum-sparse-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let p = dir.join("sym.mtx");
    std::fs::write(
        &p,
        "%%MatrixMarket matrix coordinate real symmetric\n7 7 6\n1 1 2\n3 1 -1\n5 2 0.5\n7 4 1\n6 6 3\n7 1 0\n",
    )
    .unwrap();
    read_mtx::<f64>(&p).unwrap()
}
