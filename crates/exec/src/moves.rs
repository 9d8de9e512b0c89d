//! Moves of one tensor's blocks between two distributions, along a rank's derived transfers
//! ([`deinsum_plan::Plan::step_transfers`]).
//!
//! The building blocks are [`pack`] (a rank's sends of one move, per destination),
//! [`Incoming`] (whom it receives from, and which boxes each message carries), [`unpack`]
//! (received messages into the target block, added with `sum`) and [`copy_local`] (the pieces
//! that stay on the rank). Three operations are made of them:
//!
//! - [`move_block`]: a plain redistribution; the source block is consumed (a block staying
//!   whole on its rank is handed over, not copied);
//! - [`reduce_block`]: a summing redistribution (partial sums reduced into the target);
//! - [`fetch_window`]: a phase window fetched from where an input rests; the source stays.

use crate::block::{LocalBlock, LocalTensor};
use crate::buffers::OutOfMemory;
use crate::comm::{CommError, Communicator};
use crate::data::{copy_box, pack_box, place_pieces, unpack_box};
use crate::held::{HeldBlock, SharedBlock};
use crate::mem::Mem;
use crate::Scalar;
use deinsum_plan::{Block, Distribution, MoveKind, PlanStep, Tensor, Transfer};

/// Why a move failed: communication, a plan whose transfers do not fit the blocks held, or a
/// buffer the allocator refused.
#[derive(Debug)]
pub(crate) enum MoveError {
    /// The communicator failed.
    Comm(CommError),
    /// The transfers do not fit the blocks (the executor names the step).
    Plan(String),
    /// A block or message cannot be allocated (the executor names the step and tensor).
    Alloc(OutOfMemory),
}

impl From<CommError> for MoveError {
    fn from(e: CommError) -> Self {
        MoveError::Comm(e)
    }
}

impl From<OutOfMemory> for MoveError {
    fn from(e: OutOfMemory) -> Self {
        MoveError::Alloc(e)
    }
}

/// Whether the nonempty box `b` reaches outside the block `blk`.
fn outside<T>(b: &Block, blk: &LocalBlock<'_, T>) -> bool {
    b.ranges
        .iter()
        .zip(&blk.ranges)
        .any(|(&(s, e), &(bs, be))| s < e && (s < bs || e > be))
}

fn not_held(me: usize) -> MoveError {
    MoveError::Plan(format!("rank {me} sends from a block it does not hold"))
}

/// Packs this rank's sends of one move: for every other rank that `transfers` send to from
/// `me`, in ascending rank order, one typed message holding the boxes of those transfers in
/// list order, each row-major. `block` is this rank's source block (`None`: it holds none and
/// must send nothing); `p` is the communicator's size. Each message is allocated once, at its
/// final size. Transfers from `me` to itself are left to [`copy_local`].
pub(crate) fn pack<T: Scalar>(
    block: Option<&LocalBlock<'_, T>>,
    transfers: &[Transfer],
    me: usize,
    p: usize,
) -> Result<Vec<(usize, Vec<T>)>, MoveError> {
    let outgoing = || transfers.iter().filter(|tr| tr.src == me && tr.dst != me);
    let mut lens: Vec<Option<usize>> = vec![None; p];
    for tr in outgoing() {
        let len = lens
            .get_mut(tr.dst)
            .ok_or_else(|| MoveError::Plan(format!("transfer to rank {} of {p}", tr.dst)))?;
        *len = Some(len.unwrap_or(0) + tr.boxes.iter().map(|b| b.len() as usize).sum::<usize>());
    }
    let mut slot = vec![usize::MAX; p];
    let mut sends: Vec<(usize, Vec<T>)> = Vec::new();
    for (d, len) in lens.iter().enumerate() {
        if let Some(n) = len {
            slot[d] = sends.len();
            sends.push((d, crate::buffers::take_empty(*n)?));
        }
    }
    for tr in outgoing() {
        let blk = block.ok_or_else(|| not_held(me))?;
        for b in &tr.boxes {
            if outside(b, blk) {
                return Err(not_held(me));
            }
            pack_box(blk, b, &mut sends[slot[tr.dst]].1)?;
        }
    }
    Ok(sends)
}

/// This rank's incoming transfers of one move, grouped by sender.
pub(crate) struct Incoming<'a> {
    /// The other ranks this rank receives from, ascending: the `from` list of
    /// [`Communicator::exchange`], and the order of the messages [`unpack`] takes.
    pub from: Vec<usize>,
    /// Per entry of `from`, its transfers to this rank in list order (the packing order).
    by_src: Vec<Vec<&'a Transfer>>,
}

impl<'a> Incoming<'a> {
    /// The transfers that other ranks send to `me` in `transfers` (`p` ranks).
    pub fn of(transfers: &'a [Transfer], me: usize, p: usize) -> Result<Self, MoveError> {
        let mut by_rank: Vec<Vec<&Transfer>> = vec![Vec::new(); p];
        for tr in transfers.iter().filter(|tr| tr.dst == me && tr.src != me) {
            by_rank
                .get_mut(tr.src)
                .ok_or_else(|| MoveError::Plan(format!("transfer from rank {} of {p}", tr.src)))?
                .push(tr);
        }
        let from = (0..p).filter(|&s| !by_rank[s].is_empty()).collect();
        let by_src = by_rank.into_iter().filter(|v| !v.is_empty()).collect();
        Ok(Incoming { from, by_src })
    }
}

