//! The fine-grain SpMV (and SpMM, k > 1) against the dense serial reference (A densified)
//! for P = 1..16, every rank's measured bytes equal to its plan's prediction, and the plan's
//! lists exact (each fetched x entry and pushed y entry once per rank, none of the rank's
//! own); empty rows and columns, empty ranks, non-symmetric patterns, duplicates, explicit
//! zeros, a symmetric Matrix Market file, a hub (a star) and R-MAT.

use deinsum_exec::{Communicator, InProcess};
use deinsum_sparse::fine::{self, FineLocal, FinePlan};
use deinsum_sparse::halo::HaloPlan;
use deinsum_sparse::{gen, SparseError, SparseTensor};
use proptest::prelude::*;
use std::collections::BTreeSet;

mod common;
use common::{close, dense, dense_mm, duplicates, every_third_row, symmetric_mtx};

fn matrices() -> Vec<(&'static str, SparseTensor<f64>)> {
    // A hub: vertex 0 linked both ways with every other, and a few leaf-to-leaf entries, so
    // the hub's nonzeros are computed at the leaves (pushes into y_0, fetches of x_0).
    let n = 33;
    let (mut coords, mut vals) = (Vec::new(), Vec::new());
    for v in 1..n {
        coords.extend([0, v, v, 0]);
        vals.extend([v as f64, 0.5 - v as f64]);
        if v % 5 == 0 {
            coords.extend([v, (v * 3) % n]);
            vals.push(1.5);
        }
    }
    let star = SparseTensor::from_entries(vec![n, n], coords, vals).unwrap();
    vec![
        ("square", gen::uniform(&[41, 41], 0.08, 11).unwrap()),
        ("empty rows and columns", every_third_row(40)),
        ("duplicates", duplicates()),
        ("star", star),
        ("symmetric mtx", symmetric_mtx("fine")),
        ("tiny", gen::uniform(&[3, 3], 0.6, 13).unwrap()),
        (
            "no nonzeros",
            SparseTensor::from_entries(vec![5, 5], vec![], vec![]).unwrap(),
        ),
        ("rmat", gen::rmat(7, 4, 14).unwrap()),
    ]
}

/// Runs the fine-grain product on `procs` ranks and checks it against the dense product,
/// every rank's bytes against the plan, and the plan's lists against a brute-force count.
fn check(name: &str, a: &SparseTensor<f64>, k: usize, procs: usize) -> FinePlan {
    let n = a.shape()[0];
    let csr = a.to_csr().unwrap();
    let x = dense(n * k, 1);
    let plan = FinePlan::build(&csr, k, procs).unwrap();
    let outs = InProcess::new(procs)
        .unwrap()
        .run(|comm| {
            let me = comm.rank();
            let local = FineLocal::build(&plan, me, &csr)?;
            let xl = &x[plan.cuts[me] * k..plan.cuts[me + 1] * k];
            let before = comm.traffic();
            let y = fine::spmv_local(comm, &plan, &local, xl, None)?;
            let after = comm.traffic();
            // A second run moves the same words (the plan holds no state).
            let again = fine::spmv_local(comm, &plan, &local, xl, None)?;
            let later = comm.traffic();
            Ok::<_, SparseError>((
                y,
                again,
                after.received - before.received,
                after.sent - before.sent,
                later.received - after.received,
            ))
        })
        .unwrap();
    let what = format!("{name} k={k} P={procs}");
    let mut got = Vec::new();
    for (r, (y, again, recv, sent, recv2)) in outs.into_iter().enumerate() {
        assert_eq!(recv, 8 * plan.received_words(r), "{what} rank {r} received");
        assert_eq!(sent, 8 * plan.sent_words(r), "{what} rank {r} sent");
        assert_eq!(recv2, recv, "{what} rank {r} second run");
        assert_eq!(y, again, "{what} rank {r} second run");
        assert_eq!(y.len(), plan.own_rows(r) * k);
        got.extend(y);
    }
    close(&got, &dense_mm(&a.to_dense(), &x, n, n, k), &what);
    // The lists by brute force: each nonzero at its lower-degree end (ties to the row).
    let mut deg = vec![0usize; n];
    for e in 0..a.nnz() {
        deg[a.coord(e)[0]] += 1;
        deg[a.coord(e)[1]] += 1;
    }
    let mut fetch = vec![BTreeSet::new(); procs];
    let mut push = vec![BTreeSet::new(); procs];
    let mut nnz = vec![0usize; procs];
    for e in 0..a.nnz() {
        let (i, j) = (a.coord(e)[0], a.coord(e)[1]);
        let (oi, oj) = (plan.owner(i), plan.owner(j));
        if deg[i] <= deg[j] {
            nnz[oi] += 1;
            if oi != oj {
                fetch[oi].insert(j);
            }
        } else {
            nnz[oj] += 1;
            if oi != oj {
                push[oj].insert(i);
            }
        }
    }
    assert_eq!(plan.nnz, nnz, "{what}");
    for r in 0..procs {
        assert_eq!(plan.fetch[r], fetch[r].iter().copied().collect::<Vec<_>>());
        assert_eq!(plan.push[r], push[r].iter().copied().collect::<Vec<_>>());
    }
    let total: u64 = (0..procs).map(|r| plan.sent_words(r)).sum();
    assert_eq!(total, plan.total_received(), "{what}");
    let cut: usize = fetch.iter().chain(&push).map(BTreeSet::len).sum();
    assert_eq!(plan.total_received(), (cut * k) as u64, "{what}");
    // A rank receives at most every x entry it does not own plus, for each of its rows, one
    // partial sum from every other rank (pushes are not bounded by replication).
    for r in 0..procs {
        let own = plan.own_rows(r);
        let most = (n - own) + (procs - 1) * own;
        assert!(
            plan.received_words(r) <= (most * k) as u64,
            "{what} rank {r}"
        );
    }
    plan
}

