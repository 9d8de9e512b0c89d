//! The plan executor: runs [`Plan::steps`] in order on every rank of a communicator.

use crate::block::{Data, LocalBlock, LocalTensor};
use crate::buffers::OutOfMemory;
use crate::comm::Calls;
use crate::data::{block_of_full, seeded_block, unpack_box, Inputs};
use crate::held::HeldBlock;
use crate::kernels::{eval_group, GroupStats, GroupSteps};
use crate::mem::Mem;
use crate::moves::{self, MoveError};
use crate::{CommError, Communicator, Scalar};
use deinsum_path::{NodeId, StepId};
use deinsum_plan::{
    Block, Distribution, PhaseCut, Plan, PlanStep, Tensor, TensorId, TensorKind, Transfer,
};
use std::collections::BTreeMap;
use std::time::Instant;

/// Why a run failed.
#[derive(Debug, thiserror::Error)]
pub enum ExecError {
    /// Communication failed (or a peer failed).
    #[error(transparent)]
    Comm(#[from] CommError),
    /// The caller cancelled the run ([`ExecOptions::cancel`]); it stopped between steps.
    #[error("rank {rank}: the run was cancelled before step {step}")]
    Cancelled {
        /// The rank that saw the request.
        rank: usize,
        /// The step it did not start.
        step: usize,
    },
    /// The ranks do not all hold the same plan.
    #[error("rank {rank}: the ranks hold different plans (plan hash {hash:016x} differs)")]
    PlanMismatch {
        /// The detecting rank.
        rank: usize,
        /// Its plan hash.
        hash: u64,
    },
    /// The plan is for a different number of ranks than the communicator has.
    #[error("the plan is for {plan} ranks, the communicator has {world}")]
    WorldSize {
        /// Ranks of the plan.
        plan: usize,
        /// Ranks of the communicator.
        world: usize,
    },
    /// The plan is inconsistent (a step that its semantics do not allow).
    #[error("invalid plan at step {step}: {message}")]
    InvalidPlan {
        /// Step number.
        step: usize,
        /// What is wrong.
        message: String,
    },
    /// The rank's thread pool cannot be made.
    #[error("cannot start the rank's threads: {0}")]
    Threads(String),
    /// The GEMM library asked for is not in this build ([`ExecOptions::gemm`]).
    #[error(transparent)]
    Gemm(#[from] crate::gemm::GemmUnavailable),
    /// A tensor's buffer cannot be allocated (a memory limit the preflight check did not
    /// see: `ulimit -v`, a cgroup, other processes). Not the user's input: exit 1.
    #[error(
        "rank {rank}: cannot allocate {} ({bytes} bytes) for {tensor} at {stage}: out of memory",
        crate::preflight::human(*.bytes)
    )]
    OutOfMemory {
        /// The rank whose allocation failed.
        rank: usize,
        /// The tensor the buffer was for: its name and indices, such as `T1 (jk)`.
        tensor: String,
        /// The bytes asked for.
        bytes: u128,
        /// Where in the run.
        stage: Stage,
    },
    /// Bad input data (wrong length, unreadable file).
    #[error("rank {rank}: input operand {operand}: {message}")]
    Input {
        /// The rank that found it.
        rank: usize,
        /// The operand.
        operand: usize,
        /// What is wrong.
        message: String,
    },
}

/// Where in a run an allocation failed ([`ExecError::OutOfMemory`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stage {
    /// Plan step `step` (inputs are read ahead of the runs, at their Load steps).
    Step {
        /// Position in `Plan::steps`.
        step: usize,
        /// Its kind.
        kind: StepKind,
    },
    /// The gather of the output to rank 0, after the run.
    Gather,
}

impl std::fmt::Display for Stage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Stage::Step { step, kind } => write!(f, "step {step} ({kind})"),
            Stage::Gather => write!(f, "the gather of the output"),
        }
    }
}

/// A tensor as an error names it: `T1 (jk)`; an intermediate inside a fused group (no plan
/// tensor) by its tree node and indices.
fn tensor_label(plan: &Plan, id: usize) -> String {
    if let Some(t) = plan.tensor(id) {
        return t.label();
    }
    match plan
        .tree
        .step_of(NodeId(id))
        .map(|s| &plan.tree.steps[s.index()])
    {
        Some(st) => format!(
            "t{id} ({}), an intermediate of a fused group",
            st.output.iter().collect::<String>()
        ),
        None => format!("tensor {id}"),
    }
}

/// The executor's error for an allocation that failed on rank `rank` at `stage`; `tensor` is
/// named unless the failure names a more precise one.
fn oom(plan: &Plan, rank: usize, stage: Stage, tensor: usize, e: OutOfMemory) -> ExecError {
    ExecError::OutOfMemory {
        rank,
        tensor: tensor_label(plan, e.tensor.unwrap_or(tensor)),
        bytes: e.bytes,
        stage,
    }
}

/// The stage of plan step `i`.
fn step_stage(plan: &Plan, i: usize) -> Stage {
    Stage::Step {
        step: i,
        kind: plan.steps.get(i).map_or(StepKind::Free, StepKind::of),
    }
}

/// Executor settings.
#[derive(Clone, Debug)]
pub struct ExecOptions {
    /// Largest intermediate of a fused group evaluated at once, in words (tiles are cut so
    /// that none exceeds it). The plan's memory model counts whole intermediates, so any
    /// value keeps within the prediction; the default (4 Mi words) leaves GEMM-sized
    /// intermediates whole, so a fused group reads its large operands in place once instead
    /// of copying a slice of them per tile.
    pub tile_words: u64,
    /// Timed runs of the plan's steps (at least 1); the inputs are read once, before them.
    pub repeat: usize,
    /// Untimed runs before the timed ones (first-touch page faults, caches, thread pools).
    pub warmup: usize,
    /// Threads per rank for GEMMs, fused kernels and packing (at least 1).
    pub threads: usize,
    /// Set to true (from any thread) to stop the run before its next step; the ranks then fail
    /// with [`ExecError::Cancelled`] (a rank waiting on a peer is woken by the peer's failure).
    pub cancel: Option<std::sync::Arc<std::sync::atomic::AtomicBool>>,
    /// Free buffers kept across runs (see [`crate::buffers::KeptBuffers`]): the run takes its
    /// buffers from them and leaves its freed ones there (inputs read ahead included), up to
    /// its plan's predicted peak per rank. `None`: a single run allocates afresh.
    pub kept: Option<crate::buffers::KeptBuffers>,
    /// Every rank runs this very `Plan` value (in-process ranks of one call sharing it by
    /// reference): the check that the ranks hold the same plan (a hash of its JSON, about
    /// 50 µs, and an all-reduce) is skipped.
    pub shared_plan: bool,
    /// This rank's predicted peak, `Plan::peak_of(rank)`, when the caller has it already (a
    /// repeated call of one compiled plan): the memory model is then not walked again.
    pub peak: Option<(u64, u64)>,
    /// The library that runs the GEMMs ([`crate::Gemm::Blas`] needs the cargo feature
    /// `blas`; a run asking for it without fails with [`ExecError::Gemm`]).
    pub gemm: crate::Gemm,
}

impl Default for ExecOptions {
    fn default() -> Self {
        ExecOptions {
            tile_words: 1 << 22,
            repeat: 1,
            warmup: 0,
            threads: 1,
            cancel: None,
            kept: None,
            shared_plan: false,
            peak: None,
            gemm: crate::Gemm::Faer,
        }
    }
}

/// The kind of a plan step, as measures and reports name it (`load`, `redistribute`, ...).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StepKind {
    /// [`PlanStep::Load`].
    Load,
    /// [`PlanStep::Redistribute`].
    Redistribute,
    /// [`PlanStep::Compute`].
    Compute,
    /// [`PlanStep::ComputePhase`].
    ComputePhase,
    /// [`PlanStep::Free`].
    Free,
}

impl StepKind {
    /// The kind of `step`.
    pub fn of(step: &PlanStep) -> StepKind {
        match step {
            PlanStep::Load { .. } => StepKind::Load,
            PlanStep::Redistribute { .. } => StepKind::Redistribute,
            PlanStep::Compute { .. } => StepKind::Compute,
            PlanStep::ComputePhase { .. } => StepKind::ComputePhase,
            PlanStep::Free { .. } => StepKind::Free,
        }
    }

    /// Its name in reports and JSON.
    pub fn name(self) -> &'static str {
        match self {
            StepKind::Load => "load",
            StepKind::Redistribute => "redistribute",
            StepKind::Compute => "compute",
            StepKind::ComputePhase => "compute_phase",
            StepKind::Free => "free",
        }
    }
}

