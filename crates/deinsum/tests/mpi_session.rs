//! `deinsum::Session` on the MPI world: the same session code as in process, every rank making
//! the same calls. Results equal the in-process session's (values, words moved, operand
//! words), arrays stay distributed between einsums (an operand placed once moves no more), a
//! gather reaches every rank or the root only, `save_npy` writes one file, and bad input
//! (arrays of two sessions, a shape that does not fit, use after close, a gather too large for
//! the node, saving over a live array's file) is an error on every rank, never a crash or a
//! hang.
//!
//! `cargo test -p deinsum --features mpi --test mpi_session` (relaunches under mpirun).

mod mpi_support;

use deinsum::exec::mpi::MpiComm;
use deinsum::{Communicator, OutLayout, Session, SessionError};
use mpi_support::{rel_err, Checks};
use std::process::ExitCode;

fn values(n: usize, salt: usize) -> Vec<f64> {
    (0..n)
        .map(|x| ((x * 7919 + salt * 104_729) % 113) as f64 / 113.0 - 0.5)
        .collect()
}

/// A path every rank of this job names alike (the launcher's daemon is their common parent).
fn shared_path(w: &MpiComm, what: &str) -> std::path::PathBuf {
    std::env::temp_dir().join(format!(
        "deinsum-mpi-session-{}-{}-{what}.npy",
        std::os::unix::process::parent_id(),
        w.size()
    ))
}

