//! deinsum: compile an einsum into a distributed, communication-optimal execution plan and run
//! it, on in-process ranks or on MPI.
//!
//! [`Einsum::compile`] parses the expression, finds a contraction path, fuses and bounds it
//! (SOAP) and plans it for P ranks; [`Einsum::run`] executes the plan on any
//! [`Communicator`] and returns this rank's part of the distributed output;
//! [`Einsum::run_local`] runs it on P in-process ranks and gathers the result.
//!
//! ```
//! use deinsum::{Einsum, Options, Inputs};
//! use deinsum::expr::ExtentSpec;
//!
//! // C[i,k] = sum_j A[i,j] B[j,k], 3 ranks, every extent 6.
//! let spec = ExtentSpec { default: Some(6), ..ExtentSpec::default() };
//! let mm = Einsum::compile("ij,jk->ik", &spec, &Options::procs(3)).unwrap();
//! let a: Vec<f64> = (0..36).map(|x| x as f64).collect();
//! let id: Vec<f64> = (0..36).map(|x| if x % 7 == 0 { 1.0 } else { 0.0 }).collect();
//! let c = mm.run_local(&Inputs::Full(vec![a.clone(), id])).unwrap();
//! assert_eq!(c, a); // A times the identity
//! ```

pub mod cli;
pub mod dense_run;
pub mod empty;
pub mod report;
pub mod session;
pub use session::{DistArray, EinsumStats, OutLayout, Session, SessionError};
pub mod sparse_einsum;
pub mod sparse_summary;

pub use deinsum_exec as exec;
pub use deinsum_expr as expr;
pub use deinsum_path as path;
pub use deinsum_plan as plan;
pub use deinsum_soap as soap;
pub use deinsum_sparse as sparse;
pub use sparse_einsum::{Operand, SparseEinsum, SparseOptions};

pub use deinsum_exec::{
    with_dtype, Communicator, DistTensor, ExecError, ExecOptions, Gemm, InProcess, Inputs,
    RunReport, Scalar,
};
pub use deinsum_plan::DType;

use deinsum_plan::Plan;

/// What can go wrong compiling or running an einsum.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The expression or its extents are invalid.
    #[error(transparent)]
    Expr(#[from] deinsum_expr::ExprError),
    /// No plan could be built (for instance the memory budget is too small).
    #[error("planning failed: {0}")]
    Plan(#[from] deinsum_plan::PlanError),
    /// The run failed.
    #[error(transparent)]
    Exec(#[from] ExecError),
    /// The run cannot start here (not enough memory on the node, too many in-process ranks);
    /// refused before anything is allocated.
    #[error(transparent)]
    Preflight(#[from] deinsum_exec::preflight::PreflightError),
    /// A sparse operand cannot be used: a form that is not built, shapes that do not fit,
    /// a sparse run that failed.
    #[error(transparent)]
    Sparse(#[from] deinsum_sparse::SparseError),
    /// A rank of an in-process run failed (its error, or its panic).
    #[error("{0}")]
    Rank(String),
}

/// Compilation options.
#[derive(Clone, Debug)]
pub struct Options {
    /// Number of ranks P.
    pub procs: usize,
    /// Per-rank memory budget S in words (`None`: unlimited).
    pub mem: Option<u64>,
    /// Path search options.
    pub path: deinsum_path::PathOptions,
    /// Overlap communication with computation where it pays (default true; see
    /// [`deinsum_plan::overlap`]); false plans without pipelined phases.
    pub overlap: bool,
    /// The machine the plan's seconds are predicted for (default: the built-in model; read
    /// a file with [`deinsum_plan::Machine::from_json`]).
    pub machine: deinsum_plan::Machine,
    /// What the planner minimises over its candidate paths (default: predicted time).
    pub objective: deinsum_plan::Objective,
    /// The element type the plan is for (default f64): sizes its predicted bytes and seconds
    /// ([`deinsum_plan::Plan::dtype`]). A plan runs in any type; this one is what it predicts.
    pub dtype: DType,
    /// Where each operand's data is before the run, by operand number
    /// ([`deinsum_plan::PlanOptions::sources`]); an operand the list does not reach is
    /// [`deinsum_plan::Source::Anywhere`] under `inputs_anywhere`, else `Canonical`.
    pub sources: Vec<deinsum_plan::Source>,
    /// Operands [`Options::sources`] does not list can be read in any layout (generated,
    /// from `.npy`, lent whole): each is read where its first use computes, or canonically
    /// where that predicts faster. True by default; false starts them in the canonical
    /// distribution (`deinsum plan --inputs-canonical`).
    pub inputs_anywhere: bool,
    /// How many candidate trees are planned (default: all of them;
    /// [`deinsum_plan::TreeSearch::WhenItPays`] keeps the path search's tree for an einsum
    /// whose plan predicts under a millisecond, for callers that compile to run at once).
    pub tree_search: deinsum_plan::TreeSearch,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            procs: 1,
            mem: None,
            path: deinsum_path::PathOptions::default(),
            overlap: true,
            machine: deinsum_plan::Machine::default(),
            objective: deinsum_plan::Objective::default(),
            dtype: DType::default(),
            sources: Vec::new(),
            inputs_anywhere: true,
            tree_search: deinsum_plan::TreeSearch::Full,
        }
    }
}

impl Options {
    /// Default options for `p` ranks.
    pub fn procs(p: usize) -> Self {
        Options {
            procs: p,
            ..Options::default()
        }
    }

    /// Default options for `p` in-process ranks on this host: the built-in machine as one
    /// node with this host's cores holding every rank, as `deinsum run` plans without
    /// `--machine` (on a full node overlap is left out, since no spare core hides a copy).
    pub fn procs_on_this_host(p: usize) -> Self {
        Options {
            procs: p,
            machine: deinsum_plan::Machine::default().on_host(cli::node_cores(), p),
            ..Options::default()
        }
    }
}

/// The free buffers in-process runs of [`Einsum::run_local_borrowed`] leave for the next
/// call (one list per rank number, bounded by the last plan's predicted peak per rank; the
/// lists of ranks it does not have are freed).
/// Where a rank copies its output block in [`Einsum::run_local_borrowed`]: the block's start in
/// the whole and its part of the whole (taken by the rank).
type Slab<'a, T> = std::sync::Mutex<Option<(usize, &'a mut [T])>>;

fn kept_buffers() -> &'static deinsum_exec::buffers::KeptBuffers {
    static KEPT: std::sync::OnceLock<deinsum_exec::buffers::KeptBuffers> =
        std::sync::OnceLock::new();
    KEPT.get_or_init(deinsum_exec::buffers::KeptBuffers::new)
}