#[test]
fn fine_spmv_equals_the_dense_reference_for_1_to_16_ranks() {
    let mut pushed = false;
    for (name, a) in matrices() {
        for procs in 1..=16 {
            for k in [1, 3] {
                let plan = check(name, &a, k, procs);
                pushed |= plan.push.iter().any(|p| !p.is_empty());
                if procs == 1 {
                    assert_eq!(plan.total_received(), 0);
                }
            }
        }
    }
    // Some case took the push path (the star's hub at least).
    assert!(pushed);
}

#[test]
fn more_ranks_than_vertices_leave_ranks_empty() {
    let a = gen::uniform::<f64>(&[3, 3], 0.9, 2).unwrap();
    let plan = check("3 x 3 on 7", &a, 1, 7);
    assert!((0..7).any(|r| plan.own_rows(r) == 0));
}

#[test]
fn on_rmat_the_fine_grain_moves_fewer_words_than_the_row_cut() {
    // The power-law case the scheme is for: R-MAT scale 10, edge factor 16.
    let a = gen::rmat::<f64>(10, 16, 1).unwrap().to_csr().unwrap();
    for procs in [2, 4, 8] {
        let fine = FinePlan::build(&a, 1, procs).unwrap();
        let halo = HaloPlan::build(&a, 1, procs).unwrap();
        assert!(
            fine.total_received() < halo.total_received(),
            "P={procs}: fine {} vs row cut {}",
            fine.total_received(),
            halo.total_received()
        );
    }
}

#[test]
fn plans_refuse_what_they_cannot_run() {
    let rect = gen::uniform::<f64>(&[4, 5], 0.5, 3)
        .unwrap()
        .to_csr()
        .unwrap();
    assert!(FinePlan::build(&rect, 1, 2).is_err());
    let a = gen::uniform::<f64>(&[9, 9], 0.4, 4)
        .unwrap()
        .to_csr()
        .unwrap();
    assert!(FinePlan::build(&a, 1, 0).is_err());
    let plan = FinePlan::build(&a, 1, 3).unwrap();
    assert!(FineLocal::build(&plan, 3, &a).is_err());
    // Another pattern of the same shape is not the plan's.
    let other = gen::uniform::<f64>(&[9, 9], 0.4, 5)
        .unwrap()
        .to_csr()
        .unwrap();
    assert!(
        FineLocal::build(&plan, 0, &other).is_err()
            || FineLocal::build(&plan, 1, &other).is_err()
            || FineLocal::build(&plan, 2, &other).is_err()
    );
    // Nonzeros prepared for rank 0 used on rank 1, and a block of the wrong length.
    let errs = InProcess::new(3)
        .unwrap()
        .run(|comm| {
            let l0 = FineLocal::build(&plan, 0, &a)?;
            let wrong_rank =
                comm.rank() == 1 && fine::spmv_local(comm, &plan, &l0, &[0.0; 1], None).is_err();
            Ok::<_, SparseError>(wrong_rank)
        })
        .unwrap();
    assert!(errs[1]);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn fine_spmv_holds_on_random_patterns(
        n in 1usize..20, procs in 1usize..10, k in 1usize..3,
        es in proptest::collection::vec((0usize..64, 0usize..64, -8i8..8), 0..60),
    ) {
        let mut coords = Vec::new();
        let mut vals = Vec::new();
        for &(i, j, v) in &es {
            coords.extend([i % n, j % n]);
            vals.push(f64::from(v));
        }
        let a = SparseTensor::from_entries(vec![n, n], coords, vals).unwrap();
        check("random", &a, k, procs);
    }
}
