//! Run reports: every rank's measures folded into one [`RunSummary`] (per step the slowest
//! rank, minimum and median over the timed runs, words moved against the plan's), and the
//! [`Check`] of a gathered output against a serial reference.
//!
//! The CLI's `deinsum run` and the examples only build these and print them: the text form is
//! the [`Display`](fmt::Display) of [`RunSummary`], the JSON form its serde serialization.

use deinsum_exec::reference::{iteration_space, max_error, naive_seeded_as, tree_reference};
use deinsum_exec::{Inputs, RunReport, Scalar, StepKind};
use deinsum_plan::{DType, Plan, TensorKind};
use serde::{Serialize, Serializer};
use serde_json::json;
use std::fmt;

/// Where a run's ranks ran.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    /// Threads of one process.
    Local,
    /// MPI ranks.
    Mpi,
}

impl Backend {
    /// Its name in JSON reports (`local`, `mpi`).
    pub fn name(self) -> &'static str {
        match self {
            Backend::Local => "local",
            Backend::Mpi => "mpi",
        }
    }

    /// Its name in text reports (`in-process`, `MPI`).
    pub fn label(self) -> &'static str {
        match self {
            Backend::Local => "in-process",
            Backend::Mpi => "MPI",
        }
    }
}

/// How the run was made, as the reports state it.
#[derive(Clone, Copy, Debug)]
pub struct RunContext {
    /// Where the ranks ran.
    pub backend: Backend,
    /// The element type.
    pub dtype: DType,
    /// Untimed runs before the timed ones.
    pub warmup: usize,
}

/// Where the serial reference of a check came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReferenceMethod {
    /// The einsum's loop nest, point by point (small iteration spaces).
    NaiveLoopNest,
    /// The plan's contraction tree, evaluated on one rank.
    SerialTree,
    /// The caller's own serial evaluation (the examples').
    Serial,
}

impl ReferenceMethod {
    /// Its name in reports.
    pub fn name(self) -> &'static str {
        match self {
            ReferenceMethod::NaiveLoopNest => "naive loop nest",
            ReferenceMethod::SerialTree => "serial contraction tree",
            ReferenceMethod::Serial => "serial",
        }
    }
}

/// Iteration spaces up to this many points are checked with the naive loop nest.
pub const NAIVE_MAX_POINTS: f64 = 2e7;

