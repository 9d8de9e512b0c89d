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

/// The collective operations a communicator counts calls of ([`Communicator::calls`]), so a
/// run can show which path each move took.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Collective {
    /// [`Communicator::exchange`]: the general point-to-point exchange.
    Exchange,
    /// [`Communicator::all_to_all_v`].
    AllToAll,
    /// [`Communicator::all_gather_v`].
    AllGather,
    /// [`Communicator::reduce_scatter_v`].
    ReduceScatter,
    /// [`Communicator::all_reduce_sum`].
    AllReduce,
    /// [`Communicator::broadcast_typed`] (and the byte broadcast).
    Broadcast,
    /// [`Communicator::reduce_sum`].
    Reduce,
    /// [`Communicator::gather_v`].
    Gather,
    /// [`Communicator::send_recv`].
    SendRecv,
}

impl Collective {
    /// Every kind, in the order of [`Calls`]' fields.
    pub const ALL: [Collective; 9] = [
        Collective::Exchange,
        Collective::AllToAll,
        Collective::AllGather,
        Collective::ReduceScatter,
        Collective::AllReduce,
        Collective::Broadcast,
        Collective::Reduce,
        Collective::Gather,
        Collective::SendRecv,
    ];
}

/// Calls per collective kind made by a rank (over all communicators split from its world).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Calls(pub [u64; 9]);

impl Calls {
    /// Calls of `kind`.
    pub fn of(&self, kind: Collective) -> u64 {
        self.0[kind as usize]
    }

    /// Whether no call was made.
    pub fn is_empty(&self) -> bool {
        self.0.iter().all(|&c| c == 0)
    }

    /// The calls made since `earlier` (a snapshot of the same counters).
    pub fn since(&self, earlier: &Calls) -> Calls {
        let mut out = Calls::default();
        for (k, o) in out.0.iter_mut().enumerate() {
            *o = self.0[k].saturating_sub(earlier.0[k]);
        }
        out
    }
}

/// Per-kind call counters a backend keeps per rank.
#[derive(Debug, Default)]
pub(crate) struct CallCounters([std::sync::atomic::AtomicU64; 9]);

impl CallCounters {
    /// Counts one call of `kind`.
    pub(crate) fn count(&self, kind: Collective) {
        self.0[kind as usize].fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }

    /// The counts so far.
    pub(crate) fn get(&self) -> Calls {
        let mut out = Calls::default();
        for (o, c) in out.0.iter_mut().zip(&self.0) {
            *o = c.load(std::sync::atomic::Ordering::Relaxed);
        }
        out
    }
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

    /// Element-wise sum over all ranks, in place, for any element type (the backend maps
    /// `T::DTYPE` to its own datatype).
    fn all_reduce_sum<T: Scalar>(&self, buf: &mut [T]) -> Result<(), CommError>;

    /// Element-wise maximum over all ranks, in place (used to agree on errors and figures).
    fn all_reduce_max_u64(&self, buf: &mut [u64]) -> Result<(), CommError>;

    /// Broadcast of bytes from `root`; on non-root ranks `buf` is replaced.
    fn broadcast(&self, buf: &mut Vec<u8>, root: usize) -> Result<(), CommError>;

    /// Blocks until every rank has entered.
    fn barrier(&self) -> Result<(), CommError>;

    /// Bytes moved to and from other ranks so far by this rank (over all communicators split
    /// from the same world).
    fn traffic(&self) -> Traffic;

    /// Calls per collective kind made so far by this rank, over every communicator split from
    /// its world (backends that do not count report none).
    fn calls(&self) -> Calls {
        Calls::default()
    }

    /// Time this rank has spent blocked so far, waiting for a peer's message or for the
    /// other members to enter a collective (over every communicator split from its world).
    /// What counts as waiting is the backend's: in-process, the time parked on a condition
    /// variable; under MPI, blocking receives and waits on point-to-point requests (MPI's own
    /// collectives are counted as communication). Backends that do not measure report zero.
    fn blocked(&self) -> std::time::Duration {
        std::time::Duration::ZERO
    }

    /// The sub-communicator over the grid dims marked in `keep` of the Cartesian grid `dims`
    /// laid over ranks `0..product(dims)` row-major (MPI_Cart_create, then MPI_Cart_sub): the
    /// ranks that share their coordinates on the other dims, ordered row-major by their
    /// coordinates on the kept dims. `None` on a rank outside the grid. Collective over this
    /// communicator. The default splits ([`Communicator::split`]).
    fn cart_sub(&self, dims: &[usize], keep: &[bool]) -> Result<Option<Self>, CommError>
    where
        Self: Sized,
    {
        let (color, key) = cart_color_key(dims, keep, self.rank(), self.size())?;
        let sub = self.split(color.unwrap_or(usize::MAX), key)?;
        Ok(color.map(|_| sub))
    }

