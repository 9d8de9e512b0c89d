//! Every rank classifies every move of a plan alike: the transfers each rank derives for a
//! structured move ([`Plan::step_transfers`]) are exactly what the collective of the move's
//! kind moves on that rank's fibre. This is the executor's check (`Routes::agree` in
//! deinsum-exec, mirrored here): one rank where a move does not fit sends the move to the
//! general exchange on every rank, so a kind that misfits anywhere is a wrong kind.

mod common;

use common::einsum;
use deinsum_expr::ParsedEinsum;
use deinsum_plan::Transfer;
use deinsum_plan::{build, Block, Distribution, MoveKind, Objective, Plan, PlanOptions, PlanStep};

/// The collective a structured move runs as (the executor's `Op`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Op {
    AllGather,
    ReduceScatter,
    AllReduce,
    Reduce,
    Gather,
    Broadcast,
}

/// How every rank runs one move (the executor's `Route`).
#[derive(Clone, Debug)]
enum Route {
    Local,
    SendRecv,
    Exchange,
    Collective {
        op: Op,
        grid: Vec<usize>,
        keep: Vec<bool>,
    },
}

/// The route a move of kind `kind` asks for (the executor's `route_of`).
fn route_of(kind: &MoveKind, from: &Distribution, to: &Distribution) -> Route {
    let sizes = |d: &Distribution| d.grid.dims.iter().map(|g| g.size).collect::<Vec<_>>();
    let on = |op: Op, d: &Distribution, keep: &dyn Fn(usize) -> bool| Route::Collective {
        op,
        grid: sizes(d),
        keep: (0..d.grid.dims.len()).map(keep).collect(),
    };
    let split = |g: usize| from.split.iter().any(|s| s.contains(&g));
    match kind {
        MoveKind::Local => Route::Local,
        MoveKind::Permute => Route::SendRecv,
        MoveKind::AllToAll => Route::Exchange,
        MoveKind::AllGather { dims } => on(Op::AllGather, from, &|g| dims.contains(&g)),
        MoveKind::ReduceScatter { dims } => on(Op::ReduceScatter, from, &|g| dims.contains(&g)),
        MoveKind::AllReduce { dims } => on(Op::AllReduce, from, &|g| dims.contains(&g)),
        MoveKind::Reduce => on(Op::Reduce, from, &|g| {
            from.partial.contains(&g) && !split(g) && from.grid.dims[g].size > 1
        }),
        MoveKind::Gather => on(Op::Gather, from, &|g| {
            split(g) && from.grid.dims[g].size > 1
        }),
        MoveKind::Broadcast => on(Op::Broadcast, to, &|_| true),
    }
}

/// The world ranks of `me`'s fibre along the dims `keep` of `grid` (row-major over the kept
/// dims); `None` outside the grid.
fn fibre(grid: &[usize], keep: &[bool], me: usize) -> Option<Vec<usize>> {
    let cells: usize = grid.iter().product();
    if me >= cells {
        return None;
    }
    let mut coords = vec![0usize; grid.len()];
    let mut r = me;
    for (k, &d) in grid.iter().enumerate().rev() {
        coords[k] = r % d;
        r /= d;
    }
    let kept: Vec<usize> = (0..grid.len()).filter(|&k| keep[k]).collect();
    let n: usize = kept.iter().map(|&k| grid[k]).product();
    let mut out = Vec::with_capacity(n);
    for mut q in 0..n {
        for &k in kept.iter().rev() {
            coords[k] = q % grid[k];
            q /= grid[k];
        }
        out.push(coords.iter().zip(grid).fold(0, |a, (&c, &d)| a * d + c));
    }
    Some(out)
}

/// One rank's geometry of a collective: its fibre and every member's nonempty blocks.
struct Geometry {
    fibre: Vec<usize>,
    src: Vec<Option<Block>>,
    dst: Vec<Option<Block>>,
    me: usize,
}

impl Geometry {
    fn piece(&self, x: usize, y: usize) -> Option<Block> {
        self.src[x].as_ref()?.intersect(self.dst[y].as_ref()?)
    }

    fn covers(&self, x: usize, y: usize) -> bool {
        self.dst[y].is_none() || self.piece(x, y) == self.dst[y]
    }

    fn same_target(&self) -> bool {
        self.dst.iter().all(|d| *d == self.dst[self.me])
    }
}

