//! One [`Session::einsum`](crate::Session::einsum) call: check the operands, plan from where they are
//! (cached), run on the session's ranks (in process or MPI: one [`RankJob`] for both), place
//! the operands that were whole, and keep the result distributed.

use super::array::{new_array, whole, DistArray, Held, Placed};
use super::ranks::RankJob;
use super::state::Inner;
use super::types::{EinsumStats, OutLayout, SessionError};
use crate::{Communicator, Einsum, ExecOptions, Scalar};
use deinsum_expr::{ExtentSpec, ParsedEinsum};
use deinsum_plan::{canonical_distribution, Distribution, Plan, Source};
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

/// What a rank returns: its output block and the output's layout.
type RankOut<T> = (Option<Vec<T>>, Distribution);

/// Every rank's part of one session einsum, on any communicator.
struct EinsumJob<'a, T> {
    e: &'a ParsedEinsum,
    plan: &'a Plan,
    /// Where each operand is (a placed operand here is in its load layout).
    held: &'a [Held],
    /// Each operand's load distribution.
    loads: &'a [&'a Distribution],
    /// The operands placed by this call, each rank's block ready.
    placements: &'a [Option<Placed<T>>],
    threads: usize,
    /// The ranks are processes (MPI): a rank that cannot read its blocks stops all ranks
    /// before the run, and the ranks check that they hold the same plan.
    separate: bool,
}

impl<T: Scalar> RankJob for EinsumJob<'_, T> {
    type Out = RankOut<T>;

    fn run<C: Communicator>(&self, comm: &C) -> Result<(RankOut<T>, u64), crate::ExecError> {
        let me = comm.rank();
        // Placed blocks are lent to the run as they are (never copied); only an operand held
        // whole is cut, into a block of its own.
        let read = || -> Result<BTreeMap<usize, Vec<T>>, crate::ExecError> {
            let mut cut = BTreeMap::new();
            for k in 0..self.held.len() {
                if self.placements[k].is_none() && !matches!(self.held[k], Held::Placed(_)) {
                    if let Some(b) = rank_block::<T>(self.e, k, self.loads[k], &self.held[k], me)? {
                        cut.insert(k, b);
                    }
                }
            }
            Ok(cut)
        };
        let cut = read();
        let cut = if self.separate {
            let mut v = [u64::from(cut.is_err())];
            comm.all_reduce_max_u64(&mut v)?;
            if v[0] > 0 {
                return Err(invalid(
                    "another rank could not read its operand blocks".into(),
                ));
            }
            cut.unwrap_or_default()
        } else {
            cut?
        };
        let mut mine: BTreeMap<usize, &[T]> = BTreeMap::new();
        for k in 0..self.held.len() {
            let placed = match (&self.placements[k], &self.held[k]) {
                (Some(p), _) => Some(p),
                (None, Held::Placed(p)) => p.downcast_ref::<Placed<T>>(),
                _ => None,
            };
            let block = match placed {
                Some(p) => p.blocks.get(me).and_then(|b| b.as_deref()),
                None => cut.get(&k).map(|b| b.as_slice()),
            };
            if let Some(b) = block {
                mine.insert(k, b);
            }
        }
        let o = ExecOptions {
            shared_plan: !self.separate,
            threads: self.threads,
            ..ExecOptions::default()
        };
        let (t, report) = deinsum_exec::execute_lent_blocks(self.plan, comm, &mine, &o)?;
        let received = report.steps.iter().map(|m| m.received).sum();
        Ok(((t.local.map(|l| l.data.into_vec()), t.dist), received))
    }
}

/// Replaces a placed operand by its whole data (collective under MPI); returns the words the
/// read moves.
fn read_whole<T: Scalar>(s: &Inner, shape: &[usize], held: &mut Held) -> Result<u64, SessionError> {
    let words = regather_words::<T>(held, shape, s.ranks.procs());
    let full = whole::<T>(s, shape, held, None)?
        .ok_or_else(|| SessionError::Data("no data gathered".into()))?;
    *held = Held::whole(full);
    Ok(words)
}

/// Words that reading a placed operand whole moves: every rank receives the elements its own
/// block lacks.
fn regather_words<T: Scalar>(held: &Held, shape: &[usize], procs: usize) -> u64 {
    let n: u64 = shape.iter().map(|&x| x as u64).product();
    let Held::Placed(p) = held else { return 0 };
    let Some(p) = p.downcast_ref::<Placed<T>>() else {
        return 0;
    };
    (0..procs)
        .map(|r| {
            let own = p.layout.block(r, shape).map_or(0, |b| b.len());
            n.saturating_sub(own)
        })
        .sum()
}

/// An executor error for what a rank could not read.
fn invalid(m: String) -> crate::ExecError {
    crate::ExecError::Comm(deinsum_exec::comm::CommError::Invalid(m))
}