    /// All-gather with varying counts: every rank contributes `mine` (`counts[rank()]`
    /// elements) and receives all contributions back to back in rank order (`counts`, the same
    /// on every rank). Counted as `mine` sent to every other rank. Default: point to point.
    fn all_gather_v<T: Scalar>(&self, mine: &[T], counts: &[usize]) -> Result<Vec<T>, CommError> {
        p2p::all_gather_v(self, mine, counts)
    }

    /// [`Communicator::all_gather_v`] into `out` (exactly the total of `counts` long), for a
    /// target that holds the pieces back to back in rank order. Default: gathered, then copied.
    fn all_gather_v_into<T: Scalar>(
        &self,
        mine: &[T],
        counts: &[usize],
        out: &mut [T],
    ) -> Result<(), CommError> {
        let all = self.all_gather_v(mine, counts)?;
        if all.len() != out.len() {
            return Err(CommError::Invalid(format!(
                "all-gather of {} elements into {}",
                all.len(),
                out.len()
            )));
        }
        out.copy_from_slice(&all);
        Ok(())
    }

    /// Whether [`Communicator::all_gather_each`] reads the peers' buffers where they lie
    /// (no gathered buffer held beside them). Default: no.
    fn gathers_in_place(&self) -> bool {
        false
    }

    /// All-gather read where it lies: every rank offers `mine` (`counts[rank()]` elements,
    /// `counts` the same on every rank) and `place(x, data)` is called on every rank with rank
    /// x's elements, its own included, in rank order; `mine` is handed back. Counted as
    /// [`Communicator::all_gather_v`]. In-process the peers' buffers are shared, so `place`
    /// makes the only copy; the default gathers into one buffer first.
    fn all_gather_each<T: Scalar, E: From<CommError>>(
        &self,
        mine: Vec<T>,
        counts: &[usize],
        mut place: impl FnMut(usize, &[T]) -> Result<(), E>,
    ) -> Result<Vec<T>, E> {
        let all = self.all_gather_v(&mine, counts)?;
        let mut off = 0;
        for (x, &c) in counts.iter().enumerate() {
            place(x, &all[off..off + c])?;
            off += c;
        }
        Ok(mine)
    }

    /// Whether [`Communicator::all_gather_shared`] builds one value that every rank shares
    /// (ranks in one address space). Default: no (each rank builds its own).
    fn gathers_shared(&self) -> bool {
        false
    }

