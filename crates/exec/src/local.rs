//! The in-process world: P ranks as threads of one process, exchanging real messages.
//!
//! Point-to-point messages go to the receiving rank's own mailbox (a lock and a condition
//! variable per rank, one FIFO queue per communicator context and sender), so a send wakes
//! only its receiver and typed buffers are handed over without a copy. Collectives meet on a
//! board per communicator context and call number: every member leaves its messages there and
//! takes its own once all have arrived, so a collective of P ranks costs one wake-up per rank,
//! not P. Receives give up when a peer has failed or has exited without sending, so a failing
//! rank can never deadlock the others. [`InProcess::run`] waits for every rank and reports the
//! first rank that failed, with its own error. Ranks 1.. run on threads kept between runs.

use crate::comm::{CallCounters, Calls, Collective, CommError, Communicator, Traffic};
use crate::Scalar;
use deinsum_runtime::{cores, lock, mark_carrier, on_carrier, Pool, PoolBuilder, ProcessPool};
use std::any::Any;
use std::collections::{HashMap, VecDeque};
use std::fmt::Display;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// Communicator context: the world is `[]`, a split appends (split number, color).
type Ctx = Vec<u64>;

/// A message in a mailbox: a typed buffer, handed over as it is.
type Msg = Box<dyn Any + Send>;

/// A receiver's word that it has read a shared buffer and let go of it.
struct Ack;

/// One rank's incoming point-to-point messages, by (context, sending world rank).
#[derive(Default)]
struct Mailbox {
    queues: Mutex<HashMap<(Ctx, usize), VecDeque<Msg>>>,
    cv: Condvar,
    /// The owner waits on `cv` (set under the lock): only then is a wake-up (a system call)
    /// needed, which keeps P ranks' exits and sends from costing P^2 of them.
    waiting: AtomicBool,
    /// Messages posted so far (a spinning owner watches it without the lock).
    posted: AtomicU64,
}

/// How long a rank spins for a message or a collective before it parks, when the world's
/// ranks fit the machine's cores: a parked thread takes tens to hundreds of microseconds to
/// wake (more in a virtual machine whose idle core the host has descheduled), which doubled
/// the time of millisecond kernels' moves; a spin on a core no other rank needs costs nothing.
const SPIN: Duration = Duration::from_micros(200);

/// Spins until `changed` holds or [`SPIN`] has passed; whether it held. Between short spins
/// the thread yields, so that a runnable thread on the same core (a rank's kernel worker
/// computing while the rank waits for its halo) keeps the core (sparse bench, SpMV at P=2:
/// a pure spin took 0.0082 s against 0.0072 s parked).
fn spin_until(changed: impl Fn() -> bool) -> bool {
    let t = Instant::now();
    loop {
        for _ in 0..16 {
            if changed() {
                return true;
            }
            std::hint::spin_loop();
        }
        std::thread::yield_now();
        if t.elapsed() >= SPIN {
            return changed();
        }
    }
}

/// One collective call in progress: each member's outgoing messages (one per member).
struct Board {
    msgs: Vec<Option<Vec<Vec<u8>>>>,
    arrived: usize,
    departed: usize,
}

struct Shared {
    boxes: Vec<Mailbox>,
    boards: Mutex<HashMap<(Ctx, u64), Board>>,
    boards_cv: Condvar,
    /// Collectives completed and wake-ups sent so far (a spinning rank watches it).
    boards_done: AtomicU64,
    /// Whether waiting ranks spin before they park: the ranks fit the machine's cores.
    spin: bool,
    /// The first rank that failed and its message.
    failed: Mutex<Option<(usize, String)>>,
    any_failed: AtomicBool,
    /// Ranks whose closure has returned, and how many.
    done: Vec<AtomicBool>,
    done_count: AtomicUsize,
    sent: Vec<AtomicU64>,
    received: Vec<AtomicU64>,
    /// Calls per collective kind, per world rank.
    calls: Vec<CallCounters>,
    /// Nanoseconds each world rank spent parked waiting for a message or a collective.
    blocked: Vec<AtomicU64>,
}

impl Shared {
    fn new(p: usize) -> Self {
        Shared {
            boxes: (0..p).map(|_| Mailbox::default()).collect(),
            boards: Mutex::new(HashMap::new()),
            boards_cv: Condvar::new(),
            boards_done: AtomicU64::new(0),
            spin: p > 1 && cores() >= p,
            failed: Mutex::new(None),
            any_failed: AtomicBool::new(false),
            done: (0..p).map(|_| AtomicBool::new(false)).collect(),
            done_count: AtomicUsize::new(0),
            sent: (0..p).map(|_| AtomicU64::new(0)).collect(),
            received: (0..p).map(|_| AtomicU64::new(0)).collect(),
            calls: (0..p).map(|_| CallCounters::default()).collect(),
            blocked: (0..p).map(|_| AtomicU64::new(0)).collect(),
        }
    }

