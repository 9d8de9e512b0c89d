//! The distributed plan: Cartesian process grids, block distributions with replication,
//! redistribution schedules and predicted volumes.
//!
//! A [`Plan`] is the only contract between compiler and executor. Its geometry is defined here
//! once ([`Grid::coords`], [`Interval`], [`Distribution::block`], [`GroupPlan::iteration_box`])
//! and both the planner's predictions and the executor's packing use these same functions.

use deinsum_expr::{Index, ParsedEinsum};
use deinsum_path::ContractionTree;
use deinsum_soap::FusedGroup;
use serde::{Deserialize, Serialize};

mod geometry;
pub use geometry::*;
mod schema;

pub mod choose;
mod display;
mod dtype;
pub mod machine;
pub mod time;
pub use display::{DistributionDisplay, MoveKindDisplay, PlanDisplay};
pub use dtype::{DType, UnknownDType};
pub use machine::{Machine, MachineError};
mod source;
pub use source::{relabel, Source};

/// How many contraction trees [`crate::build`] plans under [`Objective::Time`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum TreeSearch {
    /// Every candidate tree ([`choose::choose`]), whatever the einsum's size: what `deinsum
    /// plan` and `deinsum run` print and run (the default).
    #[default]
    Full,
    /// The path search's tree first, planned once from where its inputs are first used; when
    /// that plan predicts at least [`SEARCH_PAYS`] seconds it is dropped and the plan is
    /// [`TreeSearch::Full`]'s (byte-identical). Below that the search (tens of plannings of
    /// every tree) takes longer than any plan it could find saves, so a caller that compiles
    /// to run at once (Python's `einsum`) keeps the first.
    WhenItPays,
}

/// Predicted seconds below which [`TreeSearch::WhenItPays`] keeps the path search's tree: the
/// full search plans every candidate tree several times (about 20 ms for a 30-operand MPS
/// network on one core), more than the whole run of a plan predicted under a millisecond.
pub const SEARCH_PAYS: f64 = 1e-3;

/// What [`crate::build`] minimises.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Objective {
    /// Predicted seconds on the machine model.
    #[default]
    Time,
    /// FLOPs of the path alone (the path search's tree, planned as it is).
    Flops,
    /// Words received by the busiest rank over the plan.
    Volume,
}

impl Objective {
    /// Every objective's name, as `--objective` takes it.
    pub const NAMES: [&'static str; 3] = ["time", "flops", "volume"];

    /// The objective named `name`.
    pub fn from_name(name: &str) -> Option<Objective> {
        match name {
            "time" => Some(Objective::Time),
            "flops" => Some(Objective::Flops),
            "volume" => Some(Objective::Volume),
            _ => None,
        }
    }

    /// Its name.
    pub fn name(self) -> &'static str {
        match self {
            Objective::Time => "time",
            Objective::Flops => "flops",
            Objective::Volume => "volume",
        }
    }
}

/// What a redistribution is, classified from its source, target and `sum` flag. Grid dims are
/// positions in the source grid (the same grid as the target's for the same-grid kinds).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum MoveKind {
    /// Nothing crosses ranks: every target block lies in the same rank's source block.
    Local,
    /// Same grid: each rank gathers, along the grid dims `dims`, the pieces of its target block
    /// (or of a phase window of it) that its fibre holds.
    AllGather {
        /// The grid dims gathered along.
        dims: Vec<usize>,
    },
    /// Same grid: partial sums along `dims` are reduced and scattered (the target nests the
    /// summed dims into its split).
    ReduceScatter {
        /// The grid dims holding partial sums.
        dims: Vec<usize>,
    },
    /// Same grid: partial sums along `dims` are reduced and every rank of the fibre keeps the sum.
    AllReduce {
        /// The grid dims holding partial sums.
        dims: Vec<usize>,
    },
    /// Partial sums reduced onto a single rank.
    Reduce,
    /// Blocks gathered onto a single rank.
    Gather,
    /// One rank's whole tensor copied to every rank of the target grid.
    Broadcast,
    /// Grids of one shape whose blocks match one to one: each rank sends its block to one rank.
    Permute,
    /// The general block all-to-all (grid changes, canonical to grid, anything else).
    AllToAll,
}

