//! The MPI backend: [`MpiComm`] implements [`Communicator`] over an rsmpi communicator.
//!
//! MPI counts and displacements are 32-bit (`int`). Every collective here checks its sizes
//! against [`MpiComm::max_count`] (by default `i32::MAX`) and splits a larger exchange into
//! several calls, so nothing is ever truncated.
//!
//! Traffic is counted per rank with the same message model as the in-process backend
//! ([`crate::local`]): each collective is counted as the direct messages it logically needs
//! (all-reduce and split as an all-gather, reduce-scatter as one segment to each owner,
//! broadcast as root-to-each), messages to self are not counted, and the size exchanges MPI
//! needs before a variable all-to-all are protocol, not payload. So a run on MPI reports the
//! same bytes as the same run in-process, and both can be held against the plan's volume.
//!
//! Element types meet MPI in one way: a typed collective takes `T::DTYPE` through
//! [`with_dtype!`](crate::with_dtype) to the primitive of that type, whose rsmpi
//! `Equivalence` is its MPI datatype (`MPI_FLOAT`, `MPI_DOUBLE`); byte-level collectives
//! move `MPI_BYTE`s.
//!
//! [`Communicator::exchange`] is point-to-point (non-blocking sends, then the receives): ranks
//! that exchange nothing do not synchronize, and each message is a length header (protocol,
//! not counted) and the typed buffer itself, received straight into a typed buffer.

use std::ffi::{c_int, c_void};
use std::fmt::Display;
use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use mpi::collective::SystemOperation;
use mpi::datatype::{Partition, PartitionMut};
use mpi::raw::FromRaw;
use mpi::topology::{CartesianCommunicator, Color, SimpleCommunicator};
use mpi::traits::{
    AsRaw, Communicator as _, CommunicatorCollectives, Destination, Equivalence, Root, Source,
};

use crate::comm::{p2p, CallCounters, Calls, Collective, CommError, Communicator, Traffic};
use crate::Scalar;

/// Tag of the point-to-point messages of [`Communicator::exchange`].
const EXCHANGE_TAG: i32 = 0x5e1;
/// Tag of the messages of [`Communicator::exchange_while`] (never matched by an exchange's).
const OVERLAP_TAG: i32 = 0x5e2;
/// How long the rank's thread sleeps between two progress polls while the overlapped work runs.
const POLL: std::time::Duration = std::time::Duration::from_micros(100);

/// Tag of the messages of [`Communicator::send_recv`].
const SEND_RECV_TAG: i32 = 0x5e2;

/// Byte counters shared by a world communicator and everything split from it.
#[derive(Debug, Default)]
struct Counters {
    sent: AtomicU64,
    received: AtomicU64,
    calls: CallCounters,
    /// Nanoseconds spent in blocking receives and waits on point-to-point requests.
    blocked: AtomicU64,
}

/// A [`Communicator`] over an MPI communicator (rsmpi).
///
/// Build it from the world (`MpiComm::world(&universe)`) or from any rsmpi communicator the
/// caller owns ([`MpiComm::new`], [`MpiComm::duplicate_of`]). Communicators obtained by
/// [`Communicator::split`] share the byte counters of their parent.
pub struct MpiComm {
    comm: SimpleCommunicator,
    counters: Arc<Counters>,
    max_count: usize,
    /// Cartesian communicators made from this one (MPI_Cart_create), by grid: made once, on
    /// the first [`Communicator::cart_sub`] over that grid; `None` on ranks outside it.
    carts: std::cell::RefCell<Vec<(Vec<usize>, Option<CartesianCommunicator>)>>,
}

impl std::fmt::Debug for MpiComm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MpiComm")
            .field("rank", &self.comm.rank())
            .field("size", &self.comm.size())
            .field("max_count", &self.max_count)
            .finish()
    }
}

/// The largest count one MPI call takes (`int`).
const MPI_MAX_COUNT: usize = i32::MAX as usize;

fn to_count(n: usize, what: &str) -> Result<c_int, CommError> {
    c_int::try_from(n).map_err(|_| CommError::Invalid(format!("{what} {n} does not fit MPI's int")))
}

impl MpiComm {
    /// Wraps an rsmpi communicator (takes ownership; it is freed when the `MpiComm` drops).
    pub fn new(comm: SimpleCommunicator) -> Self {
        MpiComm {
            comm,
            counters: Arc::new(Counters::default()),
            max_count: MPI_MAX_COUNT,
            carts: Default::default(),
        }
    }

    /// The world communicator of `universe` (from `mpi::initialize()`).
    pub fn world(universe: &mpi::environment::Universe) -> Self {
        MpiComm::new(universe.world())
    }

    /// A private duplicate (MPI_Comm_dup) of the caller's communicator, so deinsum's messages
    /// never mix with the caller's.
    pub fn duplicate_of<C: mpi::traits::Communicator>(comm: &C) -> Self {
        MpiComm::new(comm.duplicate())
    }

