//! Rank-R CP-ALS on a [`deinsum::Session`]: X is placed once, at its first MTTKRP, and stays
//! there; each sweep runs one MTTKRP per mode on the session, the Gram matrices of the
//! factors, their Hadamard product and an R×R solve (faer) on the replicated small matrices,
//! then the fit as TensorLy's `parafac` computes it (from the last mode's MTTKRP).
//!
//! `cargo run --example cp_als -- [--procs P] [--threads T] [--rank R] [--sweeps S] [--shape 12,10,9]
//! [--no-check] [--backend local|mpi]`: without `--shape`, a 3-way and a 5-way tensor. Each fit
//! is checked against a serial CP-ALS (naive MTTKRPs) unless `--no-check`; exit status 1 when a
//! check fails or X moved after its first sweep.
//!
//! With `--backend mpi` (a build with `--features mpi`, started by `mpirun -n P`) the session is
//! the MPI world's: every rank runs this program, X and the factors are distributed over the
//! processes, and each fit is also checked against the same CP-ALS on P in-process ranks.
//! `--procs`, when given, must be the world's size (exit status 2 otherwise).

#[path = "session_backend.rs"]
mod session_backend;

use deinsum::{DistArray, Session, SessionError};
use faer::linalg::solvers::Solve;
pub use session_backend::Backend;
use session_backend::{session, start_mpi};
use std::process::ExitCode;
use std::time::Instant;

/// Index names of X's modes; `z` is the rank index (and `y` its second copy in a Gram).
const MODES: &[char] = &['i', 'j', 'k', 'l', 'm', 'n', 'o', 'p'];

/// What one CP-ALS run produced.
pub struct CpResult {
    /// Factor `n`, row-major `shape[n] × rank`.
    pub factors: Vec<Vec<f64>>,
    /// The fit `1 - ‖X - [[A_1..A_N]]‖ / ‖X‖` after each sweep.
    pub fits: Vec<f64>,
    /// Seconds of each sweep.
    pub seconds: Vec<f64>,
    /// Words X moved (over all ranks) in each sweep's MTTKRPs.
    pub x_words: Vec<u64>,
    /// Words moved (over all ranks) in each sweep.
    pub words: Vec<u64>,
    /// Per sweep, the SOAP lower bound on the words one rank touches, summed over the
    /// sweep's MTTKRPs.
    pub mttkrp_bound: Vec<f64>,
    /// Per sweep, the words the busiest rank touches in the MTTKRPs' plans.
    pub mttkrp_touched: Vec<u64>,
}

/// The MTTKRP of mode `n` of an order-`order` tensor: `ijk,jz,kz->iz` for n = 0.
pub fn mttkrp_expr(order: usize, n: usize) -> String {
    let x: String = MODES[..order].iter().collect();
    let others: Vec<String> = (0..order)
        .filter(|&m| m != n)
        .map(|m| format!("{}z", MODES[m]))
        .collect();
    format!("{x},{}->{}z", others.join(","), MODES[n])
}

/// Element-wise product of the Gram matrices of every mode but `skip`.
fn hadamard(grams: &[Vec<f64>], skip: Option<usize>, r: usize) -> Vec<f64> {
    let mut v = vec![1.0; r * r];
    for (m, g) in grams.iter().enumerate() {
        if Some(m) != skip {
            v.iter_mut().zip(g).for_each(|(a, b)| *a *= b);
        }
    }
    v
}

/// `M V⁻ᵀ` as TensorLy computes it (`solve(Vᵀ, Mᵀ)ᵀ`): M is `rows × r`, V `r × r`, both
/// row-major; LU with partial pivoting.
pub fn solve_update(m: &[f64], v: &[f64], rows: usize, r: usize) -> Vec<f64> {
    // Vᵀ as a faer matrix, and Mᵀ (r × rows) as the right-hand side.
    let vt = faer::Mat::<f64>::from_fn(r, r, |a, b| v[b * r + a]);
    let mt = faer::Mat::<f64>::from_fn(r, rows, |a, i| m[i * r + a]);
    let y = vt.partial_piv_lu().solve(&mt);
    let mut out = vec![0.0; rows * r];
    for i in 0..rows {
        for a in 0..r {
            out[i * r + a] = y[(a, i)];
        }
    }
    out
}