/// Version of the plan JSON schema (docs/plan-schema.md).
pub const PLAN_VERSION: u32 = 3;

/// Identifies a tensor of the plan: the contraction tree's node id (inputs `0..n`, then one per
/// step). Only inputs and the results of fused groups are materialized as distributed tensors.
pub type TensorId = usize;

/// What a distributed tensor is.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TensorKind {
    /// Input operand `k` of the einsum.
    Input(usize),
    /// The result of a fused group that a later group consumes.
    Intermediate,
    /// The einsum's output.
    Output,
}

/// A tensor that lives distributed at some point of the plan.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Tensor {
    /// Its id (tree node id).
    pub id: TensorId,
    /// A display name (`T0`, `T1`, ... for inputs, `t5` for intermediates, `out`).
    pub name: String,
    /// Distinct indices in storage order (row-major local blocks use this order).
    pub indices: Vec<Index>,
    /// Extent per index, in the same order.
    pub shape: Vec<usize>,
    /// What it is.
    pub kind: TensorKind,
}

impl Tensor {
    /// `T0 (ij)`: its name and indices, as reports and errors name it.
    pub fn label(&self) -> String {
        format!(
            "{} ({})",
            self.name,
            self.indices.iter().collect::<String>()
        )
    }
}

/// Words moved by one step: the busiest rank's and the total always; the sparse per-rank lists
/// `(rank, words)` (ascending, nonzero only) only when the plan was built with
/// [`PlanOptions::per_rank`] (a plan for 2^20 ranks stays small). Any rank's figures are derived
/// on demand with [`Plan::step_words`]. Self-transfers (a rank to itself) are local copies and
/// not counted.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Volume {
    /// Max over ranks of words received (the figure held against the SOAP per-rank bound).
    pub max_per_rank: u64,
    /// Sum over ranks of words received (= words sent).
    pub total: u64,
    /// Max over ranks of words sent.
    pub max_sent: u64,
    /// Words sent, per rank that sends anything (only with `per_rank`).
    #[serde(default, skip_serializing_if = "PerRank::is_empty")]
    pub sent: PerRank,
    /// Words received, per rank that receives anything (only with `per_rank`).
    #[serde(default, skip_serializing_if = "PerRank::is_empty")]
    pub received: PerRank,
}

impl Volume {
    /// Counts `rank`'s words, sent and received; ranks must come in ascending order. The
    /// per-rank lists are kept only with `per_rank`.
    pub fn add_rank(&mut self, rank: usize, sent: u64, received: u64, per_rank: bool) {
        self.max_per_rank = self.max_per_rank.max(received);
        self.max_sent = self.max_sent.max(sent);
        self.total += received;
        if per_rank && sent > 0 {
            self.sent.push(rank, sent);
        }
        if per_rank && received > 0 {
            self.received.push(rank, received);
        }
    }
}

/// The boxes of one message, stored inline when there is one (the common case).
pub type Boxes = smallvec::SmallVec<[Block; 1]>;

/// A message of a redistribution: boxes of the tensor that `src` sends to `dst`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Transfer {
    /// Sending rank.
    pub src: usize,
    /// Receiving rank.
    pub dst: usize,
    /// Global boxes of the tensor, packed in this order, each in row-major order.
    pub boxes: Boxes,
}