    /// All-gather into one shared result: every rank offers `mine` (`counts[rank()]`
    /// elements, `counts` the same on every rank); `build` is called with every rank's
    /// elements in rank order and returns the result, which every rank gets; `mine` is handed
    /// back. Counted as [`Communicator::all_gather_v`]. In-process, one rank builds the
    /// result, reading its peers' buffers where they lie, and the others share it (they wait
    /// meanwhile, so `build` may use their share of the cores: `lent` is the number of ranks
    /// it builds for); the default gathers into one buffer and builds on every rank.
    fn all_gather_shared<T: Scalar, S: Send + Sync + 'static, E: From<CommError>>(
        &self,
        mine: Vec<T>,
        counts: &[usize],
        build: impl FnOnce(&[&[T]], usize) -> Result<S, E>,
    ) -> Result<(std::sync::Arc<S>, Vec<T>), E> {
        let all = self.all_gather_v(&mine, counts)?;
        let mut pieces: Vec<&[T]> = Vec::with_capacity(counts.len());
        let mut off = 0;
        for &c in counts {
            pieces.push(&all[off..off + c]);
            off += c;
        }
        let built = build(&pieces, 1)?;
        Ok((std::sync::Arc::new(built), mine))
    }

    /// Reduce-scatter (sum) with varying counts: `send` holds, back to back in rank order, this
    /// rank's contribution to every rank's segment (`counts`, the same on every rank); returns
    /// the sum over ranks of this rank's segment. Default: point to point.
    fn reduce_scatter_v<T: Scalar>(
        &self,
        send: &[T],
        counts: &[usize],
    ) -> Result<Vec<T>, CommError> {
        p2p::reduce_scatter_v(self, send, counts)
    }

    /// Broadcast of `buf` (the same length on every rank) from `root`. Counted as root to
    /// each other rank. Default: point to point.
    fn broadcast_typed<T: Scalar>(&self, buf: &mut [T], root: usize) -> Result<(), CommError> {
        p2p::broadcast(self, buf, root)
    }

    /// Sum of every rank's `buf` (the same length on every rank) on `root` (`Some` there).
    /// Counted as each other rank's buffer sent to the root. Default: point to point.
    fn reduce_sum<T: Scalar>(&self, buf: &[T], root: usize) -> Result<Option<Vec<T>>, CommError> {
        p2p::reduce_sum(self, buf, root)
    }

    /// Gather with varying counts onto `root`: every rank contributes `mine`
    /// (`counts[rank()]` elements); the root gets all back to back in rank order (`Some`).
    /// Default: point to point.
    fn gather_v<T: Scalar>(
        &self,
        mine: &[T],
        counts: &[usize],
        root: usize,
    ) -> Result<Option<Vec<T>>, CommError> {
        p2p::gather_v(self, mine, counts, root)
    }

    /// One send and one receive at once: `send` (destination, elements) and `recv` (source,
    /// element count); returns the received elements. The pairs match as in
    /// [`Communicator::exchange`]. Default: [`Communicator::exchange`].
    fn send_recv<T: Scalar>(
        &self,
        send: Option<(usize, Vec<T>)>,
        recv: Option<(usize, usize)>,
    ) -> Result<Option<Vec<T>>, CommError> {
        let from: Vec<usize> = recv.iter().map(|&(s, _)| s).collect();
        let mut got = self.exchange(send.into_iter().collect(), &from)?;
        Ok(got.pop())
    }

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
pub(crate) fn check_lengths<T>(recv: &[Vec<T>], from: &[(usize, usize)]) -> Result<(), CommError> {
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
pub(crate) fn check_send_counts(
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

/// Checks the arguments of [`Communicator::reduce_scatter_v`] (one count per rank, counts
/// adding up to the buffer's length, without overflow), shared by every backend; returns the
/// total.
pub(crate) fn check_recv_counts(
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

/// The split of [`Communicator::cart_sub`]: `(color, key)` of `rank` in the grid `dims` with
/// the dims `keep` retained; color `None` outside the grid.
pub fn cart_color_key(
    dims: &[usize],
    keep: &[bool],
    rank: usize,
    size: usize,
) -> Result<(Option<usize>, usize), CommError> {
    let cells = dims
        .iter()
        .try_fold(1usize, |a, &d| a.checked_mul(d))
        .filter(|&n| n <= size && dims.len() == keep.len())
        .ok_or_else(|| {
            CommError::Invalid(format!("grid {dims:?} (keep {keep:?}) on {size} ranks"))
        })?;
    if rank >= cells {
        return Ok((None, rank));
    }
    let (mut color, mut key, mut r) = (0usize, 0usize, rank);
    let mut coords = vec![0usize; dims.len()];
    for (k, &d) in dims.iter().enumerate().rev() {
        coords[k] = r % d;
        r /= d;
    }
    for (k, &d) in dims.iter().enumerate() {
        if keep[k] {
            key = key * d + coords[k];
        } else {
            color = color * d + coords[k];
        }
    }
    Ok((Some(color), key))
}

/// The typed collectives over [`Communicator::exchange`]: the defaults of the trait, and what a
/// backend falls back to where its own call cannot take the sizes.
pub mod p2p {
    use super::{check_recv_counts, CommError, Communicator};
    use crate::Scalar;

    fn check_counts(counts: &[usize], n: usize, mine: usize, me: usize) -> Result<(), CommError> {
        if counts.len() != n || counts[me] != mine {
            return Err(CommError::Invalid(format!(
                "{} counts for {n} ranks, this rank's {} for {mine} elements",
                counts.len(),
                counts.get(me).copied().unwrap_or(0)
            )));
        }
        Ok(())
    }

    /// The parts of an all-gather or gather in rank order: this rank's own `mine` in its place,
    /// the messages `got` (from the other ranks with a nonzero count, ascending) in theirs,
    /// each checked against its count.
    fn in_rank_order<T: Scalar>(
        me: usize,
        mine: &[T],
        counts: &[usize],
        got: Vec<Vec<T>>,
        what: &str,
    ) -> Result<Vec<T>, CommError> {
        let mut out = Vec::with_capacity(counts.iter().sum());
        let mut it = got.into_iter();
        for (r, &c) in counts.iter().enumerate() {
            if r == me {
                out.extend_from_slice(mine);
            } else if c > 0 {
                let v = it.next().unwrap_or_default();
                if v.len() != c {
                    return Err(CommError::Invalid(format!(
                        "{what}: rank {r} sent {}",
                        v.len()
                    )));
                }
                out.extend(v);
            }
        }
        Ok(out)
    }

    /// [`Communicator::all_gather_v`] as point-to-point messages.
    pub fn all_gather_v<C: Communicator + ?Sized, T: Scalar>(
        comm: &C,
        mine: &[T],
        counts: &[usize],
    ) -> Result<Vec<T>, CommError> {
        let (me, n) = (comm.rank(), comm.size());
        check_counts(counts, n, mine.len(), me)?;
        let sends = if mine.is_empty() {
            Vec::new()
        } else {
            (0..n)
                .filter(|&r| r != me)
                .map(|r| (r, mine.to_vec()))
                .collect()
        };
        let from: Vec<usize> = (0..n).filter(|&r| r != me && counts[r] > 0).collect();
        let got = comm.exchange(sends, &from)?;
        in_rank_order(me, mine, counts, got, "all-gather")
    }

    /// [`Communicator::reduce_scatter_v`] as point-to-point messages (summed in rank order).
    pub fn reduce_scatter_v<C: Communicator + ?Sized, T: Scalar>(
        comm: &C,
        send: &[T],
        counts: &[usize],
    ) -> Result<Vec<T>, CommError> {
        let (me, n) = (comm.rank(), comm.size());
        check_recv_counts(send.len(), counts, n)?;
        let mut off = 0;
        let mut sends = Vec::new();
        let mut own = &send[..0];
        for (r, &c) in counts.iter().enumerate() {
            if r == me {
                own = &send[off..off + c];
            } else if c > 0 {
                sends.push((r, send[off..off + c].to_vec()));
            }
            off += c;
        }
        let from: Vec<usize> = if counts[me] > 0 {
            (0..n).filter(|&r| r != me).collect()
        } else {
            Vec::new()
        };
        let got = comm.exchange(sends, &from)?;
        let mut out = vec![T::default(); counts[me]];
        let mut it = got.iter();
        for r in 0..n {
            let part = if r == me {
                own
            } else if counts[me] > 0 {
                it.next().map(Vec::as_slice).unwrap_or(&[])
            } else {
                continue;
            };
            if part.len() != out.len() {
                return Err(CommError::Invalid("reduce-scatter lengths differ".into()));
            }
            for (x, &y) in out.iter_mut().zip(part) {
                *x += y;
            }
        }
        Ok(out)
    }

    /// [`Communicator::broadcast_typed`] as point-to-point messages.
    pub fn broadcast<C: Communicator + ?Sized, T: Scalar>(
        comm: &C,
        buf: &mut [T],
        root: usize,
    ) -> Result<(), CommError> {
        let (me, n) = (comm.rank(), comm.size());
        if root >= n {
            return Err(CommError::Invalid(format!(
                "broadcast root {root} of {n} ranks"
            )));
        }
        if buf.is_empty() {
            return Ok(());
        }
        if me == root {
            let sends = (0..n)
                .filter(|&r| r != me)
                .map(|r| (r, buf.to_vec()))
                .collect();
            comm.exchange(sends, &[])?;
        } else {
            let got = comm.exchange(Vec::new(), &[root])?;
            let v = got.into_iter().next().unwrap_or_default();
            if v.len() != buf.len() {
                return Err(CommError::Invalid("broadcast lengths differ".into()));
            }
            buf.copy_from_slice(&v);
        }
        Ok(())
    }

    /// [`Communicator::reduce_sum`] as point-to-point messages (summed in rank order).
    pub fn reduce_sum<C: Communicator + ?Sized, T: Scalar>(
        comm: &C,
        buf: &[T],
        root: usize,
    ) -> Result<Option<Vec<T>>, CommError> {
        let (me, n) = (comm.rank(), comm.size());
        if root >= n {
            return Err(CommError::Invalid(format!(
                "reduce root {root} of {n} ranks"
            )));
        }
        let counts = vec![buf.len(); n];
        let all = gather_v(comm, buf, &counts, root)?;
        Ok(all
            .map(|all| {
                let mut out = vec![T::default(); buf.len()];
                for part in all.chunks(buf.len().max(1)) {
                    for (x, &y) in out.iter_mut().zip(part) {
                        *x += y;
                    }
                }
                out
            })
            .filter(|_| me == root))
    }

    /// [`Communicator::gather_v`] as point-to-point messages.
    pub fn gather_v<C: Communicator + ?Sized, T: Scalar>(
        comm: &C,
        mine: &[T],
        counts: &[usize],
        root: usize,
    ) -> Result<Option<Vec<T>>, CommError> {
        let (me, n) = (comm.rank(), comm.size());
        check_counts(counts, n, mine.len(), me)?;
        if root >= n {
            return Err(CommError::Invalid(format!(
                "gather root {root} of {n} ranks"
            )));
        }
        if me != root {
            let sends = if mine.is_empty() {
                Vec::new()
            } else {
                vec![(root, mine.to_vec())]
            };
            comm.exchange(sends, &[])?;
            return Ok(None);
        }
        let from: Vec<usize> = (0..n).filter(|&r| r != me && counts[r] > 0).collect();
        let got = comm.exchange::<T>(Vec::new(), &from)?;
        in_rank_order(me, mine, counts, got, "gather").map(Some)
    }
}