/// Frees the buffers that in-process runs keep for the next call and ends their ranks' kept
/// thread pools (see [`Einsum::run_local_borrowed`]); returns the words freed.
pub fn release_buffers() -> usize {
    let k = kept_buffers();
    let words = k.words();
    k.clear();
    words
}

/// A compiled einsum: the distributed plan, ready to run.
#[derive(Clone, Debug)]
pub struct Einsum {
    plan: Plan,
    /// Each rank's predicted peak (`Plan::peak_of`), worked out on the first in-process run
    /// that needs it: walking the memory model cost about 40 µs a rank on every call.
    peaks: Vec<std::sync::OnceLock<(u64, u64)>>,
}

/// Builds the plan: path search, SOAP fusion, then the planner.
fn build_plan(einsum: &deinsum_expr::ParsedEinsum, o: &Options) -> Result<Plan, Error> {
    let opts = deinsum_plan::PlanOptions {
        procs: o.procs,
        mem: o.mem,
        path: o.path.clone(),
        overlap: o.overlap,
        machine: o.machine.clone(),
        objective: o.objective,
        dtype: o.dtype,
        inputs_in_place: o.inputs_anywhere,
        sources: o.sources.clone(),
        tree_search: o.tree_search,
        ..deinsum_plan::PlanOptions::default()
    };
    if empty::has_empty_extent(einsum) {
        return empty::plan_empty(einsum, |e| deinsum_plan::build(e, &opts));
    }
    Ok(deinsum_plan::build(einsum, &opts)?)
}

impl Einsum {
    /// Parses `expr` with the extents of `extents` and plans it with `options`.
    pub fn compile(
        expr: &str,
        extents: &deinsum_expr::ExtentSpec,
        options: &Options,
    ) -> Result<Self, Error> {
        let e = deinsum_expr::parse(expr, extents)?;
        Self::compile_parsed(&e, options)
    }

    /// Plans an already parsed einsum.
    pub fn compile_parsed(
        einsum: &deinsum_expr::ParsedEinsum,
        options: &Options,
    ) -> Result<Self, Error> {
        Ok(Self::from_plan(build_plan(einsum, options)?))
    }

    /// Wraps an existing plan (one read from JSON, or built by hand).
    pub fn from_plan(plan: Plan) -> Self {
        let peaks = (0..plan.procs)
            .map(|_| std::sync::OnceLock::new())
            .collect();
        Einsum { plan, peaks }
    }