/// The plan of one fused group.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct GroupPlan {
    /// The fused group (steps of the tree, iteration space, bound).
    #[serde(with = "schema::group")]
    pub group: FusedGroup,
    /// The process grid over the group's iteration space (dims named by indices; an index
    /// absent from the grid is not split).
    pub grid: Grid,
    /// The distribution each input tensor must be in when the group computes, by tensor id.
    pub inputs: Vec<(TensorId, Distribution)>,
    /// The distribution the group's result is produced in (partial over the grid dims of summed
    /// indices).
    pub output: (TensorId, Distribution),
    /// Multiply-adds of the group's steps on the busiest rank.
    pub max_flops_per_rank: f64,
    /// SOAP parallel bound of the group for P ranks: memory-independent, per rank.
    pub bound_memory_independent: f64,
    /// SOAP parallel bound of the group for P ranks and budget S: memory-dependent, per rank.
    pub bound_memory_dependent: f64,
    /// Words received by the busiest rank in the redistributions feeding this group plus the
    /// reduction of its output (what the grid choice optimized).
    pub predicted_max_per_rank: u64,
    /// Grids considered for this group (admissible by load balance and memory).
    pub candidates_considered: usize,
    /// When the group's blocks do not fit the memory budget: the summed index each rank walks
    /// in phases (the 2.5D/SUMMA scheme), `None` when the group computes in one go.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phases: Option<Phases>,
}

/// A group computed in phases along one summed index: the inputs that hold the index rest in
/// a distribution without replicas (their replicas' share of the index nested into its split)
/// and, before each phase, every rank fetches the window of its block for that phase.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Phases {
    /// The summed index walked in phases.
    pub index: Index,
    /// Number of phases T: phase t covers part t of T of every rank's block of the index.
    pub count: usize,
    /// Where each input holding the index rests between phases, by tensor id (an input
    /// holding the index that is not listed rests in the group's distribution).
    pub resting: Vec<(TensorId, Distribution)>,
    /// True when the overlap pass cut the group into phases ([`overlap`]): its whole blocks
    /// fit, and its inputs rest where their move into the group started; false when the
    /// phases are for the memory budget.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub overlap: bool,
}

/// The window of one input that a rank fetches before a phase, from where the input rests.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Fetch {
    /// The input tensor (it stays in its resting distribution; the window is a copy).
    pub tensor: TensorId,
    /// Where the input rests ([`Phases::resting`]).
    pub from: Distribution,
    /// The window: the group's distribution of the input with one [`Window`] on the index.
    pub to: Distribution,
    /// What the move is; each rank's transfers are derived from `from` and `to`
    /// ([`Plan::step_transfers`]).
    pub pattern: MoveKind,
    /// Predicted words.
    pub volume: Volume,
}

/// One step of the plan, executed in order by every rank.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum PlanStep {
    /// Input tensor `tensor` is materialized in `dist` (its canonical distribution): each rank
    /// generates or reads its own block. No communication.
    Load {
        /// The input tensor.
        tensor: TensorId,
        /// Its canonical distribution.
        dist: Distribution,
    },
    /// Move `tensor` from distribution `from` to `to`. With `sum`, `from` holds partial sums
    /// and each target block is the sum of what it receives (blocks start at zero); otherwise
    /// every target element is received exactly once.
    Redistribute {
        /// The tensor moved.
        tensor: TensorId,
        /// Source distribution.
        from: Distribution,
        /// Target distribution.
        to: Distribution,
        /// Whether pieces are summed (a reduction folded into the move).
        sum: bool,
        /// What the move is; each rank's transfers are derived from `from` and `to`
        /// ([`Plan::step_transfers`]).
        pattern: MoveKind,
        /// Predicted words.
        volume: Volume,
    },
    /// Every rank holding a block of the group's output computes it from its input blocks.
    Compute {
        /// Index into [`Plan::groups`].
        group: usize,
    },
    /// Phase `phase` of a phased group ([`GroupPlan::phases`]): every rank fetches the windows
    /// listed in `fetch`, starts fetching those in `prefetch` (the next phase's), computes the
    /// group over its box with the phased index cut to this phase, completes the prefetch and
    /// adds the result into its output block (zero before phase 0), then drops this phase's
    /// windows. After the last phase the output is held as after a [`PlanStep::Compute`].
    ComputePhase {
        /// Index into [`Plan::groups`].
        group: usize,
        /// The phase, `0..count`.
        phase: usize,
        /// The windows fetched for this phase, before it computes.
        fetch: Vec<Fetch>,
        /// The windows of phase `phase + 1` fetched while this phase computes (double
        /// buffering: they are held beside this phase's windows and used by the next step,
        /// whose `fetch` is then empty). Empty when the group is not pipelined.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        prefetch: Vec<Fetch>,
        /// Predicted words of all the fetches and prefetches together.
        volume: Volume,
    },
    /// `tensor` is no longer needed; ranks free its blocks.
    Free {
        /// The tensor released.
        tensor: TensorId,
    },
}

