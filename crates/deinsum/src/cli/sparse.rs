//! `deinsum run` with a sparse operand (`--sparse K`, `--density`, `--rmat`, or a `.mtx`,
//! `.tns` or `.npz` input): the SpMM family `ij,jk->ik` / SpMV `ij,j->i` with the sparse
//! operand first, planned from its pattern ([`deinsum_sparse::halo`]) and run on in-process
//! ranks. Other einsums with a sparse operand, and MPI, are refused as not built yet.

use super::run::{Args, Backend, Dtype};
use super::{Format, InputError};
use anyhow::Context;
use deinsum_exec::data::seeded_value;
use deinsum_exec::{Communicator, InProcess};
use deinsum_expr::{Dim, ParsedEinsum};
use deinsum_sparse::halo::{self, HaloPlan};
use deinsum_sparse::{gen, io, kernels, Csr, SparseError, SparseTensor};
use serde_json::json;
use std::path::PathBuf;
use std::process::ExitCode;

/// Whether `args` ask for a sparse run: `--sparse`, `--density`, `--rmat`, or a sparse input file.
pub fn wanted(args: &Args) -> bool {
    args.sparse.is_some()
        || args.density.is_some()
        || args.rmat.is_some()
        || sparse_files(args).iter().any(|p| io::is_sparse_file(p))
}

fn sparse_files(args: &Args) -> Vec<PathBuf> {
    args.inputs
        .as_deref()
        .map(|raw| {
            raw.split(',')
                .map(|s| PathBuf::from(s.trim()))
                .filter(|p| !p.as_os_str().is_empty())
                .collect()
        })
        .unwrap_or_default()
}

fn not_built(what: &str) -> anyhow::Error {
    InputError(format!("sparse operands: {what} is not built yet")).into()
}

/// The SpMM shape of `e` with operand 0 sparse: (i, j, the dense operand's other indices).
fn spmm_form(e: &ParsedEinsum) -> Result<(char, char, Vec<char>), anyhow::Error> {
    let why = "only the SpMM family (ij,jk->ik, ij,j->i, ij,jkl->ikl: operand 0 sparse with \
               two indices, its second summed with the first index of a dense operand 1)";
    if e.num_inputs() != 2 {
        return Err(not_built(&format!("{} ({} operands)", why, e.num_inputs())));
    }
    let a = &e.inputs()[0];
    let b = &e.inputs()[1];
    let (i, j) = match a.dims[..] {
        [Dim::Index(i), Dim::Index(j)] if i != j => (i, j),
        _ => return Err(not_built(why)),
    };
    let b_idx: Vec<char> = b
        .dims
        .iter()
        .map(|d| match d {
            Dim::Index(c) => Ok(*c),
            Dim::Broadcast => Err(not_built(why)),
        })
        .collect::<Result<_, _>>()?;
    let ok = b_idx.first() == Some(&j)
        && !b_idx.contains(&i)
        && b_idx[1..].iter().all(|c| *c != j)
        && e.output().first() == Some(&i)
        && e.output()[1..] == b_idx[1..];
    if !ok {
        return Err(not_built(why));
    }
    Ok((i, j, b_idx[1..].to_vec()))
}

/// The sparse operand: read from its file or generated.
/// A sparse input file and the tensor read from it (with the file's own shape).
type ReadFile = (PathBuf, SparseTensor<f64>);

/// The sparse operand of `shape`: the file already read (a FROSTT file whose shape the einsum
/// gives is read again within that shape, since the file carries none), or generated.
fn sparse_operand(
    args: &Args,
    shape: &[usize],
    read: Option<ReadFile>,
) -> anyhow::Result<SparseTensor<f64>> {
    let input = |e: SparseError| anyhow::Error::new(InputError(e.to_string()));
    if let Some((p, t)) = read {
        if t.shape() != shape && p.extension().is_some_and(|e| e == "tns") {
            return io::read::<f64>(&p, Some(shape)).map_err(input);
        }
        return io::check_shape(&p, t, shape).map_err(input);
    }
    let t = match (args.density, args.rmat) {
        (Some(_), Some(_)) => {
            return Err(InputError("give --density or --rmat, not both".into()).into())
        }
        (Some(d), None) => gen::uniform::<f64>(shape, d, args.seed),
        (None, Some(s)) => {
            let n = 1usize.checked_shl(s).unwrap_or(0);
            if shape != [n, n] {
                return Err(InputError(format!(
                    "--rmat {s} makes a {n} x {n} matrix; the einsum gives the operand shape {shape:?} (try --size {n})"
                ))
                .into());
            }
            gen::rmat::<f64>(s, 16, args.seed)
        }
        (None, None) => gen::uniform::<f64>(shape, 0.01, args.seed),
    };
    t.map_err(|e: SparseError| InputError(e.to_string()).into())
}

