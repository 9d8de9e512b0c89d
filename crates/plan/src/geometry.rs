//! Grids, blocks and distributions: the shared geometry of planner and executor.

use deinsum_expr::Index;
use serde::{Deserialize, Serialize};

/// One dimension of a Cartesian process grid.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct GridDim {
    /// The iteration index this dimension splits (a name; reduce-scatter helpers may reuse one).
    pub index: Index,
    /// Number of ranks along it (>= 1).
    pub size: usize,
}

/// A Cartesian process grid. Ranks `0..size()` have coordinates in row-major order (the last
/// dimension varies fastest, as MPI_Cart_create); ranks `>= size()` hold nothing.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Grid {
    /// Dimensions, outermost first.
    pub dims: Vec<GridDim>,
}

impl Grid {
    /// Number of ranks in the grid (1 for an empty grid: rank 0 alone).
    pub fn size(&self) -> usize {
        self.dims.iter().map(|d| d.size).product()
    }

    /// Coordinates of `rank`, or `None` when the rank is outside the grid.
    pub fn coords(&self, rank: usize) -> Option<Vec<usize>> {
        if rank >= self.size() {
            return None;
        }
        let mut c = vec![0; self.dims.len()];
        let mut r = rank;
        for (k, d) in self.dims.iter().enumerate().rev() {
            c[k] = r % d.size;
            r /= d.size;
        }
        Some(c)
    }

    /// The rank at `coords` (row-major).
    pub fn rank_of(&self, coords: &[usize]) -> usize {
        coords
            .iter()
            .zip(&self.dims)
            .fold(0, |acc, (&x, d)| acc * d.size + x)
    }

    /// Position of the grid dimension named `c`.
    pub fn position(&self, c: Index) -> Option<usize> {
        self.dims.iter().position(|d| d.index == c)
    }
}

/// A half-open range `[start, end)` of one index: the unit of every block cut.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Interval {
    /// First element.
    pub start: usize,
    /// One past the last element.
    pub end: usize,
}

impl Interval {
    /// `[start, end)`.
    pub fn new(start: usize, end: usize) -> Self {
        Interval { start, end }
    }

    /// Number of elements (0 when empty).
    pub fn len(&self) -> usize {
        self.end.saturating_sub(self.start)
    }

    /// True when the interval holds no element.
    pub fn is_empty(&self) -> bool {
        self.end <= self.start
    }

    /// The common part with `other` (empty, at `max` of the starts, when they do not meet).
    pub fn intersect(&self, other: Interval) -> Interval {
        let start = self.start.max(other.start);
        Interval {
            start,
            end: self.end.min(other.end).max(start),
        }
    }

    /// The `part`-th of `parts` ceil-sized blocks ([`block_range`]).
    pub fn subinterval(&self, parts: usize, part: usize) -> Interval {
        block_range(self.start, self.end, parts, part).into()
    }

    /// The `part`-th of `parts` balanced blocks ([`balanced_range`]).
    pub fn balanced_subinterval(&self, parts: usize, part: usize) -> Interval {
        balanced_range(self.start, self.end, parts, part).into()
    }

    /// The `part`-th of `parts` blocks, balanced or ceil-sized ([`split_range`]).
    pub fn split(&self, balanced: bool, parts: usize, part: usize) -> Interval {
        split_range(balanced, self.start, self.end, parts, part).into()
    }

    /// Length of the longest of `parts` blocks, `ceil(len / parts)`: the first ceil-sized
    /// block's, and a balanced cut's longest too.
    pub fn max_block_len(&self, parts: usize) -> usize {
        busiest_len(self.len(), parts)
    }

    /// Consecutive pieces of `len` elements (at least 1) from the start; the last may be short.
    pub fn tiles(&self, len: usize) -> impl Iterator<Item = Interval> {
        let (end, step) = (self.end, len.max(1));
        (self.start..end)
            .step_by(step)
            .map(move |s| Interval::new(s, (s + step).min(end)))
    }
}

/// Length of the longest of `parts` blocks of an extent `n`, `ceil(n / parts)` (the first
/// block of a ceil-sized cut, the longest of a balanced one): what the planner's models
/// multiply, one definition for [`Interval::max_block_len`] and them.
pub fn busiest_len(n: usize, parts: usize) -> usize {
    n.div_ceil(parts.max(1))
}