impl PlanStep {
    /// The words this step moves (a redistribution's, or a phase's fetches together); `None`
    /// for steps that move nothing.
    pub fn volume(&self) -> Option<&Volume> {
        match self {
            PlanStep::Redistribute { volume, .. } | PlanStep::ComputePhase { volume, .. } => {
                Some(volume)
            }
            _ => None,
        }
    }
}

/// Predicted totals of a plan.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Prediction {
    /// Words over all steps: max over ranks of words received (summed per rank first).
    pub max_per_rank: u64,
    /// Words received over all ranks and steps.
    pub total: u64,
    /// Max over ranks of words sent (summed per rank over the steps).
    pub max_sent_per_rank: u64,
    /// Words received per rank over all steps, sparse `(rank, words)` ascending (only with
    /// [`PlanOptions::per_rank`]).
    #[serde(default, skip_serializing_if = "PerRank::is_empty")]
    pub received: PerRank,
    /// Words sent per rank over all steps, sparse `(rank, words)` ascending (only with
    /// [`PlanOptions::per_rank`]).
    #[serde(default, skip_serializing_if = "PerRank::is_empty")]
    pub sent: PerRank,
    /// Peak memory of each rank, in words (blocks alive at once, including receive buffers and
    /// the group-local intermediates of a Compute), sparse `(rank, words)` ascending; ranks
    /// that never hold data are absent (only with [`PlanOptions::per_rank`]; any rank's
    /// figure is derived on demand by [`Plan::peak_of`]).
    #[serde(default, skip_serializing_if = "PerRank::is_empty")]
    pub peak_memory: PerRank,
    /// Max over ranks of `peak_memory`.
    pub max_peak_memory: u64,
    /// `peak_memory` plus the message buffers of each step (a rank's packed sends and its
    /// receives, which exist at once during the exchange): what the process really holds.
    /// The budget S bounds `peak_memory`, the tensor data; the buffers come on top (only with
    /// [`PlanOptions::per_rank`]).
    #[serde(default, skip_serializing_if = "PerRank::is_empty")]
    pub peak_memory_with_buffers: PerRank,
    /// Max over ranks of `peak_memory_with_buffers`.
    #[serde(default)]
    pub max_peak_memory_with_buffers: u64,
    /// Per-rank I/O of the plan: for each rank, the words of its blocks of every group's
    /// inputs and output (what it must hold, received or already resident, to do its share of
    /// the iterations), summed over groups; the max over ranks. This is the quantity the SOAP
    /// parallel bound limits from below.
    #[serde(default)]
    pub touched_per_rank: u64,
    /// The SOAP per-rank lower bound on the words a rank touches (the binding one of
    /// memory-independent and memory-dependent, summed over groups).
    pub bound_per_rank: f64,
    /// `touched_per_rank / bound_per_rank` (>= 1 up to rounding: the bound is a lower bound on
    /// the same quantity).
    pub ratio: f64,
    /// Predicted seconds of the whole plan on [`Prediction::machine`]: the sum of
    /// `step_seconds` (docs/machine.md).
    #[serde(default)]
    pub seconds: f64,
    /// Predicted seconds of each step, the busiest rank's, in step order (0 for loads and
    /// frees).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub step_seconds: Vec<f64>,
    /// The name of the machine model the seconds are for.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub machine: String,
}