/// Unpacks the messages `recv` (`recv[k]` from rank `incoming.from[k]`, as [`pack`] made it)
/// into this rank's target block, adding with `sum` (the target then starts at zero), copying
/// otherwise. Checks that every message has exactly the elements of its transfers' boxes.
pub(crate) fn unpack<T: Scalar>(
    target: Option<&mut LocalBlock<'_, T>>,
    recv: &[Vec<T>],
    incoming: &Incoming<'_>,
    sum: bool,
    me: usize,
) -> Result<(), MoveError> {
    if recv.len() != incoming.from.len() {
        return Err(MoveError::Plan(format!(
            "rank {me}: {} messages for {} senders",
            recv.len(),
            incoming.from.len()
        )));
    }
    if recv.is_empty() {
        return Ok(());
    }
    let dst = target.ok_or_else(|| MoveError::Plan(format!("rank {me} receives into no block")))?;
    for ((&src, vals), trs) in incoming.from.iter().zip(recv).zip(&incoming.by_src) {
        let mut pos = 0usize;
        for b in trs.iter().flat_map(|tr| &tr.boxes) {
            let n = b.len() as usize;
            if pos + n > vals.len() || outside(b, dst) {
                return Err(MoveError::Plan(format!(
                    "rank {me}: message from rank {src} does not match its transfer"
                )));
            }
            unpack_box(dst, b, &vals[pos..pos + n], sum)?;
            pos += n;
        }
        if pos != vals.len() {
            return Err(MoveError::Plan(format!(
                "rank {me}: message from rank {src} has {} elements, the transfers {pos}",
                vals.len()
            )));
        }
    }
    Ok(())
}

/// Copies (adds, with `sum`) the pieces that stay on this rank — the transfers from `me` to
/// itself — from its source block into its target block.
pub(crate) fn copy_local<T: Scalar>(
    src: Option<&LocalBlock<'_, T>>,
    mut dst: Option<&mut LocalBlock<'_, T>>,
    transfers: &[Transfer],
    sum: bool,
    me: usize,
) -> Result<(), MoveError> {
    for tr in transfers.iter().filter(|tr| tr.src == me && tr.dst == me) {
        let blk = src.ok_or_else(|| not_held(me))?;
        let dst = dst
            .as_deref_mut()
            .ok_or_else(|| MoveError::Plan(format!("rank {me} receives into no block")))?;
        for b in &tr.boxes {
            if outside(b, blk) || outside(b, dst) {
                return Err(not_held(me));
            }
            copy_box(blk, dst, b, sum)?;
        }
    }
    Ok(())
}

/// This rank's block of `t` in `to`, zero-filled (`None` when it holds none).
pub(crate) fn target_block<T: Scalar>(
    t: &Tensor,
    to: &Distribution,
    me: usize,
) -> Result<Option<LocalTensor<T>>, OutOfMemory> {
    to.block(me, &t.shape)
        .map(|b| LocalTensor::<T>::zeros(t.indices.clone(), b.ranges.to_vec()))
        .transpose()
}

fn words<T>(t: &Option<LocalTensor<T>>) -> u64 {
    t.as_ref().map_or(0, |l| l.data.len() as u64)
}

/// Packs and exchanges one move's messages: returns the received ones with their senders.
/// `target_words` (the target block) is counted beside the buffers in `mem`.
fn send_and_receive<'a, T: Scalar, C: Communicator>(
    comm: &C,
    src: Option<&LocalBlock<'_, T>>,
    transfers: &'a [Transfer],
    target_words: u64,
    mem: &mut Mem,
) -> Result<(Incoming<'a>, Vec<Vec<T>>), MoveError> {
    let (me, p) = (comm.rank(), comm.size());
    let sends = pack(src, transfers, me, p)?;
    let send_words: u64 = sends.iter().map(|(_, v)| v.len() as u64).sum();
    mem.touch_buffers(send_words + target_words);
    let incoming = Incoming::of(transfers, me, p)?;
    let recv = comm.exchange(sends, &incoming.from)?;
    let recv_words: u64 = recv.iter().map(|v| v.len() as u64).sum();
    mem.touch_buffers(recv_words + target_words);
    Ok((incoming, recv))
}

/// The source block and target block after a [`move_block`].
pub(crate) struct Moved<'d, T: Send + 'static> {
    /// This rank's block in the target distribution.
    pub block: Option<HeldBlock<'d, T>>,
    /// The source block, unless it was handed over as the target block.
    pub source: Option<HeldBlock<'d, T>>,
}