impl std::fmt::Display for StepKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // pad, so that width and alignment flags apply as they do to strings
        f.pad(self.name())
    }
}

/// What one plan step did on this rank, beside the plan's prediction.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct StepMeasure {
    /// Position in `Plan::steps`.
    pub step: usize,
    /// What kind of step it was.
    pub kind: StepKind,
    /// Tensor moved or produced.
    pub tensor: Option<TensorId>,
    /// Wall time in seconds (of the last run).
    pub seconds: f64,
    /// Wall time in seconds of each timed run (after the warm-up runs), in run order.
    #[serde(default)]
    pub samples: Vec<f64>,
    /// Words sent to other ranks.
    pub sent: u64,
    /// Words received from other ranks.
    pub received: u64,
    /// The plan's predicted words sent by this rank.
    pub predicted_sent: u64,
    /// The plan's predicted words received by this rank.
    pub predicted_received: u64,
    /// Multiply-adds done by this rank.
    pub madds: f64,
    /// When the step started, in seconds since this rank left the barrier that starts every
    /// run (the ranks' common start), in the last run.
    #[serde(default)]
    pub start: f64,
    /// When the step ended, in the same clock as `start`.
    #[serde(default)]
    pub end: f64,
    /// Communicator calls per collective kind this step made on this rank (which path its
    /// moves took).
    #[serde(default, skip_serializing_if = "Calls::is_empty")]
    pub calls: Calls,
    /// Seconds of the step this rank spent blocked waiting for peers, in the last run, as the
    /// communicator measures it ([`Communicator::blocked`]); the rest of `seconds` is compute,
    /// packing and the transfers themselves.
    #[serde(default)]
    pub blocked: f64,
}

/// What a run did on this rank.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct RunReport {
    /// This rank.
    pub rank: usize,
    /// Per step.
    pub steps: Vec<StepMeasure>,
    /// Wall time of the whole run (reading the inputs and every repetition), seconds.
    pub seconds: f64,
    /// Seconds spent reading or generating the input blocks, before the timed runs.
    #[serde(default)]
    pub load_seconds: f64,
    /// Threads this rank computed with.
    #[serde(default)]
    pub threads: usize,
    /// Multiply-adds done by this rank.
    pub madds: f64,
    /// Peak words of tensor data held at once: blocks, the new block of a redistribution and
    /// a group's intermediates (what the plan's prediction counts).
    pub peak_words: u64,
    /// The same peak with the message buffers of redistributions (packed and received) added.
    pub peak_words_with_buffers: u64,
    /// The plan's predicted peak for this rank, if it has one.
    pub predicted_peak_words: Option<u64>,
}

/// A distributed tensor: this rank's block of it and the distribution.
#[derive(Clone, Debug)]
pub struct DistTensor<T: 'static> {
    /// The tensor (indices, shape).
    pub tensor: Tensor,
    /// How it is distributed.
    pub dist: Distribution,
    /// This rank's block (`None` outside the distribution's grid).
    pub local: Option<LocalTensor<T>>,
    /// This rank.
    pub rank: usize,
}

impl<T: Scalar> DistTensor<T> {
    /// The block rank `r` holds as the one holder [`DistTensor::gather`] takes it from
    /// (coordinate 0 along every grid dim that does not split), `None` for the other ranks:
    /// the primary blocks of all ranks are disjoint and cover the tensor.
    pub fn primary_block(&self, r: usize) -> Option<Block> {
        let c = self.dist.grid.coords(r)?;
        let ok = c
            .iter()
            .enumerate()
            .all(|(g, &x)| x == 0 || self.dist.split.iter().flatten().any(|&s| s == g));
        if ok {
            self.dist.block(r, &self.tensor.shape)
        } else {
            None
        }
    }

    /// This rank's block if it is its holder for a gather (see [`assemble`]), else `None`:
    /// the in-process way to the whole output, without messages.
    pub fn into_primary(self) -> Option<LocalTensor<T>> {
        self.primary_block(self.rank)?;
        self.local
    }

    /// Gathers the whole tensor (row-major over its indices) to rank 0: `Some` there, `None`
    /// elsewhere. Collective: every rank must call it.
    pub fn gather<C: Communicator>(&self, comm: &C) -> Result<Option<Vec<T>>, ExecError> {
        let me = comm.rank();
        let oom = |e: OutOfMemory| ExecError::OutOfMemory {
            rank: me,
            tensor: self.tensor.label(),
            bytes: e.bytes,
            stage: Stage::Gather,
        };
        let p = comm.size();
        let shape = &self.tensor.shape;
        let primary = |r: usize| self.primary_block(r);
        let mut counts = vec![0usize; p];
        let mut send = Vec::new();
        if me != 0 && primary(me).is_some() {
            if let Some(l) = &self.local {
                let bytes = l.data.len().saturating_mul(T::BYTES);
                send = crate::buffers::try_vec::<u8>(bytes).map_err(oom)?;
                T::extend_bytes(&l.data, &mut send);
                counts[0] = send.len();
            }
        }
        let (recv, rc) = comm.all_to_all_v(&send, &counts)?;
        if me != 0 {
            return Ok(None);
        }
        let mut full = LocalTensor::<T>::zeros(
            self.tensor.indices.clone(),
            shape.iter().map(|&n| (0, n)).collect(),
        )
        .map_err(oom)?;
        let mut off = 0;
        for (r, &c) in rc.iter().enumerate() {
            let Some(b) = primary(r) else { continue };
            if r == 0 {
                if let Some(l) = &self.local {
                    unpack_box(&mut full, &b, &l.data, false).map_err(oom)?;
                }
                continue;
            }
            let mut vals = crate::buffers::try_vec(c / T::BYTES).map_err(oom)?;
            T::from_bytes(&recv[off..off + c], &mut vals);
            off += c;
            if vals.len() as u64 != b.len() {
                return Err(CommError::Invalid(format!(
                    "gather: rank {r} sent {} elements for a block of {}",
                    vals.len(),
                    b.len()
                ))
                .into());
            }
            unpack_box(&mut full, &b, &vals, false).map_err(oom)?;
        }
        Ok(Some(full.data.into_vec()))
    }
}

/// The whole `tensor` (row-major over its indices) from its disjoint blocks
/// `blocks` that cover it (each rank's [`DistTensor::into_primary`]), taken by value: when the
/// blocks are consecutive slabs of the row-major order (a split of the leading indices), the
/// first block's buffer is grown and the others appended (each element copied once, the first
/// block's not at all: a large buffer grows by remapping its pages); otherwise every block is
/// copied once into a fresh buffer. The blocks' buffers that the result does not take are
/// handed to `spare` with their owner (the first of each pair), for reuse.
pub fn assemble<T: Scalar>(
    tensor: &Tensor,
    blocks: Vec<(usize, LocalTensor<T>)>,
    mut spare: impl FnMut(usize, Vec<T>),
) -> Result<Vec<T>, OutOfMemory> {
    let shape = &tensor.shape[..];
    let total: usize = shape.iter().product();
    let strides = crate::layout::strides_of(shape);
    let (owners, blocks): (Vec<usize>, Vec<LocalTensor<T>>) = blocks
        .into_iter()
        .filter(|(_, b)| !b.data.is_empty())
        .unzip();
    let slab = |b: &LocalTensor<T>| slab_of(shape, &strides, &b.ranges);
    let runs: Option<Vec<(usize, usize)>> = blocks.iter().map(slab).collect();
    if let Some(mut runs) = runs {
        let mut order: Vec<usize> = (0..blocks.len()).collect();
        order.sort_by_key(|&i| runs[i].0);
        if !runs.is_empty() && tile(&mut runs, total) {
            let mut taken: Vec<Option<Vec<T>>> = blocks
                .into_iter()
                .map(|b| Some(b.data.into_vec()))
                .collect();
            let mut out = taken[order[0]].take().unwrap_or_default();
            out.try_reserve_exact(total - out.len())
                .map_err(|_| OutOfMemory::of::<T>(total))?;
            for &i in &order[1..] {
                if let Some(d) = taken[i].take() {
                    out.extend_from_slice(&d);
                    spare(owners[i], d);
                }
            }
            return Ok(out);
        }
    }
    let whole = crate::buffers::take::<T>(total)?;
    assemble_onto(
        tensor,
        whole,
        owners.into_iter().zip(blocks).collect(),
        spare,
    )
}

