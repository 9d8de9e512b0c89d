//! `deinsum run`: plan an einsum, run it on P ranks, report measured against predicted.

pub use super::run_args::{Args, Backend, DTypeParser};
use super::{Format, InputError};
use crate::dense_run::{self, Gathered, Outcome, RunTasks};
use crate::report::{Check, ReferenceError, RunContext, RunSummary};
use anyhow::Context;
use deinsum_exec::with_dtype;
#[cfg(feature = "mpi")]
use deinsum_exec::Communicator;
use deinsum_exec::{ExecError, ExecOptions, Inputs, Scalar};
use deinsum_plan::Plan;
use std::path::PathBuf;
use std::process::ExitCode;

/// The run on `plan.procs` in-process ranks; rank 0's outcome.
fn run_local<T: Scalar>(plan: &Plan, args: &Args) -> anyhow::Result<Outcome> {
    let inputs = inputs_of::<T>(args);
    let world = deinsum_exec::InProcess::new(plan.procs).map_err(ExecError::from)?;
    let cores = deinsum_runtime::cores();
    let tasks = tasks_of(args, args.threads.unwrap_or((cores / plan.procs).max(1)));
    let out = dense_run::run_in_process(&world, plan, &inputs, &tasks).map_err(|e| match e {
        // The executor's errors often name the rank already: say it once.
        deinsum_exec::RankFailure::Error { rank, error } => {
            let text = super::chain_text(&anyhow::Error::new(error));
            let me = format!("rank {rank}: ");
            anyhow::anyhow!("rank {rank}: {}", text.strip_prefix(&me).unwrap_or(&text))
        }
        other => anyhow::anyhow!("{other}"),
    })?;
    out.context("rank 0 returned no report")
}

#[cfg(feature = "mpi")]
fn run_mpi<T: Scalar>(
    einsum: &deinsum_expr::ParsedEinsum,
    args: &Args,
    saved: Option<&Plan>,
) -> anyhow::Result<(crate::Einsum, Option<Outcome>)> {
    let universe = mpi::initialize().context("MPI initialization failed")?;
    let comm = deinsum_exec::mpi::MpiComm::world(&universe);
    let procs = args.procs.unwrap_or(comm.size());
    if comm.size() != procs {
        return Err(InputError(format!(
            "--procs {} but the MPI world has {} ranks",
            procs,
            comm.size()
        ))
        .into());
    }
    // Every rank compiles (or reads) the same plan; the executor checks the hashes.
    let compiled = compile_or_load(einsum, args, procs, saved, "the MPI world")?;
    // Every rank checks its node; all refuse together, so none waits on a refused peer.
    let ranks_on_node = deinsum_exec::preflight::mpi_ranks_on_node().unwrap_or(1);
    let holds_check = args.check && comm.rank() == 0;
    dense_run::preflight_together::<T, _>(compiled.plan(), &comm, ranks_on_node, holds_check)
        .map_err(refusal)?;
    let inputs = inputs_of::<T>(args);
    let tasks = tasks_of(
        args,
        args.threads
            .or_else(super::run_args::omp_threads)
            .unwrap_or(1),
    );
    // A rank's error aborts the whole job with its message: the other ranks may be waiting in
    // a collective that would otherwise never complete.
    let outcome = comm.or_abort(
        dense_run::run_rank(compiled.plan(), &comm, &inputs, &tasks)
            .map_err(|e| super::chain_text(&anyhow::Error::new(e))),
    );
    Ok((compiled, outcome))
}

#[cfg(not(feature = "mpi"))]
#[allow(clippy::extra_unused_type_parameters)] // Same signature as the MPI build's.
fn run_mpi<T: Scalar>(
    _einsum: &deinsum_expr::ParsedEinsum,
    _args: &Args,
    _saved: Option<&Plan>,
) -> anyhow::Result<(crate::Einsum, Option<Outcome>)> {
    Err(InputError(
        "--backend mpi needs a build with the `mpi` feature (cargo build --features mpi)".into(),
    )
    .into())
}

