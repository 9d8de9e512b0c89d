//! Tucker HOOI on a [`deinsum::Session`]: per sweep and mode, the TTMc chain
//! `Y = X ×_{m≠n} U_mᵀ` (one einsum over X and the other factors, which the planner orders as
//! a chain) on the session, then the leading left singular vectors of Y's mode-n unfolding
//! (a small SVD, faer) as the new factor; after the sweep the core `G = X ×_all U_mᵀ` and the
//! fit `1 - sqrt(‖X‖² - ‖G‖²) / ‖X‖`.
//!
//! `cargo run --example tucker_hooi -- [--procs P] [--sweeps S] [--shape 10,9,8]
//! [--ranks 3,3,2] [--no-check]`: without `--shape`, a 3-way and a 5-way tensor. Each sweep's
//! core norm and the final factors' subspaces are checked against a serial HOOI (naive
//! TTMcs) unless `--no-check`.
//!
//! `--backend mpi` (a build with `--features mpi`, started by `mpirun -n P`) runs the session on
//! the MPI world, every rank running this program; each sweep is then also checked against the
//! same HOOI on P in-process ranks. `--procs`, when given, must be the world's size.

#[path = "session_backend.rs"]
mod session_backend;

use deinsum::{DistArray, Session, SessionError};
pub use session_backend::Backend;
use session_backend::{session, start_mpi};
use std::process::ExitCode;

/// Index names of X's modes and of the ranks of each mode's factor.
const MODES: &[char] = &['i', 'j', 'k', 'l', 'm', 'n', 'o', 'p'];
const RANKS: &[char] = &['a', 'b', 'c', 'd', 'e', 'f', 'g', 'h'];

/// What one HOOI run produced.
pub struct TuckerResult {
    /// Factor `n`, row-major `shape[n] × ranks[n]`, orthonormal columns.
    pub factors: Vec<Vec<f64>>,
    /// `‖G‖` after each sweep.
    pub core_norms: Vec<f64>,
    /// The fit after each sweep.
    pub fits: Vec<f64>,
    /// Words X moved (over all ranks) in each sweep's einsums.
    pub x_words: Vec<u64>,
}

/// The TTMc of mode `n`: X times every factor but `n`'s, `ijk,jb,kc->ibc` for n = 0 of 3.
/// `None` for `n` = order: the whole core, `ijk,ia,jb,kc->abc`.
pub fn ttmc_expr(order: usize, n: Option<usize>) -> String {
    let x: String = MODES[..order].iter().collect();
    let ops: Vec<String> = (0..order)
        .filter(|&m| Some(m) != n)
        .map(|m| format!("{}{}", MODES[m], RANKS[m]))
        .collect();
    let out: String = (0..order)
        .map(|m| if Some(m) == n { MODES[m] } else { RANKS[m] })
        .collect();
    format!("{x},{}->{out}", ops.join(","))
}

/// The `r` leading left singular vectors of the row-major `rows × cols` matrix `y`, row-major
/// `rows × r`.
pub fn leading(y: &[f64], rows: usize, cols: usize, r: usize) -> Vec<f64> {
    let m = faer::Mat::<f64>::from_fn(rows, cols, |i, j| y[i * cols + j]);
    let svd = m.thin_svd().expect("the SVD of a finite matrix converges");
    let u = svd.U();
    let mut out = vec![0.0; rows * r];
    for i in 0..rows {
        for a in 0..r {
            out[i * r + a] = u[(i, a)];
        }
    }
    out
}

/// Orthonormal `rows × r` columns from pseudo-random values.
pub fn orthonormal(rows: usize, r: usize, seed: u64) -> Vec<f64> {
    leading(&values(rows * r, seed), rows, r, r)
}

