//! The fine-grain SpMV (and SpMM, k > 1) against the dense serial reference (A densified)
//! for P = 1..16, every rank's measured bytes equal to its plan's prediction, and the plan's
//! lists exact (each fetched x entry and pushed y entry once per rank, none of the rank's
//! own); empty rows and columns, empty ranks, non-symmetric patterns, duplicates, explicit
//! zeros, a symmetric Matrix Market file, a hub (a star) and R-MAT.

use deinsum_exec::{Communicator, InProcess};
use deinsum_sparse::cover::min_vertex_cover;
use deinsum_sparse::fine::{self, FineLocal, FinePlan, VERTEX_WORK};
use deinsum_sparse::halo::{balance_rows, HaloPlan};
use deinsum_sparse::{gen, Csr, SparseError, SparseTensor};
use proptest::prelude::*;
use std::collections::{BTreeMap, BTreeSet};

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

/// The size of a maximum matching of the cross nonzeros of `a` under `owner` (left: (row,
/// column owner), right: (column, row owner)), by Kuhn's augmenting paths.
fn matching(a: &Csr<f64>, owner: impl Fn(usize) -> usize) -> usize {
    let mut adj: BTreeMap<(usize, usize), Vec<(usize, usize)>> = BTreeMap::new();
    for i in 0..a.nrows {
        for &j in &a.indices[a.indptr[i]..a.indptr[i + 1]] {
            if owner(i) != owner(j) {
                adj.entry((i, owner(j))).or_default().push((j, owner(i)));
            }
        }
    }
    fn augment(
        u: (usize, usize),
        adj: &BTreeMap<(usize, usize), Vec<(usize, usize)>>,
        mate: &mut BTreeMap<(usize, usize), (usize, usize)>,
        seen: &mut BTreeSet<(usize, usize)>,
    ) -> bool {
        for &v in &adj[&u] {
            if seen.insert(v)
                && mate
                    .get(&v)
                    .copied()
                    .is_none_or(|w| augment(w, adj, mate, seen))
            {
                mate.insert(v, u);
                return true;
            }
        }
        false
    }
    let mut mate = BTreeMap::new();
    adj.keys()
        .filter(|&&u| augment(u, &adj, &mut mate, &mut BTreeSet::new()))
        .count()
}

/// Per vertex, the prefix sums of the nonzeros the lower-degree rule computes there (each
/// nonzero at its endpoint of fewer row plus column nonzeros, ties to the row).
fn lower_degree_loads(a: &Csr<f64>) -> Vec<usize> {
    let deg = degrees(a);
    let mut load = vec![0usize; a.nrows + 1];
    for i in 0..a.nrows {
        for &j in &a.indices[a.indptr[i]..a.indptr[i + 1]] {
            load[if deg[i] <= deg[j] { i } else { j } + 1] += 1;
        }
    }
    // Each vertex weighs as the plan's work counts it.
    for v in 0..a.nrows {
        load[v + 1] += load[v] + VERTEX_WORK;
    }
    load
}

fn degrees(a: &Csr<f64>) -> Vec<usize> {
    let mut deg: Vec<usize> = a.indptr.windows(2).map(|w| w[1] - w[0]).collect();
    for &j in &a.indices {
        deg[j] += 1;
    }
    deg
}