/// Why the serial reference could not be computed.
#[derive(Debug, thiserror::Error)]
pub enum ReferenceError {
    /// A whole tensor of the reference could not be allocated.
    #[error("{tensor}: {source}")]
    OutOfMemory {
        /// The tensor (`T1`, `tree node 4`, `a tensor`).
        tensor: String,
        /// The refused allocation.
        source: deinsum_exec::OutOfMemory,
    },
    /// An input file could not be read whole.
    #[error(transparent)]
    Npy(#[from] deinsum_exec::npy::NpyError),
    /// The inputs are given in a form the reference does not read (whole arrays or per-rank
    /// blocks).
    #[error("the serial reference reads only seeded or .npy inputs")]
    Unsupported,
}

/// The output of `plan` computed serially from the same `inputs` (seeded: the naive loop nest
/// when the iteration space is small, else the serial contraction tree; `.npy` files: the
/// tree), row-major over the output indices, in `W` (f64 for a real run, complex f64 for a
/// complex one: [`DType::wide`]).
pub fn serial_reference<T: Scalar, W: Scalar>(
    plan: &Plan,
    inputs: &Inputs<T>,
) -> Result<(ReferenceMethod, Vec<W>), ReferenceError> {
    let e = &plan.einsum;
    // The reference holds whole tensors: a refused allocation names the tensor.
    let refused = |o: deinsum_exec::OutOfMemory| ReferenceError::OutOfMemory {
        tensor: o
            .tensor
            .and_then(|id| plan.tensor(id).map(|t| t.name.clone()))
            .or_else(|| o.tensor.map(|id| format!("tree node {id}")))
            .unwrap_or_else(|| "a tensor".into()),
        source: o,
    };
    let leaves = match inputs {
        Inputs::Seeded { seed } if iteration_space(e) <= NAIVE_MAX_POINTS => {
            return Ok((ReferenceMethod::NaiveLoopNest, naive_seeded_as(e, *seed)));
        }
        Inputs::Seeded { seed } => (0..e.inputs().len())
            .map(|k| {
                deinsum_exec::reference::seeded_leaf(e, k, *seed)
                    .map_err(|o| refused(o.for_tensor(k)))
            })
            .collect::<Result<_, _>>()?,
        Inputs::Npy(paths) => paths
            .iter()
            .enumerate()
            .map(|(k, p)| read_leaf::<T, W>(e, k, p))
            .collect::<Result<_, _>>()?,
        Inputs::Full(_) | Inputs::Blocks(_) | Inputs::Given(_) => {
            return Err(ReferenceError::Unsupported)
        }
    };
    let want = tree_reference(e, &plan.tree, leaves).map_err(refused)?;
    Ok((ReferenceMethod::SerialTree, want))
}

/// Operand `k` whole from `path`, read as `T` (as the run read it) and widened to `W`.
fn read_leaf<T: Scalar, W: Scalar>(
    e: &deinsum_expr::ParsedEinsum,
    k: usize,
    path: &std::path::Path,
) -> Result<deinsum_exec::kernels::LocalTensor<W>, ReferenceError> {
    let op = &e.inputs()[k];
    let shape: Vec<usize> = op.indices.iter().map(|&c| e.extent(c)).collect();
    let b = deinsum_plan::Block::full(&shape);
    let data = deinsum_exec::npy::read_operand_block::<T>(path, op, e.extents(), &b)?
        .into_iter()
        .map(|x| {
            let (re, im) = x.parts();
            W::from_parts(re, im)
        })
        .collect();
    Ok(deinsum_exec::kernels::LocalTensor {
        indices: op.indices.clone(),
        ranges: b.ranges.to_vec(),
        data,
    })
}

/// A gathered output held against a serial reference.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Check {
    /// Where the reference came from.
    pub method: ReferenceMethod,
    /// Largest absolute difference.
    pub max_abs: f64,
    /// Largest difference relative to the reference's largest magnitude (infinite when the
    /// lengths differ).
    pub max_rel: f64,
    /// The largest relative error accepted.
    pub tolerance: f64,
    /// Whether `max_rel` is within `tolerance`.
    pub pass: bool,
}

impl Check {
    /// Compares `got` with the reference `want` under `tolerance` (complex values by the
    /// magnitude of their difference).
    pub fn compare<G: Scalar, W: Scalar>(
        method: ReferenceMethod,
        got: &[G],
        want: &[W],
        tolerance: f64,
    ) -> Self {
        let (max_abs, max_rel) = max_error(got, want);
        Check {
            method,
            max_abs,
            max_rel,
            tolerance,
            pass: max_rel <= tolerance,
        }
    }

    /// Computes the serial reference of `plan` from `inputs` (in double precision of `T`'s
    /// kind) and compares the gathered `got` with it, at the tolerance of `T`'s precision.
    pub fn against_reference<T: Scalar, G: Scalar>(
        plan: &Plan,
        inputs: &Inputs<T>,
        got: &[G],
    ) -> Result<Self, ReferenceError> {
        deinsum_exec::with_dtype!(T::DTYPE.wide(), W => {
            let (method, want) = serial_reference::<T, W>(plan, inputs)?;
            Ok(Check::compare(method, got, &want, T::DTYPE.tolerance()))
        })
    }

    /// The JSON form (`method`, `max_abs_error`, `max_rel_error`, `tolerance`, `pass`).
    fn to_json(self) -> serde_json::Value {
        json!({
            "method": self.method.name(), "max_abs_error": self.max_abs,
            "max_rel_error": self.max_rel, "tolerance": self.tolerance, "pass": self.pass,
        })
    }
}

/// One plan step over all ranks: measured beside predicted.
#[derive(Clone, Debug, PartialEq)]
pub struct StepRow {
    /// Position in `Plan::steps`.
    pub step: usize,
    /// What kind of step it was (none when no rank measured it).
    pub kind: Option<StepKind>,
    /// The tensor moved or produced (empty when none).
    pub tensor: String,
    /// Median over the timed runs of the slowest rank's seconds.
    pub seconds: f64,
    /// Minimum over the timed runs of the slowest rank's seconds.
    pub seconds_min: f64,
    /// Words the busiest rank received.
    pub measured_max: u64,
    /// Words all ranks received.
    pub measured_total: u64,
    /// The plan's words for the busiest rank.
    pub predicted_max: u64,
    /// The plan's words over all ranks.
    pub predicted_total: u64,
    /// Whether every rank sent and received exactly the plan's words.
    pub exact: bool,
    /// The predicted seconds of the step.
    pub predicted_seconds: f64,
}

