//! A bundle: the messages of several moves of one step sent together, for
//! [`crate::Communicator::exchange_while`]: a phase's prefetches are packed into one message
//! per destination before the phase computes and unpacked into the next phase's windows after
//! it. One message per pair keeps every backend's matching simple (a mailbox per sender, MPI's
//! ordering per tag), however many windows the phase prefetches.

use crate::block::{LocalBlock, LocalTensor};
use crate::data::{copy_box, pack_box, unpack_box};
use crate::moves::MoveError;
use crate::Scalar;
use deinsum_plan::{Block, Transfer};

/// One move of the step: this rank's derived transfers and its source block.
pub(crate) type Leg<'a, T> = (&'a [Transfer], Option<&'a LocalBlock<'a, T>>);

/// Whether the nonempty box `b` reaches outside the block `blk`.
fn outside<T>(b: &Block, blk: &LocalBlock<'_, T>) -> bool {
    b.ranges
        .iter()
        .zip(&blk.ranges)
        .any(|(&(s, e), &(bs, be))| s < e && (s < bs || e > be))
}

/// This rank's messages of the moves `legs` (one per other rank it sends to, ascending: each
/// move's boxes in move order, then transfer order) and what it receives (each sending rank,
/// ascending, with the elements it sends), on `p` ranks.
#[allow(clippy::type_complexity)] // (messages, expected receives): the two sides of one call.
pub(crate) fn pack<T: Scalar>(
    legs: &[Leg<'_, T>],
    me: usize,
    p: usize,
) -> Result<(Vec<(usize, Vec<T>)>, Vec<(usize, usize)>), MoveError> {
    let mut out_len: Vec<Option<usize>> = vec![None; p];
    let mut in_len: Vec<Option<usize>> = vec![None; p];
    for (trs, _) in legs {
        for tr in trs.iter().filter(|tr| tr.src != tr.dst) {
            let n: usize = tr.boxes.iter().map(|b| b.len() as usize).sum();
            let (slot, peer) = match (tr.src == me, tr.dst == me) {
                (true, _) => (&mut out_len, tr.dst),
                (_, true) => (&mut in_len, tr.src),
                _ => continue,
            };
            let e = slot
                .get_mut(peer)
                .ok_or_else(|| MoveError::Plan(format!("transfer with rank {peer} of {p}")))?;
            *e = Some(e.unwrap_or(0) + n);
        }
    }
    let mut slot = vec![usize::MAX; p];
    let mut sends: Vec<(usize, Vec<T>)> = Vec::new();
    for (d, n) in out_len.iter().enumerate() {
        if let Some(n) = n {
            slot[d] = sends.len();
            sends.push((d, crate::buffers::take_empty(*n)?));
        }
    }
    for (trs, src) in legs {
        for tr in trs.iter().filter(|tr| tr.src == me && tr.dst != me) {
            let blk = src.ok_or_else(|| {
                MoveError::Plan(format!("rank {me} sends from a block it does not hold"))
            })?;
            for b in &tr.boxes {
                if outside(b, blk) {
                    return Err(MoveError::Plan(format!(
                        "rank {me} sends from outside its block"
                    )));
                }
                pack_box(blk, b, &mut sends[slot[tr.dst]].1)?;
            }
        }
    }
    let from = in_len
        .iter()
        .enumerate()
        .filter_map(|(s, n)| n.map(|n| (s, n)))
        .collect();
    Ok((sends, from))
}

/// Fills the targets of the moves `legs` (`targets[j]` for move j): the pieces this rank
/// keeps, copied from its source blocks, then the messages `recv` (one per entry of `from`,
/// as [`pack`] laid them out).
pub(crate) fn unpack<T: Scalar>(
    targets: &mut [Option<LocalTensor<T>>],
    legs: &[Leg<'_, T>],
    recv: &[Vec<T>],
    from: &[(usize, usize)],
    me: usize,
) -> Result<(), MoveError> {
    let no_block = || MoveError::Plan(format!("rank {me} receives into no block"));
    for ((trs, src), dst) in legs.iter().zip(targets.iter_mut()) {
        for tr in trs.iter().filter(|tr| tr.src == me && tr.dst == me) {
            let blk = src.ok_or_else(|| {
                MoveError::Plan(format!("rank {me} copies from a block it does not hold"))
            })?;
            let d = dst.as_mut().ok_or_else(no_block)?;
            for b in &tr.boxes {
                if outside(b, blk) || outside(b, d) {
                    return Err(MoveError::Plan(format!(
                        "rank {me}: a local piece outside its blocks"
                    )));
                }
                copy_box(blk, d, b, false)?;
            }
        }
    }
    for (vals, &(s, _)) in recv.iter().zip(from) {
        let mut pos = 0usize;
        for ((trs, _), dst) in legs.iter().zip(targets.iter_mut()) {
            for tr in trs.iter().filter(|tr| tr.src == s && tr.dst == me) {
                let d = dst.as_mut().ok_or_else(no_block)?;
                for b in &tr.boxes {
                    let n = b.len() as usize;
                    if pos + n > vals.len() || outside(b, d) {
                        return Err(MoveError::Plan(format!(
                            "rank {me}: message from rank {s} does not match its transfers"
                        )));
                    }
                    unpack_box(d, b, &vals[pos..pos + n], false)?;
                    pos += n;
                }
            }
        }
        if pos != vals.len() {
            return Err(MoveError::Plan(format!(
                "rank {me}: message from rank {s} has {} elements, its transfers {pos}",
                vals.len()
            )));
        }
    }
    Ok(())
}
