//! The search strategies: one trait, one registry selected by name.

mod branch;
mod dp;
mod greedy;
mod optimal;

use crate::bits::Bits;
use crate::net::{Net, Problem};
use crate::PathError;

pub(crate) use crate::net::PairPath;
pub use crate::net::{SsaPath, MAX_INDICES};

/// The SSA form of a pairwise path.
fn from_pairs(pairs: PairPath) -> SsaPath {
    pairs.into_iter().map(|(a, b)| vec![a, b]).collect()
}

/// A path search strategy. Every strategy gets the same [`Problem`] and must keep every step
/// result within `problem.memory_limit`, or fail with [`PathError::MemoryLimit`].
pub trait PathStrategy: Send + Sync {
    /// The registry name (`greedy`, `optimal`, ...).
    fn name(&self) -> &str;
    /// Finds a path.
    fn search(&self, problem: &Problem<'_>) -> Result<SsaPath, PathError>;
}

/// Runs `$f::<W>(&Net::<W>::new($p) $(, $arg)*)` with the narrowest bit-set width that fits.
macro_rules! with_width {
    ($p:expr, $f:ident $(, $arg:expr)*) => {{
        let p: &Problem<'_> = $p;
        match p.order.len() {
            0..=64 => $f::<1>(&Net::<1>::new(p) $(, $arg)*),
            65..=128 => $f::<2>(&Net::<2>::new(p) $(, $arg)*),
            129..=256 => $f::<4>(&Net::<4>::new(p) $(, $arg)*),
            257..=1024 => $f::<16>(&Net::<16>::new(p) $(, $arg)*),
            1025..=4096 => $f::<64>(&Net::<64>::new(p) $(, $arg)*),
            n => Err(PathError::TooManyIndices(n)),
        }
    }};
}

/// The error for a search that found nothing within the memory limit.
pub(crate) fn memory_error(p: &Problem<'_>, strategy: &str, exact: bool) -> PathError {
    PathError::MemoryLimit {
        limit: p.memory_limit.unwrap_or(u128::MAX),
        detail: if exact {
            format!("no such path exists ({strategy} search is exhaustive)")
        } else {
            format!("the {strategy} search found none")
        },
    }
}

/// opt_einsum's greedy heuristic (with a memory limit it runs `branch-1`, as opt_einsum does).
pub struct Greedy;
/// Exact minimum over all binary trees: subset dynamic programming with sound pruning.
pub struct Optimal;
/// Branch and bound with `width` candidates per step (`None`: all), as opt_einsum's branch.
pub struct Branch {
    /// Candidates explored per step.
    pub width: Option<usize>,
    /// Registry name.
    pub name: &'static str,
}
/// Dynamic programming over connected subgraphs, cheapest first, plus outer products where
/// they pay.
pub struct Dp;
/// Chooses by operand count as opt_einsum's `auto` does, and keeps greedy's path if cheaper.
pub struct Auto;

impl PathStrategy for Greedy {
    fn name(&self) -> &str {
        StrategyKind::Greedy.name()
    }
    fn search(&self, p: &Problem<'_>) -> Result<SsaPath, PathError> {
        with_width!(p, greedy_on)
    }
}

impl PathStrategy for Optimal {
    fn name(&self) -> &str {
        StrategyKind::Optimal.name()
    }
    fn search(&self, p: &Problem<'_>) -> Result<SsaPath, PathError> {
        if p.num_inputs() > optimal::MAX_OPERANDS {
            // Strategies that take any such einsum (branch's recursion runs out of stack near a
            // thousand operands, so not it), dp where its one limit allows.
            let instead = match largest_component(p) {
                Ok(c) if c <= dp::MAX_COMPONENT => "dp or greedy",
                _ => "greedy",
            };
            return Err(PathError::TooManyOperands {
                strategy: StrategyKind::Optimal.name().into(),
                max: optimal::MAX_OPERANDS,
                n: p.num_inputs(),
                instead: instead.into(),
            });
        }
        // A feasible path bounds the exact search; without one the search is unbounded.
        let ub = if p.num_inputs() >= 8 {
            Greedy.search(p).ok().and_then(|s| path_cost(p, &s))
        } else {
            None // 3^n splits are cheaper than a greedy run here
        };
        with_width!(p, run_optimal, ub)
    }
}

impl PathStrategy for Branch {
    fn name(&self) -> &str {
        self.name
    }
    fn search(&self, p: &Problem<'_>) -> Result<SsaPath, PathError> {
        with_width!(p, run_branch, self.width, self.name).map(from_pairs)
    }
}

impl PathStrategy for Dp {
    fn name(&self) -> &str {
        StrategyKind::Dp.name()
    }
    fn search(&self, p: &Problem<'_>) -> Result<SsaPath, PathError> {
        // Any number of operands, but each connected piece solved apart has a limit (which
        // fewer operands in all cannot break: no second pass over the network then).
        let c = match p.num_inputs() {
            n if n <= dp::MAX_COMPONENT => n,
            _ => largest_component(p)?,
        };
        if c > dp::MAX_COMPONENT {
            return Err(PathError::TooLargeComponent {
                strategy: StrategyKind::Dp.name().into(),
                max: dp::MAX_COMPONENT,
                n: c,
                instead: "greedy".into(),
            });
        }
        // opt_einsum's dp sums out every input's own indices first; both ways are tried.
        dp_with_singles(p, false)
    }
}

impl Auto {
    /// The strategy `auto` runs for `n` operands (before comparing with greedy).
    ///
    /// opt_einsum's `auto` runs optimal below 5 operands, branch-all below 7, branch-2 below 9,
    /// branch-1 below 15 and greedy beyond. Our exact `optimal` takes microseconds up to 8
    /// operands, so it replaces the first three bands (never costlier, being exact). From 9 to
    /// 14 operands ours runs `dp`, so that `auto` never costs more than opt_einsum's `dp` there
    /// (branch-1 can be twice as costly), capped by greedy's path ([`capped_dp`]); from 15 on
    /// it runs greedy, as opt_einsum's does.
    pub fn choice(n: usize) -> StrategyKind {
        match n {
            0..=8 => StrategyKind::Optimal,
            9..=14 => StrategyKind::Dp,
            _ => StrategyKind::Greedy,
        }
    }
}

impl PathStrategy for Auto {
    fn name(&self) -> &str {
        StrategyKind::Auto.name()
    }
    fn search(&self, p: &Problem<'_>) -> Result<SsaPath, PathError> {
        let chosen = Auto::choice(p.num_inputs());
        match chosen {
            // Exact, single-input reductions included.
            StrategyKind::Optimal => chosen.build().search(p),
            // Greedy's pairwise path, or the same after summing out each input's own indices.
            StrategyKind::Greedy => with_singles(p, |q, _| Greedy.search(q).map(Some)),
            // The cheaper of dp's and greedy's paths, each way of with_singles.
            StrategyKind::Dp => dp_with_singles(p, true),
            _ => chosen.build().search(p),
        }
    }
}

/// dp's search capped by greedy's path (opt_einsum's `cost_cap` idea): greedy runs first, and
/// dp joins no sets into a tree costlier than its path, so it stops once it has shown that no
/// tree of its space is cheaper. Then `or_greedy` returns greedy's path (the cheaper of the
/// two, as `auto` wants); otherwise dp searches again without the cap, so the result is dp's
/// path whatever greedy's cost.
///
/// With `bound`, the cost of a path the caller already has, only a path costing at most that
/// is of use: the cap is at most the bound, and `Ok(None)` says that this search's path (dp's,
/// or greedy's with `or_greedy`) would cost more.
fn capped_dp(
    p: &Problem<'_>,
    or_greedy: bool,
    bound: Option<f64>,
) -> Result<Option<SsaPath>, PathError> {
    with_width!(p, capped_dp_on, or_greedy, bound)
}

/// [`capped_dp`] on one bit-set form of the problem, shared by its searches.
fn capped_dp_on<const W: usize>(
    net: &Net<'_, '_, W>,
    or_greedy: bool,
    bound: Option<f64>,
) -> Result<Option<SsaPath>, PathError> {
    let greedy = || greedy_on(net);
    let dp = |cap: Option<f64>| run_dp(net, cap);
    capped(|x| net.path_cost(x), or_greedy, bound, dp, greedy)
}

/// Greedy's path, as `Greedy` finds it (branch-1 under a memory limit).
fn greedy_on<const W: usize>(net: &Net<'_, '_, W>) -> Result<SsaPath, PathError> {
    if net.p.memory_limit.is_some() {
        run_branch(net, Some(1), StrategyKind::Greedy.name()).map(from_pairs)
    } else {
        run_greedy(net).map(from_pairs)
    }
}

/// [`capped_dp`]'s rule over any dp search (`dp(cap)`) and greedy search (`greedy()`, run
/// only when of use), with `cost` the problem's path cost.
fn capped(
    cost: impl Fn(&SsaPath) -> Option<f64>,
    or_greedy: bool,
    bound: Option<f64>,
    dp: impl Fn(Option<f64>) -> Result<SsaPath, PathError>,
    greedy: impl FnOnce() -> Result<SsaPath, PathError>,
) -> Result<Option<SsaPath>, PathError> {
    if let (false, Some(b)) = (or_greedy, bound) {
        // dp's own path whatever greedy's: above the bound it is of no use.
        return Ok(dp(Some(b)).ok());
    }
    let greedy = greedy();
    let upper = greedy.as_ref().ok().and_then(&cost);
    let Some(upper) = upper else {
        return match bound {
            Some(b) => Ok(dp(Some(b)).ok()),
            None => dp(None).map(Some),
        };
    };
    if let Some(b) = bound.filter(|&b| b < upper) {
        // Greedy's path is of no use either: dp's, if at most the bound, is the answer.
        return Ok(dp(Some(b)).ok());
    }
    match dp(Some(upper)) {
        // The cap bounds each connected component's tree; joining the components can still
        // cost more than greedy's path.
        Ok(path) if or_greedy && cost(&path).is_none_or(|c| c > upper) => greedy.map(Some),
        Ok(path) => Ok(Some(path)),
        Err(_) if or_greedy => greedy.map(Some),
        Err(_) => dp(None).map(Some),
    }
}

/// dp (capped by greedy as [`capped_dp`], `or_greedy` likewise) with single-operand
/// reductions: on a connected network with operands that hold indices of their own, one
/// search over each such operand's two forms ([`dp::dp_ways`]), capped by the cheaper of
/// greedy's paths with and without those reductions; elsewhere [`with_singles`] over
/// [`capped_dp`]. Never costlier than the latter (the one search's space holds both of its
/// searches' on a connected network, and greedy caps it the same way).
fn dp_with_singles(p: &Problem<'_>, or_greedy: bool) -> Result<SsaPath, PathError> {
    let own = own_indices(p);
    if !own.1.is_empty() {
        if let Some(path) = with_width!(p, dp_ways_on, or_greedy)? {
            return Ok(path);
        }
    }
    with_singles_of(p, own, |q, bound| capped_dp(q, or_greedy, bound))
}

/// Each input without its own indices (those no other input and not the output holds), and
/// the inputs that have some, in order.
fn own_indices(p: &Problem<'_>) -> (Vec<Vec<crate::Index>>, Vec<usize>) {
    // How many inputs hold each index (an input's index list is distinct), the output counting
    // as one more: an index held once is the input's own.
    let mut holders: crate::bits::FastMap<crate::Index, usize> = Default::default();
    for c in p.inputs.iter().flatten().chain(p.output.iter()) {
        *holders.entry(*c).or_insert(0) += 1;
    }
    let inputs: Vec<Vec<crate::Index>> = p
        .inputs
        .iter()
        .map(|t| t.iter().copied().filter(|c| holders[c] > 1).collect())
        .collect();
    let reducible = (0..p.num_inputs())
        .filter(|&t| inputs[t].len() < p.inputs[t].len())
        .collect();
    (inputs, reducible)
}

/// [`dp_with_singles`]'s one search, or `None` where it does not apply.
fn dp_ways_on<const W: usize>(
    net: &Net<'_, '_, W>,
    or_greedy: bool,
) -> Result<Option<SsaPath>, PathError> {
    // Indices that one input alone holds (and not the output): those held once, not twice.
    let (mut once, mut twice) = (Bits::<W>::EMPTY, Bits::<W>::EMPTY);
    for k in &net.inputs {
        twice = twice | (once & *k);
        once = once | *k;
    }
    let own = once.minus(twice).minus(net.output);
    let reducible: Vec<usize> = (0..net.n())
        .filter(|&t| net.inputs[t].intersects(&own))
        .collect();
    if net.n() < 2 || reducible.is_empty() || !dp::connected(net) {
        return Ok(None);
    }
    // The cheaper of greedy's paths on the problem as it is and with own indices summed out
    // first (as `with_singles` over greedy, on this net and on it without those indices).
    let greedy = || -> Result<SsaPath, PathError> {
        let reduced =
            greedy_on(&net.without(own)).map(|pairs| unary_first(net.n(), &reducible, &pairs));
        let plain = greedy_on(net);
        let cost = |x: &Result<SsaPath, PathError>| x.as_ref().ok().and_then(|x| net.path_cost(x));
        match (cost(&reduced), cost(&plain)) {
            (Some(r), Some(a)) if r < a => reduced,
            (Some(_), None) => reduced,
            _ => plain,
        }
    };
    let dp = |cap: Option<f64>| {
        dp::dp_ways(net, cap).ok_or_else(|| memory_error(net.p, StrategyKind::Dp.name(), false))
    };
    let path = capped(|x| net.path_cost(x), or_greedy, None, dp, greedy)?;
    Ok(Some(path.expect("an unbounded search returns a path")))
}

/// A registered search strategy, as named on the command line and in [`crate::PathOptions`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum StrategyKind {
    /// [`Auto`]: chosen by operand count.
    Auto,
    /// [`Greedy`].
    Greedy,
    /// [`Optimal`].
    Optimal,
    /// [`Branch`] with two candidates per step.
    Branch2,
    /// [`Branch`] with every candidate.
    BranchAll,
    /// [`Branch`] with one candidate per step.
    Branch1,
    /// [`Dp`].
    Dp,
}

