//! `deinsum run`'s flags: the clap arguments, the backend and dtype choices, and the sparse
//! distribution scheme, shared by the dense run ([`super::run`]) and the sparse one
//! ([`super::sparse`]).

use super::{Format, InputError};
use deinsum_exec::gemm::Gemm;
use deinsum_plan::DType;
use deinsum_sparse::einsum as se;
use std::path::PathBuf;

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
    /// Inputs (generated or --inputs files) are read in any layout: each rank reads its block
    /// of an input where the input's first use computes, or canonically where that predicts
    /// faster. The default; the flag is kept for scripts that give it.
    #[arg(long)]
    pub inputs_in_place: bool,
    /// Start every input in the canonical distribution (C-order blocks, first index over the
    /// ranks) and move it from there, as plans did before inputs were read where they
    /// compute (for A/B comparisons).
    #[arg(long, conflicts_with_all = ["inputs_in_place", "plan"])]
    pub inputs_canonical: bool,
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
    /// refused naming the size), .mtx (Matrix Market coordinate real general, complex general
    /// in a complex run, matrices), .tns (FROSTT, any order, real runs) or .npz (SciPy's
    /// save_npz CSR, matrices; complex128 data in a complex run): a sparse result
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
    #[arg(long, value_enum, default_value_t = Scheme::Auto)]
    pub spmv_scheme: Scheme,
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

impl Args {
    /// The backend of the run: `--backend`, else MPI when an MPI launcher started this process
    /// (its environment says so) and the build has MPI. A launched world of several ranks in a
    /// build without MPI is refused: it would run that many independent in-process jobs.
    pub(super) fn backend_of(&self) -> anyhow::Result<Backend> {
        if let Some(b) = self.backend {
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

    /// The machine a run of `procs` ranks plans for: `--machine`'s file, else the built-in default
    /// as one node with this host's cores. Either way the ranks are placed as the run places them
    /// (in-process: all on this node; under a launcher: the ranks it started on this node), since
    /// a file's `ranks_per_node` describes a job on its machine, not this run: 4 in-process ranks
    /// on a 2-core host were predicted as two nodes of 2, at half the time they took.
    pub(super) fn run_machine(&self, procs: usize) -> anyhow::Result<deinsum_plan::Machine> {
        let m = super::calibrate::load_machine(self.machine.as_deref())?;
        let on_node = super::launch_local_size()
            .unwrap_or(procs)
            .clamp(1, procs.max(1));
        if self.machine.is_some() {
            return Ok(m.with_ranks_per_node(on_node));
        }
        // The node's cores, not this process's: under mpirun each rank is bound to its own.
        Ok(m.on_host(super::node_cores(), on_node))
    }
}

/// How SpMV/SpMM with a square sparse matrix is distributed (`--spmv-scheme`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum Scheme {
    /// The one whose plan moves fewer words in all (the row cut on a tie).
    #[default]
    Auto,
    /// Rows cut by nonzeros; each rank fetches the x rows its nonzeros touch.
    Rows,
    /// Each cross nonzero at its row's owner, which fetches x, or its column's, which pushes
    /// a partial y, as a minimum vertex cover chooses ([`deinsum_sparse::fine`]).
    Fine,
}

impl From<Scheme> for se::Scheme {
    fn from(s: Scheme) -> Self {
        match s {
            Scheme::Auto => se::Scheme::Auto,
            Scheme::Rows => se::Scheme::Rows,
            Scheme::Fine => se::Scheme::Fine,
        }
    }
}

impl From<Backend> for crate::report::Backend {
    fn from(b: Backend) -> Self {
        match b {
            Backend::Local => crate::report::Backend::Local,
            Backend::Mpi => crate::report::Backend::Mpi,
        }
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
