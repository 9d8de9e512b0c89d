//! The in-process world: collectives, sub-communicators, byte counting and failures.

use deinsum_exec::{CommError, Communicator, InProcess, RankFailure};

#[test]
fn collectives_and_traffic() {
    for p in [1usize, 2, 3, 5, 8] {
        let world = InProcess::new(p).unwrap();
        let out = world
            .run(|c| {
                let me = c.rank();
                // all-to-all-v: rank r sends r+1 bytes of value `me` to every rank r.
                let counts: Vec<usize> = (0..p).map(|r| r + 1).collect();
                let send: Vec<u8> = (0..p).flat_map(|r| vec![me as u8; r + 1]).collect();
                let (recv, rc) = c.all_to_all_v(&send, &counts)?;
                assert_eq!(rc, vec![me + 1; p]);
                let expect: Vec<u8> = (0..p).flat_map(|s| vec![s as u8; me + 1]).collect();
                assert_eq!(recv, expect);
                let t = c.traffic();
                // Everything but the self-message is counted.
                let sent_other: usize = (0..p).filter(|&r| r != me).map(|r| r + 1).sum();
                assert_eq!(t.sent, sent_other as u64);
                assert_eq!(t.received, ((me + 1) * (p - 1)) as u64);
                let mut v = vec![me as f64, 1.0];
                c.all_reduce_sum(&mut v)?;
                assert_eq!(v, vec![(p * (p - 1) / 2) as f64, p as f64]);
                let mut w = vec![me as f32];
                c.all_reduce_sum(&mut w)?;
                assert_eq!(w[0], (p * (p - 1) / 2) as f32);
                let mut m = vec![me as u64, 100 - me as u64];
                c.all_reduce_max_u64(&mut m)?;
                assert_eq!(m, vec![p as u64 - 1, 100]);
                // Reduce-scatter with variable counts: rank r gets r elements.
                let counts: Vec<usize> = (0..p).collect();
                let total: usize = counts.iter().sum();
                let send: Vec<f64> = (0..total).map(|x| x as f64).collect();
                let got = c.reduce_scatter_v(&send, &counts)?;
                let off: usize = (0..me).sum();
                let want: Vec<f64> = (off..off + me).map(|x| (x * p) as f64).collect();
                assert_eq!(got, want);
                let mut b = if me == p - 1 {
                    b"plan".to_vec()
                } else {
                    Vec::new()
                };
                c.broadcast(&mut b, p - 1)?;
                assert_eq!(b, b"plan".to_vec());
                c.barrier()?;
                Ok::<_, CommError>(me)
            })
            .unwrap();
        assert_eq!(out, (0..p).collect::<Vec<_>>());
    }
}

#[test]
fn split_forms_sub_communicators() {
    let world = InProcess::new(6).unwrap();
    world
        .run(|c| {
            let me = c.rank();
            // Two colors by parity, ordered by descending key.
            let sub = c.split(me % 2, 10 - me)?;
            assert_eq!(sub.size(), 3);
            let members: Vec<usize> = (0..6).filter(|r| r % 2 == me % 2).rev().collect();
            assert_eq!(sub.rank(), members.iter().position(|&r| r == me).unwrap());
            let mut v = vec![me as f64];
            sub.all_reduce_sum(&mut v)?;
            assert_eq!(v[0], members.iter().sum::<usize>() as f64);
            // A split of a split, and the world still works afterwards.
            let subsub = sub.split(0, sub.rank())?;
            assert_eq!(subsub.size(), 3);
            let mut w = vec![1.0];
            c.all_reduce_sum(&mut w)?;
            assert_eq!(w[0], 6.0);
            Ok::<_, CommError>(())
        })
        .unwrap();
}

#[test]
fn failing_rank_fails_the_run_without_hanging() {
    for p in [2usize, 3, 7] {
        let world = InProcess::new(p).unwrap();
        let r = world.run(|c| {
            if c.rank() == p - 1 {
                return Err(CommError::Invalid("bad block on the last rank".into()));
            }
            // The others block in a collective the failed rank never joins.
            c.barrier()?;
            Ok(())
        });
        match r {
            Err(RankFailure::Error { rank, error }) => {
                assert_eq!(rank, p - 1);
                assert!(error.to_string().contains("bad block"));
            }
            other => panic!("expected the last rank's error, got {other:?}"),
        }
    }
}