/// One row of the strategy table: the canonical name, the other names it answers to, and what
/// it runs.
#[derive(Clone, Copy, Debug)]
pub struct StrategyEntry {
    /// The name the strategy reports and prints.
    pub name: &'static str,
    /// Other accepted spellings (opt_einsum's).
    pub aliases: &'static [&'static str],
    /// The strategy itself.
    pub kind: StrategyKind,
}

/// The one table of strategy names and aliases, in the order help and errors list them.
pub const STRATEGIES: &[StrategyEntry] = &[
    StrategyEntry {
        name: "auto",
        aliases: &[],
        kind: StrategyKind::Auto,
    },
    StrategyEntry {
        name: "greedy",
        aliases: &[],
        kind: StrategyKind::Greedy,
    },
    StrategyEntry {
        name: "optimal",
        aliases: &[],
        kind: StrategyKind::Optimal,
    },
    StrategyEntry {
        name: "branch-2",
        aliases: &["branch"],
        kind: StrategyKind::Branch2,
    },
    StrategyEntry {
        name: "branch-all",
        aliases: &[],
        kind: StrategyKind::BranchAll,
    },
    StrategyEntry {
        name: "branch-1",
        aliases: &[],
        kind: StrategyKind::Branch1,
    },
    StrategyEntry {
        name: "dp",
        aliases: &["dynamic-programming"],
        kind: StrategyKind::Dp,
    },
];

