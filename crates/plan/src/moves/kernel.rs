//! The per-rank words of a one-holder move swept by table offsets: each index's block range
//! looked up by an offset that the grid's odometer step moves (no per-rank cut, no change
//! test), and a source range's sent words tabled with it. [`super::MoveView::words_by_runs`]
//! takes it for moves whose grids step a block every rank, where runs do not help.

use super::{meeting, overlap, Cuts, MoveView, Range};

/// One grid's blocks by table offset.
#[derive(Clone, Debug)]
struct Side {
    sizes: Vec<usize>,
    /// Per grid dim, the indices it splits and the step of each one's table offset.
    by_dim: Vec<Vec<(usize, usize)>>,
    /// Per index, its range per offset and what the move counts of it (the range's length on
    /// the target side; on the source side the words of it that target blocks take).
    table: Vec<Vec<(Range, u64)>>,
}

impl Side {
    /// The side of `cuts`' distribution, `words` counting each tabled range of index `v`;
    /// `None` when an index has no table (too many blocks).
    fn new(cuts: &Cuts, words: impl Fn(usize, Range) -> u64) -> Option<Side> {
        let mut by_dim = vec![Vec::new(); cuts.sizes.len()];
        let mut table = Vec::with_capacity(cuts.per_index.len());
        for (v, (dims, t)) in cuts.per_index.iter().enumerate() {
            let t = t.as_ref()?;
            let mut step = 1;
            for &g in dims.iter().rev() {
                by_dim[g].push((v, step));
                step *= cuts.sizes[g];
            }
            table.push(t.iter().map(|&r| (r, words(v, r))).collect());
        }
        Some(Side {
            sizes: cuts.sizes.clone(),
            by_dim,
            table,
        })
    }

    /// The coordinates and per-index offsets of `rank` (modulo the grid's size).
    fn start(&self, cuts: &Cuts, rank: usize) -> (Vec<usize>, Vec<usize>) {
        let coords = cuts.start_at(rank);
        let mut off = vec![0; self.table.len()];
        for (g, list) in self.by_dim.iter().enumerate() {
            for &(v, step) in list {
                off[v] += coords[g] * step;
            }
        }
        (coords, off)
    }

    /// Steps `coords` (and the offsets) to the next rank (row-major, wrapping at the end).
    #[inline(always)]
    fn step(&self, coords: &mut [usize], off: &mut [usize]) {
        for k in (0..coords.len()).rev() {
            coords[k] += 1;
            if coords[k] < self.sizes[k] {
                self.by_dim[k].iter().for_each(|&(v, s)| off[v] += s);
                return;
            }
            coords[k] = 0;
            let back = self.sizes[k] - 1;
            self.by_dim[k].iter().for_each(|&(v, s)| off[v] -= back * s);
        }
    }
}

/// A one-holder move's two sides, tabled once for all its sweeps.
#[derive(Clone, Debug)]
pub(super) struct Kernel {
    src: Side,
    dst: Side,
}

impl Kernel {
    /// The kernel of `view` (one holder per piece), `None` when a block table would be large.
    pub(super) fn new(view: &MoveView) -> Option<Kernel> {
        let (from, to) = (
            Cuts::new(&view.from, &view.shape),
            Cuts::new(&view.to, &view.shape),
        );
        // What a source range sends: its length where the target pieces tile the index, else
        // what the target pieces meeting it take (as `MoveView::sent_from` counts it).
        let src = Side::new(&from, |v, r| match view.dst_tiles[v] {
            true => r.1.saturating_sub(r.0) as u64,
            false => meeting(&view.dst_parts[v], r)
                .iter()
                .map(|iv| overlap(r, (iv.start, iv.end)))
                .sum(),
        })?;
        let dst = Side::new(&to, |_, r| r.1.saturating_sub(r.0) as u64)?;
        Some(Kernel { src, dst })
    }

    /// Calls `f(sent, received)` for each rank of `ranks` in order: the words
    /// `MoveView::words_with` gives a one-holder move's rank.
    pub(super) fn sweep(
        &self,
        view: &MoveView,
        ranks: std::ops::Range<usize>,
        mut f: impl FnMut(u64, u64),
    ) {
        let (from, to) = (
            Cuts::new(&view.from, &view.shape),
            Cuts::new(&view.to, &view.shape),
        );
        let (mut sc, mut so) = self.src.start(&from, ranks.start);
        let (mut tc, mut to_off) = self.dst.start(&to, ranks.start);
        let (partial, rep_to) = (view.partial_count as u64, view.rep_to);
        let (st, dt) = (&self.src.table, &self.dst.table);
        for r in ranks {
            let (in_src, in_dst) = (r < view.src_size, r < view.dst_size);
            let (mut slen, mut cover, mut tlen, mut own) = (1u64, 1u64, 1u64, 1u64);
            let src = st.iter().zip(&so);
            for ((sv, &si), (dv, &di)) in src.zip(dt.iter().zip(&to_off)) {
                let (s, c) = sv[si];
                let (t, l) = dv[di];
                slen *= s.1.saturating_sub(s.0) as u64;
                cover *= c;
                tlen *= l;
                own *= overlap(s, t);
            }
            let own = if in_src && in_dst { own } else { 0 };
            let received = match in_dst && tlen > 0 {
                true => tlen * partial - own,
                false => 0,
            };
            let sent = match in_src && slen > 0 {
                true => cover * rep_to - own,
                false => 0,
            };
            f(sent, received);
            self.src.step(&mut sc, &mut so);
            self.dst.step(&mut tc, &mut to_off);
        }
    }
}