/// The transfers of `op` on the rank's fibre, sorted by (src, dst); `None` when the blocks do
/// not have the collective's shape (the executor's `expected`).
fn expected(op: Op, g: &Geometry) -> Option<Vec<(usize, usize, Block)>> {
    let (k, n) = (g.me, g.fibre.len());
    let mut out = Vec::new();
    let mut add = |x: usize, y: usize, b: Option<Block>| {
        if let Some(b) = b {
            out.push((g.fibre[x], g.fibre[y], b));
        }
    };
    match op {
        Op::AllGather => {
            if !g.same_target() {
                return None;
            }
            for x in 0..n {
                add(x, k, g.piece(x, k));
                if x != k {
                    add(k, x, g.piece(k, x));
                }
            }
        }
        Op::ReduceScatter | Op::AllReduce => {
            let fits = (0..n).all(|x| g.covers(x, k) && g.covers(k, x));
            if !fits || (op == Op::AllReduce && !g.same_target()) {
                return None;
            }
            for x in 0..n {
                add(x, k, g.dst[k].clone());
                if x != k {
                    add(k, x, g.dst[x].clone());
                }
            }
        }
        Op::Reduce | Op::Gather | Op::Broadcast => {
            let Some(root) = g.fibre.iter().position(|&r| r == 0) else {
                return Some(out);
            };
            let others_empty = (0..n).all(|x| x == root || g.dst[x].is_none());
            let fits = match op {
                Op::Reduce => others_empty && (0..n).all(|x| g.covers(x, root)),
                Op::Gather => others_empty,
                _ => g.same_target() && g.covers(root, root),
            };
            if !fits {
                return None;
            }
            for x in 0..n {
                match op {
                    Op::Reduce if x == k || k == root => add(x, root, g.dst[root].clone()),
                    Op::Gather if x == k || k == root => add(x, root, g.piece(x, root)),
                    Op::Broadcast if x == k || k == root => add(root, x, g.dst[x].clone()),
                    _ => {}
                }
            }
        }
    }
    out.sort_by_key(|t| (t.0, t.1));
    out.dedup();
    Some(out)
}

/// Why `route` does not move exactly `transfers` on rank `me` (`None`: it does).
fn misfit(
    route: &Route,
    shape: &[usize],
    from: &Distribution,
    to: &Distribution,
    transfers: &[Transfer],
    me: usize,
) -> Option<String> {
    let others =
        |f: &dyn Fn(&Transfer) -> bool| transfers.iter().filter(|t| t.src != t.dst && f(t)).count();
    let mut got: Vec<(usize, usize, Block)> = transfers
        .iter()
        .map(|t| {
            assert_eq!(t.boxes.len(), 1, "one box per transfer");
            (t.src, t.dst, t.boxes[0].clone())
        })
        .collect();
    got.sort_by_key(|t| (t.0, t.1));
    match route {
        Route::Exchange => None,
        Route::Local => (others(&|_| true) > 0).then(|| "a local move communicates".into()),
        Route::SendRecv => (others(&|t| t.src == me) > 1 || others(&|t| t.dst == me) > 1)
            .then(|| "a permutation sends or receives more than one message".into()),
        Route::Collective { op, grid, keep } => {
            let Some(f) = fibre(grid, keep, me) else {
                return (!got.is_empty()).then(|| "transfers outside the grid".into());
            };
            let block = |d: &Distribution, r: usize| {
                d.block(r, shape)
                    .filter(|b| b.ranges.iter().all(|&(s, e)| s < e))
            };
            let g = Geometry {
                src: f.iter().map(|&r| block(from, r)).collect(),
                dst: f.iter().map(|&r| block(to, r)).collect(),
                me: f.iter().position(|&r| r == me)?,
                fibre: f,
            };
            match expected(*op, &g) {
                None => Some(format!(
                    "the blocks of fibre {:?} are not a {op:?}",
                    g.fibre
                )),
                Some(want) if want != got => Some(format!(
                    "{op:?} on fibre {:?} moves {want:?}, the rank derives {got:?}",
                    g.fibre
                )),
                Some(_) => None,
            }
        }
    }
}

/// The moves of a step as (tensor, from, to, kind), in [`Plan::step_moves`] order.
fn step_moves(step: &PlanStep) -> Vec<(usize, &Distribution, &Distribution, &MoveKind)> {
    match step {
        PlanStep::Redistribute {
            tensor,
            from,
            to,
            pattern,
            ..
        } => vec![(*tensor, from, to, pattern)],
        PlanStep::ComputePhase {
            fetch, prefetch, ..
        } => fetch
            .iter()
            .chain(prefetch)
            .map(|f| (f.tensor, &f.from, &f.to, &f.pattern))
            .collect(),
        _ => Vec::new(),
    }
}

/// How many structured (collective) moves `plan` has, when every move's kind fits on every
/// rank; else the first misfit.
fn kinds_fit(plan: &Plan) -> Result<usize, String> {
    let mut checked = 0;
    for (i, step) in plan.steps.iter().enumerate() {
        let moves = step_moves(step);
        if moves.is_empty() {
            continue;
        }
        let shapes: Vec<Vec<usize>> = moves
            .iter()
            .map(|m| plan.tensor(m.0).expect("tensor").shape.clone())
            .collect();
        for me in 0..plan.procs {
            let transfers = plan.step_transfers(i, me);
            assert_eq!(transfers.len(), moves.len());
            for (j, ((_, from, to, kind), tr)) in moves.iter().zip(&transfers).enumerate() {
                let route = route_of(kind, from, to);
                if let Some(why) = misfit(&route, &shapes[j], from, to, tr, me) {
                    return Err(format!(
                        "P={}: step {i} move {j} ({kind:?}) on rank {me}: {why}\n\
                         from {from:?}\nto {to:?}",
                        plan.procs
                    ));
                }
            }
        }
        checked += moves
            .iter()
            .filter(|m| matches!(route_of(m.3, m.1, m.2), Route::Collective { .. }))
            .count();
    }
    Ok(checked)
}