    /// Adds the time since `since` to `rank`'s blocked time.
    fn add_blocked(&self, rank: usize, since: Instant) {
        let ns = u64::try_from(since.elapsed().as_nanos()).unwrap_or(u64::MAX);
        self.blocked[rank].fetch_add(ns, Ordering::Relaxed);
    }

    /// Wakes every waiting rank (after a failure or an exit, which any of them may be
    /// waiting on). Taking each lock first means no waiter misses the news.
    fn wake_all(&self) {
        for b in &self.boxes {
            if b.waiting.load(Ordering::SeqCst) {
                drop(lock(&b.queues));
                b.cv.notify_all();
            }
        }
        drop(lock(&self.boards));
        self.boards_done.fetch_add(1, Ordering::SeqCst);
        self.boards_cv.notify_all();
    }

    fn fail(&self, rank: usize, message: String) {
        let mut f = lock(&self.failed);
        if f.is_none() {
            *f = Some((rank, message));
        }
        drop(f);
        self.any_failed.store(true, Ordering::SeqCst);
        self.wake_all();
    }

    fn finish(&self, rank: usize) {
        self.done[rank].store(true, Ordering::SeqCst);
        self.done_count.fetch_add(1, Ordering::SeqCst);
        self.wake_all();
    }

    /// The failure to report to a waiting rank, if a rank has failed.
    fn failure(&self) -> Option<CommError> {
        if !self.any_failed.load(Ordering::SeqCst) {
            return None;
        }
        lock(&self.failed)
            .as_ref()
            .map(|(rank, message)| CommError::PeerFailed {
                rank: *rank,
                message: message.clone(),
            })
    }
}

/// One rank's handle on a communicator of the in-process world (the world itself or a
/// sub-communicator from [`Communicator::split`]). Not shared between threads.
pub struct LocalComm {
    shared: Arc<Shared>,
    ctx: Ctx,
    /// World ranks of the members, in communicator rank order.
    members: Vec<usize>,
    /// This rank's position in `members`.
    rank: usize,
    /// Splits done so far on this communicator (makes child contexts unique).
    splits: std::cell::Cell<u64>,
    /// Collectives called so far on this communicator (names their boards).
    calls: std::cell::Cell<u64>,
}

impl LocalComm {
    fn world_rank(&self) -> usize {
        self.members[self.rank]
    }

    /// Queues `msg` (`bytes` long) for communicator rank `dst`.
    fn post(&self, dst: usize, msg: Msg, bytes: usize) {
        let me = self.world_rank();
        let to = self.members[dst];
        if to != me {
            self.shared.sent[me].fetch_add(bytes as u64, Ordering::Relaxed);
        }
        let mb = &self.shared.boxes[to];
        let mut q = lock(&mb.queues);
        q.entry((self.ctx.clone(), me)).or_default().push_back(msg);
        mb.posted.fetch_add(1, Ordering::SeqCst);
        if mb.waiting.load(Ordering::SeqCst) {
            mb.cv.notify_all();
        }
        drop(q);
    }

    /// Takes the next message from communicator rank `src`, waiting for it.
    fn take(&self, src: usize) -> Result<Msg, CommError> {
        let me = self.world_rank();
        let from = self.members[src];
        let key = (self.ctx.clone(), from);
        let mb = &self.shared.boxes[me];
        let mut q = lock(&mb.queues);
        // Announced before the checks: an exit or failure after them sees it and wakes us.
        mb.waiting.store(true, Ordering::SeqCst);
        let mut spun = !self.shared.spin;
        let got = loop {
            if let Some(e) = self.shared.failure() {
                break Err(e);
            }
            if let Some(m) = q.get_mut(&key).and_then(|q| q.pop_front()) {
                break Ok(m);
            }
            if self.shared.done[from].load(Ordering::SeqCst) {
                break Err(CommError::Backend(format!(
                    "rank {from} exited while rank {me} waited for its message"
                )));
            }
            let t = Instant::now();
            if !spun {
                // Once per call, then parked: a long wait costs one wake-up at most.
                spun = true;
                let seen = mb.posted.load(Ordering::SeqCst);
                drop(q);
                let sh = &self.shared;
                spin_until(|| {
                    mb.posted.load(Ordering::SeqCst) != seen
                        || sh.any_failed.load(Ordering::SeqCst)
                        || sh.done[from].load(Ordering::SeqCst)
                });
                q = lock(&mb.queues);
            } else {
                q = mb.cv.wait(q).unwrap_or_else(|e| e.into_inner());
            }
            self.shared.add_blocked(me, t);
        };
        mb.waiting.store(false, Ordering::SeqCst);
        got
    }

