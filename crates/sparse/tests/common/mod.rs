//! Helpers shared by the sparse crate's test binaries.

#![allow(dead_code)]

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