impl From<(usize, usize)> for Interval {
    fn from((start, end): (usize, usize)) -> Self {
        Interval { start, end }
    }
}

impl From<Interval> for (usize, usize) {
    fn from(iv: Interval) -> Self {
        (iv.start, iv.end)
    }
}

/// A phased compute's window of a summed index: phase `part` of `count` of `index`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct PhaseCut {
    /// The summed index walked in phases.
    pub index: Index,
    /// Number of phases.
    pub count: usize,
    /// The phase, `0..count`.
    pub part: usize,
}

impl PhaseCut {
    /// `range` of index `c` cut to this phase when `c` is the phased index (else unchanged).
    pub fn apply(cut: Option<PhaseCut>, c: Index, range: Interval) -> Interval {
        match cut {
            Some(cut) if cut.index == c => range.subinterval(cut.count, cut.part),
            _ => range,
        }
    }
}

/// The `part`-th of `parts` ceil-sized blocks of `[lo, hi)`: `[lo + part*b, min(lo + (part+1)*b, hi))`
/// with `b = ceil((hi-lo)/parts)`; the last blocks may be short or empty.
pub fn block_range(lo: usize, hi: usize, parts: usize, part: usize) -> (usize, usize) {
    let n = hi - lo;
    let b = n.div_ceil(parts.max(1));
    let s = (lo + part * b).min(hi);
    let e = (lo + (part + 1) * b).min(hi);
    (s, e)
}

/// The `part`-th of `parts` balanced blocks of `[lo, hi)`: with `n = hi - lo`, the first
/// `n mod parts` blocks have `ceil(n/parts)` elements and the rest `floor(n/parts)`, so every
/// block is nonempty when `n >= parts` and the largest is the ceil block's size.
pub fn balanced_range(lo: usize, hi: usize, parts: usize, part: usize) -> (usize, usize) {
    let p = parts.max(1);
    let (q, r) = ((hi - lo) / p, (hi - lo) % p);
    let start = |x: usize| lo + x.min(p) * q + x.min(r);
    (start(part), start(part.saturating_add(1)))
}

/// Block `part` of `parts` of `[lo, hi)`: balanced ([`balanced_range`]) or ceil-sized
/// ([`block_range`]). Every split of a distribution's grid goes through here.
pub fn split_range(
    balanced: bool,
    lo: usize,
    hi: usize,
    parts: usize,
    part: usize,
) -> (usize, usize) {
    if balanced {
        balanced_range(lo, hi, parts, part)
    } else {
        block_range(lo, hi, parts, part)
    }
}

/// A box of a tensor: one half-open global range per tensor index, in the tensor's order.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Block {
    /// `[start, end)` per index.
    pub ranges: Ranges,
}

/// The ranges of a box, stored inline up to four indices (no allocation per box).
pub type Ranges = smallvec::SmallVec<[(usize, usize); 4]>;

impl Block {
    /// The whole tensor of this shape.
    pub fn full(shape: &[usize]) -> Self {
        Block {
            ranges: shape.iter().map(|&n| (0, n)).collect(),
        }
    }

    /// Number of elements.
    pub fn len(&self) -> u64 {
        self.ranges.iter().map(|&(s, e)| (e - s) as u64).product()
    }

    /// True when the box has no element.
    pub fn is_empty(&self) -> bool {
        self.ranges.iter().any(|&(s, e)| e <= s)
    }

    /// Extent of the box along each index.
    pub fn shape(&self) -> Vec<usize> {
        self.ranges.iter().map(|&(s, e)| e - s).collect()
    }

    /// The intersection with `other`, `None` when empty.
    pub fn intersect(&self, other: &Block) -> Option<Block> {
        let ranges: Ranges = self
            .ranges
            .iter()
            .zip(&other.ranges)
            .map(|(&(a, b), &(c, d))| (a.max(c), b.min(d)))
            .collect();
        let blk = Block { ranges };
        if blk.is_empty() {
            None
        } else {
            Some(blk)
        }
    }
}