/// `whole` (all of `tensor`, row-major) with `blocks` copied over it where they lie; their
/// buffers go to `spare` with their owner, as in [`assemble`].
pub fn assemble_onto<T: Scalar>(
    tensor: &Tensor,
    whole: Vec<T>,
    blocks: Vec<(usize, LocalTensor<T>)>,
    mut spare: impl FnMut(usize, Vec<T>),
) -> Result<Vec<T>, OutOfMemory> {
    let mut full = LocalTensor {
        indices: tensor.indices.clone(),
        ranges: tensor.shape.iter().map(|&n| (0, n)).collect(),
        data: whole.into(),
    };
    for (owner, b) in blocks {
        let bx = Block {
            ranges: b.ranges.iter().copied().collect(),
        };
        unpack_box(&mut full, &bx, &b.data, false)?;
        spare(owner, b.data.into_vec());
    }
    Ok(full.data.into_vec())
}

/// The run `(start, len)` of the row-major order of `shape` (with `strides`) that the block
/// `ranges` is, if it is one: the dims after its first cut one are whole and those before it
/// have extent 1.
fn slab_of(
    shape: &[usize],
    strides: &[usize],
    ranges: &[(usize, usize)],
) -> Option<(usize, usize)> {
    let first = ranges
        .iter()
        .zip(shape)
        .position(|(&(s, e), &n)| (s, e) != (0, n))
        .unwrap_or(0);
    let outer_ok = ranges[..first.min(ranges.len())]
        .iter()
        .all(|&(s, e)| e - s == 1);
    let inner_ok = ranges
        .iter()
        .zip(shape)
        .skip(first + 1)
        .all(|(&(s, e), &n)| (s, e) == (0, n));
    let start = ranges
        .iter()
        .zip(strides)
        .map(|(&(s, _), &st)| s * st)
        .sum();
    let len = ranges.iter().map(|&(s, e)| e - s).product();
    (outer_ok && inner_ok).then_some((start, len))
}

/// The run `(start, len)` of `tensor`'s row-major order that the block `ranges` is, if it is
/// one (see [`primary_slabs`]).
pub fn slab_in(tensor: &Tensor, ranges: &[(usize, usize)]) -> Option<(usize, usize)> {
    slab_of(
        &tensor.shape,
        &crate::layout::strides_of(&tensor.shape),
        ranges,
    )
}

/// Where each rank's primary block of `tensor` distributed as `dist` over `procs` ranks (the
/// block [`DistTensor::into_primary`] gives) lies in the row-major whole, as `(start, len)`
/// (`None` for a rank with none), when every such block is one run and the runs tile the
/// whole: then in-process ranks can copy their blocks straight into the whole, each its own,
/// instead of one thread putting them together after the run ([`assemble`]).
pub fn primary_slabs(
    tensor: &Tensor,
    dist: &Distribution,
    procs: usize,
) -> Option<Vec<Option<(usize, usize)>>> {
    let shape = &tensor.shape[..];
    let strides = crate::layout::strides_of(shape);
    let whole = DistTensor::<f64> {
        tensor: tensor.clone(),
        dist: dist.clone(),
        local: None,
        rank: 0,
    };
    let slabs: Vec<Option<(usize, usize)>> = (0..procs)
        .map(|r| match whole.primary_block(r) {
            Some(b) => slab_of(shape, &strides, &b.ranges).map(Some),
            None => Some(None),
        })
        .collect::<Option<_>>()?;
    let mut runs: Vec<(usize, usize)> = slabs
        .iter()
        .flatten()
        .copied()
        .filter(|r| r.1 > 0)
        .collect();
    tile(&mut runs, shape.iter().product()).then_some(slabs)
}

/// Whether the runs `(start, len)`, once sorted (in place), follow each other from 0 to
/// `total` without gap or overlap.
fn tile(runs: &mut [(usize, usize)], total: usize) -> bool {
    runs.sort();
    runs.first().is_none_or(|r| r.0 == 0)
        && runs.windows(2).all(|w| w[0].0 + w[0].1 == w[1].0)
        && runs.last().map_or(total == 0, |r| r.0 + r.1 == total)
}

/// A hash of the plan's canonical JSON (FNV-1a-style over 8-byte words, streamed while the
/// JSON is written, so a large plan is neither held as text nor hashed byte by byte): every
/// rank must hold the same plan.
pub fn plan_hash(plan: &Plan) -> u64 {
    let mut h = WordHasher {
        h: 0xcbf2_9ce4_8422_2325,
        tail: [0; 8],
        n: 0,
    };
    // Writing into the hasher cannot fail; a plan that does not serialize hashes what it wrote.
    let _ = serde_json::to_writer(&mut h, plan);
    h.finish()
}

/// The streaming hasher of [`plan_hash`].
struct WordHasher {
    h: u64,
    tail: [u8; 8],
    n: usize,
}

impl WordHasher {
    fn word(&mut self, w: u64) {
        self.h = (self.h ^ w)
            .wrapping_mul(0x0000_0100_0000_01b3)
            .rotate_left(29);
    }

    fn finish(mut self) -> u64 {
        let n = self.n;
        self.tail[n..].fill(0);
        self.word(u64::from_le_bytes(self.tail) ^ ((n as u64) << 56));
        self.h
    }
}