/// The canonical name of every registered strategy, in table order.
pub const STRATEGY_NAMES: [&str; STRATEGIES.len()] = {
    let mut names = [""; STRATEGIES.len()];
    let mut i = 0;
    // A const block cannot use iterators; this copies the table's first column.
    while i < STRATEGIES.len() {
        names[i] = STRATEGIES[i].name;
        i += 1;
    }
    names
};

/// Every strategy with its aliases, as help and errors print them: `branch-2 (= branch)`.
pub fn strategy_list() -> String {
    STRATEGIES
        .iter()
        .map(|e| match e.aliases {
            [] => e.name.to_string(),
            a => format!("{} (= {})", e.name, a.join(", ")),
        })
        .collect::<Vec<_>>()
        .join(", ")
}

impl StrategyKind {
    /// This strategy's row of [`STRATEGIES`].
    pub fn entry(self) -> &'static StrategyEntry {
        STRATEGIES
            .iter()
            .find(|e| e.kind == self)
            .expect("every kind has a row in STRATEGIES")
    }

    /// The canonical name.
    pub fn name(self) -> &'static str {
        self.entry().name
    }

    /// The search this name runs.
    pub fn build(self) -> Box<dyn PathStrategy> {
        let name = self.name();
        match self {
            StrategyKind::Auto => Box::new(Auto),
            StrategyKind::Greedy => Box::new(Greedy),
            StrategyKind::Optimal => Box::new(Optimal),
            StrategyKind::Branch2 => Box::new(Branch {
                width: Some(2),
                name,
            }),
            StrategyKind::BranchAll => Box::new(Branch { width: None, name }),
            StrategyKind::Branch1 => Box::new(Branch {
                width: Some(1),
                name,
            }),
            StrategyKind::Dp => Box::new(Dp),
        }
    }
}

