//! `deinsum run`: plan an einsum, run it on P ranks, report measured against predicted.

use super::{Format, InputError};
use crate::report::{Check, ReferenceError, RunContext, RunSummary};
use anyhow::Context;
use deinsum_exec::gemm::Gemm;
use deinsum_exec::with_dtype;
use deinsum_exec::{
    execute_measured, gather_reports, Communicator, ExecError, ExecOptions, Inputs, RunReport,
    Scalar,
};
use deinsum_plan::{DType, Plan};
use std::path::PathBuf;
use std::process::ExitCode;

/// `--gemm`'s parser: the names of [`Gemm`], which clap lists and checks.
fn gemm_parser() -> impl clap::builder::TypedValueParser<Value = Gemm> {
    use clap::builder::TypedValueParser;
    clap::builder::PossibleValuesParser::new(Gemm::ALL.map(Gemm::name))
        .try_map(|name| name.parse::<Gemm>())
}

/// `--dtype`'s parser: the names of [`DType`] ([`DType::ALL`]), which clap lists and checks
/// as it does an enum's.
#[derive(Clone, Copy, Debug)]
pub struct DTypeParser;

impl clap::builder::TypedValueParser for DTypeParser {
    type Value = DType;

    fn parse_ref(
        &self,
        cmd: &clap::Command,
        arg: Option<&clap::Arg>,
        value: &std::ffi::OsStr,
    ) -> Result<DType, clap::Error> {
        // clap's own check first, so a wrong name gets its usual message and list.
        let names = clap::builder::PossibleValuesParser::new(DType::ALL.map(DType::name));
        let name = names.parse_ref(cmd, arg, value)?;
        name.parse()
            .map_err(|e| clap::Error::raw(clap::error::ErrorKind::InvalidValue, e))
    }

    fn possible_values(
        &self,
    ) -> Option<Box<dyn Iterator<Item = clap::builder::PossibleValue> + '_>> {
        Some(Box::new(DType::ALL.into_iter().map(|d| {
            clap::builder::PossibleValue::new(d.name()).help(d.description())
        })))
    }
}

/// Where the ranks run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Backend {
    /// P ranks as threads of this process.
    Local,
    /// The MPI ranks this process is one of (build with `--features mpi`, start with mpirun).
    Mpi,
}