impl std::io::Write for WordHasher {
    fn write(&mut self, mut buf: &[u8]) -> std::io::Result<usize> {
        let len = buf.len();
        if self.n > 0 {
            let k = (8 - self.n).min(buf.len());
            self.tail[self.n..self.n + k].copy_from_slice(&buf[..k]);
            self.n += k;
            buf = &buf[k..];
            if self.n < 8 {
                return Ok(len);
            }
            self.word(u64::from_le_bytes(self.tail));
            self.n = 0;
        }
        let mut words = buf.chunks_exact(8);
        for c in &mut words {
            self.word(u64::from_le_bytes(c.try_into().expect("8 bytes")));
        }
        let rest = words.remainder();
        self.tail[..rest.len()].copy_from_slice(rest);
        self.n = rest.len();
        Ok(len)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Runs `plan` on `comm` and returns this rank's part of the distributed output.
pub fn execute<T: Scalar, C: Communicator>(
    plan: &Plan,
    comm: &C,
    inputs: &Inputs<T>,
) -> Result<DistTensor<T>, ExecError> {
    execute_measured(plan, comm, inputs, &ExecOptions::default()).map(|(t, _)| t)
}

/// Words of rank memory a block takes (none for a lent one: see [`Data::own_words`]).
fn words<T: Scalar>(t: &Option<LocalBlock<'_, T>>) -> u64 {
    t.as_ref().map_or(0, |l| l.data.own_words())
}

fn held_words<T: Scalar>(t: &Option<HeldBlock<'_, T>>) -> u64 {
    t.as_ref().map_or(0, HeldBlock::words)
}

/// Runs `plan` on `comm` and also returns what every step did on this rank.
pub fn execute_measured<T: Scalar, C: Communicator>(
    plan: &Plan,
    comm: &C,
    inputs: &Inputs<T>,
    opts: &ExecOptions,
) -> Result<(DistTensor<T>, RunReport), ExecError> {
    if let Some(out) = empty_output(plan, comm) {
        return out;
    }
    execute_from(plan, comm, Source::Inputs(inputs), opts)
}

/// [`execute_measured`] on whole operands the caller lends, one per operand in storage layout
/// (row-major over `Operand::dims`): a rank's block that is a contiguous part of its operand
/// (all of it, or a range of its leading indices, with no diagonal or broadcast dim) is read
/// in place, neither copied nor counted in the rank's memory (`RunReport::peak_words` leaves
/// it out, where the plan's predicted peak counts it); other blocks are copied out once.
pub fn execute_lent<T: Scalar, C: Communicator>(
    plan: &Plan,
    comm: &C,
    operands: &[&[T]],
    opts: &ExecOptions,
) -> Result<(DistTensor<T>, RunReport), ExecError> {
    if let Some(out) = empty_output(plan, comm) {
        return out;
    }
    execute_from(plan, comm, Source::Lent(operands), opts)
}

/// [`execute_measured`] on this rank's own blocks, lent for the run: operand number to the
/// row-major data of exactly its block in the plan's `Load` distribution, read in place (a
/// distributed array that stays placed between runs is never copied to be read).
pub fn execute_lent_blocks<T: Scalar, C: Communicator>(
    plan: &Plan,
    comm: &C,
    blocks: &BTreeMap<usize, &[T]>,
    opts: &ExecOptions,
) -> Result<(DistTensor<T>, RunReport), ExecError> {
    if let Some(out) = empty_output(plan, comm) {
        return out;
    }
    execute_from(plan, comm, Source::LentBlocks(blocks), opts)
}

/// Where a run's input blocks come from.
enum Source<'d, T> {
    /// The caller's [`Inputs`] (every block the rank's own).
    Inputs(&'d Inputs<T>),
    /// Whole operands lent for the run (contiguous blocks read in place).
    Lent(&'d [&'d [T]]),
    /// The rank's own blocks lent for the run (read in place).
    LentBlocks(&'d BTreeMap<usize, &'d [T]>),
}

impl<T> Clone for Source<'_, T> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<T> Copy for Source<'_, T> {}

/// The output of an einsum with an index of extent 0, without reading an input or running a
/// step: NumPy's meaning, an empty output, or zeros where the empty index is summed (each rank
/// holds its block of the output's distribution as zeros; nothing moves).
/// `None` when every extent is at least 1 (the plan runs its steps).
fn empty_output<T: Scalar, C: Communicator>(
    plan: &Plan,
    comm: &C,
) -> Option<Result<(DistTensor<T>, RunReport), ExecError>> {
    if plan.einsum.extents().values().all(|&n| n > 0) {
        return None;
    }
    if comm.size() != plan.procs {
        return Some(Err(ExecError::WorldSize {
            plan: plan.procs,
            world: comm.size(),
        }));
    }
    Some(zero_output(plan, comm.rank()))
}

/// Rank `me`'s block of the output of a plan with an empty extent, as zeros.
fn zero_output<T: Scalar>(plan: &Plan, me: usize) -> Result<(DistTensor<T>, RunReport), ExecError> {
    let (id, dist) = &plan.output;
    let tensor = plan
        .tensor(*id)
        .ok_or_else(|| ExecError::InvalidPlan {
            step: plan.steps.len(),
            message: "unknown output tensor".into(),
        })?
        .clone();
    let local = match dist.block(me, &tensor.shape) {
        Some(b) => Some(
            LocalTensor::zeros(tensor.indices.clone(), b.ranges.to_vec())
                .map_err(|e| oom(plan, me, Stage::Gather, *id, e))?,
        ),
        None => None,
    };
    let out = DistTensor {
        tensor,
        dist: dist.clone(),
        local,
        rank: me,
    };
    let report = RunReport {
        rank: me,
        ..RunReport::default()
    };
    Ok((out, report))
}

/// Fails unless `comm` has the plan's rank count and (unless `opts.shared_plan`) every rank
/// holds the same plan: a rank running another plan would deadlock or mix results.
fn check_world<C: Communicator>(
    plan: &Plan,
    comm: &C,
    opts: &ExecOptions,
) -> Result<(), ExecError> {
    if comm.size() != plan.procs {
        return Err(ExecError::WorldSize {
            plan: plan.procs,
            world: comm.size(),
        });
    }
    opts.gemm.check()?;
    if !opts.shared_plan {
        let h = plan_hash(plan);
        let mut agree = [h, !h];
        comm.all_reduce_max_u64(&mut agree)?;
        if agree != [h, !h] {
            return Err(ExecError::PlanMismatch {
                rank: comm.rank(),
                hash: h,
            });
        }
    }
    Ok(())
}

/// [`execute_measured`] from `source`.
fn execute_from<'d, T: Scalar, C: Communicator>(
    plan: &Plan,
    comm: &C,
    inputs: Source<'d, T>,
    opts: &ExecOptions,
) -> Result<(DistTensor<T>, RunReport), ExecError> {
    let me = comm.rank();
    check_world(plan, comm, opts)?;
    // Which moves run as collectives, agreed before any step (and the sub-communicators made),
    // so that no step's measured traffic includes it.
    let routes = moves::Routes::agree(plan, comm)?;
    let start = Instant::now();
    let runs = opts.warmup + opts.repeat.max(1);
    // The rank's threads: kernels use them inside `on_pool`; communication stays on the
    // rank's own thread (MPI is initialized for one thread per process). Repeated runs reuse
    // freed blocks and messages (crate::buffers), keeping at most the rank's predicted peak; so
    // do runs given buffers kept from earlier ones.
    // The plan's memory model is walked once per run (it costs about as much as a small
    // contraction).
    let peak = opts.peak.unwrap_or_else(|| plan.peak_of(me));
    let cap = if runs > 1 || opts.kept.is_some() {
        peak.1 as usize
    } else {
        0
    };
    let ctx = match &opts.kept {
        Some(k) => crate::buffers::RankContext::kept(k, cap, opts.threads, me),
        None => crate::buffers::RankContext::new(cap, opts.threads, me),
    }
    .map_err(|e| ExecError::Threads(e.to_string()))?;
    let _in_ctx = ctx.enter();
    // Kernels read the GEMM library from their thread: the rank's and its pool's workers.
    let _gemm = crate::gemm::enter(opts.gemm)?;
    if let Some(p) = ctx.thread_pool() {
        p.broadcast(|_| crate::gemm::set(opts.gemm));
    }
    // faer's per-thread buffers before the blocks (where its products are worth measuring).
    let min = crate::tune::MIN_MADDS as f64;
    if plan.groups.iter().any(|g| g.max_flops_per_rank >= min) {
        crate::scalar::warm_gemm();
        if let Some(p) = ctx.thread_pool() {
            p.broadcast(|_| crate::scalar::warm_gemm());
        }
    }
    // Inputs are read (or generated) before the timed runs: a Load step then only places the
    // block, so repetitions time the contraction, not the input source.
    let mut loaded = preload(plan, me, inputs)?;
    let pool = ctx.thread_pool();
    let load_seconds = start.elapsed().as_secs_f64();
    let mut samples: Vec<Vec<f64>> = vec![Vec::new(); plan.steps.len()];
    let mut last = None;
    for run in 0..runs {
        // Every rank starts each run together: a step's time is its own, not a late peer's.
        comm.barrier()?;
        let r = run_steps(plan, comm, &routes, &mut loaded, inputs, opts, pool)?;
        if run >= opts.warmup {
            for (s, m) in samples.iter_mut().zip(&r.2.steps) {
                s.push(m.seconds);
            }
        }
        if let Some((held, _, _)) = last.replace(r) {
            held.into_values()
                .for_each(|(_, b)| b.into_iter().for_each(HeldBlock::release));
        }
    }
    let (mut held, mem, mut report) = last.expect("at least one run");
    for (m, s) in report.steps.iter_mut().zip(samples) {
        m.samples = s;
    }
    report.load_seconds = load_seconds;
    report.threads = opts.threads.max(1);
    report.predicted_peak_words = Some(peak.0);
    let (out_id, out_dist) = &plan.output;
    let out_t = plan.tensor(*out_id).ok_or_else(|| ExecError::InvalidPlan {
        step: plan.steps.len(),
        message: format!("unknown output tensor {out_id}"),
    })?;
    let (d, local) = held.remove(out_id).ok_or_else(|| ExecError::InvalidPlan {
        step: plan.steps.len(),
        message: "the output is not live at the end".into(),
    })?;
    // What the run no longer needs goes to the free list (kept for the next run, if any).
    held.into_values()
        .filter_map(|(_, b)| b)
        .for_each(HeldBlock::release);
    loaded
        .into_values()
        .filter_map(|s| s.block)
        .for_each(|b| b.data.release());
    // The output as the caller's own (a block shared with other ranks is copied).
    let local = local
        .map(HeldBlock::into_owned)
        .transpose()
        .map_err(|e| oom(plan, me, Stage::Gather, *out_id, e))?;
    if &d != out_dist {
        return Err(ExecError::InvalidPlan {
            step: plan.steps.len(),
            message: "the output is not in the plan's final distribution".into(),
        });
    }
    report.seconds = start.elapsed().as_secs_f64();
    report.peak_words = mem.peak();
    report.peak_words_with_buffers = mem.peak_buffers();
    Ok((
        DistTensor {
            tensor: out_t.clone(),
            dist: d,
            local,
            rank: me,
        },
        report,
    ))
}

/// An input block read ahead of the runs.
struct Slot<'d, T: 'static> {
    /// The block's ranges (`None`: this rank holds no block of the input).
    ranges: Option<Vec<(usize, usize)>>,
    /// The block, while no run holds it: a run takes it at the Load step and gives it back
    /// where it would drop it (inputs are never written), so repeated runs neither copy nor
    /// free the inputs.
    block: Option<LocalBlock<'d, T>>,
}

/// Input blocks read ahead of the runs, by tensor.
type Loaded<'d, T> = BTreeMap<TensorId, Slot<'d, T>>;