/// Options of [`build`].
#[derive(Clone)]
pub struct PlanOptions {
    /// Number of ranks P (>= 1).
    pub procs: usize,
    /// Per-rank memory budget S in words (`None`: unlimited): caps the tensor data a rank
    /// holds ([`Prediction::max_peak_memory`]).
    pub mem: Option<u64>,
    /// Per-rank cap on the whole process in words (`None`: unlimited): the tensor data plus
    /// the message buffers of each step ([`Prediction::max_peak_memory_with_buffers`]).
    pub mem_total: Option<u64>,
    /// How [`build`] finds the contraction tree.
    pub path: deinsum_path::PathOptions,
    /// The source of every operand that [`PlanOptions::sources`] does not list: when true,
    /// [`Source::Anywhere`] (each such input is loaded where its consuming group computes, or
    /// canonically when that predicts better); when false (default) [`Source::Canonical`]
    /// ([`canonical_distribution`]).
    pub inputs_in_place: bool,
    /// Where each input operand's data is before the plan runs, by operand number
    /// ([`PlanOptions::source`]); empty by default (every operand as `inputs_in_place` says).
    pub sources: Vec<Source>,
    /// Load balance slack: a grid is admissible when its busiest rank's iteration box is at
    /// most `1 + balance_tolerance` times the smallest achievable one (default 0.25).
    pub balance_tolerance: f64,
    /// When true, the plan carries per-rank lists (words sent and received per step and in
    /// all, peak memory per rank): O(P) numbers. Off by default: any rank's figures are
    /// derived on demand ([`Plan::step_words`], [`Plan::peak_of`]).
    pub per_rank: bool,
    /// When true (default), communication is overlapped with computation where it can pay
    /// ([`overlap`]): phased groups prefetch the next phase's windows, and a group whose
    /// inputs arrive by a move is computed in phases whose windows are in flight while the
    /// previous phase computes. False gives the plan without overlap.
    pub overlap: bool,
    /// The machine the plan's seconds are predicted for (default: [`Machine::default`]).
    pub machine: Machine,
    /// What [`build`] minimises over its candidate paths (default: predicted time).
    pub objective: Objective,
    /// The element type the plan is for (default f64): its words' size in bytes, for the
    /// predicted seconds and memory ([`Plan::dtype`]).
    pub dtype: DType,
    /// How many candidate trees are planned under [`Objective::Time`] (default: all).
    pub tree_search: TreeSearch,
}

impl std::fmt::Debug for PlanOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PlanOptions")
            .field("procs", &self.procs)
            .field("mem", &self.mem)
            .field("mem_total", &self.mem_total)
            .field("path.strategy", &self.path.strategy)
            .field("inputs_in_place", &self.inputs_in_place)
            .field("sources", &self.sources)
            .field("balance_tolerance", &self.balance_tolerance)
            .field("per_rank", &self.per_rank)
            .field("overlap", &self.overlap)
            .field("machine", &self.machine.name)
            .field("objective", &self.objective)
            .field("dtype", &self.dtype)
            .field("tree_search", &self.tree_search)
            .finish()
    }
}

impl Default for PlanOptions {
    fn default() -> Self {
        PlanOptions {
            procs: 1,
            mem: None,
            mem_total: None,
            path: deinsum_path::PathOptions::default(),
            inputs_in_place: false,
            sources: Vec::new(),
            balance_tolerance: 0.25,
            per_rank: false,
            overlap: true,
            machine: Machine::default(),
            objective: Objective::default(),
            dtype: DType::default(),
            tree_search: TreeSearch::default(),
        }
    }
}