    /// Caps the elements one MPI call moves (default `i32::MAX`). Larger exchanges are split
    /// into several calls; a small cap exercises that path in tests. Values below 1 are 1.
    pub fn with_max_count(mut self, max_count: usize) -> Self {
        self.max_count = max_count.clamp(1, MPI_MAX_COUNT);
        self
    }

    /// The cap on elements per MPI call.
    pub fn max_count(&self) -> usize {
        self.max_count
    }

    /// The underlying rsmpi communicator.
    pub fn raw(&self) -> &SimpleCommunicator {
        &self.comm
    }

    /// Prints `deinsum: rank R: message` to stderr and aborts the whole MPI job (MPI_Abort with
    /// `code`), so that one rank's error never leaves the others waiting in a collective.
    pub fn abort(&self, message: &str, code: i32) -> ! {
        let mut err = std::io::stderr().lock();
        let me = format!("rank {}: ", self.comm.rank());
        // Executor errors often name the rank already; say it once.
        let message = message.strip_prefix(&me).unwrap_or(message);
        let _ = writeln!(err, "deinsum: {me}{message}");
        let _ = err.flush();
        drop(err);
        self.comm.abort(code)
    }

    /// The value of `r`, or [`MpiComm::abort`] with its error (exit code 1).
    pub fn or_abort<T, E: Display>(&self, r: Result<T, E>) -> T {
        match r {
            Ok(v) => v,
            Err(e) => self.abort(&e.to_string(), 1),
        }
    }

    fn count_sent(&self, bytes: u64) {
        self.counters.sent.fetch_add(bytes, Ordering::Relaxed);
    }

    fn count_received(&self, bytes: u64) {
        self.counters.received.fetch_add(bytes, Ordering::Relaxed);
    }

    fn count(&self, kind: Collective) {
        self.counters.calls.count(kind);
    }

    /// Runs `f`, a blocking receive or wait, and counts its time as blocked.
    fn blocking<R>(&self, f: impl FnOnce() -> R) -> R {
        let t = std::time::Instant::now();
        let r = f();
        let ns = u64::try_from(t.elapsed().as_nanos()).unwrap_or(u64::MAX);
        self.counters.blocked.fetch_add(ns, Ordering::Relaxed);
        r
    }

    /// A communicator made from this one, sharing its counters and cap.
    fn child(&self, comm: SimpleCommunicator) -> MpiComm {
        MpiComm {
            comm,
            counters: self.counters.clone(),
            max_count: self.max_count,
            carts: Default::default(),
        }
    }

    /// Whether `elems` elements of `T` fit one MPI call as bytes.
    fn fits_bytes<T: Scalar>(&self, elems: usize) -> bool {
        elems
            .checked_mul(T::BYTES)
            .is_some_and(|b| b <= self.max_count)
    }

    fn peers(&self) -> u64 {
        self.size() as u64 - 1
    }

    /// The elements an all-gather of `mine` with `counts` (one per rank, this rank's matching
    /// `mine`) delivers to every rank.
    fn gather_total<T>(&self, mine: &[T], counts: &[usize]) -> Result<usize, CommError> {
        let (me, p) = (self.rank(), self.size());
        if counts.len() != p || counts[me] != mine.len() {
            return Err(CommError::Invalid(format!(
                "all-gather of {} counts on {p} ranks",
                counts.len()
            )));
        }
        Ok(counts.iter().sum())
    }

    /// `MPI_Allgatherv` of `mine` (`counts`, checked by the caller, fitting one call) into
    /// `out`, back to back in rank order; counts the traffic.
    fn gather_into<T: Scalar>(
        &self,
        mine: &[T],
        counts: &[usize],
        out: &mut [T],
    ) -> Result<(), CommError> {
        self.count(Collective::AllGather);
        let bc: Vec<c_int> = counts
            .iter()
            .map(|&c| to_count(c * T::BYTES, "all-gather count"))
            .collect::<Result<_, _>>()?;
        let displs = exclusive_prefix(&bc)?;
        let one = [0u8; 1];
        let send = real(bytemuck::cast_slice(mine), &one);
        {
            let mut rp =
                PartitionMut::new(bytemuck::cast_slice_mut::<T, u8>(out), &bc[..], &displs[..]);
            self.comm.all_gather_varcount_into(send, &mut rp);
        }
        let mine_b = std::mem::size_of_val(mine) as u64;
        self.count_sent(mine_b * self.peers());
        self.count_received(std::mem::size_of_val(out) as u64 - mine_b);
        Ok(())
    }

    /// Max over ranks of each entry (no traffic counted: internal agreement).
    fn agree_max(&self, vals: &[u64]) -> Vec<u64> {
        let mut out = vec![0u64; vals.len()];
        self.comm
            .all_reduce_into(vals, &mut out[..], SystemOperation::max());
        out
    }

