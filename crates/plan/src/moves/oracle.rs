//! The explicit scheduler plans used to store (the whole list of transfers, sources chosen by a
//! global least-loaded greedy), kept as the oracle of the derived transfers' property test.

use crate::moves::{partition, Piece};
use crate::{Block, Distribution, Grid, Transfer};

/// The schedule that moves a tensor of `shape` from `from` to `to` on `procs` ranks.
///
/// Without `sum`, every element of every nonempty target block is received exactly once, from a
/// rank whose `from` block holds it; a rank that already holds a piece copies it to itself
/// (listed as a transfer with `src == dst`, not counted in the volume). Among the replicas of a
/// piece the sender is the least loaded so far (ties broken by rotating with the target rank),
/// which spreads the sends over the replicas. `from` must not be partial when `sum` is false.
///
/// With `sum`, `from` holds partial sums along `from.partial`: every target element receives
/// exactly one contribution from every partial replica (a rank's own contribution is a local
/// transfer), and the executor adds them into a zeroed block.
///
/// One transfer per (src, dst) pair, sorted by (dst, src); each carries the one box where the
/// source block meets the target block. `to` may be a phase window; `from` must not be
/// (panics). Grids must fit in `procs` ranks (ranks beyond a grid hold nothing).
pub fn redistribute(
    shape: &[usize],
    from: &Distribution,
    to: &Distribution,
    sum: bool,
    procs: usize,
) -> Vec<Transfer> {
    // Sources are partitioned by their grid splits alone: a phase buffer is never a source.
    assert!(
        from.window.is_empty(),
        "redistribute from a phase window (a planner bug)"
    );
    schedule(shape, from, to, sum, procs)
}

fn schedule(
    shape: &[usize],
    from: &Distribution,
    to: &Distribution,
    sum: bool,
    procs: usize,
) -> Vec<Transfer> {
    let fg = &from.grid;
    let nd = shape.len();
    let src_size = fg.size().min(procs.max(1));
    let dst_size = to.grid.size().min(procs.max(1));
    // Source partition per tensor index.
    let parts: Vec<Vec<Piece>> = (0..nd)
        .map(|v| partition(shape[v], &from.split[v], from))
        .collect();
    let mut is_split = vec![false; fg.dims.len()];
    for dims in &from.split {
        for &g in dims {
            is_split[g] = true;
        }
    }
    let partial_dims: Vec<usize> = if sum {
        from.partial
            .iter()
            .copied()
            .filter(|&g| !is_split[g])
            .collect()
    } else {
        Vec::new()
    };
    let mut is_partial = vec![false; fg.dims.len()];
    for &g in &partial_dims {
        is_partial[g] = true;
    }
    // Dimensions whose coordinates only pick a replica of the same data.
    let replica_dims: Vec<usize> = (0..fg.dims.len())
        .filter(|&g| !is_split[g] && !is_partial[g])
        .collect();
    let replicas: usize = replica_dims.iter().map(|&g| fg.dims[g].size).product();
    let partial_count: usize = partial_dims.iter().map(|&g| fg.dims[g].size).product();
    let mut sent_load = vec![0u64; src_size];
    let mut coords = vec![0usize; fg.dims.len()];
    // Count the messages first: one exact allocation instead of doublings that copy ~P^2
    // messages and fault in twice the memory.
    let mut count = 0usize;
    for d in 0..dst_size {
        if let Some(tb) = to.block(d, shape) {
            count += pieces_of(&parts, &tb) * partial_count;
        }
    }
    let mut out: Vec<Transfer> = Vec::with_capacity(count);
    // Counted while the messages are made: no second pass over ~P^2 of them.
    let mut received: Vec<u64> = Vec::with_capacity(dst_size);
    for d in 0..dst_size {
        let Some(tb) = to.block(d, shape) else {
            received.push(0);
            continue;
        };
        let mut got = 0u64;
        let own = if d < src_size { fg.coords(d) } else { None };
        let mut counter = 0usize;
        let first = out.len();
        for_each_piece(&parts, from, &tb, &mut coords, |ranges, coords| {
            let len: u64 = ranges.iter().map(|&(s, e)| (e - s) as u64).product();
            for q in 0..partial_count {
                let mut r = q;
                for &g in partial_dims.iter().rev() {
                    coords[g] = r % fg.dims[g].size;
                    r /= fg.dims[g].size;
                }
                let src = pick_source(
                    fg,
                    coords,
                    &replica_dims,
                    replicas,
                    own.as_deref(),
                    d,
                    counter,
                    &sent_load,
                );
                counter += 1;
                if src != d {
                    sent_load[src] += len;
                    got += len;
                }
                out.push(Transfer {
                    src,
                    dst: d,
                    boxes: smallvec::smallvec![Block {
                        ranges: crate::Ranges::from_slice(ranges)
                    }],
                });
            }
        });
        received.push(got);
        // (dst, src) order: one target's messages sorted while they are still in cache.
        out[first..].sort_unstable_by_key(|t| t.src);
    }
    // A source holds one block, which meets a target block in one box: pairs are unique.
    debug_assert!(out
        .windows(2)
        .all(|w| (w[0].dst, w[0].src) < (w[1].dst, w[1].src)));
    let _ = received;
    out
}