/// Runs a sparse einsum; see the module doc.
pub fn run(args: &Args) -> anyhow::Result<ExitCode> {
    if args.sparse.is_some_and(|k| k != 0) {
        return Err(not_built("a sparse operand other than operand 0"));
    }
    if args.plan.is_some() || args.output.is_some() || args.mem.is_some() {
        return Err(not_built("--plan, --output or --mem with a sparse operand"));
    }
    if matches!(args.backend, Some(Backend::Mpi)) || super::launch_size().is_some_and(|n| n > 1) {
        return Err(not_built("running under MPI"));
    }
    if args.dtype == Dtype::F32 {
        return Err(not_built("--dtype f32"));
    }
    let expr = args.expr.as_deref().context("an einsum is required")?;
    let (einsum, read) = einsum_of(expr, args)?;
    let (i, j, rest) = spmm_form(&einsum)?;
    let (m, n) = (einsum.extent(i), einsum.extent(j));
    let k: usize = rest.iter().map(|&c| einsum.extent(c)).product();
    let a = sparse_operand(args, &[m, n], read)?;
    let csr = a.to_csr().map_err(|e| InputError(e.to_string()))?;
    let procs = args.procs.unwrap_or(1);
    if procs == 0 {
        return Err(InputError("--procs must be at least 1".into()).into());
    }
    deinsum_exec::preflight::check_in_process_ranks(procs)
        .map_err(|e| InputError(e.to_string()))?;
    let plan = HaloPlan::build(&csr, k, procs).map_err(|e| InputError(e.to_string()))?;
    // B element (j, rest) is the dense generator's value of operand 1 at that storage index,
    // so a dense run of the same einsum and seed sees the same B.
    let b: Vec<f64> = (0..n * k)
        .map(|x| seeded_value(args.seed, 1, x as u64))
        .collect();
    let (c, measured, secs) = run_ranks(&plan, &csr, &b, args)?;
    let check = if args.check {
        let want = kernels::spmm(&csr, &b, k)?;
        Some(deinsum_exec::reference::max_error(&c, &want))
    } else {
        None
    };
    report(args, expr, &a, &plan, &measured, secs, check)
}

/// The einsum. A sparse file's shape gives the extents of operand 0's indices that no
/// `--sizes` entry names; the dense operand's other extents come from the flags (default 10,
/// as for `run`). `--rmat S` without extent flags makes every extent 2^S. The sparse file,
/// read once here, comes back with the einsum.
fn einsum_of(expr: &str, args: &Args) -> anyhow::Result<(ParsedEinsum, Option<ReadFile>)> {
    let x = &args.extents;
    let no_flags = x.sizes.is_none() && x.size.is_none() && x.shapes.is_none();
    let mut ext = x.clone();
    let files = sparse_files(args);
    let mut read = None;
    if let Some(p) = files.iter().find(|p| io::is_sparse_file(p)) {
        let t = io::read::<f64>(p, None).map_err(|e| InputError(e.to_string()))?;
        let probe = super::einsum_from_args(expr, &super::ExtentArgs::default())?;
        let idx: Vec<char> = probe.inputs()[0].indices.clone();
        if idx.len() != t.order() {
            return Err(InputError(format!(
                "{} has {} modes but operand 0 has {} indices",
                p.display(),
                t.order(),
                idx.len()
            ))
            .into());
        }
        let named = |c: char| {
            x.sizes.as_deref().is_some_and(|s| {
                s.split(',')
                    .any(|kv| kv.trim().starts_with(&format!("{c}=")))
            })
        };
        let mut sizes: Vec<String> = x.sizes.iter().cloned().collect();
        sizes.extend(
            idx.iter()
                .zip(t.shape())
                .filter(|(c, _)| !named(**c))
                .map(|(c, n)| format!("{c}={n}")),
        );
        ext.sizes = Some(sizes.join(","));
        if ext.size.is_none() && ext.shapes.is_none() {
            ext.size = Some(super::DEFAULT_SIZE.to_string());
        }
        read = Some((p.clone(), t));
    } else if let (Some(s), true) = (args.rmat, no_flags) {
        ext.size = Some(1usize.checked_shl(s).unwrap_or(0).to_string());
    }
    Ok((super::einsum_from_args(expr, &ext)?, read))
}

/// Each rank's rows of C with its measured (received, sent) words, and the slowest rank's time.
type RankOut = (Vec<f64>, u64, u64, f64);

/// C's rows in rank order, every rank's measured (received, sent) words, the slowest time.
type RunOut = (Vec<f64>, Vec<(u64, u64)>, f64);

