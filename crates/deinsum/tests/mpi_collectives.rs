//! MpiComm's collectives under mpirun: contents, uneven and empty counts, calls split by a
//! small count cap, sub-communicators, errors, and traffic equal to the in-process backend's.
//!
//! `cargo test -p deinsum --features mpi --test mpi_collectives` (relaunches under mpirun).

mod mpi_support;

use deinsum::exec::comm::cart_color_key;
use deinsum::exec::mpi::MpiComm;
use deinsum::exec::{Collective, Traffic};
use deinsum::{Communicator, InProcess};
use mpi_support::Checks;
use std::process::ExitCode;

/// Length of the message from `s` to `d` (uneven, some empty, self included).
fn msg_len(s: usize, d: usize) -> usize {
    (3 * s + 5 * d + 1) % 13 + if s == d + 1 { 20 } else { 0 }
}

fn msg_byte(s: usize, d: usize, i: usize) -> u8 {
    ((s * 31 + d * 17 + i) % 251) as u8
}

/// Reduce-scatter segment length of rank `r` (uneven, one empty at r = 5).
fn seg_len(r: usize) -> usize {
    (r * 5 + 3) % 7
}

/// Runs every collective once on `comm`, recording checks on the results (not the traffic).
fn sequence<C: Communicator>(comm: &C, c: &mut Checks, tag: &str) {
    let p = comm.size();
    let me = comm.rank();

    // all-to-all-v
    let counts: Vec<usize> = (0..p).map(|d| msg_len(me, d)).collect();
    let send: Vec<u8> = (0..p)
        .flat_map(|d| (0..msg_len(me, d)).map(move |i| msg_byte(me, d, i)))
        .collect();
    match comm.all_to_all_v(&send, &counts) {
        Ok((recv, rc)) => {
            let want_counts: Vec<usize> = (0..p).map(|s| msg_len(s, me)).collect();
            c.eq(&rc, &want_counts, &format!("{tag} alltoallv counts"));
            let want: Vec<u8> = (0..p)
                .flat_map(|s| (0..msg_len(s, me)).map(move |i| msg_byte(s, me, i)))
                .collect();
            c.check(recv == want, || format!("{tag} alltoallv contents differ"));
        }
        Err(e) => c.check(false, || format!("{tag} alltoallv: {e}")),
    }
    // Bad arguments are refused on every rank alike, without communicating.
    let bad = comm.all_to_all_v(&send, &counts[..p - 1]);
    c.check(bad.is_err(), || {
        format!("{tag} alltoallv accepted {} counts", p - 1)
    });
    let mut more = send.clone();
    more.push(0);
    c.check(comm.all_to_all_v(&more, &counts).is_err(), || {
        format!("{tag} alltoallv accepted a buffer longer than its counts")
    });

    // all-reduce f64 / f32 / max u64
    let mut b64: Vec<f64> = (0..37)
        .map(|i| me as f64 * 1000.0 + i as f64 * 0.25)
        .collect();
    let rsum = (p * (p - 1) / 2) as f64;
    match comm.all_reduce_sum(&mut b64) {
        Ok(()) => {
            let want: Vec<f64> = (0..37)
                .map(|i| rsum * 1000.0 + p as f64 * i as f64 * 0.25)
                .collect();
            c.check(b64 == want, || format!("{tag} allreduce f64 {b64:?}"));
        }
        Err(e) => c.check(false, || format!("{tag} allreduce f64: {e}")),
    }
    let mut b32: Vec<f32> = (0..11).map(|i| (me * 3 + i) as f32).collect();
    match comm.all_reduce_sum(&mut b32) {
        Ok(()) => {
            let want: Vec<f32> = (0..11)
                .map(|i| (3.0 * rsum) as f32 + (p * i) as f32)
                .collect();
            c.check(b32 == want, || format!("{tag} allreduce f32 {b32:?}"));
        }
        Err(e) => c.check(false, || format!("{tag} allreduce f32: {e}")),
    }
    let mut bm: Vec<u64> = (0..9).map(|i| ((me * 7 + i) % (p + 2)) as u64).collect();
    match comm.all_reduce_max_u64(&mut bm) {
        Ok(()) => {
            let want: Vec<u64> = (0..9)
                .map(|i| {
                    (0..p)
                        .map(|r| ((r * 7 + i) % (p + 2)) as u64)
                        .max()
                        .unwrap_or(0)
                })
                .collect();
            c.eq(&bm, &want, &format!("{tag} allreduce max u64"));
        }
        Err(e) => c.check(false, || format!("{tag} allreduce max: {e}")),
    }

    // reduce-scatter with uneven counts
    let rcounts: Vec<usize> = (0..p).map(seg_len).collect();
    let total: usize = rcounts.iter().sum();
    let off: usize = rcounts[..me].iter().sum();
    let send: Vec<f64> = (0..total).map(|j| me as f64 + j as f64 * 0.5).collect();
    match comm.reduce_scatter_v(&send, &rcounts) {
        Ok(got) => {
            let want: Vec<f64> = (0..rcounts[me])
                .map(|t| rsum + p as f64 * (off + t) as f64 * 0.5)
                .collect();
            c.check(got == want, || {
                format!("{tag} reduce-scatter {got:?} want {want:?}")
            });
        }
        Err(e) => c.check(false, || format!("{tag} reduce-scatter: {e}")),
    }
    c.check(
        total == 0 || comm.reduce_scatter_v(&send[1..], &rcounts).is_err(),
        || format!("{tag} reduce-scatter accepted a short buffer"),
    );

    // broadcast from the last rank, a payload and an empty one
    let root = p - 1;
    let payload: Vec<u8> = (0..1000).map(|i| (i * 7 % 256) as u8).collect();
    let mut buf = if me == root {
        payload.clone()
    } else {
        vec![9u8; 3]
    };
    match comm.broadcast(&mut buf, root) {
        Ok(()) => c.check(buf == payload, || {
            format!("{tag} broadcast contents differ")
        }),
        Err(e) => c.check(false, || format!("{tag} broadcast: {e}")),
    }
    let mut empty = if me == 0 { Vec::new() } else { vec![1u8; 5] };
    match comm.broadcast(&mut empty, 0) {
        Ok(()) => c.check(empty.is_empty(), || {
            format!("{tag} empty broadcast left {empty:?}")
        }),
        Err(e) => c.check(false, || format!("{tag} empty broadcast: {e}")),
    }
    c.check(comm.broadcast(&mut buf, p).is_err(), || {
        format!("{tag} broadcast accepted root {p}")
    });

    // split: parity colors, reversed keys
    match comm.split(me % 2, p - me) {
        Ok(sub) => {
            let same: Vec<usize> = (0..p).filter(|r| r % 2 == me % 2).collect();
            c.eq(sub.size(), same.len(), &format!("{tag} split size"));
            let want_rank = same.iter().filter(|&&r| r > me).count();
            c.eq(
                sub.rank(),
                want_rank,
                &format!("{tag} split rank (ordered by key)"),
            );
            let mut v = [me as f64];
            match sub.all_reduce_sum(&mut v) {
                Ok(()) => c.eq(
                    v[0],
                    same.iter().sum::<usize>() as f64,
                    &format!("{tag} sub allreduce"),
                ),
                Err(e) => c.check(false, || format!("{tag} sub allreduce: {e}")),
            }
        }
        Err(e) => c.check(false, || format!("{tag} split: {e}")),
    }
    c.check(comm.barrier().is_ok(), || format!("{tag} barrier"));
}