    /// Takes the next message from `src`, which must be an `M`; counts its `bytes` as received
    /// (unless sent to itself).
    fn take_as<M: 'static>(&self, src: usize, bytes: impl Fn(&M) -> usize) -> Result<M, CommError> {
        let m = self.take(src)?.downcast::<M>().map_err(|_| {
            CommError::Invalid(format!(
                "rank {} expected a message of {} from rank {src}",
                self.rank,
                std::any::type_name::<M>()
            ))
        })?;
        if self.members[src] != self.world_rank() {
            self.shared.received[self.world_rank()].fetch_add(bytes(&m) as u64, Ordering::Relaxed);
        }
        Ok(*m)
    }

    /// Takes the next message from `src`, which must be a `Vec<E>`; counts its bytes.
    fn take_vec<E: 'static>(&self, src: usize) -> Result<Vec<E>, CommError> {
        self.take_as::<Vec<E>>(src, |v| std::mem::size_of_val(&v[..]))
    }

    /// The collective core: `msgs[r]` goes to member r; returns what each member sent to this
    /// one. Every member calls it, in the same order on this communicator.
    fn collective(&self, msgs: Vec<Vec<u8>>) -> Result<Vec<Vec<u8>>, CommError> {
        let n = self.members.len();
        if msgs.len() != n {
            return Err(CommError::Invalid(format!(
                "{} messages for {n} ranks",
                msgs.len()
            )));
        }
        let me = self.world_rank();
        let out: u64 = msgs
            .iter()
            .enumerate()
            .filter(|&(r, _)| r != self.rank)
            .map(|(_, m)| m.len() as u64)
            .sum();
        self.shared.sent[me].fetch_add(out, Ordering::Relaxed);
        let call = self.calls.get();
        self.calls.set(call + 1);
        let key = (self.ctx.clone(), call);
        let sh = &self.shared;
        let mut boards = lock(&sh.boards);
        let b = boards.entry(key.clone()).or_insert_with(|| Board {
            msgs: vec![None; n],
            arrived: 0,
            departed: 0,
        });
        b.msgs[self.rank] = Some(msgs);
        b.arrived += 1;
        if b.arrived == n {
            sh.boards_done.fetch_add(1, Ordering::SeqCst);
            sh.boards_cv.notify_all();
        }
        let mut spun = !sh.spin;
        loop {
            if let Some(e) = sh.failure() {
                return Err(e);
            }
            let b = boards
                .get(&key)
                .expect("the board stays until all have left");
            if b.arrived == n {
                break;
            }
            if sh.done_count.load(Ordering::SeqCst) > 0 {
                if let Some(r) = (0..n).find(|&r| {
                    b.msgs[r].is_none() && sh.done[self.members[r]].load(Ordering::SeqCst)
                }) {
                    return Err(CommError::Backend(format!(
                        "rank {} exited while rank {me} waited for it in a collective",
                        self.members[r]
                    )));
                }
            }
            let t = Instant::now();
            if !spun {
                spun = true;
                let seen = sh.boards_done.load(Ordering::SeqCst);
                drop(boards);
                spin_until(|| {
                    sh.boards_done.load(Ordering::SeqCst) != seen
                        || sh.any_failed.load(Ordering::SeqCst)
                        || sh.done_count.load(Ordering::SeqCst) > 0
                });
                boards = lock(&sh.boards);
            } else {
                boards = sh.boards_cv.wait(boards).unwrap_or_else(|e| e.into_inner());
            }
            sh.add_blocked(me, t);
        }
        let b = boards
            .get_mut(&key)
            .expect("the board stays until all have left");
        let got: Vec<Vec<u8>> = b
            .msgs
            .iter_mut()
            .map(|m| std::mem::take(&mut m.as_mut().expect("every member arrived")[self.rank]))
            .collect();
        b.departed += 1;
        if b.departed == n {
            boards.remove(&key);
        }
        drop(boards);
        let inc: u64 = got
            .iter()
            .enumerate()
            .filter(|&(r, _)| r != self.rank)
            .map(|(_, m)| m.len() as u64)
            .sum();
        sh.received[me].fetch_add(inc, Ordering::Relaxed);
        Ok(got)
    }

    fn all_gather(&self, msg: Vec<u8>) -> Result<Vec<Vec<u8>>, CommError> {
        self.collective(vec![msg; self.members.len()])
    }

    fn count(&self, kind: Collective) {
        self.shared.calls[self.world_rank()].count(kind);
    }

    /// The collective core with one typed message per member (`None`: empty), returning the
    /// typed messages from each member.
    fn typed_collective<T: Scalar>(
        &self,
        msgs: impl Fn(usize) -> Option<Vec<u8>>,
    ) -> Result<Vec<Vec<T>>, CommError> {
        let got = self.collective(
            (0..self.size())
                .map(|r| msgs(r).unwrap_or_default())
                .collect(),
        )?;
        got.into_iter()
            .map(|b| {
                if b.len() % T::BYTES != 0 {
                    return Err(CommError::Invalid("a message of partial elements".into()));
                }
                let mut v = vec![T::default(); b.len() / T::BYTES];
                bytemuck::cast_slice_mut::<T, u8>(&mut v).copy_from_slice(&b);
                Ok(v)
            })
            .collect()
    }
}

fn bytes_of<T: Scalar>(xs: &[T]) -> Vec<u8> {
    bytemuck::cast_slice(xs).to_vec()
}

/// Checks one count per member, this rank's matching its buffer.
fn check_counts(counts: &[usize], n: usize, mine: usize, me: usize) -> Result<(), CommError> {
    if counts.len() != n || counts[me] != mine {
        return Err(CommError::Invalid(format!(
            "{} counts for {n} ranks, {mine} elements here",
            counts.len()
        )));
    }
    Ok(())
}