#[test]
fn panicking_rank_fails_the_run() {
    let world = InProcess::new(4).unwrap();
    let r = world.run(|c| {
        if c.rank() == 2 {
            panic!("kernel blew up");
        }
        let mut v = vec![1.0];
        c.all_reduce_sum(&mut v)?;
        Ok::<_, CommError>(())
    });
    match r {
        Err(RankFailure::Panic { rank, message }) => {
            assert_eq!(rank, 2);
            assert!(message.contains("kernel blew up"));
        }
        other => panic!("expected rank 2's panic, got {other:?}"),
    }
}

#[test]
fn rank_that_exits_early_does_not_hang_others() {
    let world = InProcess::new(3).unwrap();
    let r = world.run(|c| {
        if c.rank() == 0 {
            return Ok(());
        }
        c.barrier()
    });
    let e = r.unwrap_err();
    assert!(e.to_string().contains("exited"), "{e}");
}

/// A communicator that forwards everything but `exchange` to the in-process one, so the
/// trait's default `exchange` (through `all_to_all_v`) runs.
struct BytesOnly<'a>(&'a deinsum_exec::LocalComm);

impl Communicator for BytesOnly<'_> {
    fn rank(&self) -> usize {
        self.0.rank()
    }
    fn size(&self) -> usize {
        self.0.size()
    }
    fn split(&self, _: usize, _: usize) -> Result<Self, CommError> {
        Err(CommError::Invalid("not needed".into()))
    }
    fn all_to_all_v(&self, s: &[u8], c: &[usize]) -> Result<(Vec<u8>, Vec<usize>), CommError> {
        self.0.all_to_all_v(s, c)
    }
    fn all_reduce_sum<T: deinsum_exec::Scalar>(&self, b: &mut [T]) -> Result<(), CommError> {
        self.0.all_reduce_sum(b)
    }
    fn all_reduce_max_u64(&self, b: &mut [u64]) -> Result<(), CommError> {
        self.0.all_reduce_max_u64(b)
    }
    fn broadcast(&self, b: &mut Vec<u8>, root: usize) -> Result<(), CommError> {
        self.0.broadcast(b, root)
    }
    fn barrier(&self) -> Result<(), CommError> {
        self.0.barrier()
    }
    fn traffic(&self) -> deinsum_exec::Traffic {
        self.0.traffic()
    }
}

/// Rank r sends `r * 100 + d` repeated (r + d) % 3 times to each rank d with (r + d) % 2 == 0,
/// itself included; checks what arrives and the bytes counted.
fn exchange_pattern<C: Communicator>(c: &C) -> Result<(), CommError> {
    let (me, p) = (c.rank(), c.size());
    let talks = |r: usize, d: usize| (r + d).is_multiple_of(2);
    let msg = |r: usize, d: usize| vec![(r * 100 + d) as f64; (r + d) % 3];
    let sends: Vec<(usize, Vec<f64>)> = (0..p)
        .filter(|&d| talks(me, d))
        .map(|d| (d, msg(me, d)))
        .collect();
    let from: Vec<usize> = (0..p).rev().filter(|&r| talks(r, me)).collect();
    let t0 = c.traffic();
    let got = c.exchange(sends, &from)?;
    let t1 = c.traffic();
    assert_eq!(got.len(), from.len());
    for (&r, m) in from.iter().zip(&got) {
        assert_eq!(m, &msg(r, me), "rank {me} from {r}");
    }
    let sent: usize = (0..p)
        .filter(|&d| d != me && talks(me, d))
        .map(|d| msg(me, d).len())
        .sum();
    let recv: usize = from
        .iter()
        .filter(|&&r| r != me)
        .map(|&r| msg(r, me).len())
        .sum();
    assert_eq!(t1.sent - t0.sent, 8 * sent as u64);
    assert_eq!(t1.received - t0.received, 8 * recv as u64);
    Ok(())
}

#[test]
fn typed_exchange_hands_over_and_default_agrees() {
    for p in [1usize, 2, 3, 5, 8] {
        InProcess::new(p)
            .unwrap()
            .run(|c| {
                exchange_pattern(c)?;
                exchange_pattern(&BytesOnly(c))?;
                // Several exchanges in a row keep their order per pair.
                exchange_pattern(c)
            })
            .unwrap();
    }
}