/// Why a plan cannot be built.
#[derive(Debug, thiserror::Error)]
pub enum PlanError {
    /// P = 0.
    #[error("the number of ranks must be at least 1 (got --procs 0)")]
    ZeroProcs,
    /// The budget S is too small for every candidate plan.
    #[error("memory budget of {budget} words per rank is too small: the best plan needs {needed} words per rank{detail}")]
    MemoryTooSmall {
        /// The budget given.
        budget: u64,
        /// The least budget that plans ([`build`] and [`build_from`] search it): a plan at
        /// this budget exists and none at one word less.
        needed: u64,
        /// What needs it (such as ` (group 0 ijk,ja,ka->ia)`).
        detail: String,
    },
    /// The cap on the whole process (data with message buffers) is too small.
    #[error("memory cap of {budget} words per rank with message buffers is too small: the best plan needs {needed} words per rank{detail}")]
    TotalMemoryTooSmall {
        /// The cap given.
        budget: u64,
        /// The least cap that plans ([`build`] and [`build_from`] search it).
        needed: u64,
        /// What needs it.
        detail: String,
    },
    /// The path is opt_einsum's one step over all operands (no pairwise path fits the memory
    /// limit); plans are built from steps over one or two operands.
    #[error(
        "no pairwise contraction path keeps every intermediate within the memory limit of \
             {limit} elements, so the path is one step over all operands at once ({path}); \
             deinsum plans only steps over one or two operands: raise the path memory limit or \
             drop it (the per-rank budget `mem` is what bounds a rank's memory)"
    )]
    MultiOperandStep {
        /// The path memory limit, in elements.
        limit: u128,
        /// The path in opt_einsum's linear format.
        path: String,
    },
    /// A `Given` source does not fit its operand.
    #[error("the layout given for operand {operand} does not fit it: {why}")]
    BadSource {
        /// The operand's number.
        operand: usize,
        /// What does not fit.
        why: String,
    },
    /// The tree or fusion handed in is inconsistent (an upstream bug, not user input).
    #[error("inconsistent plan input: {0}")]
    Inconsistent(String),
    /// The path optimizer failed.
    #[error(transparent)]
    Path(#[from] deinsum_path::PathError),
    /// The SOAP analysis failed.
    #[error(transparent)]
    Soap(#[from] deinsum_soap::SoapError),
    /// A size overflowed.
    #[error("size overflow: {0}")]
    Overflow(String),
    /// A plan JSON of another schema version.
    #[error("plan JSON schema version {found} is not supported: this deinsum reads version {PLAN_VERSION} only (plan again with `deinsum plan ... --format json`)")]
    Version {
        /// The version the file declares (0 when it declares none).
        found: u64,
    },
    /// A plan JSON that does not parse.
    #[error("plan JSON does not parse: {0}")]
    Json(String),
}

/// A complete distributed execution plan.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Plan {
    /// Schema version, [`PLAN_VERSION`].
    pub version: u32,
    /// The einsum in canonical form.
    pub expression: String,
    /// The validated einsum (operands' storage dimensions, output, extents).
    #[serde(with = "schema::einsum")]
    pub einsum: ParsedEinsum,
    /// Number of ranks the plan is for.
    pub procs: usize,
    /// Per-rank memory budget in words (`None`: unlimited).
    pub mem: Option<u64>,
    /// Per-rank cap on the data with message buffers, in words (absent: none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mem_total: Option<u64>,
    /// The element type the plan is for: a word of its figures is `dtype.bytes()` bytes
    /// (absent in the JSON: f64, so f64 plans read and write as before the field existed).
    #[serde(default, skip_serializing_if = "DType::is_f64")]
    pub dtype: DType,
    /// The contraction tree.
    #[serde(with = "schema::tree")]
    pub tree: ContractionTree,
    /// opt_einsum linear path of the tree.
    pub path: Vec<Vec<usize>>,
    /// The distributed tensors.
    pub tensors: Vec<Tensor>,
    /// Per fused group: grid and distributions.
    pub groups: Vec<GroupPlan>,
    /// The ordered steps.
    pub steps: Vec<PlanStep>,
    /// The output tensor's id and its final distribution.
    pub output: (TensorId, Distribution),
    /// Predicted figures.
    pub prediction: Prediction,
    /// Ranks that do no work and why (empty when all are used).
    pub idle: Option<String>,
    /// Number of ranks that compute in at least one group.
    pub ranks_used: usize,
    /// Whether inputs were planned as already sitting in their first group's distribution.
    pub inputs_in_place: bool,
}