    /// Rank `me`'s predicted peak, `Plan::peak_of(me)`, computed once per compiled plan.
    fn peak_of(&self, me: usize) -> Option<(u64, u64)> {
        self.peaks
            .get(me)
            .map(|p| *p.get_or_init(|| self.plan.peak_of(me)))
    }

    /// The plan.
    pub fn plan(&self) -> &Plan {
        &self.plan
    }

    /// Runs the plan on `world` (every rank calls it) and returns this rank's part of the
    /// distributed output.
    pub fn run<T: Scalar, C: Communicator>(
        &self,
        world: &C,
        inputs: &Inputs<T>,
    ) -> Result<DistTensor<T>, Error> {
        Ok(deinsum_exec::execute(&self.plan, world, inputs)?)
    }

    /// [`Einsum::run`] that also reports each step's time and measured volume.
    pub fn run_measured<T: Scalar, C: Communicator>(
        &self,
        world: &C,
        inputs: &Inputs<T>,
        options: &ExecOptions,
    ) -> Result<(DistTensor<T>, RunReport), Error> {
        Ok(deinsum_exec::execute_measured(
            &self.plan, world, inputs, options,
        )?)
    }

    /// Checks, before anything is allocated, that `ranks_on_node` ranks of this plan fit the
    /// memory this node has available (`/proc/meminfo`; no check where that is unknown, nor
    /// for a run needing at most [`deinsum_exec::preflight::UNCHECKED_BYTES`]).
    pub fn check_fits<T: Scalar>(&self, ranks_on_node: usize) -> Result<(), Error> {
        use deinsum_exec::preflight;
        let demand = preflight::NodeDemand {
            dtype: T::DTYPE,
            ranks_on_node,
            extra_words: 0,
        };
        if preflight::needed_bytes(&self.plan, demand) <= preflight::UNCHECKED_BYTES {
            return Ok(());
        }
        if let Some(avail) = preflight::available_memory() {
            preflight::check_memory(&self.plan, demand, avail)?;
        }
        Ok(())
    }