/// Reads this rank's block of the input loaded by step `i` (`Load { tensor, dist }`).
fn read_input<'d, T: Scalar>(
    plan: &Plan,
    me: usize,
    inputs: Source<'d, T>,
    i: usize,
    tensor: TensorId,
    dist: &Distribution,
) -> Result<Option<LocalBlock<'d, T>>, ExecError> {
    let bad = |message: String| ExecError::InvalidPlan { step: i, message };
    let t = plan
        .tensor(tensor)
        .ok_or_else(|| bad(format!("unknown tensor {tensor}")))?;
    let TensorKind::Input(k) = t.kind else {
        return Err(bad(format!("load of {} which is not an input", t.name)));
    };
    if k >= plan.einsum.inputs().len() || dist.split.len() != t.shape.len() {
        return Err(bad(format!("load of {} does not fit the einsum", t.name)));
    }
    Ok(match dist.block(me, &t.shape) {
        None => None,
        Some(b) => {
            let data =
                load_block(plan, k, &b, inputs).map_err(|e| e.into_exec(plan, me, i, tensor, k))?;
            Some(LocalBlock {
                indices: t.indices.clone(),
                ranges: b.ranges.to_vec(),
                data,
            })
        }
    })
}

/// Reads this rank's block of every loaded input, checking each Load step.
fn preload<'d, T: Scalar>(
    plan: &Plan,
    me: usize,
    inputs: Source<'d, T>,
) -> Result<Loaded<'d, T>, ExecError> {
    let mut loaded = BTreeMap::new();
    for (i, step) in plan.steps.iter().enumerate() {
        let PlanStep::Load { tensor, dist } = step else {
            continue;
        };
        let block = read_input(plan, me, inputs, i, *tensor, dist)?;
        let slot = Slot {
            ranges: block.as_ref().map(|b| b.ranges.clone()),
            block,
        };
        if loaded.insert(*tensor, slot).is_some() {
            return Err(ExecError::InvalidPlan {
                step: i,
                message: format!("tensor {tensor} is loaded twice"),
            });
        }
    }
    Ok(loaded)
}

/// Gives an input's block back to its slot (a run is done with it); other blocks go to the
/// rank's free list.
fn give_back<'d, T: Scalar>(
    loaded: &mut Loaded<'d, T>,
    tensor: TensorId,
    block: Option<HeldBlock<'d, T>>,
) {
    let b = match block {
        Some(HeldBlock::Own(b)) => b,
        // A shared block is not an input's: it goes when its last holder lets go.
        Some(b) => return b.release(),
        None => return,
    };
    match loaded.get_mut(&tensor) {
        Some(slot) if slot.block.is_none() && slot.ranges.as_ref() == Some(&b.ranges) => {
            slot.block = Some(b);
        }
        _ => b.data.release(),
    }
}

/// The blocks a rank holds, by tensor, with their distributions.
type LiveBlocks<'d, T> = BTreeMap<TensorId, (Distribution, Option<HeldBlock<'d, T>>)>;

/// One run of the plan's steps from the preloaded inputs (`inputs` again only for a block a
/// previous run did not give back); returns the blocks held at the end, the memory tally and
/// the step measures.
fn run_steps<'d, T: Scalar, C: Communicator>(
    plan: &Plan,
    comm: &C,
    routes: &moves::Routes<C>,
    loaded: &mut Loaded<'d, T>,
    inputs: Source<'d, T>,
    opts: &ExecOptions,
    pool: Option<&rayon::ThreadPool>,
) -> Result<(LiveBlocks<'d, T>, Mem, RunReport), ExecError> {
    let me = comm.rank();
    let mut run = Interpreter {
        plan,
        comm,
        routes,
        loaded,
        inputs,
        opts,
        pool,
        me,
        held: BTreeMap::new(),
        mem: Mem::default(),
        prefetched: Vec::new(),
    };
    let mut report = RunReport {
        rank: me,
        ..RunReport::default()
    };
    // The caller has just left the barrier: the ranks' common start.
    let run_start = Instant::now();
    for (i, step) in plan.steps.iter().enumerate() {
        if opts
            .cancel
            .as_ref()
            .is_some_and(|c| c.load(std::sync::atomic::Ordering::Relaxed))
        {
            return Err(ExecError::Cancelled { rank: me, step: i });
        }
        let t0 = Instant::now();
        let tr0 = comm.traffic();
        let calls0 = comm.calls();
        let blocked0 = comm.blocked();
        let mut m = StepMeasure {
            step: i,
            kind: StepKind::of(step),
            tensor: None,
            seconds: 0.0,
            samples: Vec::new(),
            sent: 0,
            received: 0,
            predicted_sent: 0,
            predicted_received: 0,
            madds: 0.0,
            start: t0.duration_since(run_start).as_secs_f64(),
            end: 0.0,
            calls: Default::default(),
            blocked: 0.0,
        };
        run.step(i, step, &mut m)?;
        m.calls = comm.calls().since(&calls0);
        m.blocked = comm.blocked().saturating_sub(blocked0).as_secs_f64();
        let tr1 = comm.traffic();
        m.sent = (tr1.sent - tr0.sent) / T::BYTES as u64;
        m.received = (tr1.received - tr0.received) / T::BYTES as u64;
        m.seconds = t0.elapsed().as_secs_f64();
        m.end = m.start + m.seconds;
        report.madds += m.madds;
        report.steps.push(m);
    }
    if !run.prefetched.is_empty() {
        return Err(ExecError::InvalidPlan {
            step: plan.steps.len(),
            message: "the last step prefetched windows that no phase uses".into(),
        });
    }
    Ok((run.held, run.mem, report))
}

/// One rank walking one run of a plan: what it holds and its memory tally, with one method per
/// [`PlanStep`] kind.
struct Interpreter<'a, 'd, T: Scalar, C: Communicator> {
    plan: &'a Plan,
    comm: &'a C,
    /// How each move runs (collective, send/recv or exchange).
    routes: &'a moves::Routes<C>,
    loaded: &'a mut Loaded<'d, T>,
    inputs: Source<'d, T>,
    opts: &'a ExecOptions,
    pool: Option<&'a rayon::ThreadPool>,
    me: usize,
    held: LiveBlocks<'d, T>,
    mem: Mem,
    /// The windows the previous phase prefetched for the next one (double buffering).
    prefetched: Vec<PhaseWindow<'d, T>>,
}

/// A phase window: the tensor, its windowed distribution and this rank's block of it.
type PhaseWindow<'d, T> = (TensorId, Distribution, Option<HeldBlock<'d, T>>);

impl<'a, 'd, T: Scalar, C: Communicator> Interpreter<'a, 'd, T, C> {
    /// Runs step `i`, filling in what `m` measures besides time and traffic.
    fn step(&mut self, i: usize, step: &PlanStep, m: &mut StepMeasure) -> Result<(), ExecError> {
        if !self.prefetched.is_empty() && !matches!(step, PlanStep::ComputePhase { .. }) {
            return Err(ExecError::InvalidPlan {
                step: i,
                message: "windows prefetched by the step before are not used".into(),
            });
        }
        match step {
            PlanStep::Load { tensor, dist } => {
                m.tensor = Some(*tensor);
                self.load(i, *tensor, dist)
            }
            PlanStep::Redistribute {
                tensor,
                from,
                to,
                sum,
                ..
            } => {
                m.tensor = Some(*tensor);
                (m.predicted_sent, m.predicted_received) = self.routes.words(i);
                if *sum {
                    self.reduce_tensor(i, *tensor, from, to)
                } else {
                    self.move_tensor(i, *tensor, from, to)
                }
            }
            PlanStep::Compute { group } => self.compute(i, *group, m),
            PlanStep::ComputePhase {
                group,
                phase,
                fetch,
                prefetch,
                ..
            } => {
                (m.predicted_sent, m.predicted_received) = self.routes.words(i);
                self.compute_phase(i, *group, *phase, fetch, prefetch, m)
            }
            PlanStep::Free { tensor } => {
                m.tensor = Some(*tensor);
                if let Some((_, b)) = self.held.remove(tensor) {
                    self.mem.sub(held_words(&b));
                    give_back(self.loaded, *tensor, b);
                }
                Ok(())
            }
        }
    }

    /// Takes an input's block from its slot (read ahead of the timed runs).
    fn load(&mut self, i: usize, tensor: TensorId, dist: &Distribution) -> Result<(), ExecError> {
        let bad = |message: String| ExecError::InvalidPlan { step: i, message };
        let t = self
            .plan
            .tensor(tensor)
            .ok_or_else(|| bad(format!("unknown tensor {tensor}")))?;
        let slot = self
            .loaded
            .get_mut(&tensor)
            .ok_or_else(|| bad(format!("{} was not read ahead", t.name)))?;
        let local = match (&slot.ranges, slot.block.take()) {
            (None, _) => None,
            (Some(_), Some(b)) => Some(b),
            // Kept by the previous run (an input that is also the output): read again.
            (Some(_), None) => read_input(self.plan, self.me, self.inputs, i, tensor, dist)?,
        };
        self.mem.add(words(&local));
        self.held
            .insert(tensor, (dist.clone(), local.map(HeldBlock::Own)));
        Ok(())
    }