/// A preflight refusal is the user's (exit 2); a failed collective is not.
fn refusal(e: dense_run::DenseRunError) -> anyhow::Error {
    match e {
        dense_run::DenseRunError::Exec(e) => e.into(),
        other => InputError(other.to_string()).into(),
    }
}

/// What each rank does from the flags, with `threads` per rank.
fn tasks_of(args: &Args, threads: usize) -> RunTasks<'_> {
    RunTasks {
        exec: ExecOptions {
            repeat: args.repeat,
            warmup: args.warmup,
            threads,
            gemm: args.gemm,
            ..ExecOptions::default()
        },
        gather: args.check,
        output: args.output.as_deref(),
    }
}

fn inputs_of<T>(args: &Args) -> Inputs<T> {
    match input_paths(args) {
        Some(paths) => Inputs::Npy(paths),
        None => Inputs::Seeded { seed: args.seed },
    }
}

/// The `--inputs` files (the list was checked by [`einsum_of_run`]).
fn input_paths(args: &Args) -> Option<Vec<PathBuf>> {
    args.inputs
        .as_deref()
        .and_then(|raw| super::inputs::parse_list(raw).ok())
}

/// The einsum of the run: extents from the flags, or from the `--inputs` headers when no
/// extent flag is given. Every input file is checked here, before any rank moves data, and
/// each dtype conversion is said once on stderr.
fn einsum_of_run(args: &Args, saved: Option<&Plan>) -> anyhow::Result<deinsum_expr::ParsedEinsum> {
    let expr = args.expr.as_deref().unwrap_or_default();
    if let Some(out) = &args.output {
        super::inputs::check_output_path(out)?;
        super::inputs::check_dense_output_format(out)?;
    }
    let Some(raw) = args.inputs.as_deref() else {
        return match saved {
            Some(p) => Ok(p.einsum.clone()),
            None => super::einsum_from_args(expr, &args.extents),
        };
    };
    let paths = super::inputs::parse_list(raw)?;
    let x = &args.extents;
    let einsum = if let Some(p) = saved {
        p.einsum.clone()
    } else if x.sizes.is_none() && x.size.is_none() && x.shapes.is_none() {
        super::inputs::einsum_from_files(expr, &paths)?
    } else {
        super::einsum_from_args(expr, &args.extents)?
    };
    let notes = super::inputs::check_files(&einsum, &paths, args.dtype)?;
    if let Some(out) = &args.output {
        super::inputs::check_output(out, &paths)?;
    }
    if super::launch_rank().unwrap_or(0) == 0 {
        for n in notes {
            eprintln!("{n}");
        }
    }
    Ok(einsum)
}

/// The saved plan (refused when it is for another number of ranks than `procs`, which comes
/// from `what`), else the plan compiled for `procs` ranks.
fn compile_or_load(
    einsum: &deinsum_expr::ParsedEinsum,
    args: &Args,
    procs: usize,
    saved: Option<&Plan>,
    what: &str,
) -> anyhow::Result<crate::Einsum> {
    match (saved, &args.plan) {
        (Some(plan), Some(path)) => {
            super::plan_file::check_procs(plan, path, procs, what)?;
            Ok(crate::Einsum::from_plan(plan.clone()))
        }
        _ => compile(einsum, args, procs),
    }
}

/// Compiles the plan for `procs` ranks; planner errors are the user's (exit 2).
fn compile(
    einsum: &deinsum_expr::ParsedEinsum,
    args: &Args,
    procs: usize,
) -> anyhow::Result<crate::Einsum> {
    let opts = crate::Options {
        procs,
        dtype: args.dtype,
        mem: args.mem,
        overlap: !args.no_overlap,
        machine: args.run_machine(procs)?,
        objective: super::calibrate::objective(&args.objective)?,
        inputs_anywhere: !args.inputs_canonical,
        ..crate::Options::default()
    };
    crate::Einsum::compile_parsed(einsum, &opts).map_err(|e| match e {
        crate::Error::Plan(m) => anyhow::Error::new(InputError(m.to_string())),
        other => other.into(),
    })
}