/// How a tensor is laid out over a grid: blocks along the grid dimensions that split its
/// indices, replicated (or holding partial sums) along the others.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Distribution {
    /// The grid the tensor lives on.
    pub grid: Grid,
    /// For each tensor index (tensor order), the grid dimensions (positions in `grid.dims`)
    /// that split it, outermost first (nested blocking: ceil-sized, or balanced with
    /// `balanced`). Empty: not split.
    pub split: Vec<Vec<usize>>,
    /// Grid dimensions along which blocks are partial sums. Grid dimensions that neither split
    /// nor are partial replicate the block.
    pub partial: Vec<usize>,
    /// Phase windows: after the grid splits, tensor index `dim` of every rank's block is cut
    /// into `parts` ceil-blocks and only block `part` is held (the buffer of one phase of a
    /// phased compute). Empty for every distribution a tensor rests in.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub window: Vec<Window>,
    /// The grid splits cut balanced blocks ([`balanced_range`]) instead of ceil-sized ones
    /// ([`block_range`]); windows are ceil-sized either way. Only canonical input
    /// distributions set it, and only where it changes a block (absent when false).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub balanced: bool,
}

/// One phase window of a [`Distribution`]: part `part` of `parts` of tensor index `dim`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Window {
    /// Position of the tensor index (tensor order).
    pub dim: usize,
    /// Number of phases the rank's range is cut into.
    pub parts: usize,
    /// The phase held.
    pub part: usize,
}

impl Window {
    /// `range` of tensor index `v` cut down to those of `windows` on `v`, each a ceil-sized
    /// [`Interval::subinterval`] (unchanged without one).
    pub fn narrow(windows: &[Window], v: usize, range: Interval) -> Interval {
        windows
            .iter()
            .filter(|w| w.dim == v)
            .fold(range, |r, w| r.subinterval(w.parts, w.part))
    }
}

impl Distribution {
    /// The block `rank` holds of a tensor of `shape`, or `None` when the rank is outside the
    /// grid. A rank inside the grid may hold an empty block (ceil-blocking of a short extent).
    pub fn block(&self, rank: usize, shape: &[usize]) -> Option<Block> {
        let coords = self.grid.coords(rank)?;
        let ranges = shape
            .iter()
            .zip(&self.split)
            .enumerate()
            .map(|(v, (&n, _))| self.index_range(v, n, |g| coords[g]).into())
            .collect();
        Some(Block { ranges })
    }

    /// Whether `self` and `other` give every rank `0..procs` the same block of a tensor of
    /// `shape` (and hold the same partial sums): two descriptions of one layout, such as a
    /// grid with an extra dim of size 1, or a replica dim under another name.
    pub fn same_blocks(&self, other: &Distribution, shape: &[usize], procs: usize) -> bool {
        self == other
            || (self.partial == other.partial
                && (0..procs).all(|r| self.block(r, shape) == other.block(r, shape)))
    }

    /// The range of tensor index `v` (extent `n`) in the block at grid coordinates
    /// `coord(grid dim)`: cut along each grid dim splitting it, outermost first, then windowed.
    /// Every block of a distribution is made of these.
    pub fn index_range(&self, v: usize, n: usize, coord: impl Fn(usize) -> usize) -> Interval {
        let r = self.split[v].iter().fold(Interval::new(0, n), |r, &g| {
            r.split(self.balanced, self.grid.dims[g].size, coord(g))
        });
        Window::narrow(&self.window, v, r)
    }

    /// Block `x` of `range` along grid dim `g` (this distribution's blocking).
    pub fn cut(&self, range: (usize, usize), g: usize, x: usize) -> (usize, usize) {
        let r = Interval::from(range).split(self.balanced, self.grid.dims[g].size, x);
        r.into()
    }

    /// `range` of tensor index `v` cut down to the windows on `v` (unchanged without one).
    pub fn windowed(&self, v: usize, range: (usize, usize)) -> (usize, usize) {
        Window::narrow(&self.window, v, range.into()).into()
    }

    /// The distribution of a tensor held whole by rank 0 alone.
    pub fn on_root(ndim: usize) -> Self {
        Distribution {
            grid: Grid::default(),
            split: vec![Vec::new(); ndim],
            partial: Vec::new(),
            window: Vec::new(),
            balanced: false,
        }
    }

