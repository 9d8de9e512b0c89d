//! `.npy` operand files for the tests: the seeded inputs (`naive_seeded`'s) written whole, in
//! C or Fortran order, so that a run from them is checked against the seeded reference.

#![allow(dead_code)]

use deinsum::exec::data::seeded_value;
use deinsum::exec::npy::header_bytes;
use deinsum::plan::Plan;
use std::path::{Path, PathBuf};

/// A file order by operand: its name and which operands are written in Fortran order.
pub type FileOrder = (&'static str, fn(usize) -> bool);

/// All C, all Fortran, and mixed (odd operands in Fortran order).
pub const ORDERS: [FileOrder; 3] = [
    ("C", |_| false),
    ("Fortran", |_| true),
    ("mixed", |k| k % 2 == 1),
];

/// Writes operand `k` of the seeded inputs (element `x` of its row-major storage is
/// `seeded_value(seed, k, x)`) as a `<f8` file of `shape`, in Fortran order when `fortran`.
pub fn write_operand(path: &Path, seed: u64, k: usize, shape: &[usize], fortran: bool) {
    let mut bytes = header_bytes::<f64>(shape);
    if fortran {
        // Same length, so the header's padding still ends on its boundary.
        let from = b"'fortran_order': False";
        let at = bytes
            .windows(from.len())
            .position(|w| w == from)
            .expect("a C-order header");
        bytes[at..at + from.len()].copy_from_slice(b"'fortran_order': True ");
    }
    let n: usize = shape.iter().product();
    let mut x = vec![0usize; shape.len()];
    for _ in 0..n {
        // `x` walks the file's order: the last index fastest in C order, the first in Fortran.
        let row_major = x
            .iter()
            .zip(shape)
            .fold(0u64, |o, (&c, &s)| o * s as u64 + c as u64);
        bytes.extend_from_slice(&seeded_value(seed, k, row_major).to_le_bytes());
        let dims: Vec<usize> = if fortran {
            (0..shape.len()).collect()
        } else {
            (0..shape.len()).rev().collect()
        };
        for d in dims {
            x[d] += 1;
            if x[d] < shape[d] {
                break;
            }
            x[d] = 0;
        }
    }
    std::fs::write(path, bytes).expect("write .npy");
}

/// Every operand of `plan` as a file in `dir`; operand `k` in Fortran order when
/// `fortran(k)`.
pub fn files(plan: &Plan, dir: &Path, seed: u64, fortran: impl Fn(usize) -> bool) -> Vec<PathBuf> {
    plan.einsum
        .inputs()
        .iter()
        .enumerate()
        .map(|(k, op)| {
            let path = dir.join(format!("in{k}.npy"));
            write_operand(&path, seed, k, &op.shape(plan.einsum.extents()), fortran(k));
            path
        })
        .collect()
}