/// Arguments of `deinsum run`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// The einsum, such as "ijk,ja,ka,al->il" (not with --plan).
    #[arg(required_unless_present = "plan")]
    pub expr: Option<String>,
    #[command(flatten)]
    pub extents: super::ExtentArgs,
    /// Run this plan file (from `deinsum plan ... -o FILE`) exactly, instead of planning.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["expr", "sizes", "size", "shapes", "mem"])]
    pub plan: Option<PathBuf>,
    /// Number of ranks (default 1 in-process; with --backend mpi the MPI world size, which it
    /// must equal when given).
    #[arg(long)]
    pub procs: Option<usize>,
    /// Per-rank memory budget in words.
    #[arg(long)]
    pub mem: Option<u64>,
    /// Do not overlap communication with computation (plan without pipelined phases, as
    /// before overlap; for A/B runs).
    #[arg(long, conflicts_with = "plan")]
    pub no_overlap: bool,
    /// Seed of the generated inputs.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Also compute the result serially and compare (exit 1 above 1e-10 relative for f64 and
    /// c128, 1e-4 for f32 and c64; complex values by the magnitude of the difference).
    #[arg(long)]
    pub check: bool,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Text)]
    pub format: Format,
    /// Element type.
    #[arg(long, value_parser = DTypeParser, default_value_t = DType::F64)]
    pub dtype: DType,
    /// Backend [default: mpi when started by an MPI launcher (mpirun, srun) in a build with
    /// the `mpi` feature, else local].
    #[arg(long, value_enum)]
    pub backend: Option<Backend>,
    /// Input operands as .npy files, comma-separated, one per operand (default: generated).
    /// Without an extent flag the extents come from the files' headers; any float, integer or
    /// bool dtype, C or Fortran order, is read (converted to --dtype as NumPy would).
    #[arg(long, value_name = "A.npy,B.npy,...")]
    pub inputs: Option<String>,
    /// Write the result to this file, in the format its extension names. Without a sparse
    /// operand: .npy only (each rank writes its own block). With one: .npy (a sparse result,
    /// SDDMM or SpGEMM, densified when its dense size fits this node's available memory, else
    /// refused naming the size), .mtx (Matrix Market coordinate real general, matrices),
    /// .tns (FROSTT, any order) or .npz (SciPy's save_npz CSR, matrices): a sparse result
    /// writes every stored entry of its pattern (explicit zeros too), a dense one (SpMM,
    /// SpMV, MTTKRP) its nonzeros. Another extension is refused (exit 2).
    #[arg(long, value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// Also write the plan and the run (per-rank timeline, measured against predicted) as one
    /// self-contained HTML page to this file.
    #[arg(long, value_name = "FILE")]
    pub html: Option<PathBuf>,
    /// Timed runs of the plan's steps (inputs are read once, before them); the report gives
    /// the minimum and the median over them (per step and in all, the slowest rank).
    #[arg(long, default_value_t = 1)]
    pub repeat: usize,
    /// Untimed runs before the timed ones.
    #[arg(long, default_value_t = 0)]
    pub warmup: usize,
    /// Threads per rank (default: in-process max(1, cores / procs); under MPI
    /// OMP_NUM_THREADS, else 1).
    #[arg(long)]
    pub threads: Option<usize>,
    /// GEMM library: faer (built in) or blas (the system CBLAS, in a build with the cargo
    /// feature `blas`; else refused, exit 2).
    #[arg(long, value_parser = gemm_parser(), default_value = "faer")]
    pub gemm: Gemm,
    /// Operands K,.. are sparse (generated with --density or --rmat unless --inputs gives a
    /// .mtx, .tns or .npz file); planned from their pattern with a halo exchange.
    #[arg(long, value_name = "K", value_delimiter = ',')]
    pub sparse: Vec<usize>,
    /// Density of the generated sparse operand (each entry nonzero with this probability).
    #[arg(long, value_name = "D")]
    pub density: Option<f64>,
    /// Generate the sparse operand as Graph500's R-MAT graph of 2^SCALE vertices.
    #[arg(long, value_name = "SCALE")]
    pub rmat: Option<u32>,
    /// How a square sparse matrix times a dense operand (SpMV `ij,j->i`, SpMM) is
    /// distributed: `rows` (rows cut by nonzeros, x's halo fetched), `fine` (each cross nonzero
    /// at its row's owner, which fetches x, or its column's, which pushes a partial y, as a
    /// minimum vertex cover of the cross nonzeros chooses), or `auto`
    /// (the one whose plan moves fewer words in all; rows on a tie).
    #[arg(long, value_enum, default_value_t = super::sparse::Scheme::Auto)]
    pub spmv_scheme: super::sparse::Scheme,
    /// Machine model file the predicted seconds are for (docs/machine.md) [default: the
    /// built-in model, or with --plan the plan's own prediction].
    #[arg(long, value_name = "FILE")]
    pub machine: Option<PathBuf>,
    /// What the planner minimises (as `deinsum plan --objective`).
    #[arg(
        long,
        value_name = "OBJ",
        default_value = "time",
        conflicts_with = "plan"
    )]
    pub objective: String,
}

/// What rank 0 knows at the end of a run.
struct Outcome {
    reports: Vec<RunReport>,
    /// The gathered output (only with --check).
    gathered: Option<Gathered>,
}

/// A gathered output widened to double precision of its kind, as the check compares it.
enum Gathered {
    /// A real run's output, as f64.
    Real(Vec<f64>),
    /// A complex run's output, as complex f64.
    Complex(Vec<deinsum_exec::scalar::Complex64>),
}

impl Gathered {
    fn of<T: Scalar>(v: &[T]) -> Self {
        if T::DTYPE.is_complex() {
            Gathered::Complex(
                v.iter()
                    .map(|x| {
                        let (re, im) = x.parts();
                        deinsum_exec::scalar::Complex64::new(re, im)
                    })
                    .collect(),
            )
        } else {
            Gathered::Real(v.iter().map(|x| x.to_f64()).collect())
        }
    }
}

/// The work of one rank, generic over the backend.
fn rank_main<T: Scalar, C: Communicator>(
    plan: &Plan,
    comm: &C,
    inputs: &Inputs<T>,
    opts: &ExecOptions,
    gather: bool,
    output: Option<&PathBuf>,
) -> anyhow::Result<Option<Outcome>> {
    let (t, rep) = execute_measured(plan, comm, inputs, opts)?;
    if let Some(path) = output {
        let local: &[T] = t.local.as_ref().map_or(&[], |l| &l.data);
        deinsum_exec::npy::write_distributed(path, comm, &t.tensor.shape, &t.dist, local)?;
    }
    let g = if gather { t.gather(comm)? } else { None };
    let reports = gather_reports(comm, &rep)?;
    Ok(reports.map(|reports| Outcome {
        reports,
        gathered: g.map(|v| Gathered::of(&v)),
    }))
}

