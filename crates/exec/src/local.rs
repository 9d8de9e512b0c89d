//! The in-process world: P ranks as threads of one process, exchanging real messages.
//!
//! Each rank owns only its own data; ranks talk through mailboxes (one FIFO queue per
//! communicator context and ordered pair of ranks). Sends never block, receives wait on a
//! condition variable and give up when a peer has failed or has exited without sending, so a
//! failing rank can never deadlock the others. [`InProcess::run`] joins every thread and reports
//! the first rank that failed, with its own error.

use crate::comm::{CommError, Communicator, Traffic};
use std::collections::{HashMap, VecDeque};
use std::fmt::Display;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

/// Mailbox key: communicator context, sending world rank, receiving world rank.
type Key = (Vec<u64>, usize, usize);

#[derive(Default)]
struct State {
    queues: HashMap<Key, VecDeque<Vec<u8>>>,
    /// The first rank that failed and its message.
    failed: Option<(usize, String)>,
    /// Ranks whose closure has returned.
    done: Vec<bool>,
}

struct Shared {
    state: Mutex<State>,
    cv: Condvar,
    sent: Vec<AtomicU64>,
    received: Vec<AtomicU64>,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic never happens while the lock is held, but recover from poisoning anyway.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn fail(&self, rank: usize, message: String) {
        let mut st = self.lock();
        if st.failed.is_none() {
            st.failed = Some((rank, message));
        }
        drop(st);
        self.cv.notify_all();
    }

    fn finish(&self, rank: usize) {
        self.lock().done[rank] = true;
        self.cv.notify_all();
    }
}

/// One rank's handle on a communicator of the in-process world (the world itself or a
/// sub-communicator from [`Communicator::split`]). Not shared between threads.
pub struct LocalComm {
    shared: Arc<Shared>,
    /// Context id: the world is `[]`, a split appends (split number, color).
    ctx: Vec<u64>,
    /// World ranks of the members, in communicator rank order.
    members: Vec<usize>,
    /// This rank's position in `members`.
    rank: usize,
    /// Splits done so far on this communicator (makes child contexts unique).
    splits: std::cell::Cell<u64>,
}

impl LocalComm {
    fn world_rank(&self) -> usize {
        self.members[self.rank]
    }

    fn send(&self, dst: usize, msg: Vec<u8>) {
        let me = self.world_rank();
        let to = self.members[dst];
        if to != me {
            self.shared.sent[me].fetch_add(msg.len() as u64, Ordering::Relaxed);
        }
        let mut st = self.shared.lock();
        st.queues
            .entry((self.ctx.clone(), me, to))
            .or_default()
            .push_back(msg);
        drop(st);
        self.shared.cv.notify_all();
    }

    fn recv(&self, src: usize) -> Result<Vec<u8>, CommError> {
        let me = self.world_rank();
        let from = self.members[src];
        let key = (self.ctx.clone(), from, me);
        let mut st = self.shared.lock();
        loop {
            if let Some((rank, message)) = &st.failed {
                return Err(CommError::PeerFailed {
                    rank: *rank,
                    message: message.clone(),
                });
            }
            if let Some(m) = st.queues.get_mut(&key).and_then(|q| q.pop_front()) {
                drop(st);
                if from != me {
                    self.shared.received[me].fetch_add(m.len() as u64, Ordering::Relaxed);
                }
                return Ok(m);
            }
            if st.done[from] {
                return Err(CommError::Backend(format!(
                    "rank {from} exited while rank {me} waited for its message"
                )));
            }
            st = self.shared.cv.wait(st).unwrap_or_else(|e| e.into_inner());
        }
    }

    /// Sends `msgs[r]` to every rank r and returns what each rank sent to this one.
    fn exchange(&self, msgs: Vec<Vec<u8>>) -> Result<Vec<Vec<u8>>, CommError> {
        if msgs.len() != self.members.len() {
            return Err(CommError::Invalid(format!(
                "{} messages for {} ranks",
                msgs.len(),
                self.members.len()
            )));
        }
        for (r, m) in msgs.into_iter().enumerate() {
            self.send(r, m);
        }
        (0..self.members.len()).map(|r| self.recv(r)).collect()
    }

    fn all_gather(&self, msg: Vec<u8>) -> Result<Vec<Vec<u8>>, CommError> {
        self.exchange(vec![msg; self.members.len()])
    }
}

fn f64s_to_bytes(xs: &[f64]) -> Vec<u8> {
    xs.iter().flat_map(|x| x.to_le_bytes()).collect()
}
fn f32s_to_bytes(xs: &[f32]) -> Vec<u8> {
    xs.iter().flat_map(|x| x.to_le_bytes()).collect()
}

