//! `deinsum run` with sparse operands (`--sparse K[,K..]`, `--density`, `--rmat`, or `.mtx`,
//! `.tns` or `.npz` inputs): the flags mapped onto [`deinsum_sparse::einsum`] (the recogniser
//! of the built forms, the plans, the per-rank run and its report), run on in-process ranks or,
//! under an MPI launcher in a build with `mpi`, on the MPI world, and the report printed
//! ([`crate::sparse_summary`]).
//!
//! Dense operands are generated from the seed, or read from the `.npy` files `--inputs` lists
//! beside the sparse ones; `--output` writes the result as `.npy`, `.mtx`, `.tns` or `.npz`.
//! Complex runs (`--dtype c128|c64`) read Matrix Market `complex` files and complex `.npz`
//! archives (real files are widened), write complex results (`.tns` refused: FROSTT has no
//! complex values) and check them by the magnitude of the difference.
//! Honoured: `--dtype`, `--repeat`, `--warmup`, `--threads`, `--check`, `--format`,
//! `--backend`, `--procs`, `--seed`, `--spmv-scheme`. Refused (exit 2), since a sparse plan is
//! built from the pattern alone: `--plan`, `--mem`, `--machine`, `--objective` other than
//! `time`, `--no-overlap` and `--html`; `--gemm blas` too (the sparse kernels call no GEMM).

use super::run_args::{Args, Backend};
use super::sparse_inputs::input_err;
use super::{Format, InputError};
use crate::sparse_summary::SparseSummary;
use anyhow::Context;
#[cfg(feature = "mpi")]
use deinsum_exec::Communicator;
use deinsum_exec::{InProcess, Scalar};
use deinsum_sparse::einsum::{self as se, Check, RunOptions, SparseJob};
use deinsum_sparse::io;
use std::process::ExitCode;

/// Whether `args` ask for a sparse run: `--sparse`, `--density`, `--rmat`, or a sparse input file.
pub fn wanted(args: &Args) -> bool {
    !args.sparse.is_empty()
        || args.density.is_some()
        || args.rmat.is_some()
        || super::sparse_inputs::input_files(args)
            .iter()
            .any(|p| io::is_sparse_file(p))
}

/// Refuses, with a message, every flag the sparse path cannot honour.
fn refuse_flags(args: &Args) -> anyhow::Result<()> {
    let refuse = |what: &str, why: &str| -> anyhow::Result<()> {
        Err(InputError(format!("{what} does not apply to a sparse run: {why}")).into())
    };
    if args.plan.is_some() || args.mem.is_some() {
        let what = "--plan or --mem with a sparse operand";
        return Err(InputError(format!("sparse operands: {what} is not built yet")).into());
    }
    let pattern = "its plan is built from the nonzeros' pattern, not by the planner";
    if args.machine.is_some() {
        return refuse(
            "--machine",
            "a sparse plan predicts words per rank, not seconds",
        );
    }
    if args.objective != "time" {
        return refuse("--objective", pattern);
    }
    if args.no_overlap {
        return refuse("--no-overlap", pattern);
    }
    if args.gemm != deinsum_exec::Gemm::Faer {
        return refuse("--gemm", "the sparse kernels call no GEMM");
    }
    if args.html.is_some() {
        return refuse(
            "--html",
            "the page shows a dense plan's steps; use --format json",
        );
    }
    for (flag, bad) in [
        ("--repeat", args.repeat == 0),
        ("--threads", args.threads == Some(0)),
        ("--procs", args.procs == Some(0)),
    ] {
        if bad {
            return Err(InputError(format!("{flag} must be at least 1")).into());
        }
    }
    Ok(())
}

/// Runs a sparse einsum; see the module doc.
pub fn run(args: &Args) -> anyhow::Result<ExitCode> {
    refuse_flags(args)?;
    deinsum_exec::with_dtype!(args.dtype, T => run_typed::<T>(args))
}

