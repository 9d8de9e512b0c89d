//! Input data: the seeded generator, caller-supplied arrays and blocks, and box copies.

use crate::block::LocalBlock;
use crate::buffers::{try_vec, OutOfMemory};
use crate::layout::strides_of;
use crate::Scalar;
use deinsum_expr::{Dim, ParsedEinsum};
use deinsum_plan::Block;
use std::collections::BTreeMap;
use std::path::PathBuf;

/// Where the input operands come from.
#[derive(Debug)]
pub enum Inputs<T> {
    /// Seeded pseudo-random values in [-1, 1): element `x` of operand `k`'s storage is
    /// [`seeded_value`]`(seed, k, x)`, so results do not depend on the number of ranks.
    Seeded {
        /// The seed.
        seed: u64,
    },
    /// Whole operands in storage layout (row-major over `Operand::dims`), one per operand;
    /// each rank copies out only its own block.
    Full(Vec<Vec<T>>),
    /// This rank's own blocks: operand number to the row-major data of exactly the block the
    /// rank holds in the plan's `Load` distribution (over `Operand::indices`).
    Blocks(BTreeMap<usize, Vec<T>>),
    /// This rank's own blocks as [`Inputs::Blocks`], handed over: the executor takes each
    /// block instead of copying it, so they serve one run's reads (a repeated run that reads
    /// an input again, one that is also the output, finds it taken and fails).
    Given(std::sync::Mutex<BTreeMap<usize, Vec<T>>>),
    /// `.npy` files, one per operand; each rank reads only its block.
    Npy(Vec<PathBuf>),
}

impl<T: Clone> Clone for Inputs<T> {
    fn clone(&self) -> Self {
        match self {
            Inputs::Seeded { seed } => Inputs::Seeded { seed: *seed },
            Inputs::Full(v) => Inputs::Full(v.clone()),
            Inputs::Blocks(m) => Inputs::Blocks(m.clone()),
            // A clone holds what is still to be taken.
            Inputs::Given(m) => Inputs::Given(std::sync::Mutex::new(
                m.lock().unwrap_or_else(|e| e.into_inner()).clone(),
            )),
            Inputs::Npy(p) => Inputs::Npy(p.clone()),
        }
    }
}

/// splitmix64: a fast integer hash with full avalanche.
fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// The generator's value of element `index` (storage order) of operand `operand`, in [-1, 1).
pub fn seeded_value(seed: u64, operand: usize, index: u64) -> f64 {
    let h = mix(mix(mix(seed) ^ operand as u64) ^ index);
    // The top 53 bits give a uniform double in [0, 1).
    ((h >> 11) as f64) * (1.0 / (1u64 << 53) as f64) * 2.0 - 1.0
}

/// The generator's imaginary part of element `index` of operand `operand`, in [-1, 1): the
/// real part's generator under another seed, so a complex operand's real parts are the real
/// operand's values.
pub(crate) fn seeded_imag(seed: u64, operand: usize, index: u64) -> f64 {
    seeded_value(seed ^ 0x9e37_79b9_7f4a_7c15, operand, index)
}

/// The generator's element `index` of operand `operand` as `T`: [`seeded_value`], plus
/// [`seeded_imag`] as its imaginary part for a complex type.
pub fn seeded<T: Scalar>(seed: u64, operand: usize, index: u64) -> T {
    let re = seeded_value(seed, operand, index);
    if T::DTYPE.is_complex() {
        T::from_parts(re, seeded_imag(seed, operand, index))
    } else {
        T::from_f64(re)
    }
}

/// Per distinct index of operand `k`, the stride of its storage (summed over the storage dims
/// it labels, so a diagonal walks the diagonal; broadcast dims sit at coordinate 0).
pub(crate) fn storage_strides(einsum: &ParsedEinsum, k: usize) -> Vec<u64> {
    let op = &einsum.inputs()[k];
    let shape = op.shape(einsum.extents());
    let mut dim_stride = vec![0u64; shape.len()];
    let mut s = 1u64;
    for d in (0..shape.len()).rev() {
        dim_stride[d] = s;
        s = s.saturating_mul(shape[d] as u64);
    }
    op.indices
        .iter()
        .map(|c| {
            op.dims
                .iter()
                .zip(&dim_stride)
                .filter(|(d, _)| **d == Dim::Index(*c))
                .map(|(_, &st)| st)
                .sum()
        })
        .collect()
}