macro_rules! sum_into {
    ($buf:expr, $parts:expr, $t:ty, $n:expr) => {{
        // Sum in rank order so that every rank gets bit-identical results.
        for x in $buf.iter_mut() {
            *x = 0.0;
        }
        for part in &$parts {
            if part.len() != $buf.len() * $n {
                return Err(CommError::Invalid(
                    "reduction lengths differ between ranks".into(),
                ));
            }
            for (x, c) in $buf.iter_mut().zip(part.chunks_exact($n)) {
                *x += <$t>::from_le_bytes(c.try_into().expect("chunk size"));
            }
        }
    }};
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
        })
    }

    fn all_to_all_v(
        &self,
        send: &[u8],
        send_counts: &[usize],
    ) -> Result<(Vec<u8>, Vec<usize>), CommError> {
        crate::comm::check_send_counts(send.len(), send_counts, self.size())?;
        let mut msgs = Vec::with_capacity(self.size());
        let mut off = 0;
        for &c in send_counts {
            msgs.push(send[off..off + c].to_vec());
            off += c;
        }
        let got = self.exchange(msgs)?;
        let counts = got.iter().map(Vec::len).collect();
        Ok((got.concat(), counts))
    }

    fn all_reduce_sum_f64(&self, buf: &mut [f64]) -> Result<(), CommError> {
        let parts = self.all_gather(f64s_to_bytes(buf))?;
        sum_into!(buf, parts, f64, 8);
        Ok(())
    }

    fn all_reduce_sum_f32(&self, buf: &mut [f32]) -> Result<(), CommError> {
        let parts = self.all_gather(f32s_to_bytes(buf))?;
        sum_into!(buf, parts, f32, 4);
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

    fn reduce_scatter_sum_f64(
        &self,
        send: &[f64],
        recv_counts: &[usize],
    ) -> Result<Vec<f64>, CommError> {
        crate::comm::check_recv_counts(send.len(), recv_counts, self.size())?;
        let mut msgs = Vec::with_capacity(self.size());
        let mut off = 0;
        for &c in recv_counts {
            msgs.push(f64s_to_bytes(&send[off..off + c]));
            off += c;
        }
        let parts = self.exchange(msgs)?;
        let mut out = vec![0.0; recv_counts[self.rank]];
        sum_into!(out, parts, f64, 8);
        Ok(out)
    }

    fn broadcast(&self, buf: &mut Vec<u8>, root: usize) -> Result<(), CommError> {
        if root >= self.size() {
            return Err(CommError::Invalid(format!(
                "broadcast root {root} of {} ranks",
                self.size()
            )));
        }
        if self.rank == root {
            for r in 0..self.size() {
                if r != root {
                    self.send(r, buf.clone());
                }
            }
        } else {
            *buf = self.recv(root)?;
        }
        Ok(())
    }

    fn barrier(&self) -> Result<(), CommError> {
        self.all_gather(Vec::new()).map(|_| ())
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

    /// Runs `f` on every rank, each on its own thread with its own world communicator, and
    /// returns the results in rank order. When ranks fail, the first one to fail is reported
    /// with its own error (the others, which then see [`CommError::PeerFailed`], are joined
    /// and their secondary errors dropped).
    pub fn run<R, E, F>(&self, f: F) -> Result<Vec<R>, RankFailure<E>>
    where
        R: Send,
        E: Display + Send,
        F: Fn(&LocalComm) -> Result<R, E> + Sync,
    {
        let p = self.procs;
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                done: vec![false; p],
                ..State::default()
            }),
            cv: Condvar::new(),
            sent: (0..p).map(|_| AtomicU64::new(0)).collect(),
            received: (0..p).map(|_| AtomicU64::new(0)).collect(),
        });
        enum Outcome<R, E> {
            Ok(R),
            Err(E),
            Panic(String),
        }
        let outcomes: Vec<Outcome<R, E>> = std::thread::scope(|s| {
            let mut handles = Vec::with_capacity(p);
            for rank in 0..p {
                let shared_t = shared.clone();
                let f = &f;
                let h = std::thread::Builder::new()
                    .name(format!("deinsum-rank-{rank}"))
                    .spawn_scoped(s, move || {
                        let shared = shared_t;
                        let comm = LocalComm {
                            shared: shared.clone(),
                            ctx: Vec::new(),
                            members: (0..p).collect(),
                            rank,
                            splits: std::cell::Cell::new(0),
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
                    });
                match h {
                    Ok(h) => handles.push(h),
                    Err(e) => {
                        shared.fail(rank, format!("cannot spawn thread: {e}"));
                        break;
                    }
                }
            }
            handles
                .into_iter()
                .map(|h| {
                    h.join()
                        .unwrap_or_else(|e| Outcome::Panic(panic_message(e.as_ref())))
                })
                .collect()
        });
        let first = shared.lock().failed.clone();
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