fn run_typed<T: Scalar>(args: &Args) -> anyhow::Result<ExitCode> {
    let expr = args.expr.as_deref().context("an einsum is required")?;
    let job = super::sparse_inputs::job_of::<T>(expr, args)?;
    if let Some(out) = &args.output {
        super::inputs::check_output_path(out)?;
        super::inputs::check_output(out, &super::sparse_inputs::input_files(args))?;
        let avail = deinsum_exec::preflight::available_memory();
        se::check_output_file(job.form(), &job.output_shape(), T::DTYPE, out, avail)
            .map_err(input_err)?;
    }
    let mpi = match args.backend {
        Some(Backend::Mpi) => true,
        Some(_) => false,
        None => super::launch_size().is_some(),
    };
    if mpi {
        return run_mpi(&job, args, expr);
    }
    let procs = args.procs.unwrap_or(1);
    deinsum_exec::preflight::check_in_process_ranks(procs)
        .map_err(|e| InputError(e.to_string()))?;
    let plan = job.plan(procs).map_err(input_err)?;
    let cores = deinsum_runtime::cores();
    let opts = run_options(args, args.threads.unwrap_or((cores / procs).max(1)));
    let world = InProcess::new(procs).map_err(|e| anyhow::anyhow!("{e}"))?;
    let outs = world
        .run(|comm| se::run_rank(comm, &job, &plan, &opts))
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    finish(args, expr, &job, &plan, outs, "in-process")
}

fn run_options(args: &Args, threads: usize) -> RunOptions {
    RunOptions {
        threads,
        repeat: args.repeat,
        warmup: args.warmup,
    }
}

#[cfg(feature = "mpi")]
fn run_mpi<T: Scalar>(job: &SparseJob<T>, args: &Args, expr: &str) -> anyhow::Result<ExitCode> {
    let universe = mpi::initialize().context("MPI initialization failed")?;
    let comm = deinsum_exec::mpi::MpiComm::world(&universe);
    let procs = args.procs.unwrap_or(comm.size());
    if procs != comm.size() {
        return Err(InputError(format!(
            "--procs {procs} but the MPI world has {} ranks",
            comm.size()
        ))
        .into());
    }
    // Every rank read or generated the same pattern, so every rank builds the same plan.
    let plan = job.plan(procs).map_err(input_err)?;
    let opts = run_options(
        args,
        args.threads
            .or_else(super::run_args::omp_threads)
            .unwrap_or(1),
    );
    let mine = comm.or_abort(se::run_rank(&comm, job, &plan, &opts));
    let Some(outs) = comm.or_abort(se::gather_outcomes(&comm, mine)) else {
        return Ok(ExitCode::SUCCESS);
    };
    finish(args, expr, job, &plan, outs, "MPI")
}

#[cfg(not(feature = "mpi"))]
fn run_mpi<T: Scalar>(_job: &SparseJob<T>, _args: &Args, _expr: &str) -> anyhow::Result<ExitCode> {
    Err(InputError(
        "a sparse run under MPI needs a build with the `mpi` feature (cargo build --features mpi)"
            .into(),
    )
    .into())
}

/// Checks, writes the output, then prints the report; exit 1 when a rank moved other words
/// than planned or the check failed.
fn finish<T: Scalar>(
    args: &Args,
    expr: &str,
    job: &SparseJob<T>,
    plan: &se::Planned,
    outs: Vec<se::RankOutcome<T>>,
    backend: &str,
) -> anyhow::Result<ExitCode> {
    let report = se::SparseReport::new(job, plan, outs).map_err(input_err)?;
    let tolerance = args.dtype.tolerance();
    let check = match args.check {
        true => Some((
            Check::of(job, &report.output).map_err(input_err)?,
            tolerance,
        )),
        false => None,
    };
    if let Some(path) = &args.output {
        se::write_output(&report.output, path).map_err(input_err)?;
    }
    let summary = SparseSummary {
        expr,
        backend,
        dtype: (args.dtype != deinsum_plan::DType::F64).then_some(args.dtype.name()),
        job,
        plan,
        report: &report,
        warmup: args.warmup,
        check,
    };
    match args.format {
        Format::Json => println!("{}", serde_json::to_string_pretty(&summary.to_json())?),
        Format::Text => print!("{summary}"),
    }
    Ok(if summary.ok() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}