/// Calls `f(offset_in_block, storage_index)` for every element of `block`, with `strides` the
/// per-index storage strides.
fn for_each_storage(block: &Block, strides: &[u64], mut f: impl FnMut(usize, u64)) {
    let shape = block.shape();
    if shape.contains(&0) {
        return;
    }
    let nd = shape.len();
    let mut idx = vec![0usize; nd];
    let base: u64 = block
        .ranges
        .iter()
        .zip(strides)
        .map(|(&(s, _), &st)| s as u64 * st)
        .sum();
    let total: usize = shape.iter().product();
    let mut off = base;
    for lin in 0..total {
        f(lin, off);
        // Increment the multi-index, last dim fastest.
        let mut d = nd;
        while d > 0 {
            d -= 1;
            idx[d] += 1;
            off += strides[d];
            if idx[d] < shape[d] {
                break;
            }
            off -= strides[d] * shape[d] as u64;
            idx[d] = 0;
        }
    }
}

/// The seeded generator's block of operand `k` (row-major over its distinct indices).
pub(crate) fn seeded_block<T: Scalar>(
    einsum: &ParsedEinsum,
    k: usize,
    seed: u64,
    block: &Block,
) -> Result<Vec<T>, OutOfMemory> {
    let strides = storage_strides(einsum, k);
    let mut out = crate::buffers::take_overwritten(block_len::<T>(block)?)?;
    for_each_storage(block, &strides, |lin, x| {
        out[lin] = seeded::<T>(seed, k, x);
    });
    Ok(out)
}

/// The elements of `block` as a length (a block that cannot be addressed cannot be allocated).
fn block_len<T>(block: &Block) -> Result<usize, OutOfMemory> {
    usize::try_from(block.len()).map_err(|_| OutOfMemory {
        bytes: block.len() as u128 * std::mem::size_of::<T>() as u128,
        tensor: None,
    })
}

/// Why an operand's block cannot be had: the input is wrong, or the block does not fit.
#[derive(Debug, thiserror::Error)]
pub enum BlockError {
    /// The input does not fit the einsum (wrong length, unreadable file).
    #[error("{0}")]
    Input(String),
    /// The block's buffer cannot be allocated.
    #[error(transparent)]
    OutOfMemory(#[from] OutOfMemory),
}

/// Operand `k`'s block out of its whole storage array `full`.
pub fn block_of_full<T: Scalar>(
    einsum: &ParsedEinsum,
    k: usize,
    full: &[T],
    block: &Block,
) -> Result<Vec<T>, BlockError> {
    let shape = einsum.inputs()[k].shape(einsum.extents());
    let want: usize = shape.iter().product();
    if full.len() != want {
        return Err(BlockError::Input(format!(
            "operand {k}: {} elements given, its shape {:?} has {want}",
            full.len(),
            shape
        )));
    }
    let strides = storage_strides(einsum, k);
    let mut out = crate::buffers::take_overwritten(block_len::<T>(block)?)?;
    match plain_ranges(einsum, k, &strides) {
        // Storage is row-major over the indices: the block is copied run by run (memcpy,
        // the rank's threads for a large one), not element by element.
        Some(whole) => copy_runs(
            &run_list(&block.ranges, &whole, &block.ranges)?,
            full,
            &mut out,
            false,
        ),
        None => for_each_storage(block, &strides, |lin, x| out[lin] = full[x as usize]),
    }
    Ok(out)
}

/// Operand `k`'s `block` read in place: the part of its whole storage `full` that the block
/// is, when the block is one run of it (storage row-major over the indices, and the block all
/// of it or cut only along its leading indices); `None` when it must be copied out
/// ([`block_of_full`]), or when `full` does not have the operand's length.
pub(crate) fn contiguous_part<'a, T>(
    einsum: &ParsedEinsum,
    k: usize,
    full: &'a [T],
    block: &Block,
) -> Option<&'a [T]> {
    let want: usize = einsum.inputs()[k].shape(einsum.extents()).iter().product();
    if full.len() != want {
        return None;
    }
    let strides = storage_strides(einsum, k);
    let whole = plain_ranges(einsum, k, &strides)?;
    let len = usize::try_from(block.len()).ok()?;
    if len == 0 {
        return Some(&full[..0]);
    }
    // Dims `inner..` form one run; the block is one run when the dims before have extent 1.
    let inner = run_dims(&block.ranges, &whole, &block.ranges);
    if block.ranges[..inner].iter().any(|&(s, e)| e - s != 1) {
        return None;
    }
    let st = strides_of(&whole.iter().map(|&(_, e)| e).collect::<Vec<_>>());
    let start: usize = block
        .ranges
        .iter()
        .zip(&st)
        .map(|(&(s, _), &k)| s * k)
        .sum();
    full.get(start..start + len)
}