pub(super) fn einsum<T: Scalar>(
    s: &Arc<Inner>,
    expr: &str,
    operands: &[&DistArray],
    out: &OutLayout,
) -> Result<DistArray, SessionError> {
    let e = parse(expr, operands)?;
    let mut held: Vec<Held> = operands.iter().map(|a| a.held()).collect();
    // Words each placed operand read whole costs (every rank receives what it does not hold).
    let mut regathered = vec![0u64; operands.len()];
    // A placed array used with a diagonal or a broadcast is read whole (collective under
    // MPI, in the same order on every rank: the held states are the same everywhere).
    for k in 0..operands.len() {
        if matches!(held[k], Held::Placed(_)) && !plain(&e, k) {
            regathered[k] = read_whole::<T>(s, operands[k].shape(), &mut held[k])?;
        }
    }
    let sources: Vec<Source> = (0..operands.len())
        .map(|k| source_of::<T>(&e, k, &held[k]))
        .collect();
    let mut opts = s.options.clone();
    opts.dtype = T::DTYPE;
    opts.sources = sources.clone();
    let key = format!("{e}|{:?}|{}|{sources:?}", e.extents(), T::DTYPE);
    let (compiled, cached) = s.plan(key, || Einsum::compile_parsed(&e, &opts))?;
    let plan = compiled.plan();
    // The planner loads every operand (a Load step per input tensor).
    let loads: Vec<&Distribution> = (0..operands.len())
        .map(|k| plan.load_dist(k).expect("the plan loads every operand"))
        .collect();
    // A placed operand is loaded where it is (its source is `Given`); one that is not is read
    // whole and cut (never expected: kept so that a plan that loads elsewhere stays right).
    for k in 0..operands.len() {
        let elsewhere = matches!(&held[k], Held::Placed(p)
        if p.downcast_ref::<Placed<T>>().is_none_or(|p| {
            !p.layout.same_blocks(loads[k], operands[k].shape(), plan.procs)
        }));
        if elsewhere {
            regathered[k] = read_whole::<T>(s, operands[k].shape(), &mut held[k])?;
        }
    }
    // Whole operands are read in place and never placed twice.
    let mut placements: Vec<Option<Placed<T>>> = (0..operands.len()).map(|_| None).collect();
    let mut placed = Ok(());
    for k in 0..operands.len() {
        let first = operands[..k].iter().all(|a| !a.same(operands[k]));
        let whole_now = !matches!(operands[k].held(), Held::Placed(_));
        if first && whole_now && plain(&e, k) {
            match place::<T>(s, plan, k, loads[k], &held[k]) {
                Ok(p) => placements[k] = Some(p),
                Err(err) => {
                    placed = Err(err);
                    break;
                }
            }
        }
    }
    // A file one rank cannot read stops every rank here.
    s.ranks.agree(placed)?;
    let job = EinsumJob {
        e: &e,
        plan,
        held: &held,
        loads: &loads,
        placements: &placements,
        threads: s.threads(),
        separate: s.ranks.is_mpi(),
    };
    let (outs, words_moved) = s.ranks.run::<T, _>(&compiled, &job)?;
    for (k, p) in placements.into_iter().enumerate() {
        if let Some(p) = p {
            operands[k].set_held(Held::placed(p));
        }
    }
    let layout = outs
        .first()
        .map(|o| o.1 .1.clone())
        .unwrap_or_else(|| plan.output.1.clone());
    let mut blocks: Vec<Option<Vec<T>>> = (0..plan.procs).map(|_| None).collect();
    for (r, (b, _)) in outs {
        blocks[r] = b;
    }
    let mut result = Placed { layout, blocks };
    let out_shape = plan
        .tensor(plan.output.0)
        .map(|t| t.shape.clone())
        .unwrap_or_default();
    let moved_out = relayout(s, &mut result, &out_shape, out)?;
    s.record(EinsumStats {
        expr: expr.into(),
        words_moved: words_moved + moved_out + regathered.iter().sum::<u64>(),
        operand_words: (0..operands.len())
            .map(|k| plan.input_words(k) + regathered[k])
            .collect(),
        cached,
        predicted_seconds: plan.prediction.seconds,
        bound_per_rank: plan.prediction.bound_per_rank,
        touched_per_rank: plan.prediction.touched_per_rank,
    });
    Ok(new_array(
        s,
        out_shape,
        T::DTYPE,
        Held::placed(result),
        None,
    ))
}

/// Parses `expr` with the operands' shapes, naming the array whose shape does not fit.
fn parse(expr: &str, operands: &[&DistArray]) -> Result<ParsedEinsum, SessionError> {
    let lhs = expr.split("->").next().unwrap_or("");
    let terms: Vec<&str> = lhs.split(',').map(str::trim).collect();
    if terms.len() != operands.len() {
        return Err(SessionError::Data(format!(
            "{expr} takes {} operands, {} given",
            terms.len(),
            operands.len()
        )));
    }
    let mut seen: HashMap<char, (usize, usize)> = HashMap::new();
    for (k, (t, a)) in terms.iter().zip(operands).enumerate() {
        if t.contains("...") {
            continue;
        }
        let bad = |why: String| SessionError::Shape {
            operand: k,
            name: a.name().into(),
            shape: a.shape().to_vec(),
            why,
        };
        let idx: Vec<char> = t.chars().filter(|c| !c.is_whitespace()).collect();
        if idx.len() != a.shape().len() {
            return Err(bad(format!("`{t}` has {} indices", idx.len())));
        }
        for (&c, &n) in idx.iter().zip(a.shape()) {
            match seen.get(&c) {
                Some(&(m, j)) if m != n && m != 1 && n != 1 => {
                    return Err(bad(format!(
                        "index {c} has extent {n} here and {m} in operand {j}"
                    )))
                }
                None => {
                    seen.insert(c, (n, k));
                }
                _ => {}
            }
        }
    }
    let spec = ExtentSpec {
        shapes: Some(operands.iter().map(|a| a.shape().to_vec()).collect()),
        ..ExtentSpec::default()
    };
    deinsum_expr::parse(expr, &spec).map_err(|e| SessionError::Einsum(e.into()))
}