    /// Checks that every rank passed the same `value` (a length, a hash of counts).
    fn check_same(&self, value: u64, what: &str) -> Result<(), CommError> {
        let got = self.agree_max(&[value, !value]);
        if got[0] != value || got[1] != !value {
            return Err(CommError::Invalid(format!(
                "{what} differs between ranks (rank {} has {value})",
                self.rank()
            )));
        }
        Ok(())
    }

    /// In-place sum over all ranks of an `Equivalence` slice, `max_count` elements per call.
    fn all_reduce_in_place<T: Equivalence + Copy>(
        &self,
        buf: &mut [T],
        op: SystemOperation,
    ) -> Result<(), CommError> {
        self.check_same(buf.len() as u64, "all-reduce length")?;
        let mut tmp: Vec<T> = Vec::new();
        for chunk in buf.chunks_mut(self.max_count) {
            tmp.clear();
            tmp.extend_from_slice(chunk);
            self.comm.all_reduce_into(&tmp[..], chunk, op);
        }
        Ok(())
    }
}

impl Communicator for MpiComm {
    fn rank(&self) -> usize {
        self.comm.rank() as usize
    }

    fn size(&self) -> usize {
        self.comm.size() as usize
    }

    fn split(&self, color: usize, key: usize) -> Result<Self, CommError> {
        let c = to_count(color, "split color")?;
        let k = to_count(key, "split key")?;
        let sub = self
            .comm
            .split_by_color_with_key(Color::with_value(c), k)
            .ok_or_else(|| CommError::Backend("MPI_Comm_split returned no communicator".into()))?;
        // Modelled as an all-gather of (color, key), two u64 per peer, as the in-process backend.
        self.count_sent(16 * self.peers());
        self.count_received(16 * self.peers());
        Ok(self.child(sub))
    }

    fn all_to_all_v(
        &self,
        send: &[u8],
        send_counts: &[usize],
    ) -> Result<(Vec<u8>, Vec<usize>), CommError> {
        let p = self.size();
        let me = self.rank();
        let total = crate::comm::check_send_counts(send.len(), send_counts, p)?;
        self.count(Collective::AllToAll);
        // Every rank learns what it receives from each peer.
        let sc: Vec<u64> = send_counts.iter().map(|&c| c as u64).collect();
        let mut rc = vec![0u64; p];
        self.comm.all_to_all_into(&sc[..], &mut rc[..]);
        let recv_counts: Vec<usize> = rc
            .iter()
            .map(|&c| usize::try_from(c))
            .collect::<Result<_, _>>()
            .map_err(|_| CommError::Invalid("a receive count does not fit usize".into()))?;
        let recv_total = recv_counts
            .iter()
            .try_fold(0usize, |a, &c| a.checked_add(c))
            .ok_or_else(|| CommError::Invalid("receive counts overflow".into()))?;

        // Rounds: one call when every rank's totals fit; else each pair moves at most
        // `chunk` bytes per call, so a call's totals and displacements stay <= max_count.
        let chunk = (self.max_count / p).max(1);
        let fits = total <= self.max_count && recv_total <= self.max_count;
        let local_rounds = if fits {
            1
        } else {
            send_counts
                .iter()
                .chain(&recv_counts)
                .map(|&c| c.div_ceil(chunk))
                .max()
                .unwrap_or(1)
        };
        let rounds = self.agree_max(&[local_rounds as u64])[0] as usize;

        // An empty Vec<u8> points at address 1, which is Open MPI's MPI_IN_PLACE: every buffer
        // handed to MPI gets at least one real byte behind it.
        let mut recv = Vec::with_capacity(recv_total.max(1));
        recv.resize(recv_total, 0u8);
        let one = [0u8; 1];
        let send = if send.is_empty() { &one[..0] } else { send };
        if rounds <= 1 {
            let counts = send_counts
                .iter()
                .map(|&c| to_count(c, "send count"))
                .collect::<Result<Vec<_>, _>>()?;
            let displs = exclusive_prefix(&counts)?;
            let rcounts = recv_counts
                .iter()
                .map(|&c| to_count(c, "receive count"))
                .collect::<Result<Vec<_>, _>>()?;
            let rdispls = exclusive_prefix(&rcounts)?;
            let sp = Partition::new(send, &counts[..], &displs[..]);
            let mut rp = PartitionMut::new(&mut recv[..], &rcounts[..], &rdispls[..]);
            self.comm.all_to_all_varcount_into(&sp, &mut rp);
        } else {
            let soff = exclusive_prefix_usize(send_counts);
            let roff = exclusive_prefix_usize(&recv_counts);
            let piece = |n: usize, k: usize| {
                let s = (k * chunk).min(n);
                (s, (s + chunk).min(n))
            };
            let mut sbuf: Vec<u8> = Vec::with_capacity(1);
            let mut rbuf: Vec<u8> = Vec::with_capacity(1);
            for k in 0..rounds {
                sbuf.clear();
                let mut counts = Vec::with_capacity(p);
                for r in 0..p {
                    let (s, e) = piece(send_counts[r], k);
                    sbuf.extend_from_slice(&send[soff[r] + s..soff[r] + e]);
                    counts.push(to_count(e - s, "send count")?);
                }
                let displs = exclusive_prefix(&counts)?;
                let mut rcounts = Vec::with_capacity(p);
                for &n in &recv_counts {
                    let (s, e) = piece(n, k);
                    rcounts.push(to_count(e - s, "receive count")?);
                }
                let rdispls = exclusive_prefix(&rcounts)?;
                let rlen: usize = rcounts.iter().map(|&c| c as usize).sum();
                rbuf.clear();
                rbuf.resize(rlen, 0);
                {
                    let sp = Partition::new(&sbuf[..], &counts[..], &displs[..]);
                    let mut rp = PartitionMut::new(&mut rbuf[..], &rcounts[..], &rdispls[..]);
                    self.comm.all_to_all_varcount_into(&sp, &mut rp);
                }
                for r in 0..p {
                    let (s, e) = piece(recv_counts[r], k);
                    let d = rdispls[r] as usize;
                    recv[roff[r] + s..roff[r] + e].copy_from_slice(&rbuf[d..d + (e - s)]);
                }
            }
        }
        let others = |c: &[usize]| -> u64 {
            c.iter()
                .enumerate()
                .filter(|&(r, _)| r != me)
                .map(|(_, &n)| n as u64)
                .sum()
        };
        self.count_sent(others(send_counts));
        self.count_received(others(&recv_counts));
        Ok((recv, recv_counts))
    }