    /// Moves `tensor` from `from` to `to` along this rank's derived transfers: each word has
    /// one owner before and after (a block redistribution).
    fn move_tensor(
        &mut self,
        i: usize,
        tensor: TensorId,
        from: &Distribution,
        to: &Distribution,
    ) -> Result<(), ExecError> {
        let (t, cur, transfers) = self.take_source(i, tensor, from)?;
        let way = self.routes.way(i, 0);
        // Counted before the move: a source handed over to a peer comes back empty.
        let cur_words = held_words(&cur);
        let moved = moves::move_block(self.comm, way, t, cur, to, transfers, &mut self.mem);
        let moved = moved.map_err(step_move_error(self.plan, self.me, i, tensor))?;
        self.replace(tensor, to, cur_words, moved.source, moved.block);
        Ok(())
    }

    /// Sums the partial blocks of `tensor` (replicated over a reduced index in `from`) into
    /// their owners in `to`: a reduce-scatter, not a move.
    fn reduce_tensor(
        &mut self,
        i: usize,
        tensor: TensorId,
        from: &Distribution,
        to: &Distribution,
    ) -> Result<(), ExecError> {
        let (t, cur, transfers) = self.take_source(i, tensor, from)?;
        let way = self.routes.way(i, 0);
        let new = moves::reduce_block(
            self.comm,
            way,
            t,
            cur.as_deref(),
            to,
            transfers,
            &mut self.mem,
        );
        let new = new.map_err(step_move_error(self.plan, self.me, i, tensor))?;
        self.replace(tensor, to, held_words(&cur), cur, new.map(HeldBlock::Own));
        Ok(())
    }

    /// Takes the live block of `tensor`, checked to be in `from`, with this rank's transfers
    /// of step `i` (derived from the step: plans store none).
    #[allow(clippy::type_complexity)]
    fn take_source(
        &mut self,
        i: usize,
        tensor: TensorId,
        from: &Distribution,
    ) -> Result<(&'a Tensor, Option<HeldBlock<'d, T>>, &'a [Transfer]), ExecError> {
        let bad = |message: String| ExecError::InvalidPlan { step: i, message };
        let transfers = self
            .routes
            .transfers(i)
            .last()
            .map_or(&[][..], Vec::as_slice);
        let t = self
            .plan
            .tensor(tensor)
            .ok_or_else(|| bad(format!("unknown tensor {tensor}")))?;
        let (cur_dist, cur) = self
            .held
            .remove(&tensor)
            .ok_or_else(|| bad(format!("{} is not live", t.name)))?;
        if &cur_dist != from {
            return Err(bad(format!(
                "{} is not in the redistribution's source distribution",
                t.name
            )));
        }
        Ok((t, cur, transfers))
    }

    /// Holds `new` as `tensor` in `to`, releasing the source's `source_words` and handing the
    /// source block back to the loaded inputs.
    fn replace(
        &mut self,
        tensor: TensorId,
        to: &Distribution,
        source_words: u64,
        source: Option<HeldBlock<'d, T>>,
        new: Option<HeldBlock<'d, T>>,
    ) {
        self.mem.sub(source_words);
        give_back(self.loaded, tensor, source);
        self.held.insert(tensor, (to.clone(), new));
    }

    /// Computes fused group `group` from the blocks held.
    fn compute(&mut self, i: usize, group: usize, m: &mut StepMeasure) -> Result<(), ExecError> {
        let bad = |message: String| ExecError::InvalidPlan { step: i, message };
        let run = self.group_run(group).map_err(bad)?;
        let g = run.g;
        let (out_id, out_dist) = &g.output;
        m.tensor = Some(*out_id);
        let mut ins: Vec<(usize, Option<&LocalBlock<'_, T>>)> = Vec::new();
        for (tid, d) in &g.inputs {
            ins.push((*tid, held_input(&self.held, *tid, d).map_err(bad)?));
        }
        let result = run.eval(&ins, None, m, &mut self.mem);
        let result = result.map_err(|e| e.into_exec(self.plan, self.me, i, *out_id))?;
        self.mem.add(words(&result));
        self.held
            .insert(*out_id, (out_dist.clone(), result.map(HeldBlock::Own)));
        Ok(())
    }

    /// Phase `phase` of a phased group: fetch the windows (or take those the previous phase
    /// prefetched), compute — with a prefetch, while the next phase's windows are in flight —
    /// and add into the output block.
    fn compute_phase(
        &mut self,
        i: usize,
        group: usize,
        phase: usize,
        fetch: &[deinsum_plan::Fetch],
        prefetch: &[deinsum_plan::Fetch],
        m: &mut StepMeasure,
    ) -> Result<(), ExecError> {
        let bad = |message: String| ExecError::InvalidPlan { step: i, message };
        let run = self.group_run(group).map_err(bad)?;
        let g = run.g;
        let ph = g
            .phases
            .as_ref()
            .ok_or_else(|| bad(format!("group {group} is not phased")))?;
        if phase >= ph.count {
            return Err(bad(format!("phase {phase} of {}", ph.count)));
        }
        let (out_id, out_dist) = &g.output;
        m.tensor = Some(*out_id);
        let mut windows = self.fetch_windows(i, fetch)?;
        windows.append(&mut self.prefetched);
        let mut ins: Vec<(usize, Option<&LocalBlock<'_, T>>)> = Vec::new();
        for (tid, d) in &g.inputs {
            if let Some((_, wd, w)) = windows.iter().find(|(id, _, _)| id == tid) {
                let mut expect = d.clone();
                expect.window = wd.window.clone();
                if wd != &expect || wd.window.len() != 1 || wd.window[0].part != phase {
                    return Err(bad(format!(
                        "window of tensor {tid} is not phase {phase} of the group's distribution"
                    )));
                }
                ins.push((*tid, w.as_deref()));
                continue;
            }
            ins.push((*tid, held_input(&self.held, *tid, d).map_err(bad)?));
        }
        let read = g
            .inputs
            .iter()
            .filter(|(tid, _)| windows.iter().any(|(id, _, _)| id == tid))
            .count();
        if read != windows.len() {
            return Err(bad("a window that the group does not read".into()));
        }
        let cut = Some(PhaseCut {
            index: ph.index,
            count: ph.count,
            part: phase,
        });
        let part = if prefetch.is_empty() {
            let part = run.eval(&ins, cut, m, &mut self.mem);
            part.map_err(|e| e.into_exec(self.plan, self.me, i, *out_id))?
        } else {
            let at = Prefetch {
                plan: self.plan,
                comm: self.comm,
                lists: self.routes.transfers(i),
                held: &self.held,
                step: i,
                skip: fetch.len(),
                prefetch,
            };
            let (part, next) = at.eval_while(&run, &ins, cut, m, &mut self.mem)?;
            self.prefetched = next;
            part
        };
        drop(ins);
        for (_, _, w) in windows {
            self.mem.sub(held_words(&w));
            // The next phase's windows (or the next run's) are cut into its buffer.
            if let Some(b) = w {
                b.release();
            }
        }
        // Accumulate into the output block, held from phase 0 on.
        if phase == 0 {
            self.mem.add(words(&part));
            self.held
                .insert(*out_id, (out_dist.clone(), part.map(HeldBlock::Own)));
            return Ok(());
        }
        let (_, acc) = self
            .held
            .get_mut(out_id)
            .ok_or_else(|| bad("the phased output is not live".into()))?;
        let acc = acc.as_mut().map(HeldBlock::make_mut).transpose();
        let acc = acc.map_err(|e| oom(self.plan, self.me, step_stage(self.plan, i), *out_id, e))?;
        let acc = acc.map(|(a, copied)| {
            self.mem.add(copied);
            a
        });
        add_into(acc, part).map_err(bad)
    }

    /// The evaluation of fused group `group` on this rank, or why the plan has no such group.
    fn group_run(&self, group: usize) -> Result<GroupRun<'a>, String> {
        let g = self
            .plan
            .groups
            .get(group)
            .ok_or_else(|| format!("unknown group {group}"))?;
        Ok(GroupRun {
            plan: self.plan,
            g,
            me: self.me,
            opts: self.opts,
            pool: self.pool,
        })
    }

    /// Fetches a phase's windows: the resting blocks stay, the windows are copies.
    #[allow(clippy::type_complexity)] // (tensor, window distribution, block), used once.
    fn fetch_windows(
        &mut self,
        i: usize,
        fetch: &[deinsum_plan::Fetch],
    ) -> Result<Vec<PhaseWindow<'d, T>>, ExecError> {
        let bad = |message: String| ExecError::InvalidPlan { step: i, message };
        let fetch_transfers = self.routes.transfers(i);
        let mut windows = Vec::new();
        for (j, (f, transfers)) in fetch.iter().zip(fetch_transfers).enumerate() {
            let t = self
                .plan
                .tensor(f.tensor)
                .ok_or_else(|| bad(format!("unknown tensor {}", f.tensor)))?;
            let (_, cur) = self
                .held
                .get_mut(&f.tensor)
                .ok_or_else(|| bad(format!("{} is not live", t.name)))?;
            let way = self.routes.way(i, j);
            let w = moves::fetch_window(
                self.comm,
                way,
                t,
                cur.as_mut(),
                &f.to,
                transfers,
                &mut self.mem,
            )
            .map_err(step_move_error(self.plan, self.me, i, f.tensor))?;
            windows.push((f.tensor, f.to.clone(), w));
        }
        Ok(windows)
    }
}