/// Words each rank should have moved in [`sequence`], by the shared message model.
fn model_traffic(p: usize, me: usize) -> (u64, u64) {
    let peers = (p - 1) as u64;
    let mut sent = 0u64;
    let mut recv = 0u64;
    for r in (0..p).filter(|&r| r != me) {
        sent += msg_len(me, r) as u64;
        recv += msg_len(r, me) as u64;
    }
    let ar = (37 * 8 + 11 * 4 + 9 * 8) as u64 * peers;
    sent += ar;
    recv += ar;
    sent += 8
        * (0..p)
            .filter(|&r| r != me)
            .map(|r| seg_len(r) as u64)
            .sum::<u64>();
    recv += 8 * seg_len(me) as u64 * peers;
    if me == p - 1 {
        sent += 1000 * peers;
    } else {
        recv += 1000;
    }
    let same = (0..p).filter(|r| r % 2 == me % 2).count() as u64;
    sent += 16 * peers + 8 * (same - 1);
    recv += 16 * peers + 8 * (same - 1);
    (sent, recv)
}

/// Grids to lay over `p` ranks: the whole world as one dim and as two or three, and a grid
/// one rank short of the world (its last rank outside).
fn grids(p: usize) -> Vec<Vec<usize>> {
    let mut out = vec![vec![p]];
    if let Some(a) = (2..p).find(|&a| p.is_multiple_of(a)) {
        out.push(vec![a, p / a]);
        out.push(vec![p / a, 1, a]);
    }
    if p > 1 {
        out.push(vec![p - 1]);
    }
    out
}