    fn all_reduce_sum<T: Scalar>(&self, buf: &mut [T]) -> Result<(), CommError> {
        self.count(Collective::AllReduce);
        crate::with_dtype!(T::DTYPE, E => self.all_reduce_in_place::<E>(
            bytemuck::cast_slice_mut(buf),
            SystemOperation::sum(),
        ))?;
        let b = std::mem::size_of_val(buf) as u64 * self.peers();
        self.count_sent(b);
        self.count_received(b);
        Ok(())
    }

    fn all_reduce_max_u64(&self, buf: &mut [u64]) -> Result<(), CommError> {
        self.all_reduce_in_place(buf, SystemOperation::max())?;
        let b = 8 * buf.len() as u64 * self.peers();
        self.count_sent(b);
        self.count_received(b);
        Ok(())
    }

    fn calls(&self) -> Calls {
        self.counters.calls.get()
    }

    fn blocked(&self) -> std::time::Duration {
        std::time::Duration::from_nanos(self.counters.blocked.load(Ordering::Relaxed))
    }

    fn cart_sub(&self, dims: &[usize], keep: &[bool]) -> Result<Option<Self>, CommError> {
        let (color, _) = crate::comm::cart_color_key(dims, keep, self.rank(), self.size())?;
        // Modelled as the in-process backend's split: an all-gather of (color, key).
        self.count_sent(16 * self.peers());
        self.count_received(16 * self.peers());
        let mut carts = self.carts.borrow_mut();
        if !carts.iter().any(|(d, _)| d == dims) {
            // A grid without dims is one cell; MPI wants at least one dim.
            let sizes: Vec<c_int> = if dims.is_empty() {
                vec![1]
            } else {
                dims.iter()
                    .map(|&d| to_count(d, "grid dim"))
                    .collect::<Result<_, _>>()?
            };
            let periods = vec![false; sizes.len()];
            // No reordering: a grid cell is the world rank the plan gives it (row-major).
            let cart = self
                .comm
                .create_cartesian_communicator(&sizes, &periods, false);
            carts.push((dims.to_vec(), cart));
        }
        let cart = carts
            .iter()
            .find(|(d, _)| d == dims)
            .and_then(|(_, c)| c.as_ref());
        let (Some(cart), Some(_)) = (cart, color) else {
            return Ok(None);
        };
        let retain: Vec<bool> = if dims.is_empty() {
            vec![false]
        } else {
            keep.to_vec()
        };
        let sub = cart.subgroup(&retain);
        let raw = sub.as_raw();
        std::mem::forget(sub);
        // SAFETY: `raw` is the live intra-communicator MPI_Cart_sub just made (not a world,
        // self or inter-communicator handle); its rsmpi owner was forgotten above, so the
        // SimpleCommunicator is its only owner and frees it once.
        let simple = unsafe { SimpleCommunicator::from_raw(raw) };
        Ok(Some(self.child(simple)))
    }

    fn all_gather_v<T: Scalar>(&self, mine: &[T], counts: &[usize]) -> Result<Vec<T>, CommError> {
        let total = self.gather_total(mine, counts)?;
        if !self.fits_bytes::<T>(total) {
            return p2p::all_gather_v(self, mine, counts);
        }
        let mut out = typed_buffer::<T>(total);
        self.gather_into(mine, counts, &mut out)?;
        Ok(out)
    }