/// Concatenates the parts, checking each against its count.
fn concat_checked<T: Scalar>(parts: Vec<Vec<T>>, counts: &[usize]) -> Result<Vec<T>, CommError> {
    if parts.iter().zip(counts).any(|(p, &c)| p.len() != c) {
        return Err(CommError::Invalid("counts differ between ranks".into()));
    }
    Ok(parts.concat())
}

/// Sums equal-length parts in rank order (bit-identical on every rank).
fn sum_parts<T: Scalar>(parts: &[Vec<T>], len: usize) -> Result<Vec<T>, CommError> {
    let mut out = vec![T::default(); len];
    for p in parts {
        if p.len() != len {
            return Err(CommError::Invalid(
                "reduction lengths differ between ranks".into(),
            ));
        }
        for (x, &y) in out.iter_mut().zip(p) {
            *x += y;
        }
    }
    Ok(out)
}

impl Communicator for LocalComm {
    fn rank(&self) -> usize {
        self.rank
    }

    fn size(&self) -> usize {
        self.members.len()
    }

    fn split(&self, color: usize, key: usize) -> Result<Self, CommError> {
        let mut me = Vec::with_capacity(16);
        me.extend_from_slice(&(color as u64).to_le_bytes());
        me.extend_from_slice(&(key as u64).to_le_bytes());
        let all = self.all_gather(me)?;
        let mut group: Vec<(u64, usize)> = Vec::new();
        for (r, m) in all.iter().enumerate() {
            let c = u64::from_le_bytes(m[0..8].try_into().expect("8 bytes"));
            let k = u64::from_le_bytes(m[8..16].try_into().expect("8 bytes"));
            if c == color as u64 {
                group.push((k, r));
            }
        }
        group.sort();
        let n = self.splits.get();
        self.splits.set(n + 1);
        let mut ctx = self.ctx.clone();
        ctx.push(n);
        ctx.push(color as u64);
        let members: Vec<usize> = group.iter().map(|&(_, r)| self.members[r]).collect();
        let rank = group
            .iter()
            .position(|&(_, r)| r == self.rank)
            .expect("a rank belongs to its own color");
        Ok(LocalComm {
            shared: self.shared.clone(),
            ctx,
            members,
            rank,
            splits: std::cell::Cell::new(0),
            calls: std::cell::Cell::new(0),
        })
    }

    fn all_to_all_v(
        &self,
        send: &[u8],
        send_counts: &[usize],
    ) -> Result<(Vec<u8>, Vec<usize>), CommError> {
        crate::comm::check_send_counts(send.len(), send_counts, self.size())?;
        self.count(Collective::AllToAll);
        let mut msgs = Vec::with_capacity(self.size());
        let mut off = 0;
        for &c in send_counts {
            msgs.push(send[off..off + c].to_vec());
            off += c;
        }
        let got = self.collective(msgs)?;
        let counts = got.iter().map(Vec::len).collect();
        Ok((got.concat(), counts))
    }

    fn all_reduce_sum<T: Scalar>(&self, buf: &mut [T]) -> Result<(), CommError> {
        self.count(Collective::AllReduce);
        let mine = bytes_of(buf);
        let parts = self.typed_collective::<T>(|_| Some(mine.clone()))?;
        // Summed in rank order, so every rank gets bit-identical results.
        buf.copy_from_slice(&sum_parts(&parts, buf.len())?);
        Ok(())
    }

    fn all_reduce_max_u64(&self, buf: &mut [u64]) -> Result<(), CommError> {
        let bytes: Vec<u8> = buf.iter().flat_map(|x| x.to_le_bytes()).collect();
        let parts = self.all_gather(bytes)?;
        for part in &parts {
            if part.len() != buf.len() * 8 {
                return Err(CommError::Invalid(
                    "reduction lengths differ between ranks".into(),
                ));
            }
            for (x, c) in buf.iter_mut().zip(part.chunks_exact(8)) {
                *x = (*x).max(u64::from_le_bytes(c.try_into().expect("8 bytes")));
            }
        }
        Ok(())
    }

    fn broadcast(&self, buf: &mut Vec<u8>, root: usize) -> Result<(), CommError> {
        if root >= self.size() {
            return Err(CommError::Invalid(format!(
                "broadcast root {root} of {} ranks",
                self.size()
            )));
        }
        self.count(Collective::Broadcast);
        if self.rank == root {
            for r in 0..self.size() {
                if r != root {
                    self.post(r, Box::new(buf.clone()), buf.len());
                }
            }
        } else {
            *buf = self.take_vec::<u8>(root)?;
        }
        Ok(())
    }