impl StepRow {
    /// The JSON form of the row.
    fn to_json(&self) -> serde_json::Value {
        json!({
            "step": self.step, "kind": self.kind.map(StepKind::name), "tensor": self.tensor,
            "seconds": self.seconds, "seconds_min": self.seconds_min,
            "seconds_median": self.seconds, "words_max_per_rank": self.measured_max,
            "predicted_max_per_rank": self.predicted_max, "words_total": self.measured_total,
            "predicted_total": self.predicted_total, "exact": self.exact,
            "predicted_seconds": self.predicted_seconds,
        })
    }
}

/// One input operand over all ranks: the words moved to bring it from where it was read to
/// where it computes, measured beside predicted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InputRow {
    /// The operand's number in the einsum.
    pub operand: usize,
    /// Its tensor, as reports name it (`T0 (ij)`).
    pub tensor: String,
    /// Words all ranks received of it: the steps that move only it, and of a step that moves
    /// several tensors (a phase's windows) its share by the plan when the step measured
    /// exactly as planned (else by its predicted fraction of the step's measured words).
    pub measured_total: u64,
    /// The plan's words of it over all ranks ([`Plan::input_words`]).
    pub predicted_total: u64,
    /// Whether every step that moves it measured exactly the plan's words on every rank.
    pub exact: bool,
}

impl InputRow {
    /// Read where it computes: no step moves it.
    pub fn in_place(&self) -> bool {
        self.predicted_total == 0 && self.measured_total == 0
    }

    /// Operand `k` of `plan` over the step rows of a run.
    fn of(plan: &Plan, k: usize, rows: &[StepRow]) -> Self {
        let t = plan
            .tensors
            .iter()
            .find(|t| matches!(t.kind, TensorKind::Input(j) if j == k));
        let id = t.map_or(k, |t| t.id);
        let mut row = InputRow {
            operand: k,
            tensor: t.map(|t| t.label()).unwrap_or_default(),
            measured_total: 0,
            predicted_total: plan.input_words(id),
            exact: true,
        };
        for r in rows {
            let share = plan.step_words_of(r.step, id);
            if share == 0 {
                continue;
            }
            row.exact &= r.exact;
            row.measured_total += if share == r.predicted_total || !r.exact {
                // All the step's words are this tensor's, or the step is off plan and its
                // measured words are split by the plan's fractions.
                (u128::from(r.measured_total) * u128::from(share)
                    / u128::from(r.predicted_total.max(1))) as u64
            } else {
                share
            };
        }
        row
    }

    /// The JSON form of the row.
    fn to_json(&self) -> serde_json::Value {
        json!({
            "operand": self.operand, "tensor": self.tensor, "words_total": self.measured_total,
            "predicted_total": self.predicted_total, "exact": self.exact,
            "in_place": self.in_place(),
        })
    }
}

impl fmt::Display for InputRow {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "input {}: words moved to its compute layout {} (predicted {}){}",
            self.tensor,
            self.measured_total,
            self.predicted_total,
            if !self.exact {
                ", DIFFERS from the plan"
            } else if self.in_place() {
                ", read in place"
            } else {
                ""
            }
        )
    }
}