#[test]
fn exchange_rejects_a_rank_out_of_range() {
    InProcess::new(2)
        .unwrap()
        .run(|c| {
            let e = c.exchange::<f64>(vec![(5, vec![1.0])], &[]).unwrap_err();
            assert!(e.to_string().contains("rank 5"), "{e}");
            let e = BytesOnly(c)
                .exchange::<f64>(vec![(5, vec![1.0])], &[])
                .unwrap_err();
            assert!(e.to_string().contains("rank 5"), "{e}");
            Ok::<_, CommError>(())
        })
        .unwrap();
}

#[test]
fn a_thousand_ranks_meet_in_collectives() {
    // One wake-up per rank per collective: a barrier and a reduction of 1000 threads.
    let p = 1000;
    let out = InProcess::new(p)
        .unwrap()
        .run(|c| {
            c.barrier()?;
            let mut v = vec![1.0];
            c.all_reduce_sum(&mut v)?;
            Ok::<_, CommError>(v[0])
        })
        .unwrap();
    assert!(out.iter().all(|&x| x == p as f64));
}

#[test]
fn blocked_time_is_the_wait_for_a_late_peer() {
    use std::time::Duration;
    let world = InProcess::new(2).unwrap();
    let late = Duration::from_millis(150);
    let out = world
        .run(|c| {
            let before = c.blocked();
            if c.rank() == 1 {
                std::thread::sleep(late);
            }
            // A point-to-point message and a collective: rank 0 waits for rank 1 in both.
            let got = c.send_recv(
                Some((1 - c.rank(), vec![c.rank() as f64; 4])),
                Some((1 - c.rank(), 4)),
            )?;
            assert_eq!(got, Some(vec![(1 - c.rank()) as f64; 4]));
            if c.rank() == 1 {
                std::thread::sleep(late);
            }
            c.barrier()?;
            Ok::<_, CommError>(c.blocked() - before)
        })
        .unwrap();
    // Rank 0 waited about twice `late`; rank 1, which was the late one, hardly at all.
    assert!(out[0] >= late * 2 - Duration::from_millis(20), "{:?}", out);
    assert!(out[1] < late, "{:?}", out);
}

/// `all_gather_each` sees every rank's elements in rank order (zero counts included), counts
/// the same traffic as `all_gather_v` and hands each rank's buffer back unchanged.
#[test]
fn all_gather_each_reads_every_buffer_and_hands_it_back() {
    for p in [1usize, 2, 3, 7] {
        InProcess::new(p)
            .unwrap()
            .run(|c| {
                let me = c.rank();
                // Rank r offers r % 3 elements (rank 0 and every third rank none).
                let counts: Vec<usize> = (0..p).map(|r| r % 3).collect();
                let mine: Vec<f64> = (0..counts[me]).map(|i| (100 * me + i) as f64).collect();
                let before = c.traffic();
                let mut seen: Vec<(usize, Vec<f64>)> = Vec::new();
                let back = c.all_gather_each(mine.clone(), &counts, |x, d| {
                    seen.push((x, d.to_vec()));
                    Ok::<(), CommError>(())
                })?;
                assert_eq!(back, mine, "rank {me}: its buffer comes back as it was");
                let want: Vec<(usize, Vec<f64>)> = (0..p)
                    .map(|x| (x, (0..counts[x]).map(|i| (100 * x + i) as f64).collect()))
                    .collect();
                assert_eq!(seen, want, "rank {me}");
                let t = c.traffic();
                let others: usize = (0..p).filter(|&r| r != me).map(|r| counts[r]).sum();
                assert_eq!(t.received - before.received, 8 * others as u64);
                let sent = if p > 1 { 8 * counts[me] * (p - 1) } else { 0 };
                assert_eq!(t.sent - before.sent, sent as u64);
                // The same elements back to back from the plain all-gather.
                let flat = c.all_gather_v(&mine, &counts)?;
                let seen_flat: Vec<f64> = seen.into_iter().flat_map(|(_, d)| d).collect();
                assert_eq!(flat, seen_flat);
                Ok::<(), CommError>(())
            })
            .unwrap();
    }
}