/// Moves `t` from this rank's source block `cur` into `to` along `transfers` (a plain move:
/// every target element is received once). A block that stays whole on its rank becomes the
/// target block without a copy; otherwise the source is returned for the caller to release.
/// An all-gather between ranks that share memory makes one target block that the fibre's
/// members share.
pub(crate) fn move_block<'d, T: Scalar, C: Communicator>(
    comm: &C,
    way: Way<'_, C>,
    t: &Tensor,
    cur: Option<HeldBlock<'d, T>>,
    to: &Distribution,
    transfers: &[Transfer],
    mem: &mut Mem,
) -> Result<Moved<'d, T>, MoveError> {
    let me = comm.rank();
    let target = to.block(me, &t.shape);
    let target_words = target.as_ref().map_or(0, Block::len);
    // The block stays whole: one local transfer of all of it, into a block of the same ranges.
    let stays = match (&cur, &target) {
        (Some(c), Some(b)) => {
            c.ranges[..] == b.ranges[..]
                && transfers.iter().any(|tr| {
                    tr.src == me
                        && tr.dst == me
                        && tr.boxes.len() == 1
                        && tr.boxes[0].ranges[..] == c.ranges[..]
                })
        }
        _ => false,
    };
    if let Route::Collective {
        op: Op::AllGather, ..
    } = way.route
    {
        if let (Some((sub, g)), Some(tb)) = (fibre_of(&way, me)?, &target) {
            if sub.gathers_shared() {
                let mut cur = cur;
                let block = all_gather_shared(sub, g, t, cur.as_mut(), tb, target_words, mem)?;
                mem.add(target_words);
                return Ok(Moved {
                    block: Some(block),
                    source: cur,
                });
            }
        }
        // Every target element arrives once (a plain move): no zeros written first.
        let mut new = to
            .block(me, &t.shape)
            .map(|b| LocalTensor::<T>::overwritten(t.indices.clone(), b.ranges.to_vec()))
            .transpose()?;
        let source = all_gather_block(&way, me, cur, new.as_mut(), target_words, mem)?;
        mem.add(target_words);
        return Ok(Moved {
            block: new.map(HeldBlock::Own),
            source,
        });
    }
    if !matches!(way.route, Route::Exchange | Route::Local) {
        let mut new = target_block(t, to, me)?;
        run_way(
            comm,
            &way,
            cur.as_deref(),
            new.as_mut(),
            transfers,
            false,
            mem,
        )?;
        mem.add(target_words);
        return Ok(Moved {
            block: new.map(HeldBlock::Own),
            source: cur,
        });
    }
    // A lent block that stays is still the caller's array: it takes no rank memory.
    let target_words = match &cur {
        Some(c) if stays && c.data.is_lent() => 0,
        _ => target_words,
    };
    let (incoming, recv) = if *way.route == Route::Local {
        (Incoming::of(transfers, me, comm.size())?, Vec::new())
    } else {
        send_and_receive(comm, cur.as_deref(), transfers, target_words, mem)?
    };
    mem.add(target_words);
    let (mut block, source) = if stays {
        (cur, None)
    } else {
        let mut new = target_block(t, to, me)?;
        copy_local(cur.as_deref(), new.as_mut(), transfers, false, me)?;
        (new.map(HeldBlock::Own), cur)
    };
    // Only received elements are written (a block that stays is shared only when none are).
    let dst = match block.as_mut() {
        Some(b) if !recv.is_empty() => {
            let (b, copied) = b.make_mut()?;
            mem.add(copied);
            Some(b)
        }
        _ => None,
    };
    unpack(dst, &recv, &incoming, false, me)?;
    recv.into_iter().for_each(crate::buffers::give);
    Ok(Moved { block, source })
}

/// Reduces the partial sums of `t` (this rank's source block `cur`) into `to` along
/// `transfers`: every target block is the sum of one contribution per partial replica. The
/// source stays with the caller.
pub(crate) fn reduce_block<T: Scalar, C: Communicator>(
    comm: &C,
    way: Way<'_, C>,
    t: &Tensor,
    cur: Option<&LocalBlock<'_, T>>,
    to: &Distribution,
    transfers: &[Transfer],
    mem: &mut Mem,
) -> Result<Option<LocalTensor<T>>, MoveError> {
    exchange_into(comm, way, t, cur, to, transfers, true, mem)
}

/// Fetches this rank's window `to` of `t` from where it rests (`cur`, which stays; lent as it
/// is while the fetch runs) along `transfers`; returns the window block (a copy, shared by
/// the fibre's in-process ranks when it is all-gathered).
pub(crate) fn fetch_window<'d, T: Scalar, C: Communicator>(
    comm: &C,
    way: Way<'_, C>,
    t: &Tensor,
    cur: Option<&mut HeldBlock<'_, T>>,
    to: &Distribution,
    transfers: &[Transfer],
    mem: &mut Mem,
) -> Result<Option<HeldBlock<'d, T>>, MoveError> {
    let me = comm.rank();
    if let Route::Collective {
        op: Op::AllGather, ..
    } = way.route
    {
        if let (Some((sub, g)), Some(tb)) = (fibre_of(&way, me)?, to.block(me, &t.shape)) {
            if sub.gathers_shared() {
                let target_words = tb.len();
                let block = all_gather_shared(sub, g, t, cur, &tb, target_words, mem)?;
                mem.add(target_words);
                return Ok(Some(block));
            }
        }
    }
    let cur = cur.map(|c| &**c);
    let new = exchange_into(comm, way, t, cur, to, transfers, false, mem)?;
    Ok(new.map(HeldBlock::Own))
}

/// The target block of `to`, filled from `cur` (kept) along `way`.
// The move's own parts; bundling them would only rename them.
#[allow(clippy::too_many_arguments)]
fn exchange_into<T: Scalar, C: Communicator>(
    comm: &C,
    way: Way<'_, C>,
    t: &Tensor,
    cur: Option<&LocalBlock<'_, T>>,
    to: &Distribution,
    transfers: &[Transfer],
    sum: bool,
    mem: &mut Mem,
) -> Result<Option<LocalTensor<T>>, MoveError> {
    let mut new = target_block(t, to, comm.rank())?;
    run_way(comm, &way, cur, new.as_mut(), transfers, sum, mem)?;
    mem.add(words(&new));
    Ok(new)
}

