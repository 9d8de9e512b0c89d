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