    fn exchange<T: Scalar>(
        &self,
        sends: Vec<(usize, Vec<T>)>,
        from: &[usize],
    ) -> Result<Vec<Vec<T>>, CommError> {
        let n = self.size();
        if let Some(&(d, _)) = sends.iter().find(|(d, _)| *d >= n) {
            return Err(CommError::Invalid(format!("message to rank {d} of {n}")));
        }
        if let Some(&s) = from.iter().find(|&&s| s >= n) {
            return Err(CommError::Invalid(format!("message from rank {s} of {n}")));
        }
        self.count(Collective::Exchange);
        // The buffers themselves are handed over: the receiver unpacks from the sender's pack.
        for (d, v) in sends {
            let bytes = std::mem::size_of_val(&v[..]);
            self.post(d, Box::new(v), bytes);
        }
        from.iter().map(|&s| self.take_vec::<T>(s)).collect()
    }

    fn exchange_while<T: Scalar, R: Send>(
        &self,
        sends: Vec<(usize, Vec<T>)>,
        from: &[(usize, usize)],
        work: impl FnOnce() -> R + Send,
    ) -> Result<(Vec<Vec<T>>, R), CommError> {
        let n = self.size();
        if let Some(&(d, _)) = sends.iter().find(|(d, _)| *d >= n) {
            return Err(CommError::Invalid(format!("message to rank {d} of {n}")));
        }
        if let Some(&(s, _)) = from.iter().find(|&&(s, _)| s >= n) {
            return Err(CommError::Invalid(format!("message from rank {s} of {n}")));
        }
        // The sends are in the receivers' mailboxes before the work starts; the receives
        // after it are hand-overs of buffers that are, by then, usually there.
        for (d, v) in sends {
            let bytes = std::mem::size_of_val(&v[..]);
            self.post(d, Box::new(v), bytes);
        }
        let r = work();
        let recv = from
            .iter()
            .map(|&(s, _)| self.take_vec::<T>(s))
            .collect::<Result<Vec<_>, _>>()?;
        crate::comm::check_lengths(&recv, from)?;
        Ok((recv, r))
    }

    fn barrier(&self) -> Result<(), CommError> {
        self.all_gather(Vec::new()).map(|_| ())
    }

    fn calls(&self) -> Calls {
        self.shared.calls[self.world_rank()].get()
    }

    fn blocked(&self) -> Duration {
        Duration::from_nanos(self.shared.blocked[self.world_rank()].load(Ordering::Relaxed))
    }

    fn all_gather_v<T: Scalar>(&self, mine: &[T], counts: &[usize]) -> Result<Vec<T>, CommError> {
        check_counts(counts, self.size(), mine.len(), self.rank)?;
        self.count(Collective::AllGather);
        let b = bytes_of(mine);
        let parts = self.typed_collective::<T>(|r| (r != self.rank).then(|| b.clone()))?;
        let mut parts = parts;
        parts[self.rank] = mine.to_vec();
        concat_checked(parts, counts)
    }

    fn gathers_in_place(&self) -> bool {
        true
    }

    fn all_gather_each<T: Scalar, E: From<CommError>>(
        &self,
        mine: Vec<T>,
        counts: &[usize],
        mut place: impl FnMut(usize, &[T]) -> Result<(), E>,
    ) -> Result<Vec<T>, E> {
        let (me, n) = (self.rank, self.size());
        check_counts(counts, n, mine.len(), me)?;
        self.count(Collective::AllGather);
        // One buffer shared by every peer: each reads it where it lies, then acknowledges,
        // and after the last acknowledgement the buffer is this rank's alone again.
        let shared = Arc::new(mine);
        let bytes = std::mem::size_of_val(&shared[..]);
        if bytes > 0 {
            for r in (0..n).filter(|&r| r != me) {
                self.post(r, Box::new(Arc::clone(&shared)), bytes);
            }
        }
        for (x, &c) in counts.iter().enumerate() {
            if x == me {
                place(x, &shared)?;
            } else if c > 0 {
                let theirs = self.take_as::<Arc<Vec<T>>>(x, |v| std::mem::size_of_val(&v[..]))?;
                if theirs.len() != c {
                    return Err(CommError::Invalid("counts differ between ranks".into()).into());
                }
                place(x, &theirs)?;
                drop(theirs);
                self.post(x, Box::new(Ack), 0);
            } else {
                place(x, &[])?;
            }
        }
        if bytes > 0 {
            for r in (0..n).filter(|&r| r != me) {
                self.take_as::<Ack>(r, |_| 0)?;
            }
        }
        Ok(Arc::try_unwrap(shared).map_err(|_| {
            CommError::Backend("a shared buffer outlived its acknowledgements".into())
        })?)
    }

    fn gathers_shared(&self) -> bool {
        true
    }

