//! One [`Session::einsum`](crate::Session::einsum) call: check the operands, plan from where they are
//! (cached), run on the session's ranks, place the operands that were whole, and keep the
//! result distributed.

use super::array::{new_array, whole, DistArray, Held, Placed};
use super::state::Inner;
use super::types::{EinsumStats, OutLayout, SessionError};
use crate::{Communicator, Einsum, ExecOptions, Inputs, Scalar};
use deinsum_expr::{ExtentSpec, ParsedEinsum};
use deinsum_plan::{canonical_distribution, Distribution, Plan, PlanStep, Source};
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

/// What a rank returns: its output block, the output's layout and its received words.
type RankOut<T> = (Option<Vec<T>>, Distribution, u64);

pub(super) fn einsum<T: Scalar>(
    s: &Arc<Inner>,
    expr: &str,
    operands: &[&DistArray],
    out: &OutLayout,
) -> Result<DistArray, SessionError> {
    let e = parse(expr, operands)?;
    let held: Vec<Held> = operands.iter().map(|a| a.held()).collect();
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
    // Whole operands are read in place and never placed twice.
    let mut placements: Vec<Option<Placed<T>>> = (0..operands.len()).map(|_| None).collect();
    for k in 0..operands.len() {
        let first = operands[..k].iter().all(|a| !a.same(operands[k]));
        if first && !matches!(held[k], Held::Placed(_)) && plain(&e, k) {
            placements[k] = Some(place::<T>(plan, k, loads[k], &held[k])?);
        }
    }
    let outs = compiled.on_local_ranks::<T, RankOut<T>>(|comm| {
        let me = comm.rank();
        let mut mine = BTreeMap::new();
        for k in 0..operands.len() {
            let block = match &placements[k] {
                Some(p) => p.blocks[me].clone(),
                None => rank_block::<T>(&e, k, loads[k], &held[k], me)?,
            };
            if let Some(b) = block {
                mine.insert(k, b);
            }
        }
        let inputs = Inputs::Given(Mutex::new(mine));
        let o = ExecOptions {
            shared_plan: true,
            threads: s.threads(),
            ..ExecOptions::default()
        };
        let (t, report) = deinsum_exec::execute_measured(plan, comm, &inputs, &o)?;
        let received = report.steps.iter().map(|m| m.received).sum();
        Ok((t.local.map(|l| l.data.into_vec()), t.dist, received))
    })?;
    for (k, p) in placements.into_iter().enumerate() {
        if let Some(p) = p {
            operands[k].set_held(Held::placed(p));
        }
    }
    let words_moved: u64 = outs.iter().map(|o| o.2).sum();
    let layout = outs
        .first()
        .map(|o| o.1.clone())
        .unwrap_or_else(|| plan.output.1.clone());
    let mut result = Placed {
        layout,
        blocks: outs.into_iter().map(|o| o.0).collect(),
    };
    let out_shape = plan
        .tensor(plan.output.0)
        .map(|t| t.shape.clone())
        .unwrap_or_default();
    let moved_out = relayout(&mut result, &out_shape, out, s.procs)?;
    s.record(EinsumStats {
        expr: expr.into(),
        words_moved: words_moved + moved_out,
        operand_words: (0..operands.len())
            .map(|k| operand_words(plan, k))
            .collect(),
        cached,
        predicted_seconds: plan.prediction.seconds,
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
        // A placed array used with a diagonal or broadcast: its whole, cut again.
        Held::Placed(_) => {
            let full = whole::<T>(&shape_of(e, k), held).map_err(|x| fail(x.to_string()))?;
            deinsum_exec::data::block_of_full(e, k, &full, &b)
                .map(Some)
                .map_err(|x| fail(x.to_string()))
        }
    }
}

/// Operand `k`'s storage shape.
fn shape_of(e: &ParsedEinsum, k: usize) -> Vec<usize> {
    e.inputs()[k].shape(e.extents())
}

/// A whole operand cut into every rank's block of `dist`: where it will stay.
fn place<T: Scalar>(
    plan: &Plan,
    k: usize,
    dist: &Distribution,
    held: &Held,
) -> Result<Placed<T>, SessionError> {
    let blocks = (0..plan.procs)
        .map(|r| rank_block::<T>(&plan.einsum, k, dist, held, r))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|x| SessionError::Einsum(x.into()))?;
    Ok(Placed {
        layout: dist.clone(),
        blocks,
    })
}

/// Words moved (over all ranks) to bring input `k` to where it computes: its
/// redistributions and phase fetches.
fn operand_words(plan: &Plan, k: usize) -> u64 {
    plan.steps
        .iter()
        .map(|s| match s {
            PlanStep::Redistribute { tensor, volume, .. } if *tensor == k => volume.total,
            PlanStep::ComputePhase {
                fetch, prefetch, ..
            } => fetch
                .iter()
                .chain(prefetch)
                .filter(|f| f.tensor == k)
                .map(|f| f.volume.total)
                .sum(),
            _ => 0,
        })
        .sum()
}

/// Moves the result into the layout `out` asks for; returns the words the move takes (over
/// all ranks, the plan crate's count for it).
fn relayout<T: Scalar>(
    p: &mut Placed<T>,
    shape: &[usize],
    out: &OutLayout,
    procs: usize,
) -> Result<u64, SessionError> {
    let to = match out {
        OutLayout::Plan => return Ok(0),
        OutLayout::Canonical => {
            canonical_distribution(&super::array::axes(shape.len()), shape, procs)
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
    let full = whole::<T>(
        shape,
        &Held::placed(std::mem::replace(
            p,
            Placed {
                layout: to.clone(),
                blocks: Vec::new(),
            },
        )),
    )?;
    let e = super::array::identity(shape)?;
    p.blocks = (0..procs)
        .map(|r| match to.block(r, shape) {
            None => Ok(None),
            Some(b) => deinsum_exec::data::block_of_full(&e, 0, &full, &b)
                .map(Some)
                .map_err(|x| SessionError::Data(x.to_string())),
        })
        .collect::<Result<_, _>>()?;
    Ok(words)
}