/// The prefetch of one phase step: the step's moves after its `skip` fetches, from the
/// blocks `held`.
struct Prefetch<'a, T: Scalar, C: Communicator> {
    plan: &'a Plan,
    comm: &'a C,
    /// This rank's transfers of the step, one list per move ([`moves::Routes::transfers`]).
    lists: &'a [Vec<Transfer>],
    held: &'a LiveBlocks<'a, T>,
    step: usize,
    skip: usize,
    prefetch: &'a [deinsum_plan::Fetch],
}

impl<T: Scalar, C: Communicator> Prefetch<'_, T, C> {
    /// Evaluates a phase from `ins` while the prefetched windows are in flight: the sends
    /// are posted first, the receives completed after. Returns the phase's result and the
    /// next phase's windows.
    #[allow(clippy::type_complexity)] // (the phase's result, the next phase's windows)
    fn eval_while(
        &self,
        run: &GroupRun<'_>,
        ins: &[(usize, Option<&LocalBlock<'_, T>>)],
        cut: Option<PhaseCut>,
        m: &mut StepMeasure,
        mem: &mut Mem,
    ) -> Result<(Option<LocalTensor<T>>, Vec<PhaseWindow<'static, T>>), ExecError> {
        let bad = |message: String| ExecError::InvalidPlan {
            step: self.step,
            message,
        };
        let (me, p) = (self.comm.rank(), self.comm.size());
        let mut legs = Vec::new();
        let mut tensors = Vec::new();
        for (f, trs) in self.prefetch.iter().zip(self.lists.iter().skip(self.skip)) {
            let t = self
                .plan
                .tensor(f.tensor)
                .ok_or_else(|| bad(format!("unknown tensor {}", f.tensor)))?;
            let (d, b) = self
                .held
                .get(&f.tensor)
                .ok_or_else(|| bad(format!("{} is not live", t.name)))?;
            if d != &f.from {
                return Err(bad(format!(
                    "{} does not rest where it is prefetched from",
                    t.name
                )));
            }
            legs.push((&trs[..], b.as_deref()));
            tensors.push(t);
        }
        // A message carries every prefetched tensor: a failure names the first.
        let first = self.prefetch.first().map_or(0, |f| f.tensor);
        let oom = |e| oom(self.plan, me, step_stage(self.plan, self.step), first, e);
        let (sends, from) =
            crate::bundle::pack(&legs, me, p).map_err(|e| move_error(e, bad, oom))?;
        let send_words: u64 = sends.iter().map(|(_, v)| v.len() as u64).sum();
        mem.touch_buffers(send_words);
        let (recv, part) = {
            let mem = &mut *mem;
            self.comm
                .exchange_while(sends, &from, || run.eval(ins, cut, m, mem))?
        };
        let out_id = run.g.output.0;
        let part = part.map_err(|e| e.into_exec(self.plan, me, self.step, out_id))?;
        let mut next: Vec<Option<LocalTensor<T>>> = Vec::new();
        for (f, t) in self.prefetch.iter().zip(&tensors) {
            let block = f.to.block(me, &t.shape).map(|b| {
                LocalTensor::<T>::zeros(t.indices.clone(), b.ranges.to_vec())
                    .map_err(|e| oom(e.for_tensor(f.tensor)))
            });
            next.push(block.transpose()?);
        }
        let next_words: u64 = next.iter().map(words).sum();
        let recv_words: u64 = recv.iter().map(|v| v.len() as u64).sum();
        mem.add(next_words);
        mem.touch_buffers(recv_words + words(&part));
        crate::bundle::unpack(&mut next, &legs, &recv, &from, me)
            .map_err(|e| move_error(e, bad, oom))?;
        let next = self
            .prefetch
            .iter()
            .zip(next)
            .map(|(f, b)| (f.tensor, f.to.clone(), b.map(HeldBlock::Own)))
            .collect();
        Ok((part, next))
    }
}

/// One rank's evaluation of a fused group.
struct GroupRun<'a> {
    plan: &'a Plan,
    g: &'a deinsum_plan::GroupPlan,
    me: usize,
    opts: &'a ExecOptions,
    pool: Option<&'a rayon::ThreadPool>,
}

impl GroupRun<'_> {
    /// Evaluates the group (a phase of it with `cut`) on the rank's pool from `ins`, recording
    /// its multiply-adds in `m` and its transient memory in `mem`.
    fn eval<T: Scalar>(
        &self,
        ins: &[(usize, Option<&LocalBlock<'_, T>>)],
        cut: Option<PhaseCut>,
        m: &mut StepMeasure,
        mem: &mut Mem,
    ) -> Result<Option<LocalTensor<T>>, GroupError> {
        let mut stats = GroupStats::default();
        let out = on_pool(self.pool, || {
            compute_group(self.plan, self.g, self.me, ins, cut, self.opts, &mut stats)
        })?;
        m.madds = stats.madds;
        mem.touch(stats.max_intermediate + words(&out));
        Ok(out)
    }
}

/// Why a group's evaluation failed: the plan's fault, or an allocation.
#[derive(Debug)]
enum GroupError {
    Plan(String),
    Alloc(OutOfMemory),
}

impl From<String> for GroupError {
    fn from(m: String) -> Self {
        GroupError::Plan(m)
    }
}

impl From<OutOfMemory> for GroupError {
    fn from(e: OutOfMemory) -> Self {
        GroupError::Alloc(e)
    }
}

impl GroupError {
    /// The executor's error on rank `me` at step `i`, whose group computes tensor `out`.
    fn into_exec(self, plan: &Plan, me: usize, i: usize, out: TensorId) -> ExecError {
        match self {
            GroupError::Plan(message) => ExecError::InvalidPlan { step: i, message },
            GroupError::Alloc(e) => oom(plan, me, step_stage(plan, i), out, e),
        }
    }
}

/// Adds a phase's result into the accumulated output block (both absent on a rank that holds
/// no block).
fn add_into<T: Scalar>(
    acc: Option<&mut LocalBlock<'_, T>>,
    part: Option<LocalTensor<T>>,
) -> Result<(), String> {
    match (acc, part) {
        (Some(a), Some(p)) => {
            if a.ranges != p.ranges || a.data.len() != p.data.len() {
                return Err("phase result does not match the output block".into());
            }
            for (x, &y) in a.data.iter_mut().zip(p.data.iter()) {
                *x += y;
            }
            p.data.release();
            Ok(())
        }
        (None, None) => Ok(()),
        _ => Err("phase result does not match the output block".into()),
    }
}

/// Runs `f` on the rank's thread pool, if it has one.
fn on_pool<R: Send>(pool: Option<&rayon::ThreadPool>, f: impl FnOnce() -> R + Send) -> R {
    match pool {
        Some(p) => p.install(f),
        None => f(),
    }
}

/// The block of input `tid` this rank holds, checked to be in the group's distribution `d`.
fn held_input<'a, T: Scalar>(
    held: &'a LiveBlocks<'_, T>,
    tid: TensorId,
    d: &Distribution,
) -> Result<Option<&'a LocalBlock<'a, T>>, String> {
    let (hd, blk) = held
        .get(&tid)
        .ok_or_else(|| format!("input tensor {tid} is not live"))?;
    if hd != d {
        return Err(format!(
            "input tensor {tid} is not in the group's distribution"
        ));
    }
    Ok(blk.as_deref())
}