/// `sweeps` sweeps of HOOI of `x` to multilinear ranks `ranks` from the factors `init`
/// (row-major `shape[n] × ranks[n]`), every TTMc on session `s`.
pub fn hooi(
    s: &Session,
    x: &DistArray,
    ranks: &[usize],
    init: Vec<Vec<f64>>,
    sweeps: usize,
) -> Result<TuckerResult, SessionError> {
    let shape = x.shape().to_vec();
    let order = shape.len();
    let x_idx: String = MODES[..order].iter().collect();
    let mut factors = init;
    let mut arrays = (0..order)
        .map(|n| s.array(&[shape[n], ranks[n]], factors[n].clone()))
        .collect::<Result<Vec<_>, _>>()?;
    let mut out = TuckerResult {
        factors: Vec::new(),
        core_norms: Vec::new(),
        fits: Vec::new(),
        x_words: Vec::new(),
    };
    let mut norm_x2 = None;
    for _ in 0..sweeps {
        let calls = s.stats().len();
        for n in 0..order {
            let mut ops: Vec<&DistArray> = vec![x];
            ops.extend((0..order).filter(|&m| m != n).map(|m| &arrays[m]));
            let y = s
                .einsum(&ttmc_expr(order, Some(n)), &ops)?
                .gather::<f64>()?;
            let cols = y.len() / shape[n];
            factors[n] = leading(&y, shape[n], cols, ranks[n]);
            arrays[n] = s.array(&[shape[n], ranks[n]], factors[n].clone())?;
        }
        let mut ops: Vec<&DistArray> = vec![x];
        ops.extend(arrays.iter());
        let g = s.einsum(&ttmc_expr(order, None), &ops)?.gather::<f64>()?;
        let g2: f64 = g.iter().map(|v| v * v).sum();
        // ‖X‖² once X is placed (by the first TTMc), so that this einsum does not choose
        // X's layout.
        let nx2 = match norm_x2 {
            Some(v) => v,
            None => {
                let v = s
                    .einsum(&format!("{x_idx},{x_idx}->"), &[x, x])?
                    .gather::<f64>()?[0];
                norm_x2 = Some(v);
                v
            }
        };
        out.core_norms.push(g2.sqrt());
        out.fits.push(1.0 - (nx2 - g2).max(0.0).sqrt() / nx2.sqrt());
        out.x_words.push(
            s.stats()[calls..]
                .iter()
                .filter(|e| e.expr.starts_with(&x_idx))
                .map(|e| e.operand_words[0])
                .sum(),
        );
    }
    out.factors = factors;
    Ok(out)
}

/// Serial `expr` over whole row-major operands.
fn naive(expr: &str, ops: &[(&[usize], &[f64])]) -> Vec<f64> {
    let spec = deinsum::expr::ExtentSpec {
        shapes: Some(ops.iter().map(|o| o.0.to_vec()).collect()),
        ..Default::default()
    };
    let e = deinsum::expr::parse(expr, &spec).expect("valid einsum");
    deinsum::exec::reference::naive::<f64>(&e, &|k, i| ops[k].1[i as usize])
}

/// Serial HOOI (naive TTMcs, the same SVDs): the core norm after each sweep and the factors.
pub fn hooi_serial(
    x: &[f64],
    shape: &[usize],
    ranks: &[usize],
    init: Vec<Vec<f64>>,
    sweeps: usize,
) -> (Vec<f64>, Vec<Vec<f64>>) {
    let order = shape.len();
    let fshape: Vec<[usize; 2]> = (0..order).map(|n| [shape[n], ranks[n]]).collect();
    let mut factors = init;
    let mut norms = Vec::new();
    for _ in 0..sweeps {
        for n in 0..order {
            let mut ops: Vec<(&[usize], &[f64])> = vec![(shape, x)];
            ops.extend(
                (0..order)
                    .filter(|&m| m != n)
                    .map(|m| (&fshape[m][..], &factors[m][..])),
            );
            let y = naive(&ttmc_expr(order, Some(n)), &ops);
            let cols = y.len() / shape[n];
            factors[n] = leading(&y, shape[n], cols, ranks[n]);
        }
        let mut ops: Vec<(&[usize], &[f64])> = vec![(shape, x)];
        ops.extend((0..order).map(|m| (&fshape[m][..], &factors[m][..])));
        let g = naive(&ttmc_expr(order, None), &ops);
        norms.push(g.iter().map(|v| v * v).sum::<f64>().sqrt());
    }
    (norms, factors)
}