/// Fills the target block `new` (zero) from `cur` along `way`; `transfers` are this rank's.
// The move's own parts; bundling them would only rename them.
#[allow(clippy::too_many_arguments)]
fn run_way<T: Scalar, C: Communicator>(
    comm: &C,
    way: &Way<'_, C>,
    cur: Option<&LocalBlock<'_, T>>,
    mut new: Option<&mut LocalBlock<'_, T>>,
    transfers: &[Transfer],
    sum: bool,
    mem: &mut Mem,
) -> Result<(), MoveError> {
    let me = comm.rank();
    let target_words = new.as_ref().map_or(0, |b| b.data.len() as u64);
    match way.route {
        Route::Local => copy_local(cur, new, transfers, sum, me),
        Route::Exchange => {
            let (incoming, recv) = send_and_receive(comm, cur, transfers, target_words, mem)?;
            copy_local(cur, new.as_deref_mut(), transfers, sum, me)?;
            unpack(new, &recv, &incoming, sum, me)?;
            // Received messages go back to the rank's free buffers for the next run.
            recv.into_iter().for_each(crate::buffers::give);
            Ok(())
        }
        Route::SendRecv => {
            let mut sends = pack(cur, transfers, me, comm.size())?;
            let incoming = Incoming::of(transfers, me, comm.size())?;
            let len: usize = incoming
                .by_src
                .iter()
                .flatten()
                .flat_map(|tr| &tr.boxes)
                .map(|b| b.len() as usize)
                .sum();
            let out: u64 = sends.iter().map(|(_, v)| v.len() as u64).sum();
            mem.touch_buffers(out.max(len as u64) + target_words);
            let got = comm.send_recv(sends.pop(), incoming.from.first().map(|&s| (s, len)))?;
            copy_local(cur, new.as_deref_mut(), transfers, sum, me)?;
            unpack(
                new,
                &got.into_iter().collect::<Vec<_>>(),
                &incoming,
                sum,
                me,
            )
        }
        Route::Collective { op, .. } => {
            let Some((sub, g)) = fibre_of(way, me)? else {
                return Ok(());
            };
            collective(*op, sub, g, cur, new, target_words, mem)
        }
    }
}

/// The move's sub-communicator and geometry on this rank (`None`: not in a fibre), checked
/// against each other.
fn fibre_of<'w, C: Communicator>(
    way: &Way<'w, C>,
    me: usize,
) -> Result<Option<(&'w C, &'w Geometry)>, MoveError> {
    let (Some(sub), Some(g)) = (way.sub, way.geom) else {
        return Ok(None);
    };
    if g.fibre.len() != sub.size() || g.me != sub.rank() {
        return Err(MoveError::Plan(format!(
            "rank {me}: the sub-communicator does not match the move's fibre"
        )));
    }
    Ok(Some((sub, g)))
}

/// Whether this rank's piece `b` is all of its own source block `cur` (which can then be
/// offered as it is, not packed).
/// A lent block is packed: its elements are the caller's, not a buffer to hand to peers.
fn whole_piece<T: Scalar>(cur: Option<&HeldBlock<'_, T>>, b: &Option<Block>) -> bool {
    match (cur, b) {
        (Some(HeldBlock::Own(c)), Some(b)) => c.ranges[..] == b.ranges[..] && !c.data.is_lent(),
        _ => false,
    }
}

/// The all-gather of a move: every member's piece of the (common) target block reaches
/// `new`. When the piece is this rank's whole source block, the block itself is offered (no
/// pack) and handed back.
fn all_gather_block<'d, T: Scalar, C: Communicator>(
    way: &Way<'_, C>,
    me: usize,
    mut cur: Option<HeldBlock<'d, T>>,
    new: Option<&mut LocalBlock<'_, T>>,
    target_words: u64,
    mem: &mut Mem,
) -> Result<Option<HeldBlock<'d, T>>, MoveError> {
    let Some((sub, g)) = fibre_of(way, me)? else {
        return Ok(cur);
    };
    let pieces = Pieces::of(g);
    let whole = whole_piece(cur.as_ref(), &pieces.boxes[g.me]);
    let back = match cur.as_mut() {
        Some(HeldBlock::Own(c)) if whole => {
            let mine = std::mem::take(&mut c.data).into_vec();
            pieces.gather(sub, mine, 0, new, target_words, mem)?
        }
        _ => pieces.pack_and_gather(sub, cur.as_deref(), new, target_words, mem)?,
    };
    match cur.as_mut() {
        Some(HeldBlock::Own(c)) if whole => c.data = back.into(),
        _ => crate::buffers::give(back),
    }
    Ok(cur)
}

/// The all-gather of a move or a phase fetch between ranks that share memory: one member
/// assembles the (common) target block `target` from every member's piece, read where it
/// lies, and every member holds it shared. Returns the shared block; the source block `cur`
/// stays (lent while the builder reads it).
fn all_gather_shared<'d, T: Scalar, C: Communicator>(
    sub: &C,
    g: &Geometry,
    t: &Tensor,
    mut cur: Option<&mut HeldBlock<'_, T>>,
    target: &Block,
    target_words: u64,
    mem: &mut Mem,
) -> Result<HeldBlock<'d, T>, MoveError> {
    let pieces = Pieces::of(g);
    let k = g.me;
    let whole = whole_piece(cur.as_deref(), &pieces.boxes[k]);
    let (mine, packed) = match cur.as_deref_mut() {
        Some(HeldBlock::Own(c)) if whole => (std::mem::take(&mut c.data).into_vec(), 0),
        _ => {
            let mut buf = crate::buffers::take_empty(pieces.counts[k])?;
            pack_piece(
                cur.as_deref().map(|c| &**c),
                pieces.boxes[k].as_ref(),
                &mut buf,
            )?;
            (buf, pieces.counts[k])
        }
    };
    mem.touch_buffers(packed as u64 + target_words);
    let build = |data: &[&[T]], lent: usize| -> Result<SharedBlock<T>, MoveError> {
        // Every target element arrives once (a plain move): no zeros written first.
        let mut new = LocalTensor::<T>::overwritten(t.indices.clone(), target.ranges.to_vec())?;
        let mut list = Vec::with_capacity(data.len());
        for (b, d) in pieces.boxes.iter().zip(data) {
            match b {
                Some(b) if !outside(b, &new) && d.len() == b.len() as usize => list.push((b, *d)),
                None if d.is_empty() => {}
                _ => {
                    return Err(MoveError::Plan(
                        "gathered pieces do not match the target block".into(),
                    ))
                }
            }
        }
        place_pieces(&mut new, &list, lent)?;
        Ok(SharedBlock::new(new))
    };
    let (shared, back) = sub.all_gather_shared(mine, &pieces.counts, build)?;
    match cur {
        Some(HeldBlock::Own(c)) if whole => c.data = back.into(),
        _ => crate::buffers::give(back),
    }
    Ok(HeldBlock::Shared(shared))
}