    fn all_gather_shared<T: Scalar, S: Send + Sync + 'static, E: From<CommError>>(
        &self,
        mine: Vec<T>,
        counts: &[usize],
        build: impl FnOnce(&[&[T]], usize) -> Result<S, E>,
    ) -> Result<(Arc<S>, Vec<T>), E> {
        let (me, n) = (self.rank, self.size());
        check_counts(counts, n, mine.len(), me)?;
        self.count(Collective::AllGather);
        // Counted as the all-gather it stands for: this rank's piece to every peer, every
        // peer's piece to this rank (the messages below carry shared buffers, not bytes).
        let w = self.world_rank();
        let size = std::mem::size_of::<T>() as u64;
        let total: usize = counts.iter().sum();
        let (out, inc) = (mine.len() * (n - 1), total - mine.len());
        self.shared.sent[w].fetch_add(out as u64 * size, Ordering::Relaxed);
        self.shared.received[w].fetch_add(inc as u64 * size, Ordering::Relaxed);
        // Member 0 builds; the others lend it their buffers and wait for the result.
        const BUILDER: usize = 0;
        if me != BUILDER {
            let lent = Arc::new(mine);
            self.post(BUILDER, Box::new(Arc::clone(&lent)), 0);
            let built = self.take_as::<Arc<S>>(BUILDER, |_| 0)?;
            // The builder dropped its handle before sending the result.
            let mine = Arc::try_unwrap(lent).map_err(|_| {
                CommError::Backend("a lent buffer outlived the shared all-gather".into())
            })?;
            return Ok((built, mine));
        }
        let mut theirs: Vec<Option<Arc<Vec<T>>>> = Vec::with_capacity(n);
        for (x, &c) in counts.iter().enumerate() {
            if x == me {
                theirs.push(None);
                continue;
            }
            let v = self.take_as::<Arc<Vec<T>>>(x, |_| 0)?;
            if v.len() != c {
                return Err(CommError::Invalid("counts differ between ranks".into()).into());
            }
            theirs.push(Some(v));
        }
        let pieces: Vec<&[T]> = theirs
            .iter()
            .map(|v| v.as_deref().map_or(&mine[..], |v| &v[..]))
            .collect();
        let built = build(&pieces, n);
        drop(pieces);
        // Every lent buffer is let go before the result goes out (then each peer's is its
        // own again when it gets the result).
        drop(theirs);
        let built = Arc::new(built?);
        for r in (0..n).filter(|&r| r != me) {
            self.post(r, Box::new(Arc::clone(&built)), 0);
        }
        Ok((built, mine))
    }

    fn reduce_scatter_v<T: Scalar>(
        &self,
        send: &[T],
        counts: &[usize],
    ) -> Result<Vec<T>, CommError> {
        crate::comm::check_recv_counts(send.len(), counts, self.size())?;
        self.count(Collective::ReduceScatter);
        let mut offs = vec![0usize; counts.len() + 1];
        for (r, &c) in counts.iter().enumerate() {
            offs[r + 1] = offs[r] + c;
        }
        let parts = self.typed_collective::<T>(|r| Some(bytes_of(&send[offs[r]..offs[r + 1]])))?;
        sum_parts(&parts, counts[self.rank])
    }

    fn broadcast_typed<T: Scalar>(&self, buf: &mut [T], root: usize) -> Result<(), CommError> {
        if root >= self.size() {
            return Err(CommError::Invalid(format!("broadcast root {root}")));
        }
        self.count(Collective::Broadcast);
        let b = (self.rank == root).then(|| bytes_of(buf));
        let parts = self.typed_collective::<T>(|r| b.clone().filter(|_| r != root))?;
        if self.rank != root {
            if parts[root].len() != buf.len() {
                return Err(CommError::Invalid("broadcast lengths differ".into()));
            }
            buf.copy_from_slice(&parts[root]);
        }
        Ok(())
    }

    fn reduce_sum<T: Scalar>(&self, buf: &[T], root: usize) -> Result<Option<Vec<T>>, CommError> {
        if root >= self.size() {
            return Err(CommError::Invalid(format!("reduce root {root}")));
        }
        self.count(Collective::Reduce);
        let b = bytes_of(buf);
        let mut parts =
            self.typed_collective::<T>(|r| (r == root && self.rank != root).then(|| b.clone()))?;
        if self.rank != root {
            return Ok(None);
        }
        parts[root] = buf.to_vec();
        sum_parts(&parts, buf.len()).map(Some)
    }

    fn gather_v<T: Scalar>(
        &self,
        mine: &[T],
        counts: &[usize],
        root: usize,
    ) -> Result<Option<Vec<T>>, CommError> {
        check_counts(counts, self.size(), mine.len(), self.rank)?;
        if root >= self.size() {
            return Err(CommError::Invalid(format!("gather root {root}")));
        }
        self.count(Collective::Gather);
        let b = bytes_of(mine);
        let mut parts =
            self.typed_collective::<T>(|r| (r == root && self.rank != root).then(|| b.clone()))?;
        if self.rank != root {
            return Ok(None);
        }
        parts[root] = mine.to_vec();
        concat_checked(parts, counts).map(Some)
    }

    fn send_recv<T: Scalar>(
        &self,
        send: Option<(usize, Vec<T>)>,
        recv: Option<(usize, usize)>,
    ) -> Result<Option<Vec<T>>, CommError> {
        let n = self.size();
        if send.as_ref().is_some_and(|(d, _)| *d >= n) || recv.is_some_and(|(s, _)| s >= n) {
            return Err(CommError::Invalid(format!(
                "send/recv peer out of {n} ranks"
            )));
        }
        self.count(Collective::SendRecv);
        if let Some((d, v)) = send {
            let bytes = std::mem::size_of_val(&v[..]);
            self.post(d, Box::new(v), bytes);
        }
        match recv {
            Some((s, len)) => {
                let v = self.take_vec::<T>(s)?;
                if v.len() != len {
                    return Err(CommError::Invalid(format!(
                        "rank {s} sent {} elements, {len} expected",
                        v.len()
                    )));
                }
                Ok(Some(v))
            }
            None => Ok(None),
        }
    }

    fn traffic(&self) -> Traffic {
        let me = self.world_rank();
        Traffic {
            sent: self.shared.sent[me].load(Ordering::Relaxed),
            received: self.shared.received[me].load(Ordering::Relaxed),
        }
    }
}