    /// [`Einsum::run_local`] on whole operands the caller lends (storage layout, row-major over
    /// `Operand::dims`) with the executor's `options` (threads per rank, a cancel flag): no
    /// operand is copied whole; a rank whose block is a contiguous part of an operand (all of
    /// it, or a range of its leading indices) reads it in place, the others copy only their
    /// own block out of it ([`deinsum_exec::execute_lent`]; a NumPy array is read this way).
    /// A block read in place takes none of the rank's memory or buffers.
    ///
    /// Buffers: unless `options.kept` names others, the run takes its blocks, messages and
    /// intermediates from the buffers the previous call left in this process (per rank number,
    /// at most this plan's predicted peak per rank with message buffers; see
    /// [`release_buffers`]) and leaves its own there, so that a repeated call does not pay
    /// first-touch page faults again. With more than one thread per rank, each rank number's
    /// thread pool is kept there too and serves the next call with as many threads.
    ///
    /// The output is not gathered by messages: the ranks share this process. When their
    /// output blocks tile the row-major whole in order (split along the leading indices,
    /// [`deinsum_exec::primary_slabs`]), each rank copies its block into its part of the whole
    /// at the end of its run, all ranks at once; otherwise the blocks are handed to the
    /// caller's thread and copied once into the whole there ([`deinsum_exec::assemble`]). The
    /// plan's moves are made and measured as on any communicator; only the gather, which no
    /// plan predicts, takes this shortcut.
    pub fn run_local_borrowed<T: Scalar>(
        &self,
        operands: &[&[T]],
        options: &ExecOptions,
    ) -> Result<Vec<T>, Error> {
        let plan = &self.plan;
        if operands.len() != plan.einsum.inputs().len() {
            return Err(Error::Rank(format!(
                "{} operands given, the einsum has {}",
                operands.len(),
                plan.einsum.inputs().len()
            )));
        }
        let kept = options
            .kept
            .clone()
            .unwrap_or_else(|| kept_buffers().clone());
        kept.keep_ranks(plan.procs);
        // The ranks are threads sharing `plan` by reference: no plan-hash agreement is needed.
        let opts = ExecOptions {
            threads: options.threads.max(1),
            kept: Some(kept.clone()),
            shared_plan: true,
            ..options.clone()
        };
        let out_t = plan.tensor(plan.output.0).ok_or_else(|| {
            Error::Exec(ExecError::InvalidPlan {
                step: plan.steps.len(),
                message: "unknown output tensor".into(),
            })
        })?;
        let oom = |bytes: u128| {
            Error::Exec(ExecError::OutOfMemory {
                rank: 0,
                tensor: out_t.label(),
                bytes,
                stage: deinsum_exec::Stage::Gather,
            })
        };
        // When the ranks' output blocks tile the whole in order, each rank copies its own into
        // the whole at the end of its run, all at once (from Python, mm at 2048 on two ranks:
        // the caller's thread had grown rank 0's block and appended rank 1's, 32 MB copied
        // in turn after the run).
        // One block holding it all is handed over as it is (no copy at all).
        let slabs = deinsum_exec::primary_slabs(out_t, &plan.output.1, plan.procs)
            .filter(|s| s.iter().flatten().filter(|r| r.1 > 0).count() > 1);
        let total: usize = out_t.shape.iter().product();
        let mut whole = match slabs {
            Some(_) => {
                deinsum_exec::buffers::take_overwritten::<T>(total).map_err(|e| oom(e.bytes))?
            }
            None => Vec::new(),
        };
        let dests: Vec<Slab<'_, T>> = {
            let mut dests: Vec<_> = (0..plan.procs)
                .map(|_| std::sync::Mutex::new(None))
                .collect();
            if let Some(slabs) = &slabs {
                let mut order: Vec<(usize, usize, usize)> = slabs
                    .iter()
                    .enumerate()
                    .filter_map(|(r, s)| s.map(|(start, len)| (start, len, r)))
                    .collect();
                order.sort();
                let mut rest: &mut [T] = &mut whole;
                for (start, len, r) in order {
                    let (dst, tail) = rest.split_at_mut(len);
                    dests[r] = std::sync::Mutex::new(Some((start, dst)));
                    rest = tail;
                }
            }
            dests
        };
        let spare = |r: usize, v: Vec<T>| kept.give(r, v);
        let blocks = self.on_local_ranks::<T, _>(|comm| {
            let me = comm.rank();
            let opts = ExecOptions {
                peak: opts.peak.or_else(|| self.peak_of(me)),
                ..opts.clone()
            };
            let (t, _) = deinsum_exec::execute_lent(plan, comm, operands, &opts)?;
            // Rank 0 takes the output blocks as they are (no messages): see the doc above.
            let block = t.into_primary();
            let dest = dests[me].lock().unwrap_or_else(|e| e.into_inner()).take();
            Ok(match (block, dest) {
                (Some(b), Some((start, dst)))
                    if deinsum_exec::slab_in(out_t, &b.ranges) == Some((start, dst.len())) =>
                {
                    dst.copy_from_slice(&b.data);
                    spare(me, b.data.into_vec());
                    None
                }
                (b, _) => b,
            })
        })?;
        let blocks: Vec<_> = blocks
            .into_iter()
            .enumerate()
            .filter_map(|(r, b)| Some((r, b?)))
            .collect();
        let out = if slabs.is_some() {
            // Blocks not copied by their rank (none, when the run went as planned) go over it.
            deinsum_exec::assemble_onto(out_t, whole, blocks, spare)
        } else {
            deinsum_exec::assemble(out_t, blocks, spare)
        }
        .map_err(|e| oom(e.bytes))?;
        Ok(out)
    }

    /// Runs on the plan's P ranks as threads of this process and returns the whole output,
    /// row-major over the output indices. Refuses up front (see [`Einsum::check_fits`]) a run
    /// whose ranks would not fit this node's memory.
    pub fn run_local<T: Scalar>(&self, inputs: &Inputs<T>) -> Result<Vec<T>, Error> {
        let out = self.on_local_ranks::<T, _>(|comm| {
            let t = deinsum_exec::execute(&self.plan, comm, inputs)?;
            t.gather(comm)
        })?;
        out.into_iter()
            .flatten()
            .next()
            .ok_or_else(|| Error::Rank("rank 0 returned no output".into()))
    }

    /// Runs `rank` on the plan's P in-process ranks, after the preflight checks (for elements
    /// of `T`), and returns what each rank returned, in rank order.
    pub(crate) fn on_local_ranks<T: Scalar, R: Send>(
        &self,
        rank: impl Fn(&deinsum_exec::LocalComm) -> Result<R, ExecError> + Sync,
    ) -> Result<Vec<R>, Error> {
        deinsum_exec::preflight::check_in_process_ranks(self.plan.procs)?;
        self.check_fits::<T>(self.plan.procs)?;
        let world = InProcess::new(self.plan.procs).map_err(|e| Error::Exec(ExecError::Comm(e)))?;
        world.run(rank).map_err(|e| Error::Rank(e.to_string()))
    }
}