/// Every kept-dims pattern of a grid of `n` dims.
fn keeps(n: usize) -> Vec<Vec<bool>> {
    (0..1usize << n)
        .map(|m| (0..n).map(|k| m >> k & 1 == 1).collect())
        .collect()
}

/// The world ranks of `me`'s fibre (sub-communicator order), `None` outside the grid.
fn fibre_of(dims: &[usize], keep: &[bool], me: usize, p: usize) -> Option<Vec<usize>> {
    let (color, _) = cart_color_key(dims, keep, me, p).ok()?;
    let color = color?;
    let mut m: Vec<(usize, usize)> = (0..p)
        .filter_map(|r| match cart_color_key(dims, keep, r, p) {
            Ok((Some(c), k)) if c == color => Some((k, r)),
            _ => None,
        })
        .collect();
    m.sort_unstable();
    Some(m.into_iter().map(|(_, r)| r).collect())
}

/// Uneven contribution length of world rank `w` (some empty).
fn contrib_len(w: usize) -> usize {
    (w * 3 + 1) % 5
}

/// The typed collectives on every sub-grid fibre (uneven and empty blocks), checked against
/// their definitions; returns this rank's traffic over the sequence.
fn sub_grid_sequence<C: Communicator>(comm: &C, c: &mut Checks, tag: &str) -> Traffic {
    let (p, me) = (comm.size(), comm.rank());
    let t0 = comm.traffic();
    for dims in grids(p) {
        for keep in keeps(dims.len()) {
            let tag = format!("{tag} grid {dims:?} keep {keep:?}");
            let sub = match comm.cart_sub(&dims, &keep) {
                Ok(s) => s,
                Err(e) => return fail(c, &tag, e, t0),
            };
            let f = fibre_of(&dims, &keep, me, p);
            let (Some(sub), Some(f)) = (sub, f.clone()) else {
                c.check(f.is_none(), || {
                    format!("{tag}: rank {me} got no sub-communicator")
                });
                continue;
            };
            c.eq(sub.size(), f.len(), &format!("{tag} size"));
            let k = f.iter().position(|&r| r == me).unwrap_or(usize::MAX);
            c.eq(sub.rank(), k, &format!("{tag} rank"));
            let n = f.len();
            // all-gather-v
            let counts: Vec<usize> = f.iter().map(|&w| contrib_len(w)).collect();
            let mine: Vec<f64> = (0..counts[k]).map(|i| (me * 100 + i) as f64).collect();
            let want: Vec<f64> = f
                .iter()
                .flat_map(|&w| (0..contrib_len(w)).map(move |i| (w * 100 + i) as f64))
                .collect();
            let got = sub.all_gather_v(&mine, &counts);
            c.check(got.as_ref().ok() == Some(&want), || {
                format!("{tag} all-gather-v: {got:?}")
            });
            // reduce-scatter-v: segment x gets (w + 7x + i) from member w.
            let send: Vec<f64> = (0..n)
                .flat_map(|x| (0..counts[x]).map(move |i| (me + 7 * x + i) as f64))
                .collect();
            let sumw: usize = f.iter().sum();
            let want: Vec<f64> = (0..counts[k])
                .map(|i| (sumw + n * (7 * k + i)) as f64)
                .collect();
            let got = sub.reduce_scatter_v(&send, &counts);
            c.check(got.as_ref().ok() == Some(&want), || {
                format!("{tag} reduce-scatter-v: {got:?}")
            });
            // all-reduce (f32)
            let mut buf: Vec<f32> = (0..5).map(|i| (me + i) as f32).collect();
            let want: Vec<f32> = (0..5).map(|i| (sumw + n * i) as f32).collect();
            let ok = sub.all_reduce_sum(&mut buf).is_ok() && buf == want;
            c.check(ok, || format!("{tag} all-reduce: {buf:?}"));
            // broadcast from member 1 % n
            let root = 1 % n;
            let mut buf: Vec<f64> = (0..6)
                .map(|i| {
                    if k == root {
                        (me * 10 + i) as f64
                    } else {
                        -1.0
                    }
                })
                .collect();
            let want: Vec<f64> = (0..6).map(|i| (f[root] * 10 + i) as f64).collect();
            let ok = sub.broadcast_typed(&mut buf, root).is_ok() && buf == want;
            c.check(ok, || format!("{tag} broadcast: {buf:?}"));
            // reduce onto the last member
            let buf: Vec<f64> = (0..4).map(|i| (me + i) as f64).collect();
            let got = sub.reduce_sum(&buf, n - 1);
            let want =
                (k == n - 1).then(|| (0..4).map(|i| (sumw + n * i) as f64).collect::<Vec<_>>());
            c.check(got.as_ref().ok() == Some(&want), || {
                format!("{tag} reduce: {got:?}")
            });
            // gather-v onto member 0
            let got = sub.gather_v(&mine, &counts, 0);
            let all: Vec<f64> = f
                .iter()
                .flat_map(|&w| (0..contrib_len(w)).map(move |i| (w * 100 + i) as f64))
                .collect();
            let want = (k == 0).then_some(all);
            c.check(got.as_ref().ok() == Some(&want), || {
                format!("{tag} gather-v: {got:?}")
            });
            // a send/recv ring along the fibre
            let (to, from) = ((k + 1) % n, (k + n - 1) % n);
            let len = contrib_len(f[from]);
            let got = sub.send_recv(Some((to, mine.clone())), Some((from, len)));
            let want: Vec<f64> = (0..len).map(|i| (f[from] * 100 + i) as f64).collect();
            c.check(got.as_ref().ok() == Some(&Some(want)), || {
                format!("{tag} send/recv: {got:?}")
            });
        }
    }
    let t1 = comm.traffic();
    Traffic {
        sent: t1.sent - t0.sent,
        received: t1.received - t0.received,
    }
}