/// Why an in-process run failed: the first rank that failed, with its own error.
#[derive(Debug, thiserror::Error)]
pub enum RankFailure<E: Display> {
    /// The rank's closure returned an error.
    #[error("rank {rank} failed: {error}")]
    Error {
        /// The failing rank.
        rank: usize,
        /// Its error.
        error: E,
    },
    /// The rank panicked.
    #[error("rank {rank} panicked: {message}")]
    Panic {
        /// The failing rank.
        rank: usize,
        /// The panic message.
        message: String,
    },
    /// The world cannot be made (zero ranks, a thread that cannot be spawned).
    #[error("in-process world: {0}")]
    World(String),
}

impl<E: Display> RankFailure<E> {
    /// The failing rank, if any.
    pub fn rank(&self) -> Option<usize> {
        match self {
            RankFailure::Error { rank, .. } | RankFailure::Panic { rank, .. } => Some(*rank),
            RankFailure::World(_) => None,
        }
    }
}

/// The kept threads that carry ranks 1.. of in-process worlds: a rayon pool of as many
/// workers as the last world had ranks besides rank 0, and whether a run holds it now.
struct Kept {
    busy: bool,
    /// The pool and its number of workers.
    pool: Option<(usize, ProcessPool)>,
}

static CARRIERS: Mutex<Kept> = Mutex::new(Kept {
    busy: false,
    pool: None,
});

/// Worlds of up to this many ranks per core run on kept threads; larger ones spawn theirs, so
/// that a run of hundreds of oversubscribed ranks (whose start is a small part of its time)
/// does not leave as many idle threads behind (300 ranks from Python kept 130 MB so).
const MAX_CARRIED_PER_CORE: usize = 2;

/// A run's hold on the carrier threads (released when dropped).
struct Carriers(Arc<Pool>);

impl Drop for Carriers {
    fn drop(&mut self) {
        lock(&CARRIERS).busy = false;
    }
}

/// The kept threads to carry ranks 1.. of a world of `n + 1` ranks, so that a run does not
/// start and join threads (from Python an 8x8 product on two ranks spent about 0.1 ms so):
/// the pool of the last world of as many ranks, else a new one kept in its place. `None`
/// (the caller spawns threads) for worlds larger than [`MAX_CARRIED_PER_CORE`] ranks a core,
/// when another run holds them (two worlds sharing workers could
/// each wait for a rank queued behind the other's), the calling thread is one of them (a
/// rank that runs a world of its own), or the pool cannot be built.
fn carriers(n: usize) -> Option<Carriers> {
    if n == 0 || n >= MAX_CARRIED_PER_CORE * cores() || on_carrier() {
        return None;
    }
    let mut kept = lock(&CARRIERS);
    if kept.busy {
        return None;
    }
    let reused = kept
        .pool
        .as_ref()
        .filter(|(m, _)| *m == n)
        .and_then(|(_, p)| p.here().cloned());
    let pool = match reused {
        Some(pool) => pool,
        None => {
            let pool = PoolBuilder::new(|i| format!("deinsum-rank-{}", i + 1))
                .threads(n)
                .on_start(|_| mark_carrier())
                .build()
                .ok()?;
            let pool = Arc::new(pool);
            kept.pool = Some((n, ProcessPool::new(pool.clone())));
            pool
        }
    };
    kept.busy = true;
    Some(Carriers(pool))
}

/// P ranks as threads of this process: the embedded default backend.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct InProcess {
    procs: usize,
}

fn panic_message(p: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = p.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = p.downcast_ref::<String>() {
        s.clone()
    } else {
        "panic with a non-string payload".to_string()
    }
}

/// How a rank's run ended.
enum Outcome<R, E> {
    Ok(R),
    Err(E),
    Panic(String),
}