/// A rank whose `place` fails fails the run; its peers, waiting for its acknowledgement,
/// give up instead of hanging.
#[test]
fn all_gather_each_failing_place_does_not_hang() {
    let r = InProcess::new(3).unwrap().run(|c| {
        let me = c.rank();
        c.all_gather_each(vec![me as f64; 4], &[4, 4, 4], |x, _| {
            if me == 1 && x == 0 {
                Err(CommError::Invalid("refused".into()))
            } else {
                Ok(())
            }
        })
        .map(|_| ())
    });
    assert!(r.is_err());
}

/// `all_gather_shared` builds once from every rank's elements in rank order (zero counts
/// included) and every rank gets that one result (the same allocation), counts the traffic of
/// `all_gather_v` and hands each rank's buffer back unchanged; twice in a row, so a lent
/// buffer is its owner's again before the next call.
#[test]
fn all_gather_shared_builds_once_for_every_rank() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    for p in [1usize, 2, 3, 5, 7] {
        let builds = AtomicUsize::new(0);
        let addrs = InProcess::new(p)
            .unwrap()
            .run(|c| {
                let me = c.rank();
                let counts: Vec<usize> = (0..p).map(|r| r % 3).collect();
                let mine: Vec<f64> = (0..counts[me]).map(|i| (100 * me + i) as f64).collect();
                let mut addrs = Vec::new();
                for _ in 0..2 {
                    let before = c.traffic();
                    let (all, back) = c.all_gather_shared(mine.clone(), &counts, |d, lent| {
                        builds.fetch_add(1, Ordering::Relaxed);
                        assert_eq!(lent, p, "the builder builds for every rank");
                        Ok::<Vec<f64>, CommError>(d.concat())
                    })?;
                    assert_eq!(back, mine, "rank {me}: its buffer comes back as it was");
                    assert_eq!(*all, c.all_gather_v(&mine, &counts)?, "rank {me}");
                    let t = c.traffic();
                    // The check above is a second all-gather: each counted once.
                    let others: usize = (0..p).filter(|&r| r != me).map(|r| counts[r]).sum();
                    assert_eq!(t.received - before.received, 2 * 8 * others as u64);
                    let sent = if p > 1 { 8 * counts[me] * (p - 1) } else { 0 };
                    assert_eq!(t.sent - before.sent, 2 * sent as u64);
                    addrs.push(all.as_ptr() as usize);
                }
                Ok::<_, CommError>(addrs)
            })
            .unwrap();
        assert_eq!(
            builds.load(Ordering::Relaxed),
            2,
            "P={p}: one build per call"
        );
        assert!(addrs.iter().all(|a| a == &addrs[0]), "P={p}: one result");
    }
}

/// A builder that fails fails the run; the ranks waiting for its result give up instead of
/// hanging.
#[test]
fn all_gather_shared_failing_build_does_not_hang() {
    let r = InProcess::new(3).unwrap().run(|c| {
        let me = c.rank();
        c.all_gather_shared(vec![me as f64; 4], &[4, 4, 4], |_, _| {
            Err::<Vec<f64>, CommError>(CommError::Invalid("refused".into()))
        })
        .map(|_| ())
    });
    assert!(r.is_err());
}

/// Runs `f` on a thread of its own and fails if it has not returned within a minute (a world
/// waiting for a rank that never runs would otherwise hang the test binary).
fn within_a_minute(f: impl FnOnce() + Send + 'static) {
    let (done, finished) = std::sync::mpsc::channel();
    let h = std::thread::spawn(move || {
        f();
        let _ = done.send(());
    });
    match finished.recv_timeout(std::time::Duration::from_secs(60)) {
        Ok(()) => h.join().unwrap(),
        Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
            std::panic::resume_unwind(h.join().unwrap_err())
        }
        Err(std::sync::mpsc::RecvTimeoutError::Timeout) => panic!("worlds did not finish"),
    }
}

/// An all-reduce of every rank's number, checked, and the rank's kernel thread count.
fn sum_of_ranks(c: &impl Communicator) -> Result<usize, CommError> {
    let p = c.size();
    let mut v = vec![c.rank() as f64];
    c.all_reduce_sum(&mut v)?;
    assert_eq!(v[0], (p * (p - 1) / 2) as f64);
    Ok(deinsum_exec::kernels::threads())
}