/// A run over all ranks, measured against the plan: built by [`RunSummary::new`] from every
/// rank's [`RunReport`]; printed as text by `Display`, as JSON by `Serialize`.
#[derive(Clone, Debug)]
pub struct RunSummary {
    /// The einsum as written in the plan.
    pub expression: String,
    /// `i=8,j=8`: the extents by index.
    pub extents: String,
    /// Number of ranks.
    pub procs: usize,
    /// The contraction path the plan follows (opt_einsum's linear format).
    pub path: Vec<Vec<usize>>,
    /// How the run was made.
    pub context: RunContext,
    /// Per plan step.
    pub rows: Vec<StepRow>,
    /// Per input operand: the words moved to bring it where it computes.
    pub inputs: Vec<InputRow>,
    /// The slowest rank's wall time of the whole run (inputs and every repetition).
    pub seconds: f64,
    /// Per timed run, the slowest rank's time over the steps but loads and frees of inputs
    /// (its own steps summed: the run's wall time from the barrier that starts it).
    pub contraction: Vec<f64>,
    /// The slowest rank's seconds reading or generating its inputs.
    pub load_seconds: f64,
    /// Multiply-adds over all ranks.
    pub madds: f64,
    /// The rate of the contraction's median run.
    pub gflops: f64,
    /// Threads per rank.
    pub threads: usize,
    /// Words received over all ranks and steps.
    pub measured_total: u64,
    /// The plan's words over all ranks and steps.
    pub predicted_total: u64,
    /// Words received by the busiest rank.
    pub measured_max_per_rank: u64,
    /// The plan's words for the busiest rank.
    pub predicted_max_per_rank: u64,
    /// Whether every step moved exactly the plan's words on every rank.
    pub exact: bool,
    /// Largest peak of tensor data on any rank, in words.
    pub peak_words: u64,
    /// The same with message buffers.
    pub peak_words_with_buffers: u64,
    /// The plan's predicted peak per rank.
    pub predicted_peak_words: u64,
    /// The plan's predicted peak per rank with message buffers.
    pub predicted_peak_words_with_buffers: u64,
    /// The machine model the predicted seconds are for (empty: none).
    pub machine: String,
    /// The plan's memory budget per rank, if any.
    pub mem: Option<u64>,
    /// The check against a serial reference, when one was made.
    pub check: Option<Check>,
}

/// The minimum of `xs`; 0 when empty, as the median (a run that measured nothing: an einsum
/// with an empty extent runs no step).
fn minimum(xs: &[f64]) -> f64 {
    if xs.is_empty() {
        return 0.0;
    }
    xs.iter().copied().fold(f64::INFINITY, f64::min)
}