/// The words of the lower-degree rule (the earlier scheme) on blocks `cuts`: one per
/// (rank, fetched x) and (rank, pushed y).
fn lower_degree_words(a: &Csr<f64>, cuts: &[usize]) -> usize {
    let owner = |v: usize| cuts.partition_point(|&c| c <= v) - 1;
    let deg = degrees(a);
    let (mut fetch, mut push) = (BTreeSet::new(), BTreeSet::new());
    for i in 0..a.nrows {
        for &j in &a.indices[a.indptr[i]..a.indptr[i + 1]] {
            if owner(i) != owner(j) {
                if deg[i] <= deg[j] {
                    fetch.insert((owner(i), j));
                } else {
                    push.insert((owner(j), i));
                }
            }
        }
    }
    fetch.len() + push.len()
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
    // The lists by brute force: every cross nonzero reached by a fetch or a push, computed
    // where the plan says, and every listed entry used by a nonzero computed through it.
    let entries = a.to_csr().unwrap();
    let mut nnz = vec![0usize; procs];
    let mut met = vec![0usize; procs * procs];
    let (mut used_fetch, mut used_push) = (BTreeSet::new(), BTreeSet::new());
    for i in 0..n {
        for &j in &entries.indices[entries.indptr[i]..entries.indptr[i + 1]] {
            let (r, s) = (plan.owner(i), plan.owner(j));
            if r == s {
                nnz[r] += 1;
                continue;
            }
            let fetched = plan.fetch[r].binary_search(&j).is_ok();
            let pushed = plan.push[s].binary_search(&i).is_ok();
            assert!(fetched || pushed, "{what}: a({i}, {j}) reached by neither");
            let at_s = if fetched && pushed {
                met[r * procs + s] += 1;
                met[r * procs + s] <= plan.shifted_to(r, s)
            } else {
                pushed
            };
            if at_s {
                nnz[s] += 1;
                used_push.insert((s, i));
            } else {
                nnz[r] += 1;
                used_fetch.insert((r, j));
            }
        }
    }
    assert_eq!(plan.nnz, nnz, "{what}");
    for &(r, s, m) in &plan.shifted {
        assert!(
            m > 0 && m <= met[r * procs + s],
            "{what}: shifted {r} -> {s}"
        );
    }
    for r in 0..procs {
        assert!(plan.fetch[r].windows(2).all(|w| w[0] < w[1]), "{what}");
        assert!(plan.push[r].windows(2).all(|w| w[0] < w[1]), "{what}");
        for &j in &plan.fetch[r] {
            assert!(
                used_fetch.contains(&(r, j)),
                "{what}: rank {r} fetches {j} unused"
            );
        }
        for &i in &plan.push[r] {
            assert!(
                used_push.contains(&(r, i)),
                "{what}: rank {r} pushes {i} unused"
            );
        }
    }
    // The fewest words that reach every cross nonzero: a matching of as many cross nonzeros,
    // no two sharing a (row, column owner) or a (column, row owner), found independently.
    let cut: usize = plan.fetch.iter().chain(&plan.push).map(Vec::len).sum();
    assert_eq!(cut, matching(&entries, |v| plan.owner(v)), "{what}");
    // Never more than the lower-degree rule on the same blocks, nor on its own.
    assert!(cut <= lower_degree_words(&entries, &plan.cuts), "{what}");
    let first = balance_rows(&lower_degree_loads(&entries), procs);
    assert!(cut <= lower_degree_words(&entries, &first), "{what}");
    let total: u64 = (0..procs).map(|r| plan.sent_words(r)).sum();
    assert_eq!(total, plan.total_received(), "{what}");
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
    let (mut pushed, mut shifted) = (false, false);
    for (name, a) in matrices() {
        for procs in 1..=16 {
            for k in [1, 3] {
                let plan = check(name, &a, k, procs);
                pushed |= plan.push.iter().any(|p| !p.is_empty());
                shifted |= !plan.shifted.is_empty();
                if procs == 1 {
                    assert_eq!(plan.total_received(), 0);
                }
            }
        }
    }
    // Some case took the push path (the star's hub at least), and some balanced by shifting
    // doubly reached nonzeros.
    assert!(pushed);
    assert!(shifted);
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
        // The cut and the shifts keep the work (nonzeros and vertices) balanced.
        assert!(
            fine.work_imbalance() <= 1.01,
            "P={procs}: {}",
            fine.work_imbalance()
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
    fn the_cover_reaches_every_edge_with_as_many_vertices_as_a_maximum_matching(
        left in 0usize..12, right in 1usize..12,
        es in proptest::collection::vec((0usize..64, 0usize..64), 0..50),
    ) {
        let mut adj = vec![Vec::new(); left];
        for &(u, v) in es.iter().filter(|_| left > 0) {
            adj[u % left].push((v % right) as u32);
        }
        let ptr: Vec<usize> = std::iter::once(0)
            .chain(adj.iter().scan(0, |n, e| { *n += e.len(); Some(*n) }))
            .collect();
        let flat: Vec<u32> = adj.concat();
        let c = min_vertex_cover(&ptr, &flat, right);
        for (u, vs) in adj.iter().enumerate() {
            for &v in vs {
                prop_assert!(c.left[u] || c.right[v as usize]);
            }
        }
        let size = c.left.iter().chain(&c.right).filter(|&&x| x).count();
        prop_assert_eq!(size, c.matching);
        // The same matching size from Kuhn's algorithm, as a pattern whose row u's columns
        // are its right neighbours and every column on another rank.
        let owner = |v: usize| usize::from(v >= left);
        let mut coords = Vec::new();
        for (u, vs) in adj.iter().enumerate() {
            for &v in vs {
                coords.extend([u, left + v as usize]);
            }
        }
        let vals = vec![1.0; coords.len() / 2];
        let g = SparseTensor::from_entries(vec![left + right; 2], coords, vals)
            .unwrap()
            .to_csr()
            .unwrap();
        prop_assert_eq!(matching(&g, owner), c.matching);
    }

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