/// True when operand `k` is stored as its distinct indices (no diagonal, no broadcast dim):
/// its blocks are then blocks of the array.
fn plain(e: &ParsedEinsum, k: usize) -> bool {
    let op = &e.inputs()[k];
    op.dims.len() == op.indices.len()
}

/// Where operand `k` is: a placed array's layout when its storage is plain, else anywhere.
fn source_of<T: Scalar>(e: &ParsedEinsum, k: usize, held: &Held) -> Source {
    match held {
        Held::Placed(p) if plain(e, k) => p
            .downcast_ref::<Placed<T>>()
            .map_or(Source::Anywhere, |p| Source::Given(p.layout.clone())),
        _ => Source::Anywhere,
    }
}

/// Rank `me`'s block of operand `k` in `dist`.
fn rank_block<T: Scalar>(
    e: &ParsedEinsum,
    k: usize,
    dist: &Distribution,
    held: &Held,
    me: usize,
) -> Result<Option<Vec<T>>, crate::ExecError> {
    let shape: Vec<usize> = e.inputs()[k].indices.iter().map(|&c| e.extent(c)).collect();
    let Some(b) = dist.block(me, &shape) else {
        return Ok(None);
    };
    let fail = |m: String| crate::ExecError::Comm(deinsum_exec::comm::CommError::Invalid(m));
    match held {
        Held::Whole(v) => {
            let v = v
                .downcast_ref::<Vec<T>>()
                .ok_or_else(|| fail("array of another type".into()))?;
            deinsum_exec::data::block_of_full(e, k, v, &b)
                .map(Some)
                .map_err(|x| fail(x.to_string()))
        }
        Held::File(path) => {
            deinsum_exec::npy::read_operand_block(path, &e.inputs()[k], e.extents(), &b)
                .map(Some)
                .map_err(|x| fail(x.to_string()))
        }
        // Placed arrays are read as they are (or made whole) before the ranks run.
        Held::Placed(_) => Err(fail("a placed operand read as a whole".into())),
    }
}

/// A whole operand cut into the blocks of `dist` of this process's ranks: where it will stay.
fn place<T: Scalar>(
    s: &Inner,
    plan: &Plan,
    k: usize,
    dist: &Distribution,
    held: &Held,
) -> Result<Placed<T>, SessionError> {
    let mut blocks: Vec<Option<Vec<T>>> = (0..plan.procs).map(|_| None).collect();
    for r in s.ranks.here() {
        blocks[r] = rank_block::<T>(&plan.einsum, k, dist, held, r)
            .map_err(|x| SessionError::Einsum(x.into()))?;
    }
    Ok(Placed {
        layout: dist.clone(),
        blocks,
    })
}

/// Moves the result into the layout `out` asks for; returns the words the move takes (over
/// all ranks, the plan crate's count for it). Collective under MPI.
fn relayout<T: Scalar>(
    s: &Inner,
    p: &mut Placed<T>,
    shape: &[usize],
    out: &OutLayout,
) -> Result<u64, SessionError> {
    let procs = s.ranks.procs();
    let to = match out {
        OutLayout::Plan => return Ok(0),
        OutLayout::Canonical => {
            canonical_distribution(&super::ranks::axes(shape.len()), shape, procs)
        }
        OutLayout::Like(d) => d.clone(),
    };
    if to.split.len() != shape.len() || to.grid.size() > procs {
        return Err(SessionError::Data(format!(
            "out_layout does not fit a result of shape {shape:?} on {procs} ranks"
        )));
    }
    let mv = deinsum_plan::MoveView::new(shape, &p.layout, &to, false, procs);
    let words = (0..procs).map(|r| mv.words_of(r).1).sum();
    let from = std::mem::replace(
        p,
        Placed {
            layout: to.clone(),
            blocks: (0..procs).map(|_| None).collect(),
        },
    );
    let full = whole::<T>(s, shape, &Held::placed(from), None)?
        .ok_or_else(|| SessionError::Data("no data gathered".into()))?;
    let e = super::array::identity(shape)?;
    for r in s.ranks.here() {
        if let Some(b) = to.block(r, shape) {
            p.blocks[r] = Some(
                deinsum_exec::data::block_of_full(&e, 0, &full, &b)
                    .map_err(|x| SessionError::Data(x.to_string()))?,
            );
        }
    }
    Ok(words)
}