/// The whole ranges of operand `k`'s indices when its storage is row-major over them (no
/// diagonal, no broadcast dim, indices in storage order): then a block of it is a box of its
/// storage, and `None` otherwise.
pub(crate) fn plain_ranges(
    einsum: &ParsedEinsum,
    k: usize,
    strides: &[u64],
) -> Option<Vec<(usize, usize)>> {
    let op = &einsum.inputs()[k];
    let ext = einsum.extents();
    let shape: Vec<usize> = op.indices.iter().map(|c| ext[c]).collect();
    let row_major = strides_of(&shape);
    let same = strides.len() == shape.len()
        && strides
            .iter()
            .zip(&row_major)
            .zip(&shape)
            .all(|((&s, &r), &n)| n <= 1 || s == r as u64);
    let len: usize = op.shape(ext).iter().product();
    (same && len == shape.iter().product::<usize>())
        .then(|| shape.iter().map(|&n| (0, n)).collect())
}

/// Calls `f(src_offset, dst_offset, run_len)` for the contiguous runs of `bx` (global) inside
/// the blocks `src` and `dst` (global ranges), both row-major. Trailing dims that the box
/// covers whole in both blocks merge into one run, so a contiguous box is a single run.
fn for_each_run(
    bx: &[(usize, usize)],
    src: &[(usize, usize)],
    dst: &[(usize, usize)],
    mut f: impl FnMut(usize, usize, usize),
) {
    let shape: Vec<usize> = bx.iter().map(|&(s, e)| e - s).collect();
    if shape.contains(&0) {
        return;
    }
    let nd = shape.len();
    if nd == 0 {
        f(0, 0, 1);
        return;
    }
    let ss = strides_of(&src.iter().map(|&(s, e)| e - s).collect::<Vec<_>>());
    let ds = strides_of(&dst.iter().map(|&(s, e)| e - s).collect::<Vec<_>>());
    let inner = run_dims(bx, src, dst);
    let run: usize = shape[inner..].iter().product();
    let outer: usize = shape[..inner].iter().product();
    let mut idx = vec![0usize; inner];
    for _ in 0..outer {
        let mut so = 0;
        let mut dof = 0;
        for d in 0..nd {
            let g = bx[d].0 + if d < inner { idx[d] } else { 0 };
            so += (g - src[d].0) * ss[d];
            dof += (g - dst[d].0) * ds[d];
        }
        f(so, dof, run);
        let mut d = inner;
        while d > 0 {
            d -= 1;
            idx[d] += 1;
            if idx[d] < shape[d] {
                break;
            }
            idx[d] = 0;
        }
    }
}

/// The first dim of the runs of [`for_each_run`]: dims `inner..` form one run (each is whole
/// in both blocks, but the outermost may be cut).
fn run_dims(bx: &[(usize, usize)], src: &[(usize, usize)], dst: &[(usize, usize)]) -> usize {
    let whole = |d: usize| bx[d] == src[d] && bx[d] == dst[d];
    let mut inner = bx.len().saturating_sub(1);
    while inner > 0 && whole(inner) {
        inner -= 1;
    }
    inner
}