fn run_local<T: Scalar>(plan: &Plan, args: &Args) -> anyhow::Result<Outcome> {
    let inputs = inputs_of::<T>(args);
    let world = deinsum_exec::InProcess::new(plan.procs).map_err(ExecError::from)?;
    let cores = deinsum_runtime::cores();
    let opts = exec_options(args, args.threads.unwrap_or((cores / plan.procs).max(1)));
    let outs = world
        .run(|comm| rank_main(plan, comm, &inputs, &opts, args.check, args.output.as_ref()))
        .map_err(|e| match e {
            // The executor's errors often name the rank already: say it once.
            deinsum_exec::RankFailure::Error { rank, error } => {
                let text = super::chain_text(&error);
                let me = format!("rank {rank}: ");
                anyhow::anyhow!("rank {rank}: {}", text.strip_prefix(&me).unwrap_or(&text))
            }
            other => anyhow::anyhow!("{other}"),
        })?;
    outs.into_iter()
        .flatten()
        .next()
        .context("rank 0 returned no report")
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
    let verdict = preflight::<T>(compiled.plan(), args, ranks_on_node, comm.rank() == 0);
    let mut refused = [u64::from(verdict.is_err())];
    comm.all_reduce_max_u64(&mut refused)
        .map_err(ExecError::from)?;
    if refused[0] > 0 {
        return Err(match verdict {
            Err(e) => e,
            Ok(()) => {
                InputError("another rank's node cannot fit the run (see its message)".into()).into()
            }
        });
    }
    let inputs = inputs_of::<T>(args);
    let opts = exec_options(args, args.threads.or_else(omp_threads).unwrap_or(1));
    // A rank's error aborts the whole job with its message: the other ranks may be waiting in
    // a collective that would otherwise never complete.
    let outcome = comm.or_abort(
        rank_main(
            compiled.plan(),
            &comm,
            &inputs,
            &opts,
            args.check,
            args.output.as_ref(),
        )
        .map_err(|e| super::chain_text(&e)),
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

/// Refuses, before anything is allocated, a run whose ranks on this node would not fit its
/// available memory (with `holds_check`, also the serial reference of `--check`).
fn preflight<T: Scalar>(
    plan: &Plan,
    args: &Args,
    ranks_on_node: usize,
    holds_check: bool,
) -> anyhow::Result<()> {
    use deinsum_exec::preflight as pf;
    let Some(avail) = pf::available_memory() else {
        return Ok(());
    };
    let extra_words = if args.check && holds_check {
        check_words(plan)
    } else {
        0
    };
    let demand = pf::NodeDemand {
        dtype: T::DTYPE,
        ranks_on_node,
        extra_words,
    };
    let Err(e) = pf::check_memory(plan, demand, avail) else {
        return Ok(());
    };
    // Say whether the planner can meet the budget that would fit, rather than leave it a guess.
    let tried = match &e {
        pf::PreflightError::NotEnoughMemory {
            fit_mem: Some(w), ..
        } => {
            let mut o = crate::Options::procs(plan.procs);
            o.mem = Some(*w);
            match crate::Einsum::compile_parsed(&plan.einsum, &o) {
                Ok(c) => format!(
                    " (the planner meets --mem {w}: peak {} words per rank with buffers)",
                    c.plan().prediction.max_peak_memory_with_buffers
                ),
                Err(err) => format!(" (but no plan meets --mem {w}: {err})"),
            }
        }
        _ => String::new(),
    };
    Err(InputError(format!("{e}{tried}")).into())
}

/// Refuses an `--output` of a run without a sparse operand that is not a `.npy` file: its ranks
/// write their own blocks of one dense array, and a coordinate file (`.mtx`, `.tns`, `.npz`)
/// would need the whole result on one rank.
fn check_dense_output_format(out: &std::path::Path) -> Result<(), InputError> {
    use deinsum_sparse::io::OutputFormat;
    match OutputFormat::of(out) {
        Ok(OutputFormat::Npy) => Ok(()),
        Ok(_) => Err(InputError(format!(
            "--output {}: .mtx, .tns and .npz are written for runs with a sparse operand; this einsum's result is dense and its ranks write their blocks of a .npy file",
            out.display()
        ))),
        Err(e) => Err(InputError(format!("--output {e}"))),
    }
}

/// Words the serial check holds at once: every input whole and the output twice (gathered and
/// reference).
fn check_words(plan: &Plan) -> u128 {
    let size = |t: &deinsum_plan::Tensor| t.shape.iter().map(|&n| n as u128).product::<u128>();
    plan.tensors
        .iter()
        .map(|t| match t.kind {
            deinsum_plan::TensorKind::Input(_) => size(t),
            deinsum_plan::TensorKind::Output => 2 * size(t),
            deinsum_plan::TensorKind::Intermediate => 0,
        })
        .sum()
}

/// The executor's options from the flags, with `threads` per rank.
fn exec_options(args: &Args, threads: usize) -> ExecOptions {
    ExecOptions {
        repeat: args.repeat,
        warmup: args.warmup,
        threads,
        gemm: args.gemm,
        ..ExecOptions::default()
    }
}

/// Threads per rank from OMP_NUM_THREADS (the usual way to say it under mpirun), if set.
#[cfg(feature = "mpi")]
pub(super) fn omp_threads() -> Option<usize> {
    std::env::var("OMP_NUM_THREADS")
        .ok()
        .and_then(|v| v.trim().parse::<usize>().ok())
        .filter(|&n| n > 0)
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
        check_dense_output_format(out)?;
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
        machine: run_machine(args, procs)?,
        objective: super::calibrate::objective(&args.objective)?,
        ..crate::Options::default()
    };
    crate::Einsum::compile_parsed(einsum, &opts).map_err(|e| match e {
        crate::Error::Plan(m) => anyhow::Error::new(InputError(m.to_string())),
        other => other.into(),
    })
}

/// The backend of the run: `--backend`, else MPI when an MPI launcher started this process
/// (its environment says so) and the build has MPI. A launched world of several ranks in a
/// build without MPI is refused: it would run that many independent in-process jobs.
fn backend_of(args: &Args) -> anyhow::Result<Backend> {
    if let Some(b) = args.backend {
        return Ok(b);
    }
    match super::launch_size() {
        Some(_) if cfg!(feature = "mpi") => Ok(Backend::Mpi),
        Some(n) if n > 1 => Err(InputError(format!(
            "started by an MPI launcher as one of {n} ranks, but this deinsum is built without \
             the `mpi` feature: each rank would run its own in-process job (build with \
             --features mpi, or run without mpirun and use --procs {n})"
        ))
        .into()),
        _ => Ok(Backend::Local),
    }
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
    let (compiled, outcome) = match backend_of(&args)? {
        Backend::Local => {
            let procs = args.procs.or(saved.as_ref().map(|p| p.procs)).unwrap_or(1);
            deinsum_exec::preflight::check_in_process_ranks(procs)
                .map_err(|e| InputError(e.to_string()))?;
            let compiled =
                compile_or_load(&einsum, &args, procs, saved.as_ref(), "this run (--procs)")?;
            let outcome = with_dtype!(args.dtype, T => {
                preflight::<T>(compiled.plan(), &args, procs, true)?;
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
        backend: backend_of(&args).unwrap_or(Backend::Local).into(),
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

/// Predicted seconds per step: the plan's own, or with `--machine` (for a saved plan) those
/// of that machine; never a re-plan.
fn predicted_seconds(plan: &Plan, args: &Args) -> anyhow::Result<Vec<f64>> {
    if args.machine.is_some() && args.plan.is_some() {
        let m = super::calibrate::load_machine(args.machine.as_deref())?;
        return Ok(
            deinsum_plan::time::TimeModel::new(&m, plan.procs, plan.dtype).step_seconds(plan),
        );
    }
    Ok(plan.prediction.step_seconds.clone())
}

/// The gathered output against the serial reference of the same inputs (the library's check
/// policy: [`Check::against_reference`]).
fn check_result(plan: &Plan, args: &Args, got: &Gathered) -> anyhow::Result<Check> {
    let checked = with_dtype!(args.dtype, T => {
        let inputs = inputs_of::<T>(args);
        match got {
            Gathered::Real(v) => Check::against_reference(plan, &inputs, v),
            Gathered::Complex(v) => Check::against_reference(plan, &inputs, v),
        }
    });
    checked.map_err(|e| match e {
        e @ ReferenceError::OutOfMemory { .. } => {
            anyhow::Error::new(e).context("the serial reference of --check")
        }
        other => other.into(),
    })
}

impl From<Backend> for crate::report::Backend {
    fn from(b: Backend) -> Self {
        match b {
            Backend::Local => crate::report::Backend::Local,
            Backend::Mpi => crate::report::Backend::Mpi,
        }
    }
}

/// The machine a run of `procs` ranks plans for: `--machine`'s file, else the built-in default
/// as one node with this host's cores. Either way the ranks are placed as the run places them
/// (in-process: all on this node; under a launcher: the ranks it started on this node), since
/// a file's `ranks_per_node` describes a job on its machine, not this run: 4 in-process ranks
/// on a 2-core host were predicted as two nodes of 2, at half the time they took.
fn run_machine(args: &Args, procs: usize) -> anyhow::Result<deinsum_plan::Machine> {
    let m = super::calibrate::load_machine(args.machine.as_deref())?;
    let on_node = super::launch_local_size()
        .unwrap_or(procs)
        .clamp(1, procs.max(1));
    if args.machine.is_some() {
        return Ok(m.with_ranks_per_node(on_node));
    }
    // The node's cores, not this process's: under mpirun each rank is bound to its own.
    Ok(m.on_host(super::node_cores(), on_node))
}
