//! One CP-ALS step for a 3-way tensor: the MTTKRP `M = X_(1) (C ⊙ B)` ("ijk,jr,kr->ir"),
//! distributed and communication-optimal, then the factor update `A = M ((BᵀB) ∘ (CᵀC))⁻¹`
//! on rank 0 (an R×R solve).
//!
//! `cargo run --example mttkrp -- [--procs P] [--size N] [--rank R]`, or with
//! `--features mpi` under `mpirun -n P`. Prints the check against a serial MTTKRP.

mod common;

use common::{arg, main_for, Example};
use std::collections::BTreeMap;
use std::process::ExitCode;

struct Mttkrp {
    n: usize,
    r: usize,
}

impl Example for Mttkrp {
    fn name(&self) -> &str {
        "mttkrp"
    }
    fn flags(&self) -> Vec<(&'static str, &'static str)> {
        vec![
            ("size", "extent of i, j and k (default 24)"),
            ("rank", "CP rank r (default 8)"),
        ]
    }
    fn expr(&self) -> &str {
        "ijk,jr,kr->ir"
    }
    fn sizes(&self) -> BTreeMap<char, usize> {
        [('i', self.n), ('j', self.n), ('k', self.n), ('r', self.r)].into()
    }
    fn serial(&self, x: &dyn Fn(usize, usize) -> f64) -> Vec<f64> {
        let (n, rr) = (self.n, self.r);
        let mut m = vec![0.0; n * rr];
        for i in 0..n {
            for j in 0..n {
                for k in 0..n {
                    let xv = x(0, (i * n + j) * n + k);
                    for r in 0..rr {
                        m[i * rr + r] += xv * x(1, j * rr + r) * x(2, k * rr + r);
                    }
                }
            }
        }
        m
    }
    fn after(&self, m: &[f64], x: &dyn Fn(usize, usize) -> f64) -> Result<Vec<String>, String> {
        let (n, rr) = (self.n, self.r);
        // V = (BᵀB) ∘ (CᵀC), symmetric positive definite for factors of full column rank.
        let gram = |k: usize| {
            let mut g = vec![0.0; rr * rr];
            for j in 0..n {
                for a in 0..rr {
                    for b in 0..rr {
                        g[a * rr + b] += x(k, j * rr + a) * x(k, j * rr + b);
                    }
                }
            }
            g
        };
        let (gb, gc) = (gram(1), gram(2));
        let v: Vec<f64> = gb.iter().zip(&gc).map(|(a, b)| a * b).collect();
        let l = cholesky(&v, rr).ok_or("CP-ALS update: (BᵀB)∘(CᵀC) is not positive definite")?;
        // A V = M row by row: solve L Lᵀ aᵀ = mᵀ.
        let mut a = vec![0.0; n * rr];
        for i in 0..n {
            let row = solve_llt(&l, rr, &m[i * rr..(i + 1) * rr]);
            a[i * rr..(i + 1) * rr].copy_from_slice(&row);
        }
        let mut res = 0.0f64;
        let mut norm = 0.0f64;
        for i in 0..n {
            for c in 0..rr {
                let av: f64 = (0..rr).map(|b| a[i * rr + b] * v[b * rr + c]).sum();
                res += (av - m[i * rr + c]).powi(2);
                norm += m[i * rr + c].powi(2);
            }
        }
        let rel = (res / norm.max(f64::MIN_POSITIVE)).sqrt();
        if rel > 1e-8 {
            return Err(format!(
                "CP-ALS update: residual |A V - M|/|M| = {rel:.3e} -> MISMATCH"
            ));
        }
        let fro = a.iter().map(|v| v * v).sum::<f64>().sqrt();
        Ok(vec![format!(
            "CP-ALS update A = M V^-1 ({n}x{rr}): |A|_F = {fro:.6}, residual |A V - M|/|M| = {rel:.3e} -> OK"
        )])
    }
}

/// Lower Cholesky factor of the `n`×`n` row-major SPD matrix `a`, `None` if not SPD.
fn cholesky(a: &[f64], n: usize) -> Option<Vec<f64>> {
    let mut l = vec![0.0; n * n];
    for i in 0..n {
        for j in 0..=i {
            let s: f64 = a[i * n + j] - (0..j).map(|k| l[i * n + k] * l[j * n + k]).sum::<f64>();
            if i == j {
                if s <= 0.0 {
                    return None;
                }
                l[i * n + i] = s.sqrt();
            } else {
                l[i * n + j] = s / l[j * n + j];
            }
        }
    }
    Some(l)
}

/// Solves `L Lᵀ y = b`.
fn solve_llt(l: &[f64], n: usize, b: &[f64]) -> Vec<f64> {
    let mut z = vec![0.0; n];
    for i in 0..n {
        z[i] = (b[i] - (0..i).map(|k| l[i * n + k] * z[k]).sum::<f64>()) / l[i * n + i];
    }
    let mut y = vec![0.0; n];
    for i in (0..n).rev() {
        y[i] = (z[i] - (i + 1..n).map(|k| l[k * n + i] * y[k]).sum::<f64>()) / l[i * n + i];
    }
    y
}

fn main() -> ExitCode {
    main_for(Mttkrp {
        n: arg("size").unwrap_or(24),
        r: arg("rank").unwrap_or(8),
    })
}