    fn all_gather_v_into<T: Scalar>(
        &self,
        mine: &[T],
        counts: &[usize],
        out: &mut [T],
    ) -> Result<(), CommError> {
        let total = self.gather_total(mine, counts)?;
        if out.len() != total {
            return Err(CommError::Invalid(format!(
                "all-gather of {total} elements into {}",
                out.len()
            )));
        }
        // Nothing to gather (every member's piece of an empty window): no call at all. The
        // counts are the same on every member, so all of them skip it; the point-to-point
        // fallback would make an exchange that a structured move must not show.
        if total == 0 {
            return Ok(());
        }
        if !self.fits_bytes::<T>(total) {
            out.copy_from_slice(&p2p::all_gather_v(self, mine, counts)?);
            return Ok(());
        }
        self.gather_into(mine, counts, out)
    }

    fn reduce_scatter_v<T: Scalar>(
        &self,
        send: &[T],
        counts: &[usize],
    ) -> Result<Vec<T>, CommError> {
        crate::with_dtype!(T::DTYPE, E => {
            let r = self.reduce_scatter_in::<E>(bytemuck::cast_slice(send), counts)?;
            let mut out = vec![T::default(); r.len()];
            out.copy_from_slice(bytemuck::cast_slice(&r));
            Ok(out)
        })
    }

    fn broadcast_typed<T: Scalar>(&self, buf: &mut [T], root: usize) -> Result<(), CommError> {
        let p = self.size();
        if root >= p {
            return Err(CommError::Invalid(format!(
                "broadcast root {root} of {p} ranks"
            )));
        }
        self.count(Collective::Broadcast);
        let r = self.comm.process_at_rank(root as i32);
        let bytes = bytemuck::cast_slice_mut::<T, u8>(buf);
        for chunk in bytes.chunks_mut(self.max_count) {
            r.broadcast_into(chunk);
        }
        let len = bytes.len() as u64;
        if self.rank() == root {
            self.count_sent(len * self.peers());
        } else {
            self.count_received(len);
        }
        Ok(())
    }

    fn reduce_sum<T: Scalar>(&self, buf: &[T], root: usize) -> Result<Option<Vec<T>>, CommError> {
        let p = self.size();
        if root >= p {
            return Err(CommError::Invalid(format!(
                "reduce root {root} of {p} ranks"
            )));
        }
        self.count(Collective::Reduce);
        let mut out = typed_buffer::<T>(buf.len());
        crate::with_dtype!(T::DTYPE, E => self.reduce_in::<E>(
            bytemuck::cast_slice(buf),
            bytemuck::cast_slice_mut(&mut out),
            root,
        ));
        let len = std::mem::size_of_val(buf) as u64;
        if self.rank() == root {
            self.count_received(len * self.peers());
            Ok(Some(out))
        } else {
            self.count_sent(len);
            Ok(None)
        }
    }

    fn gather_v<T: Scalar>(
        &self,
        mine: &[T],
        counts: &[usize],
        root: usize,
    ) -> Result<Option<Vec<T>>, CommError> {
        let (me, p) = (self.rank(), self.size());
        if counts.len() != p || counts[me] != mine.len() || root >= p {
            return Err(CommError::Invalid(format!(
                "gather of {} counts to root {root} on {p} ranks",
                counts.len()
            )));
        }
        let total: usize = counts.iter().sum();
        if !self.fits_bytes::<T>(total) {
            return p2p::gather_v(self, mine, counts, root);
        }
        self.count(Collective::Gather);
        let one = [0u8; 1];
        let send = real(bytemuck::cast_slice(mine), &one);
        let r = self.comm.process_at_rank(root as i32);
        let mine_b = std::mem::size_of_val(mine) as u64;
        if me != root {
            r.gather_varcount_into(send);
            self.count_sent(mine_b);
            return Ok(None);
        }
        let bc: Vec<c_int> = counts
            .iter()
            .map(|&c| to_count(c * T::BYTES, "gather count"))
            .collect::<Result<_, _>>()?;
        let displs = exclusive_prefix(&bc)?;
        let mut out = typed_buffer::<T>(total);
        {
            let mut rp = PartitionMut::new(
                bytemuck::cast_slice_mut::<T, u8>(&mut out),
                &bc[..],
                &displs[..],
            );
            r.gather_varcount_into_root(send, &mut rp);
        }
        self.count_received((total * T::BYTES) as u64 - mine_b);
        Ok(Some(out))
    }