fn fail(c: &mut Checks, tag: &str, e: deinsum::exec::CommError, t0: Traffic) -> Traffic {
    c.check(false, || format!("{tag}: cart_sub: {e}"));
    t0
}

/// The sub-grid collectives under MPI equal their definitions, make MPI's own calls (no
/// point-to-point exchange) and count the same bytes as the in-process backend.
fn sub_grids(world: &MpiComm, c: &mut Checks) {
    let p = world.size();
    let me = world.rank();
    let comm = MpiComm::duplicate_of(world.raw());
    let calls0 = comm.calls();
    let t = sub_grid_sequence(&comm, c, "mpi");
    let calls = comm.calls().since(&calls0);
    for k in [
        Collective::AllGather,
        Collective::ReduceScatter,
        Collective::AllReduce,
        Collective::Broadcast,
        Collective::Reduce,
        Collective::Gather,
        Collective::SendRecv,
    ] {
        c.check(calls.of(k) > 0, || {
            format!("no {k:?} call on MPI: {calls:?}")
        });
    }
    c.eq(
        calls.of(Collective::Exchange),
        0,
        "point-to-point exchanges on MPI sub-grids",
    );
    let local = InProcess::new(p).expect("world");
    let got = local.run(|lc| {
        let mut lcheck = Checks::default();
        let t = sub_grid_sequence(lc, &mut lcheck, "in-process");
        Ok::<_, String>((lcheck.failed, t))
    });
    match got {
        Ok(v) => {
            let (fails, lt) = &v[me];
            c.check(fails.is_empty(), || {
                format!("in-process sub-grids: {fails:?}")
            });
            c.eq(*lt, t, "sub-grid traffic, in-process vs MPI");
        }
        Err(e) => c.check(false, || format!("in-process sub-grids: {e}")),
    }
}