/// Largest difference between the projectors `U Uᵀ` of two `rows × r` factors (zero when they
/// span the same subspace, whatever the signs of the singular vectors).
pub fn projector_gap(u: &[f64], v: &[f64], rows: usize, r: usize) -> f64 {
    let p =
        |w: &[f64], i: usize, j: usize| (0..r).map(|a| w[i * r + a] * w[j * r + a]).sum::<f64>();
    let mut gap: f64 = 0.0;
    for i in 0..rows {
        for j in 0..rows {
            gap = gap.max((p(u, i, j) - p(v, i, j)).abs());
        }
    }
    gap
}

/// `n` pseudo-random values in [-1, 1) from `seed`.
pub fn values(n: usize, seed: u64) -> Vec<f64> {
    let mut s = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    (0..n)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((s >> 11) as f64 / (1u64 << 53) as f64) * 2.0 - 1.0
        })
        .collect()
}

/// A tensor of `shape` near multilinear rank `ranks` (a Tucker model plus 5% noise), and
/// orthonormal initial factors.
pub fn problem(shape: &[usize], ranks: &[usize], seed: u64) -> (Vec<f64>, Vec<Vec<f64>>) {
    let order = shape.len();
    let core = values(ranks.iter().product(), seed);
    let basis: Vec<Vec<f64>> = (0..order)
        .map(|n| orthonormal(shape[n], ranks[n], seed + 1 + n as u64))
        .collect();
    let mut ops: Vec<(&[usize], &[f64])> = vec![(ranks, &core)];
    let fshape: Vec<[usize; 2]> = (0..order).map(|n| [shape[n], ranks[n]]).collect();
    ops.extend((0..order).map(|n| (&fshape[n][..], &basis[n][..])));
    let core_idx: String = RANKS[..order].iter().collect();
    let terms: Vec<String> = (0..order)
        .map(|n| format!("{}{}", MODES[n], RANKS[n]))
        .collect();
    let out: String = MODES[..order].iter().collect();
    let mut x = naive(&format!("{core_idx},{}->{out}", terms.join(",")), &ops);
    let noise = values(x.len(), seed + 50);
    let scale = 0.05 * (x.iter().map(|v| v * v).sum::<f64>() / x.len() as f64).sqrt();
    x.iter_mut().zip(noise).for_each(|(v, e)| *v += scale * e);
    let init = (0..order)
        .map(|n| orthonormal(shape[n], ranks[n], seed + 100 + n as u64))
        .collect();
    (x, init)
}

/// Runs HOOI on `shape`, prints each sweep (rank 0) and checks it; true when every check
/// passed. Under MPI every rank runs it and reaches the same verdict.
pub fn run_case(
    backend: Backend,
    procs: usize,
    shape: &[usize],
    ranks: &[usize],
    sweeps: usize,
    check: bool,
) -> Result<bool, SessionError> {
    let (x, init) = problem(shape, ranks, 11);
    let s = session(backend, procs)?;
    let xa = s.array(shape, x.clone())?;
    let got = hooi(&s, &xa, ranks, init.clone(), sweeps)?;
    let want = check.then(|| hooi_serial(&x, shape, ranks, init.clone(), sweeps));
    // Under MPI, the same HOOI on as many in-process ranks.
    let local = if check && s.is_mpi() {
        let l = Session::local(s.procs())?;
        let la = l.array(shape, x.clone())?;
        Some(hooi(&l, &la, ranks, init, sweeps)?)
    } else {
        None
    };
    let mut ok = true;
    let mut text = format!(
        "Tucker HOOI of a {shape:?} tensor to ranks {ranks:?} on {} ranks{}\n",
        s.procs(),
        if s.is_mpi() { " (MPI)" } else { "" }
    );
    for t in 0..sweeps {
        let g = got.core_norms[t];
        let mut line = format!(
            "  sweep {}: core norm {g:.12}  fit {:.12}  X moved {}",
            t + 1,
            got.fits[t],
            got.x_words[t]
        );
        if let Some((norms, _)) = &want {
            let good = (g - norms[t]).abs() <= 1e-9 * norms[t].max(1.0);
            ok &= good;
            line += &format!(
                "  serial {:.12} {}",
                norms[t],
                if good { "ok" } else { "MISMATCH" }
            );
        }
        if let Some(l) = &local {
            let good =
                (g - l.core_norms[t]).abs() <= 1e-10 * g.max(1.0) && got.x_words[t] == l.x_words[t];
            ok &= good;
            line += &format!(
                "  in-process {:.12} {}",
                l.core_norms[t],
                if good { "ok" } else { "MISMATCH" }
            );
        }
        if t > 0 && got.x_words[t] != 0 {
            ok = false;
            line += "  X MOVED";
        }
        text += &line;
        text.push('\n');
    }
    if let Some((_, factors)) = &want {
        for (n, f) in factors.iter().enumerate() {
            let gap = projector_gap(&got.factors[n], f, shape[n], ranks[n]);
            let good = gap <= 1e-8;
            ok &= good;
            text += &format!(
                "  factor {n}: projector gap to serial {gap:.2e} {}\n",
                if good { "ok" } else { "MISMATCH" }
            );
        }
    }
    if s.rank() == 0 {
        print!("{text}");
    }
    Ok(ok)
}