/// The runs of [`for_each_run`] as a list `(src offset, dst offset, length)`, allocated
/// fallibly: a box cut along a short innermost dim has about as many runs as elements.
fn run_list(
    bx: &[(usize, usize)],
    src: &[(usize, usize)],
    dst: &[(usize, usize)],
) -> Result<Vec<(usize, usize, usize)>, OutOfMemory> {
    let inner = run_dims(bx, src, dst);
    let count: usize = bx[..inner].iter().map(|&(s, e)| e - s).product();
    let mut runs = try_vec(count.max(1))?;
    for_each_run(bx, src, dst, |so, dof, n| runs.push((so, dof, n)));
    Ok(runs)
}

/// Below this many words a box is copied on one thread (splitting costs more than it saves).
const PAR_MIN_WORDS: usize = 1 << 16;

/// Threads a box copy of `words` may use: the rank's (see [`crate::buffers::on_rank_pool`]) when
/// the box is large enough to pay for the split.
fn copy_threads(words: usize) -> usize {
    let t = crate::buffers::rank_threads().max(crate::threads::threads());
    t.min(words / PAR_MIN_WORDS).max(1)
}

/// Appends box `bx` of block `t` to `out`, row-major (`out` grows fallibly when its room is
/// short; the executor's messages are allocated at their final size). A large contiguous box
/// is copied by the rank's threads straight into `out`'s spare room.
pub fn pack_box<T: Scalar>(
    t: &LocalBlock<'_, T>,
    bx: &Block,
    out: &mut Vec<T>,
) -> Result<(), OutOfMemory> {
    let runs = run_list(&bx.ranges, &t.ranges, &bx.ranges)?;
    let len = block_len::<T>(bx)?;
    out.try_reserve(len)
        .map_err(|_| OutOfMemory::of::<T>(out.len().saturating_add(len)))?;
    match runs[..] {
        [(so, _, n)] if copy_threads(n) > 1 => crate::buffers::on_rank_pool(|| {
            use rayon::prelude::*;
            let chunk = n
                .div_ceil(4 * crate::threads::threads())
                .max(PAR_MIN_WORDS / 4);
            out.par_extend(t.data[so..so + n].par_iter().with_min_len(chunk).copied());
        }),
        _ => {
            for (so, _, n) in runs {
                out.extend_from_slice(&t.data[so..so + n]);
            }
        }
    }
    Ok(())
}

/// Copies (or adds, with `sum`) box `bx` of block `src` into block `dst`, run by run, without
/// an intermediate buffer.
pub fn copy_box<T: Scalar>(
    src: &LocalBlock<'_, T>,
    dst: &mut LocalBlock<'_, T>,
    bx: &Block,
    sum: bool,
) -> Result<(), OutOfMemory> {
    let runs = run_list(&bx.ranges, &src.ranges, &dst.ranges)?;
    copy_runs(&runs, &src.data, &mut dst.data, sum);
    Ok(())
}

fn add_or_copy<T: Scalar>(d: &mut [T], s: &[T], sum: bool) {
    if sum {
        for (x, &y) in d.iter_mut().zip(s) {
            *x += y;
        }
    } else {
        d.copy_from_slice(s);
    }
}

/// Copies (or adds, with `sum`) the row-major box `bx` held in `src` into block `t`.
pub fn unpack_box<T: Scalar>(
    t: &mut LocalBlock<'_, T>,
    bx: &Block,
    src: &[T],
    sum: bool,
) -> Result<(), OutOfMemory> {
    let runs = run_list(&bx.ranges, &bx.ranges, &t.ranges)?;
    copy_runs(&runs, src, &mut t.data, sum);
    Ok(())
}

/// Copies (adds) the runs `(src offset, dst offset, length)` of `src` into `dst`; their target
/// offsets increase (row-major boxes), so a large copy is cut into consecutive pieces of about
/// equal length, each a disjoint part of `dst` for one of the rank's threads.
fn copy_runs<T: Scalar>(runs: &[(usize, usize, usize)], src: &[T], dst: &mut [T], sum: bool) {
    let total: usize = runs.iter().map(|r| r.2).sum();
    let runs = runs.iter().map(|&(so, dof, n)| (0, so, dof, n));
    copy_runs_from(runs, total, &[src], dst, sum, copy_threads(total));
}