fn body(w: &MpiComm, c: &mut Checks) {
    let p = w.size();
    let s = w.or_abort(Session::mpi_world());
    c.eq(s.procs(), p, "session ranks");
    c.eq(s.rank(), w.rank(), "session rank");
    c.check(s.is_mpi(), || "the session is not on MPI".into());
    let local = w.or_abort(Session::local(p));

    // An MTTKRP, then a second one reusing X where the first placed it: the same values,
    // words and operand words as the in-process session's, and X moves no more.
    let (i, j, k, r) = (9, 7, 8, 3);
    let x = values(i * j * k, 1);
    let b = values(j * r, 2);
    let cc = values(k * r, 3);
    let mut outs = Vec::new();
    for sess in [&s, &local] {
        let xa = w.or_abort(sess.array(&[i, j, k], x.clone()));
        let ba = w.or_abort(sess.array(&[j, r], b.clone()));
        let ca = w.or_abort(sess.array(&[k, r], cc.clone()));
        let m1 = w.or_abort(sess.einsum("ijk,jr,kr->ir", &[&xa, &ba, &ca]));
        let m2 = w.or_abort(sess.einsum("ijk,ir,kr->jr", &[&xa, &m1, &ca]));
        let g1 = w.or_abort(m1.gather::<f64>());
        let g2 = w.or_abort(m2.gather::<f64>());
        outs.push((g1, g2, sess.stats(), xa.layout(), m2));
    }
    let (mpi, inproc) = (&outs[0], &outs[1]);
    c.check(rel_err(&mpi.0, &inproc.0) <= 1e-12, || {
        format!("MTTKRP mode 0 differs: {}", rel_err(&mpi.0, &inproc.0))
    });
    c.check(rel_err(&mpi.1, &inproc.1) <= 1e-12, || {
        format!("MTTKRP mode 1 differs: {}", rel_err(&mpi.1, &inproc.1))
    });
    for (a, b) in mpi.2.iter().zip(&inproc.2) {
        c.eq(
            a.words_moved,
            b.words_moved,
            &format!("{} words moved", a.expr),
        );
        c.eq(
            &a.operand_words,
            &b.operand_words,
            &format!("{} operand words", a.expr),
        );
    }
    c.eq(mpi.2[1].operand_words[0], 0, "X's words in its second use");
    c.eq(&mpi.3, &inproc.3, "X's layout");

    // gather_root: the whole on the root only.
    let m2 = &mpi.4;
    let root = p - 1;
    let g = w.or_abort(m2.gather_root::<f64>(root));
    c.eq(
        g.is_some(),
        w.rank() == root,
        "gather_root reaches the root only",
    );
    if let Some(g) = g {
        c.check(rel_err(&g, &mpi.1) == 0.0, || "gather_root's data".into());
    }

    // out_layout: canonical, and another array's layout.
    let ba = w.or_abort(s.array(&[j, r], b.clone()));
    let ca = w.or_abort(s.array(&[k, r], cc.clone()));
    let o = w.or_abort(s.einsum_with("jr,kr->jk", &[&ba, &ca], &OutLayout::Canonical));
    let want: Vec<f64> = (0..j * k)
        .map(|e| (0..r).map(|q| b[e / k * r + q] * cc[e % k * r + q]).sum())
        .collect();
    c.check(
        rel_err(&w.or_abort(o.gather::<f64>()), &want) <= 1e-12,
        || "out_layout canonical".into(),
    );

    // save_npy writes one file (rank 0), load_npy reads it back block by block.
    let path = shared_path(w, "m2");
    w.or_abort(m2.save_npy(&path));
    w.or_abort(w.barrier());
    let back = w.or_abort(s.load_npy(&path));
    c.eq(back.shape().to_vec(), vec![j, r], "loaded shape");
    let twice = w.or_abort(s.einsum("jr->jr", &[&back]));
    c.check(
        rel_err(&w.or_abort(twice.gather::<f64>()), &mpi.1) == 0.0,
        || "saved and loaded data".into(),
    );
    // Saving over the file a live array reads from is refused on every rank.
    let over = m2.save_npy(&path);
    c.check(
        matches!(over, Err(SessionError::SaveOverSource { .. })),
        || format!("save over a live source: {over:?}"),
    );
    drop((back, twice));
    w.or_abort(w.barrier());
    if w.rank() == 0 {
        let _ = std::fs::remove_file(&path);
    }

    // A gather larger than the node's memory is refused with its size, on every rank (the
    // file holds only a header: the array is read lazily, nothing is allocated).
    let huge = shared_path(w, "huge");
    if w.rank() == 0 {
        let shape = [1usize << 20, 1 << 20, 1 << 8];
        let bytes = deinsum::exec::npy::header_bytes::<f64>(&shape);
        w.or_abort(std::fs::write(&huge, bytes));
    }
    w.or_abort(w.barrier());
    let h = w.or_abort(s.load_npy(&huge));
    let refused = h.gather::<f64>();
    c.check(
        matches!(refused, Err(SessionError::TooLarge { bytes, .. }) if bytes == 8u128 << 48),
        || format!("a huge gather: {refused:?}"),
    );
    drop(h);
    w.or_abort(w.barrier());
    if w.rank() == 0 {
        let _ = std::fs::remove_file(&huge);
    }

    // Arrays of two sessions, a shape that does not fit: errors on every rank.
    let other = w.or_abort(Session::mpi_world());
    let foreign = w.or_abort(other.array(&[j, r], b.clone()));
    let e = s.einsum("jr,kr->jk", &[&foreign, &ca]);
    c.check(
        matches!(e, Err(SessionError::ForeignArray { operand: 0, .. })),
        || format!("foreign array: {e:?}"),
    );
    let e = s.einsum("jr,jr->r", &[&ba, &ca]);
    let named =
        matches!(&e, Err(SessionError::Shape { operand: 1, name, .. }) if name == ca.name());
    c.check(named, || format!("shape mismatch: {e:?}"));
    c.check(
        e.as_ref()
            .err()
            .is_some_and(|e| e.to_string().contains(ca.name())),
        || format!("the shape error names the array: {e:?}"),
    );

    // Use after close: errors, never a crash; other sessions go on.
    other.close();
    let e = foreign.gather::<f64>();
    c.check(matches!(e, Err(SessionError::Closed { .. })), || {
        format!("gather after close: {e:?}")
    });
    let e = other.einsum("jr->rj", &[&foreign]);
    c.check(matches!(e, Err(SessionError::Closed { .. })), || {
        format!("einsum after close: {e:?}")
    });
    let e = other.array(&[2], vec![1.0, 2.0]);
    c.check(matches!(e, Err(SessionError::Closed { .. })), || {
        format!("array after close: {e:?}")
    });
    drop(other);
    let e = foreign.save_npy(&shared_path(w, "never"));
    c.check(matches!(e, Err(SessionError::Closed { .. })), || {
        format!("save after the session was dropped: {e:?}")
    });
    let still = w.or_abort(s.einsum("jr,kr->jk", &[&ba, &ca]));
    c.check(
        rel_err(&w.or_abort(still.gather::<f64>()), &want) <= 1e-12,
        || "the open session after the other closed".into(),
    );
}

fn main() -> ExitCode {
    mpi_support::main_with("mpi_session", body)
}