fn run_ranks(plan: &HaloPlan, csr: &Csr<f64>, b: &[f64], args: &Args) -> anyhow::Result<RunOut> {
    let k = plan.k;
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let threads = args.threads.unwrap_or((cores / plan.procs).max(1));
    let world = InProcess::new(plan.procs).map_err(|e| anyhow::anyhow!("{e}"))?;
    let outs: Vec<RankOut> = world
        .run(|comm| {
            let r = comm.rank();
            let a_local = csr.rows(plan.a_cuts[r], plan.a_cuts[r + 1]);
            let b_local = &b[plan.b_cuts()[r] * k..plan.b_cuts()[r + 1] * k];
            let pool = rayon::ThreadPoolBuilder::new()
                .num_threads(threads)
                .build()
                .map_err(|e| SparseError::Shape(format!("thread pool: {e}")))?;
            comm.barrier()?;
            let before = comm.traffic();
            let t0 = std::time::Instant::now();
            // Communication stays on the rank's thread; the product runs on its pool.
            let bx = halo::exchange_halo(comm, plan, &a_local, b_local)?;
            let local = halo::localize(plan, r, &a_local)?;
            let c = pool.install(|| kernels::spmm(&local, &bx, k))?;
            let secs = t0.elapsed().as_secs_f64();
            let after = comm.traffic();
            Ok::<_, SparseError>((
                c,
                (after.received - before.received) / 8,
                (after.sent - before.sent) / 8,
                secs,
            ))
        })
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    let secs = outs.iter().map(|o| o.3).fold(0.0, f64::max);
    let measured = outs.iter().map(|o| (o.1, o.2)).collect();
    let c = outs.into_iter().flat_map(|o| o.0).collect();
    Ok((c, measured, secs))
}

fn report(
    args: &Args,
    expr: &str,
    a: &SparseTensor<f64>,
    plan: &HaloPlan,
    measured: &[(u64, u64)],
    secs: f64,
    check: Option<(f64, f64)>,
) -> anyhow::Result<ExitCode> {
    let exact =
        (0..plan.procs).all(|r| measured[r] == (plan.received_words(r), plan.sent_words(r)));
    let repl_max = (0..plan.procs)
        .map(|r| plan.replication_words(r))
        .max()
        .unwrap_or(0);
    let repl_total: u64 = (0..plan.procs).map(|r| plan.replication_words(r)).sum();
    let measured_total: u64 = measured.iter().map(|m| m.0).sum();
    let ok = exact && check.is_none_or(|(_, rel)| rel <= 1e-10);
    let (m, n) = (a.shape()[0], a.shape()[1]);
    let density = a.nnz() as f64 / (m as f64 * n as f64);
    match args.format {
        Format::Json => {
            let v = json!({
                "expression": expr, "procs": plan.procs, "sparse_operand": 0,
                "shape": [m, n], "nnz": a.nnz(), "density": density,
                "imbalance": plan.imbalance(),
                "predicted": {"max_per_rank": plan.max_received(), "total": plan.total_received()},
                "replication": {"max_per_rank": repl_max, "total": repl_total},
                "measured": {"total": measured_total, "exact": exact,
                             "received": measured.iter().map(|m| m.0).collect::<Vec<_>>()},
                "seconds": secs,
                "check": check.map(|(abs, rel)| json!({"max_abs_error": abs, "max_rel_error": rel})),
            });
            println!("{}", serde_json::to_string_pretty(&v)?);
        }
        Format::Text => {
            println!("sparse {expr}: operand 0 is {m} x {n} sparse ({} nonzeros, density {density:.2e}), B is {} x {}, P = {}", a.nnz(), n, plan.k, plan.procs);
            println!(
                "rows cut by nonzeros: imbalance {:.3} (max nonzeros per rank over the mean)",
                plan.imbalance()
            );
            let pct = if repl_total > 0 {
                100.0 * plan.total_received() as f64 / repl_total as f64
            } else {
                0.0
            };
            println!(
                "halo exchange: busiest rank receives {} words, {} in all; replicating B would move {} per rank, {} in all ({pct:.1}% of it)",
                plan.max_received(), plan.total_received(), repl_max, repl_total
            );
            if exact {
                println!("measured: every rank received and sent exactly the planned words ({measured_total} in all)");
            } else {
                println!("measured: MISMATCH against the plan: {measured:?}");
            }
            println!("time: {secs:.6} s (slowest rank)");
            if let Some((abs, rel)) = check {
                let verdict = if rel <= 1e-10 { "ok" } else { "FAILED" };
                println!("check against the serial CSR product: {verdict} (max abs error {abs:.3e}, max rel error {rel:.3e})");
            }
        }
    }
    Ok(if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}