/// Every fibre member's piece of this rank's target block (all members' targets are the
/// same in an all-gather), and their lengths.
struct Pieces {
    boxes: Vec<Option<Block>>,
    counts: Vec<usize>,
}

impl Pieces {
    fn of(g: &Geometry) -> Self {
        let boxes: Vec<Option<Block>> = (0..g.fibre.len()).map(|x| g.piece(x, g.me)).collect();
        let counts = boxes
            .iter()
            .map(|b| b.as_ref().map_or(0, |b| b.len() as usize))
            .collect();
        Pieces { boxes, counts }
    }

    /// Packs this rank's piece of `cur` and gathers; the packed buffer is handed back.
    fn pack_and_gather<T: Scalar, C: Communicator>(
        &self,
        sub: &C,
        cur: Option<&LocalBlock<'_, T>>,
        new: Option<&mut LocalBlock<'_, T>>,
        target_words: u64,
        mem: &mut Mem,
    ) -> Result<Vec<T>, MoveError> {
        let k = sub.rank();
        let mut buf = crate::buffers::take_empty(self.counts[k])?;
        pack_piece(cur, self.boxes[k].as_ref(), &mut buf)?;
        self.gather(sub, buf, self.counts[k], new, target_words, mem)
    }

    /// Gathers every member's piece into `new`, this rank's being `mine` (`packed` of its
    /// words a buffer beside the blocks); `mine` is handed back. Read where it lies when the
    /// backend shares buffers, straight into the target when the pieces lie in it back to
    /// back in rank order, else gathered first and then placed.
    fn gather<T: Scalar, C: Communicator>(
        &self,
        sub: &C,
        mine: Vec<T>,
        packed: usize,
        mut new: Option<&mut LocalBlock<'_, T>>,
        target_words: u64,
        mem: &mut Mem,
    ) -> Result<Vec<T>, MoveError> {
        let in_place = sub.gathers_in_place();
        let direct = !in_place
            && new
                .as_ref()
                .is_some_and(|d| pieces_in_order(&self.boxes, &d.ranges, d.data.len()));
        let gathered = if in_place || direct {
            0
        } else {
            self.counts.iter().sum::<usize>()
        };
        mem.touch_buffers((packed + gathered) as u64 + target_words);
        match new.as_deref_mut().filter(|_| direct) {
            Some(d) => {
                sub.all_gather_v_into(&mine, &self.counts, &mut d.data)?;
                Ok(mine)
            }
            None => sub.all_gather_each(mine, &self.counts, |x, data| {
                let Some(b) = self.boxes[x].as_ref() else {
                    return Ok(());
                };
                match new.as_deref_mut() {
                    Some(d) if !outside(b, d) && data.len() == self.counts[x] => {
                        unpack_box(d, b, data, false)?;
                        Ok(())
                    }
                    _ => Err(MoveError::Plan(
                        "gathered pieces do not match the target block".into(),
                    )),
                }
            }),
        }
    }
}

/// Whether the nonempty `pieces` lie in the block over `ranges` (`len` elements) as one
/// contiguous run each, back to back in member order and filling it.
fn pieces_in_order(pieces: &[Option<Block>], ranges: &[(usize, usize)], len: usize) -> bool {
    let mut at = 0usize;
    for b in pieces.iter().flatten() {
        match contiguous_offset(b, ranges) {
            Some(off) if off == at => at += b.len() as usize,
            _ => return false,
        }
    }
    at == len
}

/// The row-major offset of box `b` in the block over `ranges` when the box is one contiguous
/// run there: every dim after its last partial one whole, every dim before it of length one.
fn contiguous_offset(b: &Block, ranges: &[(usize, usize)]) -> Option<usize> {
    if b.ranges.len() != ranges.len() {
        return None;
    }
    let last_partial = (0..ranges.len()).rev().find(|&d| b.ranges[d] != ranges[d]);
    let (mut off, mut stride) = (0usize, 1usize);
    for d in (0..ranges.len()).rev() {
        let ((s, e), (bs, be)) = (b.ranges[d], ranges[d]);
        if s < bs || e > be {
            return None;
        }
        if last_partial.is_some_and(|f| d < f) && e - s != 1 {
            return None;
        }
        off += (s - bs) * stride;
        stride *= be - bs;
    }
    Some(off)
}

/// Packs box `b` (if any) of the block `blk`.
fn pack_piece<T: Scalar>(
    blk: Option<&LocalBlock<'_, T>>,
    b: Option<&Block>,
    out: &mut Vec<T>,
) -> Result<(), MoveError> {
    if let Some(b) = b {
        let blk = blk.ok_or_else(|| MoveError::Plan("a piece of a block not held".into()))?;
        if outside(b, blk) {
            return Err(MoveError::Plan("a piece outside the block held".into()));
        }
        pack_box(blk, b, out)?;
    }
    Ok(())
}