/// The median of `xs` (the mean of the middle two for an even count); 0 when empty.
pub fn median(xs: &[f64]) -> f64 {
    let mut v = xs.to_vec();
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => 0.0,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

/// Step `i` over every rank's report (its times: the slowest rank's per timed run) and the
/// tensor it measured (by id).
fn step_row(
    plan: &Plan,
    reports: &[RunReport],
    i: usize,
    predicted: &[f64],
) -> (StepRow, Option<usize>) {
    let ms: Vec<_> = reports.iter().filter_map(|r| r.steps.get(i)).collect();
    let runs = ms.iter().map(|m| m.samples.len()).max().unwrap_or(0);
    let per_run: Vec<f64> = (0..runs)
        .map(|r| {
            ms.iter()
                .filter_map(|m| m.samples.get(r))
                .fold(0.0, |a, &b| f64::max(a, b))
        })
        .collect();
    let (predicted_max, predicted_total) = plan.steps[i]
        .volume()
        .map_or((0, 0), |v| (v.max_per_rank, v.total));
    let row = StepRow {
        step: i,
        kind: ms.first().map(|m| m.kind),
        tensor: ms
            .first()
            .and_then(|m| m.tensor)
            .and_then(|t| plan.tensor(t))
            .map(|t| t.name.clone())
            .unwrap_or_default(),
        seconds: median(&per_run),
        seconds_min: minimum(&per_run),
        measured_max: ms.iter().map(|m| m.received).max().unwrap_or(0),
        measured_total: ms.iter().map(|m| m.received).sum(),
        predicted_max,
        predicted_total,
        exact: ms
            .iter()
            .all(|m| m.sent == m.predicted_sent && m.received == m.predicted_received),
        predicted_seconds: predicted.get(i).copied().unwrap_or(0.0),
    };
    (row, ms.first().and_then(|m| m.tensor))
}

/// Whether a step counts in the contraction's time: placing and dropping the caller's operands
/// does not (numpy's time does not include making or freeing its operands either).
fn is_contraction(plan: &Plan, row: &StepRow, tensor: Option<usize>) -> bool {
    let input = tensor
        .and_then(|t| plan.tensor(t))
        .is_some_and(|t| matches!(t.kind, TensorKind::Input(_)));
    match row.kind {
        None | Some(StepKind::Load) => false,
        Some(StepKind::Free) => !input,
        Some(_) => true,
    }
}

impl RunSummary {
    /// Folds every rank's `reports` (in rank order) of a run of `plan` into one summary;
    /// `predicted` holds each step's predicted seconds.
    pub fn new(plan: &Plan, reports: &[RunReport], predicted: &[f64], context: RunContext) -> Self {
        let mut rows = Vec::new();
        // Per rank, per timed run: the rank's contraction steps summed. Every run starts at a
        // barrier, so the slowest rank's sum is the run's wall time; a sum of per-step maxima
        // would count a late peer twice (in its own step and in the waiting of the next).
        let mut per_rank: Vec<Vec<f64>> = vec![Vec::new(); reports.len()];
        for i in 0..plan.steps.len() {
            let (row, tensor) = step_row(plan, reports, i, predicted);
            if is_contraction(plan, &row, tensor) {
                for (acc, r) in per_rank.iter_mut().zip(reports) {
                    let Some(m) = r.steps.get(i) else { continue };
                    acc.resize(m.samples.len().max(acc.len()), 0.0);
                    for (c, x) in acc.iter_mut().zip(&m.samples) {
                        *c += x;
                    }
                }
            }
            rows.push(row);
        }
        let runs = per_rank.iter().map(Vec::len).max().unwrap_or(0);
        let contraction: Vec<f64> = (0..runs)
            .map(|r| {
                per_rank
                    .iter()
                    .filter_map(|v| v.get(r))
                    .fold(0.0, |a, &b| f64::max(a, b))
            })
            .collect();
        let madds: f64 = reports.iter().map(|r| r.madds).sum();
        let med = median(&contraction);
        let per_rank_received = |r: &RunReport| r.steps.iter().map(|m| m.received).sum::<u64>();
        let max_of = |f: fn(&RunReport) -> u64| reports.iter().map(f).max().unwrap_or(0);
        let p = &plan.prediction;
        RunSummary {
            expression: plan.expression.clone(),
            extents: plan.einsum.extent_labels().join(","),
            procs: plan.procs,
            path: plan.path.clone(),
            context,
            seconds: reports.iter().map(|r| r.seconds).fold(0.0, f64::max),
            contraction,
            load_seconds: reports.iter().map(|r| r.load_seconds).fold(0.0, f64::max),
            madds,
            // The rate of the contraction (median run), not of reading the inputs; real flops,
            // 8 per complex multiply-add.
            gflops: if med > 0.0 {
                context.dtype.flops_per_madd() * madds / med / 1e9
            } else {
                0.0
            },
            threads: reports.first().map_or(1, |r| r.threads),
            measured_total: rows.iter().map(|r| r.measured_total).sum(),
            predicted_total: rows.iter().map(|r| r.predicted_total).sum(),
            measured_max_per_rank: reports.iter().map(per_rank_received).max().unwrap_or(0),
            predicted_max_per_rank: p.max_per_rank,
            exact: rows.iter().all(|r| r.exact),
            peak_words: max_of(|r| r.peak_words),
            peak_words_with_buffers: max_of(|r| r.peak_words_with_buffers),
            predicted_peak_words: p.max_peak_memory,
            predicted_peak_words_with_buffers: p.max_peak_memory_with_buffers,
            machine: p.machine.clone(),
            mem: plan.mem,
            inputs: (0..plan.einsum.num_inputs())
                .map(|k| InputRow::of(plan, k, &rows))
                .collect(),
            rows,
            check: None,
        }
    }

    /// The summary with `check` reported.
    pub fn with_check(self, check: Option<Check>) -> Self {
        RunSummary { check, ..self }
    }

    /// Steps that moved other words than the plan's on some rank.
    pub fn steps_off_plan(&self) -> usize {
        self.rows.iter().filter(|r| !r.exact).count()
    }

    /// The predicted seconds of all steps.
    pub fn predicted_seconds(&self) -> f64 {
        self.rows.iter().map(|r| r.predicted_seconds).sum()
    }

    /// The JSON form (keys in sorted order, as `serde_json` writes a map).
    fn to_json(&self) -> serde_json::Value {
        let steps: Vec<_> = self.rows.iter().map(StepRow::to_json).collect();
        let inputs: Vec<_> = self.inputs.iter().map(InputRow::to_json).collect();
        json!({
            "expression": self.expression,
            "procs": self.procs,
            "path": self.path,
            "backend": self.context.backend.name(),
            "dtype": self.context.dtype.name(),
            "steps": steps,
            "inputs": inputs,
            "seconds": self.seconds,
            "repeat": self.contraction.len(),
            "warmup": self.context.warmup,
            "threads": self.threads,
            "load_seconds": self.load_seconds,
            "contraction_seconds_min": minimum(&self.contraction),
            "contraction_seconds_median": median(&self.contraction),
            "contraction_seconds": self.contraction,
            "predicted_seconds": self.predicted_seconds(),
            "multiply_adds": self.madds,
            "gflops": self.gflops,
            "words_total": self.measured_total,
            "predicted_total": self.predicted_total,
            "words_max_per_rank": self.measured_max_per_rank,
            "predicted_max_per_rank": self.predicted_max_per_rank,
            "volume_exact": self.exact,
            "peak_words": self.peak_words,
            "peak_words_with_buffers": self.peak_words_with_buffers,
            "predicted_peak_words": self.predicted_peak_words,
            "predicted_peak_words_with_buffers": self.predicted_peak_words_with_buffers,
            "check": self.check.map(Check::to_json),
        })
    }
}

impl Serialize for RunSummary {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.to_json().serialize(s)
    }
}