/// The fit after a sweep from `‖X‖²`, the Gram matrices and the last mode's MTTKRP and
/// factor: `‖X - Y‖² = ‖X‖² + ‖Y‖² - 2⟨X, Y⟩` with `⟨X, Y⟩ = Σ M ∘ A_N` (TensorLy's
/// `error_calc` with an MTTKRP).
pub fn fit(norm_x2: f64, grams: &[Vec<f64>], m_last: &[f64], a_last: &[f64], r: usize) -> f64 {
    let norm_y2: f64 = hadamard(grams, None, r).iter().sum();
    let iprod: f64 = m_last.iter().zip(a_last).map(|(a, b)| a * b).sum();
    1.0 - (norm_x2 + norm_y2 - 2.0 * iprod).abs().sqrt() / norm_x2.sqrt()
}

/// `sweeps` sweeps of rank-`r` CP-ALS of `x` from the factors `init` (row-major
/// `shape[n] × r`), every einsum on session `s`.
pub fn cp_als(
    s: &Session,
    x: &DistArray,
    r: usize,
    init: Vec<Vec<f64>>,
    sweeps: usize,
) -> Result<CpResult, SessionError> {
    let shape = x.shape().to_vec();
    let order = shape.len();
    // X's indices: the einsums whose first operand is X start with them.
    let x_idx: String = MODES[..order].iter().collect();
    let gram_of = |f: &DistArray| -> Result<Vec<f64>, SessionError> {
        s.einsum("iz,iy->zy", &[f, f])?.gather::<f64>()
    };
    let mut arrays = Vec::with_capacity(order);
    let mut grams = Vec::with_capacity(order);
    for (n, f) in init.iter().enumerate() {
        let a = s.array(&[shape[n], r], f.clone())?;
        grams.push(gram_of(&a)?);
        arrays.push(a);
    }
    let mut factors = init;
    let mut out = CpResult {
        factors: Vec::new(),
        fits: Vec::new(),
        seconds: Vec::new(),
        x_words: Vec::new(),
        words: Vec::new(),
        mttkrp_bound: Vec::new(),
        mttkrp_touched: Vec::new(),
    };
    let mut norm_x2 = None;
    for _ in 0..sweeps {
        let t0 = Instant::now();
        let calls = s.stats().len();
        let mut m = Vec::new();
        for n in 0..order {
            let v = hadamard(&grams, Some(n), r);
            let mut ops: Vec<&DistArray> = vec![x];
            ops.extend((0..order).filter(|&k| k != n).map(|k| &arrays[k]));
            m = s.einsum(&mttkrp_expr(order, n), &ops)?.gather::<f64>()?;
            factors[n] = solve_update(&m, &v, shape[n], r);
            arrays[n] = s.array(&[shape[n], r], factors[n].clone())?;
            grams[n] = gram_of(&arrays[n])?;
        }
        // ‖X‖² after X's first placement (by the first MTTKRP), so that this einsum does not
        // choose X's layout.
        let nx2 = match norm_x2 {
            Some(v) => v,
            None => {
                let e = format!("{x_idx},{x_idx}->");
                let v = s.einsum(&e, &[x, x])?.gather::<f64>()?[0];
                norm_x2 = Some(v);
                v
            }
        };
        out.fits.push(fit(nx2, &grams, &m, &factors[order - 1], r));
        out.seconds.push(t0.elapsed().as_secs_f64());
        let st = s.stats();
        let sweep = &st[calls..];
        out.words.push(sweep.iter().map(|e| e.words_moved).sum());
        out.x_words.push(
            sweep
                .iter()
                .filter(|e| e.expr.starts_with(&x_idx))
                .map(|e| e.operand_words[0])
                .sum(),
        );
        // The sweep's MTTKRPs (not the first sweep's ‖X‖², which ends in "->").
        let mttkrps = || {
            sweep
                .iter()
                .filter(|e| e.expr.starts_with(&format!("{x_idx},")) && !e.expr.ends_with("->"))
        };
        out.mttkrp_bound
            .push(mttkrps().map(|e| e.bound_per_rank).sum());
        out.mttkrp_touched
            .push(mttkrps().map(|e| e.touched_per_rank).sum());
    }
    out.factors = factors;
    Ok(out)
}