/// Sets the target block's data to `data` (a whole block, row-major).
fn fill<T: Scalar>(new: Option<&mut LocalBlock<'_, T>>, data: Vec<T>) -> Result<(), MoveError> {
    match new {
        Some(n) if n.data.len() == data.len() => {
            n.data = data.into();
            Ok(())
        }
        None if data.is_empty() => Ok(()),
        _ => Err(MoveError::Plan(
            "a collective's result does not match the target block".into(),
        )),
    }
}

/// Unpacks the back-to-back pieces `data` (member `x`'s is `boxes[x]`) into `new`.
fn unpack_pieces<T: Scalar>(
    new: Option<&mut LocalBlock<'_, T>>,
    boxes: &[Option<Block>],
    data: &[T],
) -> Result<(), MoveError> {
    let Some(dst) = new else {
        return if data.is_empty() {
            Ok(())
        } else {
            Err(MoveError::Plan("pieces for no block".into()))
        };
    };
    let mut pos = 0usize;
    for b in boxes.iter().flatten() {
        let n = b.len() as usize;
        if pos + n > data.len() || outside(b, dst) {
            return Err(MoveError::Plan(
                "gathered pieces do not match the target block".into(),
            ));
        }
        unpack_box(dst, b, &data[pos..pos + n], false)?;
        pos += n;
    }
    Ok(())
}

/// Runs the collective `op` on this rank's fibre `sub` (geometry `g`), from the source block
/// `cur` into the target block `new`.
fn collective<T: Scalar, C: Communicator>(
    op: Op,
    sub: &C,
    g: &Geometry,
    cur: Option<&LocalBlock<'_, T>>,
    new: Option<&mut LocalBlock<'_, T>>,
    target_words: u64,
    mem: &mut Mem,
) -> Result<(), MoveError> {
    let (k, n) = (g.me, g.fibre.len());
    let len = |b: &Option<Block>| b.as_ref().map_or(0, |b| b.len() as usize);
    let mut buf: Vec<T> = Vec::new();
    match op {
        Op::AllGather => {
            let back = Pieces::of(g).pack_and_gather(sub, cur, new, target_words, mem)?;
            crate::buffers::give(back);
            Ok(())
        }
        Op::ReduceScatter => {
            buf = crate::buffers::take_empty(g.dst.iter().map(len).sum())?;
            for x in 0..n {
                pack_piece(cur, g.dst[x].as_ref(), &mut buf)?;
            }
            let counts: Vec<usize> = g.dst.iter().map(len).collect();
            mem.touch_buffers(buf.len() as u64 + target_words);
            fill(new, sub.reduce_scatter_v(&buf, &counts)?)
        }
        Op::AllReduce => {
            pack_piece(cur, g.dst[k].as_ref(), &mut buf)?;
            mem.touch_buffers(buf.len() as u64 + target_words);
            sub.all_reduce_sum(&mut buf)?;
            fill(new, buf)
        }
        Op::Reduce | Op::Gather | Op::Broadcast => {
            let Some(root) = g.root() else {
                return Ok(());
            };
            match op {
                Op::Reduce => {
                    pack_piece(cur, g.dst[root].as_ref(), &mut buf)?;
                    mem.touch_buffers(buf.len() as u64 + target_words);
                    match sub.reduce_sum(&buf, root)? {
                        Some(sum) => fill(new, sum),
                        None => Ok(()),
                    }
                }
                Op::Gather => {
                    // The root's own piece is copied, not sent to itself.
                    let mut pieces: Vec<Option<Block>> = (0..n).map(|x| g.piece(x, root)).collect();
                    let own = pieces[root].take();
                    if k != root {
                        pack_piece(cur, pieces[k].as_ref(), &mut buf)?;
                    }
                    let counts: Vec<usize> = pieces.iter().map(len).collect();
                    mem.touch_buffers(buf.len().max(counts.iter().sum()) as u64 + target_words);
                    let all = sub.gather_v(&buf, &counts, root)?;
                    let Some(all) = all else {
                        return Ok(());
                    };
                    let mut new = new;
                    if let (Some(b), Some(src), Some(dst)) = (&own, cur, new.as_deref_mut()) {
                        if outside(b, src) || outside(b, dst) {
                            return Err(MoveError::Plan("the root's piece is not held".into()));
                        }
                        copy_box(src, dst, b, false)?;
                    }
                    unpack_pieces(new, &pieces, &all)
                }
                _ => {
                    if k == root {
                        pack_piece(cur, g.dst[root].as_ref(), &mut buf)?;
                    } else {
                        buf = crate::buffers::take(len(&g.dst[k]))?;
                    }
                    mem.touch_buffers(buf.len() as u64 + target_words);
                    sub.broadcast_typed(&mut buf, root)?;
                    fill(new, buf)
                }
            }
        }
    }
}

/// The collective a structured move runs as, on the sub-communicator of its grid dims.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Op {
    /// Every rank of a fibre gathers the pieces of its (common) target block.
    AllGather,
    /// Partial sums reduced, each rank of a fibre keeping its own target block.
    ReduceScatter,
    /// Partial sums reduced, every rank of a fibre keeping the (common) target block.
    AllReduce,
    /// Partial sums reduced onto rank 0.
    Reduce,
    /// Blocks gathered onto rank 0.
    Gather,
    /// Rank 0's block copied to every rank of the target grid.
    Broadcast,
}

/// How every rank runs one move; agreed by all ranks before the runs ([`Routes::agree`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Route {
    /// Nothing crosses ranks: the local copy only.
    Local,
    /// At most one message out and one in per rank.
    SendRecv,
    /// The general point-to-point exchange of the derived transfers.
    Exchange,
    /// A collective over the dims `keep` of the grid `grid` (sizes).
    Collective {
        /// The collective.
        op: Op,
        /// The grid's dim sizes.
        grid: Vec<usize>,
        /// The grid dims the collective runs along.
        keep: Vec<bool>,
    },
}