impl GroupPlan {
    /// The per-index ranges (in `group.indices` order) that `rank` iterates, its grid block
    /// with the phased index cut to `phase`; `None` for a rank outside the grid.
    pub fn iteration_box(
        &self,
        einsum: &deinsum_expr::ParsedEinsum,
        rank: usize,
        phase: Option<PhaseCut>,
    ) -> Option<Vec<Interval>> {
        let coords = self.grid.coords(rank)?;
        let ranges = self.group.indices.iter().map(|&c| {
            let r = self.grid_range(einsum, c, |p| coords[p]);
            PhaseCut::apply(phase, c, r)
        });
        Some(ranges.collect())
    }

    /// The busiest rank's range of index `c`, phase `part` 0 of `phase` when it cuts `c`:
    /// rank 0's, since a ceil-sized cut puts its longest block first.
    pub fn busiest_range(
        &self,
        einsum: &deinsum_expr::ParsedEinsum,
        c: Index,
        phase: Option<(Index, usize)>,
    ) -> Interval {
        let r = self.grid_range(einsum, c, |_| 0);
        let cut = phase.map(|(index, count)| PhaseCut {
            index,
            count,
            part: 0,
        });
        PhaseCut::apply(cut, c, r)
    }

    /// Index `c`'s block at the grid coordinates `coord(grid dim)` (whole when not split).
    fn grid_range(
        &self,
        einsum: &deinsum_expr::ParsedEinsum,
        c: Index,
        coord: impl Fn(usize) -> usize,
    ) -> Interval {
        let whole = Interval::new(0, einsum.extent(c));
        match self.grid.position(c) {
            Some(p) => whole.subinterval(self.grid.dims[p].size, coord(p)),
            None => whole,
        }
    }
}

impl Plan {
    /// The tensor with id `id`.
    pub fn tensor(&self, id: TensorId) -> Option<&Tensor> {
        self.tensors.iter().find(|t| t.id == id)
    }

    /// The distribution input tensor `id` is loaded in (its `Load` step), if the plan loads it.
    pub fn load_dist(&self, id: TensorId) -> Option<&Distribution> {
        self.steps.iter().find_map(|s| match s {
            PlanStep::Load { tensor, dist } if *tensor == id => Some(dist),
            _ => None,
        })
    }

    /// Reads a plan from its JSON, refusing other schema versions with a clear message
    /// (checked before the body is parsed, so an old plan is named as such).
    pub fn from_json(text: &str) -> Result<Plan, PlanError> {
        #[derive(Deserialize)]
        struct Head {
            #[serde(default)]
            version: u64,
        }
        let head: Head = serde_json::from_str(text).map_err(|e| PlanError::Json(e.to_string()))?;
        if head.version != u64::from(PLAN_VERSION) {
            return Err(PlanError::Version {
                found: head.version,
            });
        }
        serde_json::from_str(text).map_err(|e| PlanError::Json(e.to_string()))
    }

    /// `words` of this plan's element type in bytes ([`DType::bytes`] of [`Plan::dtype`]).
    pub fn bytes(&self, words: u64) -> u128 {
        u128::from(words) * self.dtype.bytes() as u128
    }
}

mod builder;
mod driver;
mod entry;
mod fasthash;
mod grids;
mod memory;
mod moves;
pub mod overlap;
mod per_rank;
mod planner;
mod predict;
mod rank_words;
pub use builder::{canonical_distribution, reduced_distribution, MIN_CANONICAL_BLOCK};
pub use driver::{analysis_memory, build_from, plan_tree};
pub use entry::{build, build_flops};
pub use grids::{axis_candidates, enumerate as enumerate_grids, tight};
pub use moves::{block_len, coord, MoveView};
pub use per_rank::{PerRank, UnorderedRanks};
