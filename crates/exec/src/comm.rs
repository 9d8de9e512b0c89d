//! The communicator layer: what the executor needs from a message-passing backend.
//!
//! Every implementation counts the bytes each rank sends to and receives from *other* ranks
//! (a rank's messages to itself are local copies and are not counted), so a run can be held
//! against the plan's predicted volume.

/// Bytes a rank has sent to and received from other ranks since creation or the last reset.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Traffic {
    /// Bytes sent to other ranks.
    pub sent: u64,
    /// Bytes received from other ranks.
    pub received: u64,
}

use crate::Scalar;

/// A communication failure (a peer failed, a count does not fit, the backend reported an error).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CommError {
    /// Another rank failed; its message.
    #[error("rank {rank} failed: {message}")]
    PeerFailed {
        /// The failing rank.
        rank: usize,
        /// What it reported.
        message: String,
    },
    /// Arguments that do not fit the collective (lengths, counts).
    #[error("invalid collective arguments: {0}")]
    Invalid(String),
    /// The backend reported an error.
    #[error("communication backend error: {0}")]
    Backend(String),
}

/// The collectives the executor uses. All ranks of the communicator must call each collective
/// in the same order (MPI semantics).
pub trait Communicator {
    /// This rank's number, `0..size()`.
    fn rank(&self) -> usize;

    /// Number of ranks.
    fn size(&self) -> usize;

    /// Splits into sub-communicators: ranks with the same `color` form one, ordered by `key`
    /// then by rank (MPI_Comm_split).
    fn split(&self, color: usize, key: usize) -> Result<Self, CommError>
    where
        Self: Sized;

    /// Variable all-to-all of bytes: `send` holds the messages to ranks `0..size()` back to
    /// back, `send_counts[r]` bytes for rank `r`. Returns the received bytes back to back, and
    /// the count from each rank.
    fn all_to_all_v(
        &self,
        send: &[u8],
        send_counts: &[usize],
    ) -> Result<(Vec<u8>, Vec<usize>), CommError>;

    /// Element-wise sum over all ranks, in place, for f64.
    fn all_reduce_sum_f64(&self, buf: &mut [f64]) -> Result<(), CommError>;

    /// Element-wise sum over all ranks, in place, for f32.
    fn all_reduce_sum_f32(&self, buf: &mut [f32]) -> Result<(), CommError>;

    /// Element-wise maximum over all ranks, in place (used to agree on errors and figures).
    fn all_reduce_max_u64(&self, buf: &mut [u64]) -> Result<(), CommError>;

    /// Reduce-scatter with variable counts, f64: sums `send` (length sum of `recv_counts`) over
    /// all ranks and returns to rank `r` its `recv_counts[r]` elements.
    fn reduce_scatter_sum_f64(
        &self,
        send: &[f64],
        recv_counts: &[usize],
    ) -> Result<Vec<f64>, CommError>;

    /// Broadcast of bytes from `root`; on non-root ranks `buf` is replaced.
    fn broadcast(&self, buf: &mut Vec<u8>, root: usize) -> Result<(), CommError>;

    /// Blocks until every rank has entered.
    fn barrier(&self) -> Result<(), CommError>;

    /// Bytes moved to and from other ranks so far by this rank (over all communicators split
    /// from the same world).
    fn traffic(&self) -> Traffic;