    fn send_recv<T: Scalar>(
        &self,
        send: Option<(usize, Vec<T>)>,
        recv: Option<(usize, usize)>,
    ) -> Result<Option<Vec<T>>, CommError> {
        let p = self.size();
        if send.as_ref().is_some_and(|(d, _)| *d >= p) || recv.is_some_and(|(s, _)| s >= p) {
            return Err(CommError::Invalid(format!(
                "send/recv peer out of {p} ranks"
            )));
        }
        self.count(Collective::SendRecv);
        let chunk = self.max_count;
        let mut got = recv.map(|(_, n)| vec![T::default(); n]);
        mpi::request::scope(|scope| {
            let mut reqs = Vec::new();
            if let Some((d, v)) = &send {
                let to = self.comm.process_at_rank(*d as i32);
                for c in bytemuck::cast_slice::<T, u8>(v).chunks(chunk) {
                    reqs.push(to.immediate_send_with_tag(scope, c, SEND_RECV_TAG));
                }
            }
            if let (Some((s, _)), Some(v)) = (recv, got.as_mut()) {
                let src = self.comm.process_at_rank(s as i32);
                for c in bytemuck::cast_slice_mut::<T, u8>(v).chunks_mut(chunk) {
                    self.blocking(|| src.receive_into_with_tag(c, SEND_RECV_TAG));
                }
            }
            self.blocking(|| {
                reqs.into_iter().for_each(|r| {
                    r.wait();
                })
            });
        });
        let me = self.rank();
        if let Some((d, v)) = &send {
            if *d != me {
                self.count_sent(std::mem::size_of_val(&v[..]) as u64);
            }
        }
        if let (Some((s, _)), Some(v)) = (recv, &got) {
            if s != me {
                self.count_received(std::mem::size_of_val(&v[..]) as u64);
            }
        }
        Ok(got)
    }
    fn broadcast(&self, buf: &mut Vec<u8>, root: usize) -> Result<(), CommError> {
        let p = self.size();
        if root >= p {
            return Err(CommError::Invalid(format!(
                "broadcast root {root} of {p} ranks"
            )));
        }
        self.count(Collective::Broadcast);
        let r = self.comm.process_at_rank(root as i32);
        let mut len = buf.len() as u64;
        r.broadcast_into(&mut len);
        let n = usize::try_from(len)
            .map_err(|_| CommError::Invalid(format!("broadcast of {len} bytes")))?;
        if self.rank() != root {
            buf.clear();
            buf.resize(n, 0);
        }
        for chunk in buf.chunks_mut(self.max_count) {
            r.broadcast_into(chunk);
        }
        if self.rank() == root {
            self.count_sent(len * self.peers());
        } else {
            self.count_received(len);
        }
        Ok(())
    }

    fn barrier(&self) -> Result<(), CommError> {
        self.comm.barrier();
        Ok(())
    }

    fn exchange<T: Scalar>(
        &self,
        sends: Vec<(usize, Vec<T>)>,
        from: &[usize],
    ) -> Result<Vec<Vec<T>>, CommError> {
        let p = self.size();
        let me = self.rank();
        let mut seen = vec![false; p];
        for (d, _) in &sends {
            let s = seen
                .get_mut(*d)
                .ok_or_else(|| CommError::Invalid(format!("message to rank {d} of {p}")))?;
            if std::mem::replace(s, true) {
                return Err(CommError::Invalid(format!("two messages to rank {d}")));
            }
        }
        if let Some(s) = from.iter().find(|&&s| s >= p) {
            return Err(CommError::Invalid(format!("message from rank {s} of {p}")));
        }
        self.count(Collective::Exchange);
        let headers: Vec<[u8; 8]> = sends
            .iter()
            .map(|(_, v)| (std::mem::size_of_val(&v[..]) as u64).to_le_bytes())
            .collect();
        let chunk = self.max_count;
        let out = mpi::request::scope(|scope| {
            let mut reqs = Vec::new();
            for ((d, v), h) in sends.iter().zip(&headers) {
                let to = self.comm.process_at_rank(*d as i32);
                reqs.push(to.immediate_send_with_tag(scope, &h[..], EXCHANGE_TAG));
                let bytes: &[u8] = bytemuck::cast_slice(v);
                for c in bytes.chunks(chunk) {
                    reqs.push(to.immediate_send_with_tag(scope, c, EXCHANGE_TAG));
                }
            }
            let mut out = Vec::with_capacity(from.len());
            let mut bad = None;
            for &s in from {
                let src = self.comm.process_at_rank(s as i32);
                let mut h = [0u8; 8];
                self.blocking(|| src.receive_into_with_tag(&mut h[..], EXCHANGE_TAG));
                let n = u64::from_le_bytes(h);
                let n = usize::try_from(n).unwrap_or(usize::MAX);
                if n % T::BYTES != 0 || n == usize::MAX {
                    // The sender's chunks stay unreceived; the caller fails the run.
                    bad = Some(CommError::Invalid(format!(
                        "rank {s} sent {n} bytes, not whole elements"
                    )));
                    break;
                }
                let mut v = vec![T::default(); n / T::BYTES];
                for c in bytemuck::cast_slice_mut::<T, u8>(&mut v).chunks_mut(chunk) {
                    self.blocking(|| src.receive_into_with_tag(c, EXCHANGE_TAG));
                }
                out.push(v);
            }
            self.blocking(|| {
                reqs.into_iter().for_each(|r| {
                    r.wait();
                })
            });
            match bad {
                Some(e) => Err(e),
                None => Ok(out),
            }
        })?;
        let sent: usize = sends
            .iter()
            .filter(|(d, _)| *d != me)
            .map(|(_, v)| std::mem::size_of_val(&v[..]))
            .sum();
        let received: usize = from
            .iter()
            .zip(&out)
            .filter(|(s, _)| **s != me)
            .map(|(_, v)| std::mem::size_of_val(&v[..]))
            .sum();
        self.count_sent(sent as u64);
        self.count_received(received as u64);
        Ok(out)
    }