/// Computes group `g` on rank `me` over its iteration box ([`deinsum_plan::GroupPlan::iteration_box`], cut
/// to phase `cut` when given) from the input blocks `ins` (by tensor id, in the group's
/// input order); `None` for a rank outside the group's grid or without an output block.
fn compute_group<T: Scalar>(
    plan: &Plan,
    g: &deinsum_plan::GroupPlan,
    me: usize,
    ins: &[(usize, Option<&LocalBlock<'_, T>>)],
    cut: Option<PhaseCut>,
    opts: &ExecOptions,
    stats: &mut GroupStats,
) -> Result<Option<LocalTensor<T>>, GroupError> {
    let (out_id, out_dist) = &g.output;
    let out_t = plan
        .tensor(*out_id)
        .ok_or_else(|| format!("unknown tensor {out_id}"))?;
    let Some(box_ranges) = g.iteration_box(&plan.einsum, me, cut) else {
        return Ok(None);
    };
    let box_idx = &g.group.indices;
    let proj = |indices: &[char]| -> Vec<(usize, usize)> {
        indices
            .iter()
            .map(|c| {
                box_idx
                    .iter()
                    .position(|d| d == c)
                    .map_or((0, 1), |p| box_ranges[p].into())
            })
            .collect()
    };
    let mut blocks: Vec<(usize, &LocalBlock<'_, T>)> = Vec::new();
    for &(tid, blk) in ins {
        let blk = blk.ok_or_else(|| format!("rank {me} holds no block of {tid}"))?;
        if blk.ranges != proj(&blk.indices) {
            return Err(GroupError::Plan(format!(
                "rank {me}: block {:?} of tensor {tid} is not the projection of its iteration box",
                blk.ranges
            )));
        }
        blocks.push((tid, blk));
    }
    let steps = GroupSteps {
        steps: g
            .group
            .steps
            .iter()
            .map(|&s| plan.tree.steps.get(s))
            .collect::<Option<Vec<_>>>()
            .ok_or_else(|| "group step out of the tree".to_string())?,
        nodes: g
            .group
            .steps
            .iter()
            .map(|&s| plan.tree.node_of(StepId(s)))
            .collect(),
    };
    if steps.steps.is_empty() {
        return Err(GroupError::Plan("a group without steps".into()));
    }
    let r = eval_group(
        &steps,
        box_idx,
        &box_ranges,
        &blocks,
        opts.tile_words,
        stats,
    )?;
    let r = r
        .into_order(&out_t.indices)
        .map_err(|e| e.for_tensor(*out_id))?;
    match out_dist.block(me, &out_t.shape) {
        Some(b) => {
            if b.ranges[..] != r.ranges[..] {
                return Err(GroupError::Plan(format!(
                    "rank {me}: computed block {:?} of {} but its distribution gives {:?}",
                    r.ranges, out_t.name, b.ranges
                )));
            }
            Ok(Some(r))
        }
        None => Ok(None),
    }
}

/// Why an input block cannot be had: the input's fault, or an allocation.
enum LoadError {
    Input(String),
    Alloc(OutOfMemory),
}

impl From<crate::data::BlockError> for LoadError {
    fn from(e: crate::data::BlockError) -> Self {
        match e {
            crate::data::BlockError::Input(m) => LoadError::Input(m),
            crate::data::BlockError::OutOfMemory(o) => LoadError::Alloc(o),
        }
    }
}

impl LoadError {
    /// The executor's error on rank `me` for operand `k` (tensor `tensor`) loaded at step `i`.
    fn into_exec(self, plan: &Plan, me: usize, i: usize, tensor: TensorId, k: usize) -> ExecError {
        match self {
            LoadError::Input(message) => ExecError::Input {
                rank: me,
                operand: k,
                message,
            },
            LoadError::Alloc(e) => oom(plan, me, step_stage(plan, i), tensor, e),
        }
    }
}

fn load_block<'d, T: Scalar>(
    plan: &Plan,
    k: usize,
    b: &Block,
    inputs: Source<'d, T>,
) -> Result<Data<'d, T>, LoadError> {
    let inputs = match inputs {
        Source::Inputs(inputs) => inputs,
        Source::Lent(all) => {
            let full = all
                .get(k)
                .ok_or_else(|| LoadError::Input(format!("{} operands given", all.len())))?;
            if let Some(part) = crate::data::contiguous_part(&plan.einsum, k, full, b) {
                return Ok(Data::Lent(part));
            }
            return Ok(block_of_full(&plan.einsum, k, full, b)?.into());
        }
        Source::LentBlocks(map) => {
            let data = *map
                .get(&k)
                .ok_or_else(|| LoadError::Input("no local block given".into()))?;
            fits_block(data.len(), b)?;
            return Ok(Data::Lent(data));
        }
    };
    load_own(plan, k, b, inputs).map(Data::Own)
}

/// A given block of `len` elements must be exactly the plan's block `b`.
fn fits_block(len: usize, b: &Block) -> Result<(), LoadError> {
    if len as u64 == b.len() {
        return Ok(());
    }
    Err(LoadError::Input(format!(
        "local block has {len} elements, the plan's block {:?} has {}",
        b.ranges,
        b.len()
    )))
}

/// This rank's block `b` of operand `k` from `inputs`, in its own buffer.
fn load_own<T: Scalar>(
    plan: &Plan,
    k: usize,
    b: &Block,
    inputs: &Inputs<T>,
) -> Result<Vec<T>, LoadError> {
    match inputs {
        Inputs::Seeded { seed } => {
            seeded_block(&plan.einsum, k, *seed, b).map_err(LoadError::Alloc)
        }
        Inputs::Full(all) => {
            let full = all
                .get(k)
                .ok_or_else(|| LoadError::Input(format!("{} operands given", all.len())))?;
            Ok(block_of_full(&plan.einsum, k, full, b)?)
        }
        Inputs::Blocks(map) => {
            let data = map
                .get(&k)
                .ok_or_else(|| LoadError::Input("no local block given".into()))?;
            fits_block(data.len(), b)?;
            crate::buffers::try_copy(data).map_err(LoadError::Alloc)
        }
        Inputs::Given(map) => {
            let mut map = map.lock().unwrap_or_else(|e| e.into_inner());
            let data = map.remove(&k).ok_or_else(|| {
                LoadError::Input("no local block given (or taken already)".into())
            })?;
            fits_block(data.len(), b)?;
            Ok(data)
        }
        Inputs::Npy(paths) => {
            let path = paths
                .get(k)
                .ok_or_else(|| LoadError::Input(format!("{} .npy files given", paths.len())))?;
            Ok(crate::npy_input::read_block::<T>(path, &plan.einsum, k, b)?)
        }
    }
}

/// The executor's error for a failed move: communication failures as they are, plan faults
/// through `bad` (which names the step).
fn move_error(
    e: MoveError,
    bad: impl FnOnce(String) -> ExecError,
    oom: impl FnOnce(OutOfMemory) -> ExecError,
) -> ExecError {
    match e {
        MoveError::Comm(c) => ExecError::Comm(c),
        MoveError::Plan(s) => bad(s),
        MoveError::Alloc(o) => oom(o),
    }
}

/// [`move_error`] for a move of `tensor` by plan step `i` on rank `me`: a plan problem names
/// the step, an allocation failure the tensor and the step's stage.
fn step_move_error(
    plan: &Plan,
    me: usize,
    i: usize,
    tensor: TensorId,
) -> impl Fn(MoveError) -> ExecError + '_ {
    move |e| {
        let bad = |message| ExecError::InvalidPlan { step: i, message };
        move_error(e, bad, |o| oom(plan, me, step_stage(plan, i), tensor, o))
    }
}

/// Collects every rank's report on rank 0 (`Some` there, in rank order; `None` elsewhere).
/// Collective. The bytes it moves are not part of any step's measurement.
pub fn gather_reports<C: Communicator>(
    comm: &C,
    report: &RunReport,
) -> Result<Option<Vec<RunReport>>, ExecError> {
    let p = comm.size();
    let mut counts = vec![0usize; p];
    let mine = serde_json::to_vec(report)
        .map_err(|e| CommError::Invalid(format!("report does not serialize: {e}")))?;
    let send = if comm.rank() == 0 { Vec::new() } else { mine };
    counts[0] = send.len();
    let (recv, rc) = comm.all_to_all_v(&send, &counts)?;
    if comm.rank() != 0 {
        return Ok(None);
    }
    let mut out = vec![report.clone()];
    let mut off = 0;
    for &c in rc.iter().skip(1) {
        let r: RunReport = serde_json::from_slice(&recv[off..off + c])
            .map_err(|e| CommError::Invalid(format!("report does not parse: {e}")))?;
        off += c;
        out.push(r);
    }
    Ok(Some(out))
}