impl fmt::Display for StepRow {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let moved = self.kind == Some(StepKind::Redistribute);
        let words = |m: u64, p: u64| {
            if moved {
                format!("{m} / {p}")
            } else {
                String::new()
            }
        };
        write!(
            f,
            "{:>4}  {:<12} {:<8} {:>10.3} {:>10.3} {:>10.3}  {:>24}  {:>24}  {}",
            self.step,
            self.kind.map_or("", StepKind::name),
            self.tensor,
            self.seconds_min * 1e3,
            self.seconds * 1e3,
            self.predicted_seconds * 1e3,
            words(self.measured_max, self.predicted_max),
            words(self.measured_total, self.predicted_total),
            if self.exact {
                ""
            } else {
                "DIFFERS from the plan"
            }
        )
    }
}

impl fmt::Display for Check {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "check ({}): max abs error {:.3e}, max rel error {:.3e} (tolerance {:.0e}): {}",
            self.method.name(),
            self.max_abs,
            self.max_rel,
            self.tolerance,
            if self.pass { "ok" } else { "FAILED" }
        )
    }
}

impl fmt::Display for RunSummary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "{}  extents {}  on {} ranks ({}, {:?})",
            self.expression,
            self.extents,
            self.procs,
            self.context.backend.label(),
            self.context.dtype
        )?;
        writeln!(
            f,
            "{:>4}  {:<12} {:<8} {:>10} {:>10} {:>10}  {:>24}  {:>24}",
            "step",
            "kind",
            "tensor",
            "min [ms]",
            "med [ms]",
            "pred [ms]",
            "words max/rank meas/pred",
            "words total meas/pred"
        )?;
        for r in &self.rows {
            writeln!(f, "{r}")?;
        }
        for r in &self.inputs {
            writeln!(f, "{r}")?;
        }
        self.write_totals(f)?;
        if let Some(c) = &self.check {
            writeln!(f, "{c}")?;
        }
        Ok(())
    }
}