    /// True when some grid dimension holds partial sums.
    pub fn is_partial(&self) -> bool {
        self.partial.iter().any(|&g| self.grid.dims[g].size > 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dist(dims: &[(char, usize)], split: Vec<Vec<usize>>) -> Distribution {
        Distribution {
            grid: Grid {
                dims: dims
                    .iter()
                    .map(|&(index, size)| GridDim { index, size })
                    .collect(),
            },
            split,
            partial: vec![],
            window: vec![],
            balanced: false,
        }
    }

    #[test]
    fn same_blocks_sees_through_size_one_dims_and_replica_names() {
        let shape = [7, 5, 3];
        let a = dist(
            &[('i', 2), ('j', 1), ('k', 1)],
            vec![vec![0], vec![1], vec![2]],
        );
        let b = dist(
            &[('i', 2), ('j', 1), ('k', 1), ('z', 1)],
            vec![vec![0], vec![1], vec![2]],
        );
        assert!(a.same_blocks(&b, &shape, 2) && b.same_blocks(&a, &shape, 2));
        // Replicated over two ranks, the replica dim named differently or placed elsewhere.
        let m = [4, 6];
        let r1 = dist(&[('i', 1), ('z', 1), ('y', 2)], vec![vec![0], vec![1]]);
        let r2 = dist(
            &[('i', 2), ('j', 1), ('k', 1), ('z', 1)],
            vec![vec![2], vec![3]],
        );
        assert!(r1.same_blocks(&r2, &m, 2));
        // Split against replicated, split along another index: different blocks.
        let s1 = dist(&[('i', 2), ('z', 1)], vec![vec![0], vec![1]]);
        let s2 = dist(&[('i', 1), ('z', 2)], vec![vec![0], vec![1]]);
        assert!(!s1.same_blocks(&r1, &m, 2));
        assert!(!s1.same_blocks(&s2, &m, 2));
        // A rank outside one grid holds nothing there: not the same as an in-grid block.
        assert!(!r1.same_blocks(&dist(&[('i', 1)], vec![vec![], vec![]]), &m, 2));
    }

    /// Pieces of `whole` cut by `cut` into `parts` tile it exactly, in order.
    fn tiles(whole: Interval, parts: usize, cut: impl Fn(usize) -> Interval) -> bool {
        let mut at = whole.start;
        for x in 0..parts {
            let iv = cut(x);
            if iv.start != at || iv.end < iv.start || iv.end > whole.end {
                return false;
            }
            at = iv.end;
        }
        at == whole.end
    }

    #[test]
    fn subintervals_tile_the_interval() {
        for lo in [0usize, 3] {
            for n in 0..40 {
                for parts in 1..50 {
                    let w = Interval::new(lo, lo + n);
                    assert!(tiles(w, parts, |x| w.subinterval(parts, x)), "{n}/{parts}");
                    assert!(tiles(w, parts, |x| w.balanced_subinterval(parts, x)));
                    // The ceil cut: every nonempty piece but the last has ceil(n/parts) elements.
                    let b = n.div_ceil(parts);
                    assert!((0..parts).all(|x| {
                        let l = w.subinterval(parts, x).len();
                        l == b || l < b && w.subinterval(parts, x + 1).is_empty()
                    }));
                }
            }
        }
    }

    #[test]
    fn max_block_len_and_tiles() {
        for n in 0..30 {
            let w = Interval::new(2, 2 + n);
            for parts in 1..12 {
                let longest = (0..parts).map(|x| w.subinterval(parts, x).len()).max();
                assert_eq!(longest, Some(w.max_block_len(parts)));
                let bal = (0..parts)
                    .map(|x| w.balanced_subinterval(parts, x).len())
                    .max();
                assert_eq!(bal, Some(w.max_block_len(parts)));
                let t: Vec<Interval> = w.tiles(parts).collect();
                assert!(tiles(w, t.len(), |x| t[x]));
                assert!(t.iter().rev().skip(1).all(|iv| iv.len() == parts));
            }
        }
    }

    #[test]
    fn interval_intersect_and_len() {
        let a = Interval::new(2, 8);
        assert_eq!(a.intersect(Interval::new(5, 12)), Interval::new(5, 8));
        assert!(a.intersect(Interval::new(9, 12)).is_empty());
        assert_eq!(a.intersect(Interval::new(9, 12)).len(), 0);
        assert_eq!(a.len(), 6);
    }
}