fn usage() -> &'static str {
    "usage: tucker_hooi [--procs P] [--sweeps S] [--shape N1,N2,...] [--ranks R1,R2,...] [--no-check] [--backend local|mpi]"
}

/// A comma-separated list of positive integers.
fn list(s: Option<String>) -> Option<Vec<usize>> {
    let v: Vec<usize> = s?
        .split(',')
        .map(|x| x.trim().parse().ok().filter(|&n: &usize| n > 0))
        .collect::<Option<_>>()?;
    (!v.is_empty() && v.len() <= MODES.len()).then_some(v)
}

#[allow(dead_code)]
fn main() -> ExitCode {
    let mut procs = 2;
    let mut sweeps = 3;
    let mut shape = None;
    let mut ranks = None;
    let mut check = true;
    let mut backend = Backend::Local;
    let mut procs_given = false;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--procs" | "--sweeps" => {
                match args
                    .next()
                    .and_then(|v| v.parse::<usize>().ok())
                    .filter(|&v| v > 0)
                {
                    Some(v) if a == "--procs" => {
                        procs = v;
                        procs_given = true;
                    }
                    Some(v) => sweeps = v,
                    None => {
                        eprintln!("{a} takes a positive integer\n{}", usage());
                        return ExitCode::from(2);
                    }
                }
            }
            "--shape" | "--ranks" => match list(args.next()) {
                Some(v) if a == "--shape" => shape = Some(v),
                Some(v) => ranks = Some(v),
                None => {
                    eprintln!("{a} takes 1 to 8 positive integers\n{}", usage());
                    return ExitCode::from(2);
                }
            },
            "--no-check" => check = false,
            "--backend" => match args.next().as_deref() {
                Some("local") => backend = Backend::Local,
                Some("mpi") => backend = Backend::Mpi,
                _ => {
                    eprintln!("--backend takes local or mpi\n{}", usage());
                    return ExitCode::from(2);
                }
            },
            "--help" | "-h" => {
                println!("{}", usage());
                return ExitCode::SUCCESS;
            }
            other => {
                eprintln!("unknown argument {other}\n{}", usage());
                return ExitCode::from(2);
            }
        }
    }
    let cases = match (shape, ranks) {
        (Some(s), Some(r)) if s.len() == r.len() && s.iter().zip(&r).all(|(n, r)| r <= n) => {
            vec![(s, r)]
        }
        (Some(s), None) => {
            let r = s.iter().map(|&n| n.min(2)).collect();
            vec![(s, r)]
        }
        (None, None) => vec![
            (vec![10, 9, 8], vec![3, 3, 2]),
            (vec![6, 5, 4, 5, 3], vec![2, 2, 2, 2, 2]),
        ],
        _ => {
            eprintln!(
                "--ranks needs --shape, one rank per mode, each at most its extent\n{}",
                usage()
            );
            return ExitCode::from(2);
        }
    };
    let _guard = match start_mpi(backend, procs_given.then_some(procs)) {
        Ok(m) => m,
        Err(code) => return code,
    };
    let mut ok = true;
    for (shape, ranks) in cases {
        match run_case(backend, procs, &shape, &ranks, sweeps, check) {
            Ok(good) => ok &= good,
            Err(e) => {
                eprintln!("error: {e}");
                return ExitCode::FAILURE;
            }
        }
    }
    if ok {
        ExitCode::SUCCESS
    } else {
        eprintln!("a check failed");
        ExitCode::FAILURE
    }
}