/// Serial CP-ALS (naive MTTKRPs, the same update and fit): the reference.
pub fn cp_als_serial(
    x: &[f64],
    shape: &[usize],
    r: usize,
    init: Vec<Vec<f64>>,
    sweeps: usize,
) -> Vec<f64> {
    let order = shape.len();
    let gram = |f: &[f64], rows: usize| {
        let mut g = vec![0.0; r * r];
        for i in 0..rows {
            for a in 0..r {
                for b in 0..r {
                    g[a * r + b] += f[i * r + a] * f[i * r + b];
                }
            }
        }
        g
    };
    let mut factors = init;
    let mut grams: Vec<Vec<f64>> = (0..order).map(|n| gram(&factors[n], shape[n])).collect();
    let norm_x2: f64 = x.iter().map(|v| v * v).sum();
    let mut fits = Vec::new();
    for _ in 0..sweeps {
        let mut m = Vec::new();
        for n in 0..order {
            let v = hadamard(&grams, Some(n), r);
            let mut shapes = vec![shape.to_vec()];
            shapes.extend((0..order).filter(|&k| k != n).map(|k| vec![shape[k], r]));
            let spec = deinsum::expr::ExtentSpec {
                shapes: Some(shapes),
                ..Default::default()
            };
            let e = deinsum::expr::parse(&mttkrp_expr(order, n), &spec).expect("valid MTTKRP");
            let others: Vec<usize> = (0..order).filter(|&k| k != n).collect();
            let f = &factors;
            m = deinsum::exec::reference::naive::<f64>(&e, &|k, i| {
                if k == 0 {
                    x[i as usize]
                } else {
                    f[others[k - 1]][i as usize]
                }
            });
            factors[n] = solve_update(&m, &v, shape[n], r);
            grams[n] = gram(&factors[n], shape[n]);
        }
        fits.push(fit(norm_x2, &grams, &m, &factors[order - 1], r));
    }
    fits
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

/// A tensor of `shape` near rank `r` (a CP model plus 10% noise), and initial factors.
pub fn problem(shape: &[usize], r: usize, seed: u64) -> (Vec<f64>, Vec<Vec<f64>>) {
    let truth: Vec<Vec<f64>> = shape
        .iter()
        .enumerate()
        .map(|(n, &d)| values(d * r, seed + n as u64))
        .collect();
    let total: usize = shape.iter().product();
    let noise = values(total, seed + 100);
    let mut x = vec![0.0; total];
    let mut idx = vec![0usize; shape.len()];
    for (flat, v) in x.iter_mut().enumerate() {
        let mut rest = flat;
        for n in (0..shape.len()).rev() {
            idx[n] = rest % shape[n];
            rest /= shape[n];
        }
        let model: f64 = (0..r)
            .map(|a| {
                (0..shape.len())
                    .map(|n| truth[n][idx[n] * r + a])
                    .product::<f64>()
            })
            .sum();
        *v = model + 0.1 * noise[flat];
    }
    let init = shape
        .iter()
        .enumerate()
        .map(|(n, &d)| values(d * r, seed + 200 + n as u64))
        .collect();
    (x, init)
}

/// Runs CP-ALS on `shape`, prints each sweep (rank 0) and checks it; true when every check
/// passed. Under MPI every rank runs it and reaches the same verdict.
pub fn run_case(
    backend: Backend,
    procs: usize,
    threads: usize,
    shape: &[usize],
    r: usize,
    sweeps: usize,
    check: bool,
) -> Result<bool, SessionError> {
    let (x, init) = problem(shape, r, 7);
    let s = session(backend, procs)?;
    s.set_threads(threads);
    let xa = s.array(shape, x.clone())?;
    let got = cp_als(&s, &xa, r, init.clone(), sweeps)?;
    let want = if check {
        Some(cp_als_serial(&x, shape, r, init.clone(), sweeps))
    } else {
        None
    };
    // Under MPI, the same CP-ALS on as many in-process ranks.
    let local = if check && s.is_mpi() {
        let l = Session::local(s.procs())?;
        let la = l.array(shape, x.clone())?;
        Some(cp_als(&l, &la, r, init, sweeps)?)
    } else {
        None
    };
    let mut ok = true;
    let mut text = format!(
        "CP-ALS of a {shape:?} tensor, rank {r}, on {} ranks x {threads} threads{}\n",
        s.procs(),
        if s.is_mpi() { " (MPI)" } else { "" }
    );
    for (t, f) in got.fits.iter().enumerate() {
        let mut line = format!(
            "  sweep {}: fit {f:.12}  {:.4} s  words moved {}  X moved {}  MTTKRP touched/rank {} SOAP bound/rank {:.0}",
            t + 1,
            got.seconds[t],
            got.words[t],
            got.x_words[t],
            got.mttkrp_touched[t],
            got.mttkrp_bound[t]
        );
        if let Some(w) = &want {
            let good = (f - w[t]).abs() <= 1e-9;
            ok &= good;
            line += &format!(
                "  serial {:.12} {}",
                w[t],
                if good { "ok" } else { "MISMATCH" }
            );
        }
        if let Some(l) = &local {
            let good = (f - l.fits[t]).abs() <= 1e-10 && got.x_words[t] == l.x_words[t];
            ok &= good;
            line += &format!(
                "  in-process {:.12} {}",
                l.fits[t],
                if good { "ok" } else { "MISMATCH" }
            );
        }
        // X never moves after its first placement.
        if t > 0 && got.x_words[t] != 0 {
            ok = false;
            line += "  X MOVED";
        }
        text += &line;
        text.push('\n');
    }
    if s.rank() == 0 {
        print!("{text}");
    }
    Ok(ok)
}

fn usage() -> &'static str {
    "usage: cp_als [--procs P] [--threads T] [--rank R] [--sweeps S] [--shape N1,N2,...] [--no-check] [--backend local|mpi]"
}