    /// Non-blocking point-to-point (`MPI_Irecv` into buffers of the announced lengths, then
    /// `MPI_Isend`), with `work` on a thread of its own while this thread tests the requests:
    /// MPI moves data only inside its calls, so without the polling a large message would wait
    /// for the final `MPI_Wait`.
    fn exchange_while<T: Scalar, R: Send>(
        &self,
        sends: Vec<(usize, Vec<T>)>,
        from: &[(usize, usize)],
        work: impl FnOnce() -> R + Send,
    ) -> Result<(Vec<Vec<T>>, R), CommError> {
        let p = self.size();
        let me = self.rank();
        let mut seen = vec![false; p];
        for (d, _) in &sends {
            let s = seen
                .get_mut(*d)
                .ok_or_else(|| CommError::Invalid(format!("message to rank {d} of {p}")))?;
            if std::mem::replace(s, true) {
                return Err(CommError::Invalid(format!("two messages to rank {d}")));
            }
        }
        if let Some(&(s, _)) = from.iter().find(|&&(s, _)| s >= p) {
            return Err(CommError::Invalid(format!("message from rank {s} of {p}")));
        }
        let mut recv: Vec<Vec<T>> = from.iter().map(|&(_, n)| vec![T::default(); n]).collect();
        let chunk = self.max_count;
        let done = mpi::request::scope(|scope| {
            let mut reqs = Vec::new();
            for (&(s, _), buf) in from.iter().zip(recv.iter_mut()) {
                let src = self.comm.process_at_rank(s as i32);
                for c in bytemuck::cast_slice_mut::<T, u8>(buf).chunks_mut(chunk) {
                    reqs.push(src.immediate_receive_into_with_tag(scope, c, OVERLAP_TAG));
                }
            }
            for (d, v) in &sends {
                let to = self.comm.process_at_rank(*d as i32);
                for c in bytemuck::cast_slice::<T, u8>(v).chunks(chunk) {
                    reqs.push(to.immediate_send_with_tag(scope, c, OVERLAP_TAG));
                }
            }
            if reqs.is_empty() {
                return Ok(work());
            }
            // The work's GEMMs use this thread's library (`ExecOptions::gemm`).
            let gemm = crate::gemm::current();
            let (r, reqs) = std::thread::scope(move |ts| {
                let h = ts.spawn(move || {
                    crate::gemm::set(gemm);
                    work()
                });
                while !h.is_finished() && !reqs.is_empty() {
                    reqs = reqs.into_iter().filter_map(|q| q.test().err()).collect();
                    std::thread::sleep(POLL);
                }
                (h.join(), reqs)
            });
            self.blocking(|| {
                reqs.into_iter().for_each(|q| {
                    q.wait();
                })
            });
            r
        });
        let r = done.unwrap_or_else(|panic| std::panic::resume_unwind(panic));
        let sent: usize = sends
            .iter()
            .filter(|(d, _)| *d != me)
            .map(|(_, v)| std::mem::size_of_val(&v[..]))
            .sum();
        let received: usize = from
            .iter()
            .zip(&recv)
            .filter(|((s, _), _)| *s != me)
            .map(|(_, v)| std::mem::size_of_val(&v[..]))
            .sum();
        self.count_sent(sent as u64);
        self.count_received(received as u64);
        Ok((recv, r))
    }

    fn traffic(&self) -> Traffic {
        Traffic {
            sent: self.counters.sent.load(Ordering::Relaxed),
            received: self.counters.received.load(Ordering::Relaxed),
        }
    }
}

/// Exclusive prefix sums of MPI counts (displacements), checked against `int`.
fn exclusive_prefix(counts: &[c_int]) -> Result<Vec<c_int>, CommError> {
    let mut out = Vec::with_capacity(counts.len());
    let mut acc: c_int = 0;
    for &c in counts {
        out.push(acc);
        acc = acc
            .checked_add(c)
            .ok_or_else(|| CommError::Invalid("displacements do not fit MPI's int".into()))?;
    }
    Ok(out)
}