    /// Typed point-to-point exchange: sends `sends` (destination rank, elements; at most one
    /// message per destination) and returns one message from each rank of `from`, in that
    /// order. Every rank calls it together, like a collective, and the pairs match: rank s
    /// lists r in `from` exactly when r sends to s (an empty message still counts). Bytes are
    /// counted as by [`Communicator::all_to_all_v`]. The default packs the messages into one
    /// buffer for [`Communicator::all_to_all_v`]; backends that can hand buffers over or post
    /// them directly override it.
    fn exchange<T: Scalar>(
        &self,
        sends: Vec<(usize, Vec<T>)>,
        from: &[usize],
    ) -> Result<Vec<Vec<T>>, CommError> {
        let p = self.size();
        let mut by_dst: Vec<Option<Vec<T>>> = vec![None; p];
        for (d, v) in sends {
            let slot = by_dst
                .get_mut(d)
                .ok_or_else(|| CommError::Invalid(format!("message to rank {d} of {p}")))?;
            if slot.replace(v).is_some() {
                return Err(CommError::Invalid(format!("two messages to rank {d}")));
            }
        }
        let mut send: Vec<u8> = Vec::new();
        let mut counts = vec![0usize; p];
        for (d, v) in by_dst.iter().enumerate() {
            if let Some(v) = v {
                let b: &[u8] = bytemuck::cast_slice(v);
                send.extend_from_slice(b);
                counts[d] = b.len();
            }
        }
        drop(by_dst);
        let (recv, rc) = self.all_to_all_v(&send, &counts)?;
        drop(send);
        let mut offs = vec![0usize; p + 1];
        for r in 0..p {
            offs[r + 1] = offs[r] + rc[r];
        }
        let mut listed = vec![false; p];
        let mut out = Vec::with_capacity(from.len());
        for &s in from {
            let flag = listed
                .get_mut(s)
                .ok_or_else(|| CommError::Invalid(format!("message from rank {s} of {p}")))?;
            *flag = true;
            let bytes = &recv[offs[s]..offs[s + 1]];
            if bytes.len() % T::BYTES != 0 {
                return Err(CommError::Invalid(format!(
                    "rank {s} sent {} bytes, not whole elements",
                    bytes.len()
                )));
            }
            let mut v = vec![T::default(); bytes.len() / T::BYTES];
            bytemuck::cast_slice_mut::<T, u8>(&mut v).copy_from_slice(bytes);
            out.push(v);
        }
        if let Some(s) = (0..p).find(|&s| !listed[s] && rc[s] > 0) {
            return Err(CommError::Invalid(format!(
                "rank {s} sent a message that was not expected"
            )));
        }
        Ok(out)
    }

    /// [`Communicator::exchange`] overlapped with `work`: posts `sends`, runs `work` while
    /// the messages are in flight, then completes the receives and returns them (one per
    /// entry of `from`, in that order) with what `work` returned. `from` lists each sending
    /// rank with the number of elements it sends, which the receiver knows from its derived
    /// transfers, so receives can be posted before the data arrives. Every rank calls it
    /// together, as it calls `exchange`, and its messages never match another call's. Bytes
    /// are counted as by `exchange`. The default does the exchange, then the work (no
    /// overlap); backends override it.
    fn exchange_while<T: Scalar, R: Send>(
        &self,
        sends: Vec<(usize, Vec<T>)>,
        from: &[(usize, usize)],
        work: impl FnOnce() -> R + Send,
    ) -> Result<(Vec<Vec<T>>, R), CommError> {
        let ranks: Vec<usize> = from.iter().map(|&(s, _)| s).collect();
        let recv = self.exchange(sends, &ranks)?;
        check_lengths(&recv, from)?;
        Ok((recv, work()))
    }
}

/// Checks that the messages `recv` have the lengths `from` announced (one per sender).
pub fn check_lengths<T>(recv: &[Vec<T>], from: &[(usize, usize)]) -> Result<(), CommError> {
    for (v, &(s, n)) in recv.iter().zip(from) {
        if v.len() != n {
            return Err(CommError::Invalid(format!(
                "rank {s} sent {} elements, {n} were expected",
                v.len()
            )));
        }
    }
    if recv.len() != from.len() {
        return Err(CommError::Invalid(format!(
            "{} messages for {} senders",
            recv.len(),
            from.len()
        )));
    }
    Ok(())
}

/// Checks the arguments of [`Communicator::all_to_all_v`] (one count per rank, counts adding
/// up to the buffer's length), shared by every backend; returns the total.
pub fn check_send_counts(
    send_len: usize,
    send_counts: &[usize],
    size: usize,
) -> Result<usize, CommError> {
    if send_counts.len() != size {
        return Err(CommError::Invalid(format!(
            "{} send counts for {size} ranks",
            send_counts.len()
        )));
    }
    let total = send_counts
        .iter()
        .try_fold(0usize, |a, &c| a.checked_add(c))
        .ok_or_else(|| CommError::Invalid("send counts overflow".into()))?;
    if total != send_len {
        return Err(CommError::Invalid(format!(
            "send counts add up to {total}, buffer has {send_len} bytes"
        )));
    }
    Ok(total)
}

/// Checks the arguments of [`Communicator::reduce_scatter_sum_f64`] (one count per rank, counts
/// adding up to the buffer's length, without overflow), shared by every backend; returns the
/// total.
pub fn check_recv_counts(
    send_len: usize,
    recv_counts: &[usize],
    size: usize,
) -> Result<usize, CommError> {
    let total = recv_counts
        .iter()
        .try_fold(0usize, |a, &c| a.checked_add(c))
        .ok_or_else(|| CommError::Invalid("receive counts overflow".into()))?;
    if recv_counts.len() != size || total != send_len {
        return Err(CommError::Invalid(format!(
            "reduce-scatter of {send_len} elements with {} counts adding up to {total} on {size} ranks",
            recv_counts.len()
        )));
    }
    Ok(total)
}