/// Copies the row-major boxes `pieces` (box, its elements) into block `dst`, on the calling
/// rank's threads and those of the `lent - 1` ranks that wait for the block meanwhile (at
/// most the machine's cores). The boxes must be disjoint, inside `dst` and as long as their
/// elements.
pub(crate) fn place_pieces<T: Scalar>(
    dst: &mut LocalBlock<'_, T>,
    pieces: &[(&Block, &[T])],
    lent: usize,
) -> Result<(), OutOfMemory> {
    let mut lists = Vec::with_capacity(pieces.len());
    for (b, _) in pieces {
        lists.push(run_list(&b.ranges, &b.ranges, &dst.ranges)?);
    }
    let count: usize = lists.iter().map(Vec::len).sum();
    let mut runs: Vec<(usize, usize, usize, usize)> = try_vec(count)?;
    for (x, list) in lists.iter().enumerate() {
        runs.extend(list.iter().map(|&(so, dof, n)| (x, so, dof, n)));
    }
    drop(lists);
    // In target order: the pieces' runs interleave when a box is cut along an inner dim.
    runs.sort_unstable_by_key(|r| r.2);
    let total: usize = runs.iter().map(|r| r.3).sum();
    let per_rank = crate::buffers::rank_threads().max(crate::threads::threads());
    let tasks = (per_rank * lent.max(1))
        .min(deinsum_runtime::cores())
        .min(total / PAR_MIN_WORDS)
        .max(1);
    let srcs: Vec<&[T]> = pieces.iter().map(|p| p.1).collect();
    copy_runs_from(runs.into_iter(), total, &srcs, &mut dst.data, false, tasks);
    Ok(())
}

/// Copies (adds) the runs `(source, src offset, dst offset, length)` from `srcs` into `dst`,
/// `total` words, on `tasks` threads; their target offsets increase, so a large copy is cut
/// into consecutive pieces of about equal length, each a disjoint part of `dst`.
fn copy_runs_from<T: Scalar>(
    runs: impl Iterator<Item = (usize, usize, usize, usize)>,
    total: usize,
    srcs: &[&[T]],
    dst: &mut [T],
    sum: bool,
    tasks: usize,
) {
    if tasks <= 1 {
        for (x, so, dof, n) in runs {
            add_or_copy(&mut dst[dof..dof + n], &srcs[x][so..so + n], sum);
        }
        return;
    }
    let piece = total.div_ceil(4 * tasks);
    // Pieces of at most `piece` words (long runs cut), grouped until a group has `piece`.
    let mut groups: Vec<Vec<(usize, usize, usize, usize)>> = vec![Vec::new()];
    let mut filled = 0;
    for (x, so, dof, n) in runs {
        let mut o = 0;
        while o < n {
            let l = (piece - filled).min(n - o);
            groups
                .last_mut()
                .expect("a group")
                .push((x, so + o, dof + o, l));
            (o, filled) = (o + l, filled + l);
            if filled == piece {
                groups.push(Vec::new());
                filled = 0;
            }
        }
    }
    let mut jobs = Vec::new();
    let (mut rest, mut base) = (dst, 0);
    for g in groups.into_iter().filter(|g| !g.is_empty()) {
        let (lo, last) = (g[0].2, g[g.len() - 1]);
        let hi = last.2 + last.3;
        let (mine, after) = std::mem::take(&mut rest)[lo - base..].split_at_mut(hi - lo);
        jobs.push((g, mine, lo));
        (rest, base) = (after, hi);
    }
    run_jobs(jobs, tasks, |(g, mine, lo)| {
        for (x, so, dof, n) in g {
            add_or_copy(&mut mine[dof - lo..dof - lo + n], &srcs[x][so..so + n], sum);
        }
    });
}

