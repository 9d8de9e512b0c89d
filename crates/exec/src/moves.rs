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

use crate::comm::{CommError, Communicator};
use crate::data::{copy_box, pack_box, unpack_box};
use crate::execute::Mem;
use crate::kernels::LocalTensor;
use crate::Scalar;
use deinsum_plan::{Block, Distribution, Tensor, Transfer};

/// Why a move failed: communication, or a plan whose transfers do not fit the blocks held.
#[derive(Debug)]
pub(crate) enum MoveError {
    /// The communicator failed.
    Comm(CommError),
    /// The transfers do not fit the blocks (the executor names the step).
    Plan(String),
}

impl From<CommError> for MoveError {
    fn from(e: CommError) -> Self {
        MoveError::Comm(e)
    }
}

/// Whether the nonempty box `b` reaches outside the block `blk`.
fn outside<T>(b: &Block, blk: &LocalTensor<T>) -> bool {
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
    block: Option<&LocalTensor<T>>,
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
            sends.push((d, Vec::with_capacity(*n)));
        }
    }
    for tr in outgoing() {
        let blk = block.ok_or_else(|| not_held(me))?;
        for b in &tr.boxes {
            if outside(b, blk) {
                return Err(not_held(me));
            }
            pack_box(blk, b, &mut sends[slot[tr.dst]].1);
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
    target: Option<&mut LocalTensor<T>>,
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
            unpack_box(dst, b, &vals[pos..pos + n], sum);
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
    src: Option<&LocalTensor<T>>,
    mut dst: Option<&mut LocalTensor<T>>,
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
            copy_box(blk, dst, b, sum);
        }
    }
    Ok(())
}

/// This rank's block of `t` in `to`, zero-filled (`None` when it holds none).
pub(crate) fn target_block<T: Scalar>(
    t: &Tensor,
    to: &Distribution,
    me: usize,
) -> Option<LocalTensor<T>> {
    to.block(me, &t.shape)
        .map(|b| LocalTensor::<T>::zeros(t.indices.clone(), b.ranges.to_vec()))
}

fn words<T>(t: &Option<LocalTensor<T>>) -> u64 {
    t.as_ref().map_or(0, |l| l.data.len() as u64)
}

/// Packs and exchanges one move's messages: returns the received ones with their senders.
/// `target_words` (the target block) is counted beside the buffers in `mem`.
fn send_and_receive<'a, T: Scalar, C: Communicator>(
    comm: &C,
    src: Option<&LocalTensor<T>>,
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
pub(crate) struct Moved<T> {
    /// This rank's block in the target distribution.
    pub block: Option<LocalTensor<T>>,
    /// The source block, unless it was handed over as the target block.
    pub source: Option<LocalTensor<T>>,
}

/// Moves `t` from this rank's source block `cur` into `to` along `transfers` (a plain move:
/// every target element is received once). A block that stays whole on its rank becomes the
/// target block without a copy; otherwise the source is returned for the caller to release.
pub(crate) fn move_block<T: Scalar, C: Communicator>(
    comm: &C,
    t: &Tensor,
    cur: Option<LocalTensor<T>>,
    to: &Distribution,
    transfers: &[Transfer],
    mem: &mut Mem,
) -> Result<Moved<T>, MoveError> {
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
    let (incoming, recv) = send_and_receive(comm, cur.as_ref(), transfers, target_words, mem)?;
    mem.add(target_words);
    let (mut block, source) = if stays {
        (cur, None)
    } else {
        let mut new = target_block(t, to, me);
        copy_local(cur.as_ref(), new.as_mut(), transfers, false, me)?;
        (new, cur)
    };
    unpack(block.as_mut(), &recv, &incoming, false, me)?;
    Ok(Moved { block, source })
}

/// Reduces the partial sums of `t` (this rank's source block `cur`) into `to` along
/// `transfers`: every target block is the sum of one contribution per partial replica. The
/// source stays with the caller.
pub(crate) fn reduce_block<T: Scalar, C: Communicator>(
    comm: &C,
    t: &Tensor,
    cur: Option<&LocalTensor<T>>,
    to: &Distribution,
    transfers: &[Transfer],
    mem: &mut Mem,
) -> Result<Option<LocalTensor<T>>, MoveError> {
    exchange_into(comm, t, cur, to, transfers, true, mem)
}

/// Fetches this rank's window `to` of `t` from where it rests (`cur`, which stays) along
/// `transfers`; returns the window block (a copy).
pub(crate) fn fetch_window<T: Scalar, C: Communicator>(
    comm: &C,
    t: &Tensor,
    cur: Option<&LocalTensor<T>>,
    to: &Distribution,
    transfers: &[Transfer],
    mem: &mut Mem,
) -> Result<Option<LocalTensor<T>>, MoveError> {
    exchange_into(comm, t, cur, to, transfers, false, mem)
}

/// The target block of `to`, filled from `cur` (kept) and the messages of `transfers`.
fn exchange_into<T: Scalar, C: Communicator>(
    comm: &C,
    t: &Tensor,
    cur: Option<&LocalTensor<T>>,
    to: &Distribution,
    transfers: &[Transfer],
    sum: bool,
    mem: &mut Mem,
) -> Result<Option<LocalTensor<T>>, MoveError> {
    let me = comm.rank();
    let mut new = target_block(t, to, me);
    let (incoming, recv) = send_and_receive(comm, cur, transfers, words(&new), mem)?;
    mem.add(words(&new));
    copy_local(cur, new.as_mut(), transfers, sum, me)?;
    unpack(new.as_mut(), &recv, &incoming, sum, me)?;
    Ok(new)
}