/// Complex sums through MPI's complex datatypes (both parts summed), after the traffic
/// checks of [`sequence`] (whose model counts real words only).
fn complex_sums<C: Communicator>(comm: &C, c: &mut Checks, tag: &str) {
    let (p, me) = (comm.size(), comm.rank());
    let rsum = (p * (p - 1) / 2) as f64;
    use deinsum::exec::scalar::{Complex32, Complex64};
    let mut z: Vec<Complex64> = (0..13)
        .map(|i| Complex64::new(me as f64 + i as f64, -(me as f64) * 0.5))
        .collect();
    match comm.all_reduce_sum(&mut z) {
        Ok(()) => {
            let want: Vec<Complex64> = (0..13)
                .map(|i| Complex64::new(rsum + (p * i) as f64, -rsum * 0.5))
                .collect();
            c.check(z == want, || format!("{tag} allreduce c128 {z:?}"));
        }
        Err(e) => c.check(false, || format!("{tag} allreduce c128: {e}")),
    }
    let mut z32: Vec<Complex32> = (0..5)
        .map(|i| Complex32::new(i as f32, me as f32))
        .collect();
    match comm.all_reduce_sum(&mut z32) {
        Ok(()) => {
            let want: Vec<Complex32> = (0..5)
                .map(|i| Complex32::new((p * i) as f32, rsum as f32))
                .collect();
            c.check(z32 == want, || format!("{tag} allreduce c64 {z32:?}"));
        }
        Err(e) => c.check(false, || format!("{tag} allreduce c64: {e}")),
    }
}

fn body(world: &MpiComm, c: &mut Checks) {
    sub_grids(world, c);
    let p = world.size();
    let me = world.rank();
    // .ci/mpi.sh: one rank's error must abort the job with its message while the others wait.
    if std::env::var_os("DEINSUM_MPI_INJECT_ERROR").is_some() {
        if me == p - 1 {
            world.or_abort(Err::<(), _>("injected failure on the last rank"));
        }
        let _ = world.barrier();
    }
    // Default cap (one MPI call each), then caps that split every exchange into many calls.
    for cap in [usize::MAX, 64, 5, 1] {
        let comm = MpiComm::duplicate_of(world.raw()).with_max_count(cap);
        let tag = format!("cap {}", comm.max_count());
        sequence(&comm, c, &tag);
        let t = comm.traffic();
        let (s, r) = model_traffic(p, me);
        c.eq(
            (t.sent, t.received),
            (s, r),
            &format!("{tag} traffic (sent, received) bytes"),
        );
        complex_sums(&comm, c, &tag);
    }
    // The in-process backend counts the same bytes for the same sequence.
    let local = InProcess::new(p).expect("world");
    let got = local.run(|lc| {
        let mut lcheck = Checks::default();
        sequence(lc, &mut lcheck, "in-process");
        let t = lc.traffic();
        Ok::<_, String>((lcheck.failed, t.sent, t.received))
    });
    match got {
        Ok(v) => {
            let (fails, s, r) = &v[me];
            c.check(fails.is_empty(), || {
                format!("in-process sequence: {fails:?}")
            });
            c.eq(
                (*s, *r),
                model_traffic(p, me),
                "in-process traffic equals the MPI model",
            );
        }
        Err(e) => c.check(false, || format!("in-process run: {e}")),
    }
    // A length mismatch between ranks is an error on every rank, not a hang.
    if p > 1 {
        let mut v = vec![1.0f64; 3 + me % 2];
        c.check(world.all_reduce_sum(&mut v).is_err(), || {
            "allreduce with lengths differing between ranks returned Ok".into()
        });
    }
}

fn main() -> ExitCode {
    mpi_support::main_with("mpi_collectives", body)
}