/// Per tensor index, the source intervals of `parts` that the target block `tb` meets
/// (`None` when the block is empty).
fn meeting<'a>(parts: &'a [Vec<Piece>], tb: &Block) -> Option<Vec<&'a [Piece]>> {
    if tb.is_empty() {
        return None;
    }
    let lists: Vec<&[Piece]> = parts
        .iter()
        .zip(&tb.ranges)
        .map(|(p, &(s, e))| {
            let lo = p.partition_point(|iv| iv.end <= s);
            let hi = p.partition_point(|iv| iv.start < e);
            &p[lo..hi]
        })
        .collect();
    Some(lists)
}

/// Number of pieces [`for_each_piece`] visits for the target block `tb`.
fn pieces_of(parts: &[Vec<Piece>], tb: &Block) -> usize {
    meeting(parts, tb).map_or(0, |lists| lists.iter().map(|l| l.len()).product())
}

/// Calls `f(ranges, coords)` for every piece of the target block `tb`: its intersection with
/// one cell of the source partition `parts`, in odometer order (last index fastest), with
/// `coords` set along the source's split dims to the cell's grid coordinates.
fn for_each_piece(
    parts: &[Vec<Piece>],
    from: &Distribution,
    tb: &Block,
    coords: &mut [usize],
    mut f: impl FnMut(&crate::Ranges, &mut [usize]),
) {
    let Some(lists) = meeting(parts, tb) else {
        return;
    };
    if lists.iter().any(|l| l.is_empty()) {
        return;
    }
    let nd = parts.len();
    let mut pos = vec![0usize; nd];
    loop {
        let mut ranges = crate::Ranges::with_capacity(nd);
        for v in 0..nd {
            let iv = &lists[v][pos[v]];
            let (s, e) = tb.ranges[v];
            ranges.push((iv.start.max(s), iv.end.min(e)));
            for (k, &g) in from.split[v].iter().enumerate() {
                coords[g] = iv.coords[k];
            }
        }
        f(&ranges, coords);
        // Odometer over the pieces, last index fastest.
        let mut v = nd;
        loop {
            if v == 0 {
                return;
            }
            v -= 1;
            pos[v] += 1;
            if pos[v] < lists[v].len() {
                break;
            }
            pos[v] = 0;
        }
    }
}

/// The rank that sends one piece: `d` itself when it holds the piece, otherwise the least
/// loaded replica (scanning from a rotation of `d` so ties spread).
#[allow(clippy::too_many_arguments)]
fn pick_source(
    fg: &Grid,
    coords: &mut [usize],
    replica_dims: &[usize],
    replicas: usize,
    own: Option<&[usize]>,
    d: usize,
    counter: usize,
    sent_load: &[u64],
) -> usize {
    if let Some(own) = own {
        let holds = (0..coords.len())
            .filter(|g| !replica_dims.contains(g))
            .all(|g| coords[g] == own[g]);
        if holds {
            return d;
        }
    }
    let set = |coords: &mut [usize], mut r: usize| {
        for &g in replica_dims.iter().rev() {
            coords[g] = r % fg.dims[g].size;
            r /= fg.dims[g].size;
        }
    };
    let start = (d + counter) % replicas;
    // Scanning every replica is O(R); cap it so huge replication stays linear.
    let scan = replicas.min(64);
    let mut best = (u64::MAX, 0usize);
    for k in 0..scan {
        let r = (start + k) % replicas;
        set(coords, r);
        let rank = fg.rank_of(coords);
        let load = sent_load.get(rank).copied().unwrap_or(0);
        if load < best.0 {
            best = (load, r);
        }
    }
    set(coords, best.1);
    fg.rank_of(coords)
}