/// Plans of `e` on `p` ranks: free under the time and flops objectives, and the phased plans
/// of a few budgets below the free peak (phase fetches are all-gathers).
fn plans(e: &ParsedEinsum, p: usize) -> Vec<(String, Plan)> {
    let mut out = Vec::new();
    for objective in [Objective::Time, Objective::Flops] {
        let opts = PlanOptions {
            procs: p,
            objective,
            ..Default::default()
        };
        let Ok(free) = build(e, &opts) else { continue };
        for num in [9u64, 8, 7, 6, 5] {
            let s = free.prediction.max_peak_memory * num / 10;
            let o = PlanOptions {
                mem: Some(s),
                ..opts.clone()
            };
            if let Ok(pl) = build(e, &o) {
                out.push((format!("{objective:?} S={s}"), pl));
            }
        }
        out.push((format!("{objective:?} free"), free));
    }
    out
}

/// A kernel: name, operands, output, extents.
type Case = (
    &'static str,
    &'static [&'static str],
    &'static str,
    &'static [(char, usize)],
);

/// The phased MTTKRP3 of the MPI kernels test on 8 ranks (with canonical inputs on every
/// rank its last phase's windows are empty on ranks 2, 3, 6 and 7, and its all-gathers still
/// fit there), and the paper's kernels at small, uneven sizes on 1..=9, 12 and 16 ranks:
/// every move's kind fits every rank.
#[test]
fn every_rank_fits_every_structured_move() {
    let cases: [Case; 7] = [
        (
            "MTTKRP3",
            &["ijk", "ja", "ka"],
            "ia",
            &[('i', 9), ('j', 11), ('k', 7), ('a', 5)],
        ),
        (
            "1MM",
            &["ij", "jk"],
            "ik",
            &[('i', 23), ('j', 29), ('k', 19)],
        ),
        (
            "1MM small",
            &["ij", "jk"],
            "ik",
            &[('i', 13), ('j', 11), ('k', 9)],
        ),
        (
            "paper",
            &["ijk", "ja", "ka", "al"],
            "il",
            &[('i', 7), ('j', 6), ('k', 8), ('a', 5), ('l', 9)],
        ),
        (
            "MTTKRP3 b",
            &["ijk", "ja", "ka"],
            "ia",
            &[('i', 13), ('j', 10), ('k', 9), ('a', 3)],
        ),
        (
            "TTMc",
            &["ijk", "jb", "kc"],
            "ibc",
            &[('i', 8), ('j', 9), ('k', 7), ('b', 4), ('c', 3)],
        ),
        (
            "2MM",
            &["ij", "jk", "kl"],
            "il",
            &[('i', 12), ('j', 7), ('k', 10), ('l', 9)],
        ),
    ];
    let mut checked = 0;
    for (name, ins, out, ext) in cases {
        let e = einsum(ins, out, ext);
        for p in (1..=9).chain([12, 16]) {
            for (what, pl) in plans(&e, p) {
                match kinds_fit(&pl) {
                    Ok(n) => checked += n,
                    Err(why) => panic!("{name} {what}: {why}"),
                }
            }
        }
    }
    assert!(checked > 100, "only {checked} collective moves checked");
}

/// The check is not vacuous: the MTTKRP3 plan's phase fetches gather over grid dims 0 and 2;
/// told they gather over dim 0 alone, some rank's transfers no longer fit.
#[test]
fn a_wrong_kind_misfits() {
    let e = einsum(
        &["ijk", "ja", "ka"],
        "ia",
        &[('i', 9), ('j', 11), ('k', 7), ('a', 5)],
    );
    let mut pl = plans(&e, 8)
        .into_iter()
        .map(|(_, pl)| pl)
        .find(|pl| {
            pl.steps.iter().any(|s| {
                matches!(s, PlanStep::ComputePhase { fetch, .. }
                    if fetch.iter().any(|f| matches!(&f.pattern, MoveKind::AllGather { dims } if dims.len() == 2)))
            })
        })
        .expect("a phased plan gathering over two grid dims");
    assert_eq!(kinds_fit(&pl).err(), None);
    for s in &mut pl.steps {
        if let PlanStep::ComputePhase { fetch, .. } = s {
            for f in fetch {
                if let MoveKind::AllGather { dims } = &mut f.pattern {
                    dims.truncate(1);
                }
            }
        }
    }
    assert!(kinds_fit(&pl).is_err());
}