/// [`InProcess::run`] without kept carrier threads: ranks 1.. on threads spawned for this run,
/// rank 0 on the calling thread. Empty when a thread could not be spawned (the failure is
/// recorded in `shared`).
fn on_spawned_threads<R: Send, E: Send>(
    p: usize,
    shared: &Shared,
    run_rank: &(impl Fn(usize) -> Outcome<R, E> + Sync),
) -> Vec<Outcome<R, E>> {
    std::thread::scope(|s| {
        // Ranks 1.. get threads of their own; rank 0 runs on the calling thread, which
        // would otherwise only wait (one thread fewer to spawn per call).
        let mut handles = Vec::with_capacity(p - 1);
        for rank in 1..p {
            let h = std::thread::Builder::new()
                .name(format!("deinsum-rank-{rank}"))
                .spawn_scoped(s, move || run_rank(rank));
            match h {
                Ok(h) => handles.push(h),
                Err(e) => {
                    shared.fail(rank, format!("cannot spawn thread: {e}"));
                    break;
                }
            }
        }
        if handles.len() + 1 < p {
            // A rank is missing: the spawned ones see the failure and return.
            handles.into_iter().for_each(|h| drop(h.join()));
            return Vec::new();
        }
        let mut outcomes = vec![run_rank(0)];
        outcomes.extend(handles.into_iter().map(|h| {
            h.join()
                .unwrap_or_else(|e| Outcome::Panic(panic_message(e.as_ref())))
        }));
        outcomes
    })
}

impl InProcess {
    /// A world of `procs` ranks (at least 1).
    pub fn new(procs: usize) -> Result<Self, CommError> {
        if procs == 0 {
            return Err(CommError::Invalid("a world needs at least one rank".into()));
        }
        Ok(InProcess { procs })
    }

    /// Number of ranks.
    pub fn procs(&self) -> usize {
        self.procs
    }

    /// Runs `f` on every rank, each on its own thread with its own world communicator (rank 0
    /// on the calling thread, the others on threads kept between runs), and returns the results in rank order. When ranks fail, the first one to fail is reported
    /// with its own error (the others, which then see [`CommError::PeerFailed`], are joined
    /// and their secondary errors dropped).
    pub fn run<R, E, F>(&self, f: F) -> Result<Vec<R>, RankFailure<E>>
    where
        R: Send,
        E: Display + Send,
        F: Fn(&LocalComm) -> Result<R, E> + Sync,
    {
        let p = self.procs;
        crate::linger::ACTIVE.fetch_add(1, std::sync::atomic::Ordering::AcqRel);
        let shared = Arc::new(Shared::new(p));
        // One rank's whole life on the thread that runs it.
        let run_rank = |rank: usize| {
            let comm = LocalComm {
                shared: shared.clone(),
                ctx: Vec::new(),
                members: (0..p).collect(),
                rank,
                splits: std::cell::Cell::new(0),
                calls: std::cell::Cell::new(0),
            };
            let out = match catch_unwind(AssertUnwindSafe(|| f(&comm))) {
                Ok(Ok(r)) => Outcome::Ok(r),
                Ok(Err(e)) => {
                    shared.fail(rank, e.to_string());
                    Outcome::Err(e)
                }
                Err(payload) => {
                    let m = panic_message(payload.as_ref());
                    shared.fail(rank, format!("panicked: {m}"));
                    Outcome::Panic(m)
                }
            };
            shared.finish(rank);
            out
        };
        let outcomes: Vec<Outcome<R, E>> = match carriers(p - 1) {
            Some(held) => {
                let pool = &held.0;
                // Ranks 1.. on the kept carrier threads, one each (a broadcast job is its
                // worker's own, never stolen by another), rank 0 on the calling thread.
                let slots: Vec<Mutex<Option<Outcome<R, E>>>> =
                    (1..p).map(|_| Mutex::new(None)).collect();
                let mut first = None;
                pool.in_place_scope(|s| {
                    s.spawn_broadcast(|_, ctx| {
                        let rank = ctx.index() + 1;
                        *lock(&slots[rank - 1]) = Some(run_rank(rank));
                    });
                    first = Some(run_rank(0));
                });
                first
                    .into_iter()
                    .chain(slots.into_iter().map(|m| {
                        m.into_inner()
                            .unwrap_or_else(|e| e.into_inner())
                            .unwrap_or_else(|| Outcome::Panic("rank did not run".into()))
                    }))
                    .collect()
            }
            None => on_spawned_threads(p, &shared, &run_rank),
        };
        crate::linger::ACTIVE.fetch_sub(1, std::sync::atomic::Ordering::AcqRel);
        if p > 1 {
            // The other cores stay awake for the next run's ranks (crate::linger).
            crate::linger::linger(cores().min(p) - 1);
        }
        let first = lock(&shared.failed).clone();
        if outcomes.len() < p {
            let msg = first.map(|f| f.1).unwrap_or_default();
            return Err(RankFailure::World(msg));
        }
        if let Some((frank, _)) = first {
            let mut outcomes = outcomes;
            return Err(match outcomes.swap_remove(frank) {
                Outcome::Err(error) => RankFailure::Error { rank: frank, error },
                Outcome::Panic(message) => RankFailure::Panic {
                    rank: frank,
                    message,
                },
                Outcome::Ok(_) => RankFailure::World(format!("rank {frank} failed")),
            });
        }
        Ok(outcomes
            .into_iter()
            .map(|o| match o {
                Outcome::Ok(r) => r,
                _ => unreachable!("no failure was recorded"),
            })
            .collect())
    }
}