impl std::str::FromStr for StrategyKind {
    type Err = PathError;

    fn from_str(name: &str) -> Result<Self, PathError> {
        STRATEGIES
            .iter()
            .find(|e| e.name == name || e.aliases.contains(&name))
            .map(|e| e.kind)
            .ok_or_else(|| PathError::UnknownStrategy {
                name: name.to_string(),
                known: strategy_list(),
            })
    }
}

impl std::fmt::Display for StrategyKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// The strategy registered under `name` (a name or an alias of [`STRATEGIES`]).
pub fn strategy(name: &str) -> Result<Box<dyn PathStrategy>, PathError> {
    name.parse::<StrategyKind>().map(StrategyKind::build)
}

/// Runs `search` on `p` and on `p` with every input's own indices (in no other input and not
/// in the output) summed out first by a single-operand step, and keeps the cheaper path (`p`'s
/// on a tie).
///
/// The reduced problem goes first (summing out early usually pays), and its path's cost bounds
/// the search on `p`: `search(problem, Some(b))` may return `Ok(None)` when its path would cost
/// more than `b`, which lets a bounded search stop early (without a bound it returns a path or
/// an error). The answer is the same as running both unbounded.
fn with_singles(
    p: &Problem<'_>,
    search: impl Fn(&Problem<'_>, Option<f64>) -> Result<Option<SsaPath>, PathError>,
) -> Result<SsaPath, PathError> {
    with_singles_of(p, own_indices(p), search)
}

/// [`with_singles`] with `p`'s [`own_indices`] already found.
fn with_singles_of(
    p: &Problem<'_>,
    (inputs, reducible): (Vec<Vec<crate::Index>>, Vec<usize>),
    search: impl Fn(&Problem<'_>, Option<f64>) -> Result<Option<SsaPath>, PathError>,
) -> Result<SsaPath, PathError> {
    let n = p.num_inputs();
    let unbounded = |q: &Problem<'_>| {
        search(q, None).map(|found| found.expect("an unbounded search returns a path"))
    };
    if reducible.is_empty() || n < 2 {
        return unbounded(p);
    }
    let q = Problem::new(inputs, p.output.clone(), p.extents, p.memory_limit, p.cost);
    let Ok(pairs) = unbounded(&q) else {
        return unbounded(p);
    };
    let reduced = unary_first(n, &reducible, &pairs);
    let Some(b) = path_cost(p, &reduced) else {
        // A reduced input breaks the memory limit: `p`'s path, if any.
        return Ok(unbounded(p).unwrap_or(reduced));
    };
    match search(p, Some(b)) {
        Ok(Some(plain)) => match path_cost(p, &plain) {
            Some(a) if a <= b => Ok(plain),
            _ => Ok(reduced),
        },
        // Nothing at most `b`, or nothing at all.
        _ => Ok(reduced),
    }
}

/// The path of `n` inputs that first sums the own indices out of each input of `reducible`
/// (sorted), one single-operand step each, then takes the steps of `pairs`, a path over the
/// reduced inputs.
fn unary_first(n: usize, reducible: &[usize], pairs: &SsaPath) -> SsaPath {
    // Node ids after the k unary steps: reduced input r is n + its rank, later steps shift by k.
    let k = reducible.len();
    let id = |x: usize| match reducible.binary_search(&x) {
        Ok(r) if x < n => n + r,
        _ if x >= n => x + k,
        _ => x,
    };
    let mut ssa: SsaPath = reducible.iter().map(|&t| vec![t]).collect();
    ssa.extend(pairs.iter().map(|st| st.iter().map(|&x| id(x)).collect()));
    ssa
}

fn cost_of<const W: usize>(net: &Net<'_, '_, W>, ssa: &SsaPath) -> Result<Option<f64>, PathError> {
    Ok(net.path_cost(ssa))
}

/// Cost of `ssa` under the problem's model (`None` if it breaks the limit).
pub(crate) fn path_cost(p: &Problem<'_>, ssa: &SsaPath) -> Option<f64> {
    with_width!(p, cost_of, ssa).ok().flatten()
}

fn run_greedy<const W: usize>(net: &Net<'_, '_, W>) -> Result<PairPath, PathError> {
    Ok(greedy::greedy(net))
}

fn run_branch<const W: usize>(
    net: &Net<'_, '_, W>,
    width: Option<usize>,
    name: &str,
) -> Result<PairPath, PathError> {
    branch::branch(net, width).ok_or_else(|| memory_error(net.p, name, false))
}

fn run_optimal<const W: usize>(
    net: &Net<'_, '_, W>,
    ub: Option<f64>,
) -> Result<SsaPath, PathError> {
    optimal::optimal(net, ub).ok_or_else(|| memory_error(net.p, StrategyKind::Optimal.name(), true))
}

/// The operand count of `p`'s largest connected piece (operands joined through summed
/// indices), as dp solves them apart.
fn largest_component(p: &Problem<'_>) -> Result<usize, PathError> {
    with_width!(p, largest_component_on)
}

fn largest_component_on<const W: usize>(net: &Net<'_, '_, W>) -> Result<usize, PathError> {
    Ok(dp::largest_component(net))
}

fn run_dp<const W: usize>(net: &Net<'_, '_, W>, upper: Option<f64>) -> Result<SsaPath, PathError> {
    dp::dp(net, upper).ok_or_else(|| memory_error(net.p, StrategyKind::Dp.name(), false))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cost::{CostModel, Flops, MultiplyAdds};
    use proptest::prelude::*;
    use std::collections::BTreeMap;

    /// [`with_singles`] as it was: both problems searched without a bound, the cheaper path
    /// kept (`p`'s on a tie).
    fn both_unbounded(
        p: &Problem<'_>,
        search: impl Fn(&Problem<'_>, Option<f64>) -> Result<Option<SsaPath>, PathError>,
    ) -> Option<f64> {
        let plain = search(p, None).ok().flatten();
        let mut holders: BTreeMap<char, usize> = BTreeMap::new();
        for c in p.inputs.iter().flatten().chain(p.output.iter()) {
            *holders.entry(*c).or_insert(0) += 1;
        }
        let inputs: Vec<Vec<char>> = p
            .inputs
            .iter()
            .map(|t| t.iter().copied().filter(|c| holders[c] > 1).collect())
            .collect();
        let size = |t: &[char]| -> f64 { t.iter().map(|c| p.extents[c] as f64).product() };
        let reducible = || (0..p.num_inputs()).filter(|&t| inputs[t].len() < p.inputs[t].len());
        // A single-operand step costs twice its input and must fit the limit with its result.
        let unary: f64 = reducible().map(|t| 2.0 * size(&p.inputs[t])).sum();
        let fits = reducible().all(|t| p.memory_limit.is_none_or(|l| size(&inputs[t]) <= l as f64));
        let q = Problem::new(inputs, p.output.clone(), p.extents, p.memory_limit, p.cost);
        let reduced = search(&q, None)
            .ok()
            .flatten()
            .and_then(|r| path_cost(&q, &r))
            .filter(|_| fits)
            .map(|c| c + unary);
        let plain = plain.and_then(|x| path_cost(p, &x));
        match (plain, reduced) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Networks whose operands may carry indices of their own (summing them out first can pay).
    fn arb_problem() -> impl Strategy<Value = (Vec<Vec<char>>, Vec<char>, BTreeMap<char, usize>)> {
        const SHARED: &[char] = &['a', 'b', 'c', 'd', 'e', 'f'];
        const OWN: &[char] = &['s', 't', 'u', 'v', 'w', 'x', 'y', 'z', 'S', 'T', 'U', 'V'];
        (
            prop::collection::vec(
                (
                    prop::collection::btree_set(0..SHARED.len(), 1..=3),
                    any::<bool>(),
                ),
                2..=12,
            ),
            prop::collection::vec(1..=6usize, SHARED.len() + OWN.len()),
            any::<u8>(),
        )
            .prop_map(|(ops, ext, outmask)| {
                let inputs: Vec<Vec<char>> = ops
                    .iter()
                    .enumerate()
                    .map(|(k, (t, own))| {
                        let mut v: Vec<char> = t.iter().map(|&i| SHARED[i]).collect();
                        if *own {
                            v.push(OWN[k]);
                        }
                        v
                    })
                    .collect();
                let output: Vec<char> = SHARED
                    .iter()
                    .enumerate()
                    .filter(|&(i, c)| {
                        outmask >> i & 1 == 1 && inputs.iter().flatten().any(|x| x == c)
                    })
                    .map(|(_, c)| *c)
                    .collect();
                let extents = SHARED.iter().chain(OWN).copied().zip(ext).collect();
                (inputs, output, extents)
            })
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

        /// Searching the reduced problem first and bounding the other by it changes no cost.
        #[test]
        fn bounded_singles_cost_as_both_unbounded(
            (inputs, output, extents) in arb_problem(),
            limit in prop::option::weighted(0.2, 8u128..=500),
        ) {
            let model: &dyn CostModel = &Flops;
            let p = Problem::new(inputs, output, &extents, limit, model);
            for or_greedy in [false, true] {
                let search = |q: &Problem<'_>, b: Option<f64>| capped_dp(q, or_greedy, b);
                let new = with_singles(&p, search).ok().and_then(|x| path_cost(&p, &x));
                prop_assert_eq!(new, both_unbounded(&p, search), "or_greedy {}", or_greedy);
            }
        }

        /// dp with single-operand reductions searched in one pass (`dp_with_singles`) costs no
        /// more than the two searches of `with_singles` it replaces, and no less than the exact
        /// search over the same choices (`optimal`), with and without a memory limit.
        #[test]
        fn one_search_with_reductions_as_cheap_as_two(
            (inputs, output, extents) in arb_problem(),
            limit in prop::option::weighted(0.2, 8u128..=500),
        ) {
            let models: [&dyn CostModel; 2] = [&Flops, &MultiplyAdds];
            for (model, or_greedy) in models.into_iter().flat_map(|m| [(m, false), (m, true)]) {
                let p = Problem::new(inputs.clone(), output.clone(), &extents, limit, model);
                let exact = Optimal.search(&p).ok().and_then(|x| path_cost(&p, &x));
                let new = dp_with_singles(&p, or_greedy).ok().and_then(|x| path_cost(&p, &x));
                let old = with_singles(&p, |q, b| capped_dp(q, or_greedy, b))
                    .ok()
                    .and_then(|x| path_cost(&p, &x));
                if let Some(o) = old {
                    let n = new.expect("a path wherever the two searches found one");
                    prop_assert!(n <= o * (1.0 + 1e-12), "or_greedy {}: {} > {}", or_greedy, n, o);
                }
                if let (Some(n), Some(x)) = (new, exact) {
                    prop_assert!(x <= n * (1.0 + 1e-12), "optimal {} > {}", x, n);
                }
            }
        }

        /// `auto`'s search between 9 and 14 operands (dp capped by greedy, each way of
        /// with_singles) never returns a path costlier than greedy's, disconnected networks
        /// included (dp's cap bounds each component, not their joins).
        #[test]
        fn capped_dp_never_loses_to_greedy(
            (inputs, output, extents) in arb_problem(),
            limit in prop::option::weighted(0.2, 8u128..=500),
        ) {
            let model: &dyn CostModel = &Flops;
            let p = Problem::new(inputs, output, &extents, limit, model);
            let auto = dp_with_singles(&p, true).ok().and_then(|x| path_cost(&p, &x));
            let greedy = with_singles(&p, |q, _| Greedy.search(q).map(Some))
                .ok()
                .and_then(|x| path_cost(&p, &x));
            if let (Some(a), Some(g)) = (auto, greedy) {
                prop_assert!(a <= g, "auto {} > greedy {}", a, g);
            }
        }
    }
}