/// The route a move of kind `kind` asks for (before checking that it fits).
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

/// The world ranks of `me`'s fibre along the dims `keep` of grid `grid`, in sub-communicator
/// order (row-major over the kept dims); `None` outside the grid.
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

/// The nonempty intersection of two boxes.
fn meet(a: &Block, b: &Block) -> Option<Block> {
    a.intersect(b)
}

fn nonempty(b: Option<Block>) -> Option<Block> {
    b.filter(|b| b.ranges.iter().all(|&(s, e)| s < e))
}

/// The geometry of one move on one rank: the fibre it runs on and every member's blocks.
struct Geometry {
    /// Fibre members (world ranks), in sub-communicator order.
    fibre: Vec<usize>,
    /// Source block of each member (nonempty or `None`).
    src: Vec<Option<Block>>,
    /// Target block of each member (nonempty or `None`).
    dst: Vec<Option<Block>>,
    /// This rank's position in `fibre`.
    me: usize,
}

impl Geometry {
    fn new(
        shape: &[usize],
        from: &Distribution,
        to: &Distribution,
        fibre: Vec<usize>,
        me: usize,
    ) -> Option<Self> {
        let k = fibre.iter().position(|&r| r == me)?;
        Some(Geometry {
            src: fibre
                .iter()
                .map(|&r| nonempty(from.block(r, shape)))
                .collect(),
            dst: fibre
                .iter()
                .map(|&r| nonempty(to.block(r, shape)))
                .collect(),
            fibre,
            me: k,
        })
    }

    /// Member `x`'s piece of the target block of member `y`.
    fn piece(&self, x: usize, y: usize) -> Option<Block> {
        meet(self.src[x].as_ref()?, self.dst[y].as_ref()?)
    }

    /// Whether member `x`'s source block holds all of member `y`'s target block.
    fn covers(&self, x: usize, y: usize) -> bool {
        self.dst[y].is_none() || self.piece(x, y) == self.dst[y]
    }

    /// Whether every member's target block is this rank's.
    fn same_target(&self) -> bool {
        self.dst.iter().all(|d| *d == self.dst[self.me])
    }

    /// The root's position (world rank 0), if it is in the fibre.
    fn root(&self) -> Option<usize> {
        self.fibre.iter().position(|&r| r == 0)
    }
}