/// Runs `jobs` on `tasks` threads: the rank's pool (or the pool the caller runs on) when it
/// has that many, else the calling thread and `tasks - 1` scoped helpers (threads lent by
/// ranks that wait meanwhile), each taking the next job not yet taken (a helper that starts
/// late, on a busy machine, takes fewer).
fn run_jobs<J: Send>(jobs: Vec<J>, tasks: usize, f: impl Fn(J) + Sync + Send) {
    if tasks <= crate::buffers::rank_threads().max(crate::threads::threads()) {
        crate::buffers::on_rank_pool(|| {
            use rayon::prelude::*;
            jobs.into_par_iter().for_each(f)
        });
        return;
    }
    let slots: Vec<std::sync::Mutex<Option<J>>> = jobs
        .into_iter()
        .map(|j| std::sync::Mutex::new(Some(j)))
        .collect();
    let next = std::sync::atomic::AtomicUsize::new(0);
    let work = || {
        while let Some(slot) = slots.get(next.fetch_add(1, std::sync::atomic::Ordering::Relaxed)) {
            let job = deinsum_runtime::lock(slot).take();
            job.into_iter().for_each(&f);
        }
    };
    std::thread::scope(|s| {
        for _ in 1..tasks.min(slots.len()) {
            let helper = std::thread::Builder::new().stack_size(HELPER_STACK);
            // A helper the system refuses (no memory for its stack) leaves its jobs to the
            // others.
            let _refused = helper.spawn_scoped(s, work);
        }
        work();
    });
}

/// Stack of a copy helper thread (it only copies slices).
const HELPER_STACK: usize = 256 << 10;

#[cfg(test)]
mod tests {
    use super::*;
    use deinsum_expr::ExtentSpec;

    fn parse(expr: &str, shapes: Vec<Vec<usize>>) -> ParsedEinsum {
        let spec = ExtentSpec {
            shapes: Some(shapes),
            ..ExtentSpec::default()
        };
        deinsum_expr::parse(expr, &spec).expect("a valid einsum")
    }

    fn bx(r: &[(usize, usize)]) -> Block {
        Block {
            ranges: r.iter().copied().collect(),
        }
    }

    #[test]
    fn contiguous_blocks_are_read_in_place_and_others_are_not() {
        let e = parse("ijk,k->i", vec![vec![4, 3, 5], vec![5]]);
        let full: Vec<f64> = (0..60).map(f64::from).collect();
        let part = |r: &[(usize, usize)]| contiguous_part(&e, 0, &full, &bx(r));
        // All of it, a range of the leading index, one row of the second index.
        assert_eq!(part(&[(0, 4), (0, 3), (0, 5)]), Some(&full[..]));
        assert_eq!(part(&[(1, 3), (0, 3), (0, 5)]), Some(&full[15..45]));
        assert_eq!(part(&[(2, 3), (1, 3), (0, 5)]), Some(&full[35..45]));
        // Cut along an inner index over several rows: not one run.
        assert_eq!(part(&[(0, 2), (1, 3), (0, 5)]), None);
        assert_eq!(part(&[(0, 4), (0, 3), (0, 2)]), None);
        // The in-place part equals the copied block.
        let b = bx(&[(2, 3), (1, 3), (0, 5)]);
        let copied = block_of_full(&e, 0, &full, &b).unwrap();
        assert_eq!(part(&[(2, 3), (1, 3), (0, 5)]).unwrap(), &copied[..]);
        // A diagonal's storage is not row-major over its indices; a short array is refused.
        let d = parse("iij->ij", vec![vec![3, 3, 2]]);
        let dfull: Vec<f64> = (0..18).map(f64::from).collect();
        assert_eq!(contiguous_part(&d, 0, &dfull, &bx(&[(0, 3), (0, 2)])), None);
        assert_eq!(part_of_short(&e), None);
    }

    fn part_of_short(e: &ParsedEinsum) -> Option<Vec<f64>> {
        let short: Vec<f64> = (0..59).map(f64::from).collect();
        contiguous_part(e, 0, &short, &bx(&[(0, 4), (0, 3), (0, 5)])).map(<[f64]>::to_vec)
    }
}