impl RunSummary {
    /// The lines after the step table: contraction time, prediction, volume and memory.
    fn write_totals(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let med = median(&self.contraction);
        writeln!(
            f,
            "contraction (all steps but loads and frees of inputs, the slowest rank from the common start): min {:.3} ms, median {:.3} ms over {} run(s) after {} warm-up; {} thread(s) per rank; inputs read in {:.3} ms",
            minimum(&self.contraction) * 1e3,
            med * 1e3,
            self.contraction.len(),
            self.context.warmup,
            self.threads,
            self.load_seconds * 1e3
        )?;
        let predicted = self.predicted_seconds();
        writeln!(
            f,
            "predicted {:.3} ms against measured median {:.3} ms (measured/predicted {:.2}) on {}",
            predicted * 1e3,
            med * 1e3,
            if predicted > 0.0 {
                med / predicted
            } else {
                0.0
            },
            if self.machine.is_empty() {
                "no machine model"
            } else {
                &self.machine
            }
        )?;
        writeln!(
            f,
            "total: {:.3} ms, {:.3} GFLOP/s ({:.3e} multiply-adds), words moved {} (predicted {}), max per rank {} (predicted {}){}",
            self.seconds * 1e3,
            self.gflops,
            self.madds,
            self.measured_total,
            self.predicted_total,
            self.measured_max_per_rank,
            self.predicted_max_per_rank,
            if self.exact {
                ", every rank exactly as planned"
            } else {
                ", MEASURED VOLUME DIFFERS FROM THE PLAN"
            }
        )?;
        writeln!(
            f,
            "peak memory per rank: {} words measured ({} with message buffers), {} predicted ({} with message buffers){}",
            self.peak_words,
            self.peak_words_with_buffers,
            self.predicted_peak_words,
            self.predicted_peak_words_with_buffers,
            self.mem.map(|m| format!(", budget {m}")).unwrap_or_default()
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_of_odd_even_and_empty() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), 2.5);
        assert_eq!(median(&[]), 0.0);
    }

    #[test]
    fn check_passes_within_tolerance_only() {
        let ok = Check::compare(
            ReferenceMethod::Serial,
            &[1.0, 2.0],
            &[1.0, 2.0 + 1e-12],
            1e-10,
        );
        assert!(ok.pass, "{ok}");
        let off = Check::compare(ReferenceMethod::Serial, &[1.0, 2.5], &[1.0, 2.0], 1e-10);
        assert!(!off.pass);
        assert_eq!(off.max_abs, 0.5);
        assert_eq!(off.max_rel, 0.25);
        let short = Check::compare(ReferenceMethod::Serial, &[1.0], &[1.0, 2.0], 1e-10);
        assert!(!short.pass && short.max_rel.is_infinite());
    }

    /// A real 2-rank run of `ij,jk->ik` whose timed samples are then set by hand.
    fn two_rank_reports() -> (Plan, Vec<RunReport>) {
        let spec = deinsum_expr::ExtentSpec::from_flags(Some("i=6,j=5,k=7"), None, None).unwrap();
        // Canonical inputs, so the plan has a move beside its compute.
        let o = crate::Options {
            inputs_anywhere: false,
            ..crate::Options::procs(2)
        };
        let e = crate::Einsum::compile("ij,jk->ik", &spec, &o).unwrap();
        let plan = e.plan().clone();
        let world = deinsum_exec::InProcess::new(2).unwrap();
        let opts = deinsum_exec::ExecOptions::default();
        let reports = world
            .run(|comm| {
                deinsum_exec::execute_measured::<f64, _>(
                    &plan,
                    comm,
                    &Inputs::Seeded { seed: 1 },
                    &opts,
                )
                .map(|(_, rep)| rep)
            })
            .unwrap();
        (plan, reports)
    }

    #[test]
    fn contraction_time_is_the_slowest_ranks_own_run() {
        let (plan, mut reports) = two_rank_reports();
        let context = RunContext {
            backend: Backend::Local,
            dtype: DType::F64,
            warmup: 0,
        };
        let counted: Vec<usize> = (0..plan.steps.len())
            .filter(|&i| {
                let (row, tensor) = step_row(&plan, &reports, i, &[]);
                is_contraction(&plan, &row, tensor)
            })
            .collect();
        assert!(counted.len() >= 2, "a move and a compute: {counted:?}");
        // Rank r is slow (1 s) in the r-th counted step and quick (0.1 s) in the others, over
        // two timed runs; the second run is twice as long.
        for (r, rep) in reports.iter_mut().enumerate() {
            for m in rep.steps.iter_mut() {
                m.samples = vec![0.0, 0.0];
            }
            for (j, &i) in counted.iter().enumerate() {
                let s = if j == r { 1.0 } else { 0.1 };
                rep.steps[i].samples = vec![s, 2.0 * s];
            }
        }
        let sum = |r: usize| -> f64 {
            (0..counted.len())
                .map(|j| if j == r { 1.0 } else { 0.1 })
                .sum()
        };
        let s = RunSummary::new(&plan, &reports, &[], context);
        let want = sum(0).max(sum(1));
        assert_eq!(s.contraction.len(), 2);
        assert!(
            (s.contraction[0] - want).abs() < 1e-12,
            "{:?} vs {want}",
            s.contraction
        );
        assert!((s.contraction[1] - 2.0 * want).abs() < 1e-12);
        // Not the sum of per-step maxima, which counts both slow steps.
        let per_step_max: f64 = counted
            .iter()
            .enumerate()
            .map(|(j, _)| if j < 2 { 1.0 } else { 0.1 })
            .sum();
        assert!(s.contraction[0] < per_step_max);
    }

    #[test]
    fn tolerance_follows_precision() {
        assert_eq!(<f64 as Scalar>::DTYPE.tolerance(), 1e-10);
        assert_eq!(<f32 as Scalar>::DTYPE.tolerance(), 1e-4);
    }
}