#[allow(dead_code)]
fn main() -> ExitCode {
    let mut procs = 2;
    let mut threads = 1;
    let mut rank = None;
    let mut sweeps = 4;
    let mut shape: Option<Vec<usize>> = None;
    let mut check = true;
    let mut backend = Backend::Local;
    let mut procs_given = false;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut num = |what: &str| -> Option<usize> {
            let v = args.next().and_then(|v| v.parse().ok()).filter(|&v| v > 0);
            if v.is_none() {
                eprintln!("{what} takes a positive integer\n{}", usage());
            }
            v
        };
        match a.as_str() {
            "--procs" => match num("--procs") {
                Some(v) => {
                    procs = v;
                    procs_given = true;
                }
                None => return ExitCode::from(2),
            },
            "--backend" => match args.next().as_deref() {
                Some("local") => backend = Backend::Local,
                Some("mpi") => backend = Backend::Mpi,
                _ => {
                    eprintln!("--backend takes local or mpi\n{}", usage());
                    return ExitCode::from(2);
                }
            },
            "--threads" => match num("--threads") {
                Some(v) => threads = v,
                None => return ExitCode::from(2),
            },
            "--rank" => match num("--rank") {
                Some(v) => rank = Some(v),
                None => return ExitCode::from(2),
            },
            "--sweeps" => match num("--sweeps") {
                Some(v) => sweeps = v,
                None => return ExitCode::from(2),
            },
            "--shape" => {
                let v: Option<Vec<usize>> = args.next().and_then(|s| {
                    s.split(',')
                        .map(|x| x.trim().parse().ok().filter(|&n: &usize| n > 0))
                        .collect()
                });
                match v {
                    Some(v) if !v.is_empty() && v.len() <= MODES.len() => shape = Some(v),
                    _ => {
                        eprintln!("--shape takes 1 to 8 positive extents\n{}", usage());
                        return ExitCode::from(2);
                    }
                }
            }
            "--no-check" => check = false,
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
    let cases = match shape {
        Some(s) => vec![(s, rank.unwrap_or(4))],
        None => vec![
            (vec![12, 10, 9], rank.unwrap_or(4)),
            (vec![6, 5, 4, 5, 3], rank.unwrap_or(3)),
        ],
    };
    let _guard = match start_mpi(backend, procs_given.then_some(procs)) {
        Ok(m) => m,
        Err(code) => return code,
    };
    let mut ok = true;
    for (shape, r) in cases {
        match run_case(backend, procs, threads, &shape, r, sweeps, check) {
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