fn exclusive_prefix_usize(counts: &[usize]) -> Vec<usize> {
    let mut out = Vec::with_capacity(counts.len());
    let mut acc = 0usize;
    for &c in counts {
        out.push(acc);
        acc += c;
    }
    out
}

impl MpiComm {
    /// Reduce-scatter (sum) of `send` with `recv_counts` per rank, through MPI_Reduce_scatter
    /// (`max_count` elements per call and rank).
    fn reduce_scatter_in<E: Equivalence + Copy + Default + std::ops::AddAssign>(
        &self,
        send: &[E],
        recv_counts: &[usize],
    ) -> Result<Vec<E>, CommError> {
        self.count(Collective::ReduceScatter);
        let p = self.size();
        let me = self.rank();
        let total = crate::comm::check_recv_counts(send.len(), recv_counts, p)?;
        // MPI requires identical counts on all ranks; a mismatch would hang, so check.
        let h = recv_counts.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &c| {
            (h ^ c as u64).wrapping_mul(0x0000_0100_0000_01b3)
        });
        self.check_same(h, "reduce-scatter counts")?;

        let chunk = (self.max_count / p).max(1);
        let rounds = if total <= self.max_count {
            1
        } else {
            recv_counts
                .iter()
                .map(|&c| c.div_ceil(chunk))
                .max()
                .unwrap_or(1)
        };
        let off = exclusive_prefix_usize(recv_counts);
        let mut out = vec![E::default(); recv_counts[me]];
        let mut sbuf: Vec<E> = Vec::with_capacity(1);
        let mut rbuf: Vec<E> = Vec::with_capacity(1);
        for k in 0..rounds {
            let piece = |n: usize| {
                if rounds == 1 {
                    (0, n)
                } else {
                    let s = (k * chunk).min(n);
                    (s, (s + chunk).min(n))
                }
            };
            sbuf.clear();
            let mut counts: Vec<c_int> = Vec::with_capacity(p);
            for r in 0..p {
                let (s, e) = piece(recv_counts[r]);
                sbuf.extend_from_slice(&send[off[r] + s..off[r] + e]);
                counts.push(to_count(e - s, "reduce-scatter count")?);
            }
            let (s, e) = piece(recv_counts[me]);
            rbuf.clear();
            rbuf.resize(e - s, E::default());
            let dt = E::equivalent_datatype();
            let op = SystemOperation::sum();
            // SAFETY: `sbuf` holds sum(counts) E and `rbuf` holds counts[me] E, both live
            // and unaliased for the call; `counts` has `size()` entries (MPI reads that many);
            // datatype, op and communicator are valid handles owned by rsmpi for the call.
            let rc = unsafe {
                mpi::ffi::MPI_Reduce_scatter(
                    sbuf.as_ptr() as *const c_void,
                    rbuf.as_mut_ptr() as *mut c_void,
                    counts.as_ptr(),
                    dt.as_raw(),
                    op.as_raw(),
                    self.comm.as_raw(),
                )
            };
            if rc != mpi::ffi::MPI_SUCCESS as c_int {
                return Err(CommError::Backend(format!(
                    "MPI_Reduce_scatter returned error code {rc}"
                )));
            }
            out[s..e].copy_from_slice(&rbuf);
        }
        let others: u64 = recv_counts
            .iter()
            .enumerate()
            .filter(|&(r, _)| r != me)
            .map(|(_, &n)| n as u64)
            .sum();
        self.count_sent((std::mem::size_of::<E>() * others as usize) as u64);
        self.count_received((std::mem::size_of::<E>() * recv_counts[me]) as u64 * self.peers());
        Ok(out)
    }

    /// Sum of `buf` over all ranks into `out` on `root` (`out` unused elsewhere), through
    /// MPI_Reduce, `max_count` elements per call.
    fn reduce_in<E: Equivalence + Copy>(&self, buf: &[E], out: &mut [E], root: usize) {
        let r = self.comm.process_at_rank(root as i32);
        let op = SystemOperation::sum();
        for (k, chunk) in buf.chunks(self.max_count).enumerate() {
            if self.rank() == root {
                let o = &mut out[k * self.max_count..k * self.max_count + chunk.len()];
                r.reduce_into_root(chunk, o, op);
            } else {
                r.reduce_into(chunk, op);
            }
        }
    }
}

/// A buffer of `n` elements whose pointer is a real allocation even when `n` is 0 (an empty
/// Vec's dangling pointer can read as MPI_IN_PLACE).
fn typed_buffer<T: Scalar>(n: usize) -> Vec<T> {
    let mut v = vec![T::default(); n.max(1)];
    v.truncate(n);
    v
}

/// `b`, or an empty slice of `one` when `b` is empty (see [`typed_buffer`]).
fn real<'a>(b: &'a [u8], one: &'a [u8; 1]) -> &'a [u8] {
    if b.is_empty() {
        &one[..0]
    } else {
        b
    }
}