#[test]
fn worlds_run_at_once_from_many_threads_finish() {
    // Ranks 1.. run on kept threads: worlds started at once from several threads (of the
    // same and of different sizes) must not queue a rank behind another world's.
    within_a_minute(|| {
        let threads: Vec<_> = (0..4)
            .map(|t| {
                std::thread::spawn(move || {
                    for i in 0..30 {
                        let p = [2, 3, 3, 5][(t + i) % 4];
                        let out = InProcess::new(p).unwrap().run(sum_of_ranks).unwrap();
                        // A rank's kernels use one thread: the threads carrying ranks are
                        // not the rank's own pool to split work over.
                        assert_eq!(out, vec![1; p]);
                    }
                })
            })
            .collect();
        threads.into_iter().for_each(|h| h.join().unwrap());
    });
}

#[test]
fn a_rank_runs_a_world_of_its_own() {
    // Rank 0 runs on the caller's thread and the others on kept threads; either may start a
    // world inside its own (which then cannot borrow the threads its own world holds).
    within_a_minute(|| {
        for _ in 0..10 {
            let out = InProcess::new(3)
                .unwrap()
                .run(|c| {
                    // As many ranks as the outer world: the same kept threads it holds.
                    let inner = InProcess::new(3).unwrap().run(sum_of_ranks).unwrap();
                    assert_eq!(inner, vec![1; 3]);
                    sum_of_ranks(c)
                })
                .unwrap();
            assert_eq!(out, vec![1; 3]);
        }
    });
}

#[test]
fn a_failing_rank_on_a_kept_thread_leaves_them_usable() {
    within_a_minute(|| {
        for round in 0..5 {
            let world = InProcess::new(3).unwrap();
            let err = world
                .run(|c| {
                    if c.rank() == 2 {
                        panic!("rank 2 fails in round {round}");
                    }
                    sum_of_ranks(c)
                })
                .unwrap_err();
            assert_eq!(err.rank(), Some(2), "{err}");
            assert_eq!(world.run(sum_of_ranks).unwrap(), vec![1; 3]);
        }
    });
}

/// Every typed collective of the in-process backend, generic over the element type: sums,
/// scatters, broadcasts and gathers give the same values in f32 and f64 (small integers, exact
/// in both), and move `T::DTYPE.bytes()` bytes per element.
fn typed_collectives<T: deinsum_exec::Scalar>(p: usize) {
    let world = InProcess::new(p).unwrap();
    world
        .run(|c| {
            let me = c.rank();
            let t0 = c.traffic();
            let mut v = vec![T::from_f64(me as f64), T::from_f64(1.0)];
            c.all_reduce_sum(&mut v)?;
            assert_eq!(
                v,
                vec![T::from_f64((p * (p - 1) / 2) as f64), T::from_f64(p as f64)]
            );
            let t1 = c.traffic();
            // An all-reduce is counted as an all-gather of the two elements.
            let bytes = (2 * T::DTYPE.bytes() * (p - 1)) as u64;
            assert_eq!(
                (t1.sent - t0.sent, t1.received - t0.received),
                (bytes, bytes)
            );
            // Reduce-scatter with variable counts: rank r gets r elements.
            let counts: Vec<usize> = (0..p).collect();
            let total: usize = counts.iter().sum();
            let send: Vec<T> = (0..total).map(|x| T::from_f64(x as f64)).collect();
            let got = c.reduce_scatter_v(&send, &counts)?;
            let off: usize = (0..me).sum();
            let want: Vec<T> = (off..off + me)
                .map(|x| T::from_f64((x * p) as f64))
                .collect();
            assert_eq!(got, want);
            let mut b = vec![T::from_f64(if me == 0 { 7.0 } else { 0.0 }); 3];
            c.broadcast_typed(&mut b, 0)?;
            assert_eq!(b, vec![T::from_f64(7.0); 3]);
            let summed = c.reduce_sum(&[T::from_f64(1.0)], p - 1)?;
            assert_eq!(summed, (me == p - 1).then(|| vec![T::from_f64(p as f64)]));
            let all = c.all_gather_v(&vec![T::from_f64(me as f64); me], &counts)?;
            let want: Vec<T> = (0..p)
                .flat_map(|r| vec![T::from_f64(r as f64); r])
                .collect();
            assert_eq!(all, want);
            Ok::<_, CommError>(())
        })
        .unwrap();
}

#[test]
fn typed_collectives_in_f32_and_f64() {
    for p in [1usize, 2, 3, 5] {
        typed_collectives::<f32>(p);
        typed_collectives::<f64>(p);
    }
}