/// This rank's transfers under `op` on its fibre, sorted by (src, dst); `None` when the
/// collective does not apply (the blocks do not have its shape).
fn expected(op: Op, g: &Geometry) -> Option<Vec<Transfer>> {
    let (k, n) = (g.me, g.fibre.len());
    let mut out: Vec<Transfer> = Vec::new();
    let mut add = |x: usize, y: usize, b: Option<Block>| {
        if let Some(b) = b {
            out.push(Transfer {
                src: g.fibre[x],
                dst: g.fibre[y],
                boxes: std::iter::once(b).collect(),
            });
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
            let Some(root) = g.root() else {
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
    out.sort_by_key(|t| (t.src, t.dst));
    out.dedup();
    Some(out)
}

/// Whether `route` moves exactly `transfers` on rank `me`, with this rank's geometry of a
/// collective route (`None` outside its grid).
fn fits(
    route: &Route,
    shape: &[usize],
    from: &Distribution,
    to: &Distribution,
    transfers: &[Transfer],
    me: usize,
) -> (bool, Option<Geometry>) {
    let others =
        |f: &dyn Fn(&Transfer) -> bool| transfers.iter().filter(|t| t.src != t.dst && f(t)).count();
    match route {
        Route::Exchange => (true, None),
        Route::Local => (others(&|_| true) == 0, None),
        Route::SendRecv => (
            others(&|t| t.src == me) <= 1 && others(&|t| t.dst == me) <= 1,
            None,
        ),
        Route::Collective { op, grid, keep } => {
            let mut got = transfers.to_vec();
            got.sort_by_key(|t| (t.src, t.dst));
            let Some(f) = fibre(grid, keep, me) else {
                return (got.is_empty(), None);
            };
            let Some(g) = Geometry::new(shape, from, to, f, me) else {
                return (false, None);
            };
            let ok = expected(*op, &g).is_some_and(|want| want == got);
            (ok, Some(g))
        }
    }
}

/// A sub-communicator's grid (dim sizes) and kept dims.
type SubKey = (Vec<usize>, Vec<bool>);

/// The agreed route of every move of a plan, and the sub-communicators the collectives run on
/// (made once, before the runs, so that no step's traffic includes making them).
pub(crate) struct Routes<C> {
    /// Per step, one route per move ([`deinsum_plan::Plan::step_moves`]).
    routes: Vec<Vec<Route>>,
    /// Per step and move, this rank's geometry of a collective route.
    geoms: Vec<Vec<Option<Geometry>>>,
    /// Sub-communicators by (grid, kept dims); `None` on a rank outside the grid.
    subs: Vec<(SubKey, Option<C>)>,
    /// Per step, this rank's transfers, one list per move of the plan's step (fetches, then
    /// prefetches; [`deinsum_plan::Plan::step_transfers`]): derived once, not in every run
    /// (deriving them cost more than a 32 x 64 x 32 product's step).
    transfers: Vec<Vec<Vec<Transfer>>>,
    /// Per step, the words this rank sends and receives by the plan
    /// ([`deinsum_plan::Plan::step_words`]).
    words: Vec<(u64, u64)>,
}

/// One move's route and the sub-communicator it runs on.
pub(crate) struct Way<'a, C> {
    route: &'a Route,
    sub: Option<&'a C>,
    geom: Option<&'a Geometry>,
}

static EXCHANGE: Route = Route::Exchange;

impl<C: Communicator> Routes<C> {
    /// Checks every move's structured route against this rank's derived transfers, agrees
    /// with every rank on which moves fit (one all-reduce; a move that does not fit on some
    /// rank takes the general exchange everywhere) and makes the sub-communicators.
    pub(crate) fn agree(plan: &deinsum_plan::Plan, comm: &C) -> Result<Self, CommError> {
        let me = comm.rank();
        let mut routes: Vec<Vec<Route>> = Vec::with_capacity(plan.steps.len());
        let mut geoms: Vec<Vec<Option<Geometry>>> = Vec::with_capacity(plan.steps.len());
        let mut unfit: Vec<u64> = Vec::new();
        let mut all_transfers = Vec::with_capacity(plan.steps.len());
        let mut words = Vec::with_capacity(plan.steps.len());
        for (i, step) in plan.steps.iter().enumerate() {
            let moves = step_moves(step);
            // All of the step's moves (a phase's prefetches too, which `moves` leaves out);
            // none, at no cost, for a step that moves nothing.
            let transfers = plan.step_transfers(i, me);
            words.push(plan.step_words(i, me));
            let (mut rs, mut gs) = (Vec::new(), Vec::new());
            for ((tensor, from, to, kind), tr) in moves.into_iter().zip(&transfers) {
                let shape = plan
                    .tensor(tensor)
                    .map(|t| t.shape.clone())
                    .unwrap_or_default();
                let r = route_of(kind, from, to);
                let (ok, g) = fits(&r, &shape, from, to, tr, me);
                unfit.push(u64::from(!ok));
                rs.push(r);
                gs.push(g);
            }
            routes.push(rs);
            geoms.push(gs);
            all_transfers.push(transfers);
        }
        comm.all_reduce_max_u64(&mut unfit)?;
        let mut flags = unfit.into_iter();
        let mut subs: Vec<(SubKey, Option<C>)> = Vec::new();
        for r in routes.iter_mut().flatten() {
            if flags.next() == Some(1) {
                *r = Route::Exchange;
            }
            if let Route::Collective { grid, keep, .. } = r {
                let key = (grid.clone(), keep.clone());
                if !subs.iter().any(|(k, _)| *k == key) {
                    let sub = comm.cart_sub(grid, keep)?;
                    subs.push((key, sub));
                }
            }
        }
        Ok(Routes {
            routes,
            geoms,
            subs,
            transfers: all_transfers,
            words,
        })
    }

    /// This rank's transfers in step `step`, one list per move (none for a step that moves
    /// nothing or is out of range).
    pub(crate) fn transfers(&self, step: usize) -> &[Vec<Transfer>] {
        self.transfers.get(step).map_or(&[], Vec::as_slice)
    }

    /// The words this rank sends and receives in step `step` by the plan.
    pub(crate) fn words(&self, step: usize) -> (u64, u64) {
        self.words.get(step).copied().unwrap_or((0, 0))
    }

    /// The way move `j` of step `step` runs (the exchange for a move not seen).
    pub(crate) fn way(&self, step: usize, j: usize) -> Way<'_, C> {
        let route = self
            .routes
            .get(step)
            .and_then(|r| r.get(j))
            .unwrap_or(&EXCHANGE);
        let sub = match route {
            Route::Collective { grid, keep, .. } => self
                .subs
                .iter()
                .find(|((g, k), _)| g == grid && k == keep)
                .and_then(|(_, c)| c.as_ref()),
            _ => None,
        };
        let geom = self
            .geoms
            .get(step)
            .and_then(|g| g.get(j))
            .and_then(Option::as_ref);
        Way { route, sub, geom }
    }
}

/// The moves of a step as (tensor, from, to, kind), in [`deinsum_plan::Plan::step_moves`]
/// order.
fn step_moves(step: &PlanStep) -> Vec<(usize, &Distribution, &Distribution, &MoveKind)> {
    match step {
        PlanStep::Redistribute {
            tensor,
            from,
            to,
            pattern,
            ..
        } => vec![(*tensor, from, to, pattern)],
        PlanStep::ComputePhase { fetch, .. } => fetch
            .iter()
            .map(|f| (f.tensor, &f.from, &f.to, &f.pattern))
            .collect(),
        _ => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bx(r: &[(usize, usize)]) -> Block {
        Block {
            ranges: r.iter().copied().collect(),
        }
    }

    #[test]
    fn contiguous_boxes_and_their_offsets() {
        // A 4 x 6 block starting at row 2, column 0.
        let blk = [(2, 6), (0, 6)];
        assert_eq!(contiguous_offset(&bx(&[(3, 5), (0, 6)]), &blk), Some(6));
        assert_eq!(contiguous_offset(&bx(&[(4, 5), (1, 4)]), &blk), Some(13));
        // Two rows of part of the columns: two runs.
        assert_eq!(contiguous_offset(&bx(&[(3, 5), (0, 3)]), &blk), None);
        // Outside the block.
        assert_eq!(contiguous_offset(&bx(&[(0, 3), (0, 6)]), &blk), None);
        let rows = |a, b| Some(bx(&[(a, b), (0, 6)]));
        assert!(pieces_in_order(&[rows(2, 3), None, rows(3, 6)], &blk, 24));
        // Out of member order, or short of the block.
        assert!(!pieces_in_order(&[rows(3, 6), rows(2, 3)], &blk, 24));
        assert!(!pieces_in_order(&[rows(2, 3), rows(4, 6)], &blk, 24));
    }
}