/// Runs the subcommand.
pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    // A library this binary lacks is the user's flag to change: exit 2, before anything runs.
    args.gemm
        .check()
        .map_err(|e| InputError(format!("--gemm {}: {e}", args.gemm)))?;
    if super::sparse::wanted(&args) {
        return super::sparse::run(&args);
    }
    if args.procs == Some(0) {
        return Err(InputError("--procs must be at least 1".into()).into());
    }
    if args.repeat == 0 {
        return Err(InputError("--repeat must be at least 1".into()).into());
    }
    if args.threads == Some(0) {
        return Err(InputError("--threads must be at least 1".into()).into());
    }
    // A bad machine file or objective is refused before any rank starts.
    super::calibrate::load_machine(args.machine.as_deref())?;
    super::calibrate::objective(&args.objective)?;
    let saved = match &args.plan {
        Some(path) => Some(super::plan_file::load(path)?),
        None => None,
    };
    let einsum = einsum_of_run(&args, saved.as_ref())?;
    let (compiled, outcome) = match args.backend_of()? {
        Backend::Local => {
            let procs = args.procs.or(saved.as_ref().map(|p| p.procs)).unwrap_or(1);
            deinsum_exec::preflight::check_in_process_ranks(procs)
                .map_err(|e| InputError(e.to_string()))?;
            let compiled =
                compile_or_load(&einsum, &args, procs, saved.as_ref(), "this run (--procs)")?;
            let outcome = with_dtype!(args.dtype, T => {
                dense_run::preflight::<T>(compiled.plan(), procs, args.check).map_err(refusal)?;
                run_local::<T>(compiled.plan(), &args)?
            });
            (compiled, Some(outcome))
        }
        Backend::Mpi => with_dtype!(args.dtype, T => run_mpi::<T>(&einsum, &args, saved.as_ref())?),
    };
    let plan = compiled.plan();
    // Only rank 0 reports.
    let Some(outcome) = outcome else {
        return Ok(ExitCode::SUCCESS);
    };
    let check = if args.check {
        let got = outcome.gathered.as_ref().context("no gathered output")?;
        Some(check_result(plan, &args, got)?)
    } else {
        None
    };
    let predicted = predicted_seconds(plan, &args)?;
    if let Some(path) = &args.html {
        let extras = super::html::Extras {
            predicted_seconds: (!predicted.is_empty()).then(|| predicted.clone()),
            ..Default::default()
        };
        let page = super::html::run_page(plan, &extras, &outcome.reports);
        super::html::write_file(path, &page)?;
    }
    let context = RunContext {
        backend: args.backend_of().unwrap_or(Backend::Local).into(),
        dtype: args.dtype,
        warmup: args.warmup,
    };
    let summary = RunSummary::new(plan, &outcome.reports, &predicted, context).with_check(check);
    match args.format {
        Format::Text => print!("{summary}"),
        Format::Json => println!("{}", serde_json::to_string_pretty(&summary)?),
    }
    if let Some(c) = &summary.check {
        if !c.pass {
            return Ok(ExitCode::from(1));
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// Predicted seconds per step: with `--machine` for a saved plan those of that machine, else
/// the plan's own.
fn predicted_seconds(plan: &Plan, args: &Args) -> anyhow::Result<Vec<f64>> {
    let machine = match (&args.machine, &args.plan) {
        (Some(_), Some(_)) => Some(super::calibrate::load_machine(args.machine.as_deref())?),
        _ => None,
    };
    Ok(dense_run::predicted_seconds(plan, machine.as_ref()))
}

/// The gathered output against the serial reference of the same inputs.
fn check_result(plan: &Plan, args: &Args, got: &Gathered) -> anyhow::Result<Check> {
    let checked = with_dtype!(args.dtype, T => got.check(plan, &inputs_of::<T>(args)));
    checked.map_err(|e| match e {
        e @ ReferenceError::OutOfMemory { .. } => {
            anyhow::Error::new(e).context("the serial reference of --check")
        }
        other => other.into(),
    })
}
