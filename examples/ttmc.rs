//! The Tucker TTMc of HOOI for mode 1: `Y = X ×₂ Uᵀ ×₃ Vᵀ` ("ijk,jb,kc->ibc"), the
//! contraction whose SVD gives the next mode-1 factor.
//!
//! `cargo run --example ttmc -- [--procs P] [--size N] [--rank R]`, or with `--features mpi`
//! under `mpirun -n P`. Prints the check against a serial TTMc.

mod common;

use common::{arg, main_for, Example};
use std::collections::BTreeMap;
use std::process::ExitCode;

struct Ttmc {
    n: usize,
    r: usize,
}

impl Example for Ttmc {
    fn name(&self) -> &str {
        "ttmc"
    }
    fn flags(&self) -> Vec<(&'static str, &'static str)> {
        vec![
            ("size", "extent of the tensor modes (default 20)"),
            ("rank", "extent of the factor ranks (default 5)"),
        ]
    }
    fn expr(&self) -> &str {
        "ijk,jb,kc->ibc"
    }
    fn sizes(&self) -> BTreeMap<char, usize> {
        [
            ('i', self.n),
            ('j', self.n + 3),
            ('k', self.n + 1),
            ('b', self.r),
            ('c', self.r + 1),
        ]
        .into()
    }
    fn serial(&self, x: &dyn Fn(usize, usize) -> f64) -> Vec<f64> {
        let (ni, nj, nk, nb, nc) = (self.n, self.n + 3, self.n + 1, self.r, self.r + 1);
        // Two passes, as a serial Tucker code does: T = X ×₂ Uᵀ, then Y = T ×₃ Vᵀ.
        let mut t = vec![0.0; ni * nb * nk];
        for i in 0..ni {
            for j in 0..nj {
                for b in 0..nb {
                    let u = x(1, j * nb + b);
                    for k in 0..nk {
                        t[(i * nb + b) * nk + k] += x(0, (i * nj + j) * nk + k) * u;
                    }
                }
            }
        }
        let mut y = vec![0.0; ni * nb * nc];
        for i in 0..ni {
            for b in 0..nb {
                for k in 0..nk {
                    let tv = t[(i * nb + b) * nk + k];
                    for c in 0..nc {
                        y[(i * nb + b) * nc + c] += tv * x(2, k * nc + c);
                    }
                }
            }
        }
        y
    }
}

fn main() -> ExitCode {
    main_for(Ttmc {
        n: arg("size").unwrap_or(20),
        r: arg("rank").unwrap_or(5),
    })
}
