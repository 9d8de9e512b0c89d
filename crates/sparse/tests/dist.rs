//! The distributed SDDMM, SpGEMM and sparse MTTKRP against dense serial references (the
//! sparse operands densified), for P = 1..16, with every rank's measured bytes equal to its
//! plan's prediction; empty rows, empty ranks, duplicate coordinates, explicit zeros and a
//! symmetric Matrix Market file among the inputs.

use deinsum_exec::{Communicator, InProcess, LocalComm};
use deinsum_sparse::dist::{self, choose_grid, GridWords, MttkrpPlan, SpgemmPlan, IMBALANCE_SLACK};
use deinsum_sparse::halo::{self, HaloPlan};
use deinsum_sparse::{gen, Csr, SparseError, SparseTensor};
use proptest::prelude::*;

mod common;
use common::{close, dense, dense_mm, duplicates, every_third_row, symmetric_mtx};

/// Each rank's result with the bytes it received and sent while `f` ran.
fn on_ranks<R: Send>(
    procs: usize,
    f: impl Fn(&LocalComm) -> Result<R, SparseError> + Sync,
) -> Vec<(R, u64, u64)> {
    InProcess::new(procs)
        .unwrap()
        .run(|comm| {
            let before = comm.traffic();
            let out = f(comm)?;
            let after = comm.traffic();
            Ok::<_, SparseError>((
                out,
                after.received - before.received,
                after.sent - before.sent,
            ))
        })
        .unwrap()
}

/// The test matrices: square, rectangular, with empty rows, with duplicates and an explicit
/// zero, symmetric from Matrix Market, and tiny (more ranks than rows).
fn matrices() -> Vec<(&'static str, SparseTensor<f64>)> {
    let dups = duplicates();
    assert_eq!(dups.nnz(), 4);
    vec![
        ("square", gen::uniform(&[41, 41], 0.08, 11).unwrap()),
        ("rect", gen::uniform(&[23, 37], 0.1, 12).unwrap()),
        ("empty rows", every_third_row(30)),
        ("duplicates", dups),
        ("symmetric mtx", symmetric_mtx("dist")),
        ("tiny", gen::uniform(&[3, 3], 0.6, 13).unwrap()),
        ("rmat", gen::rmat(6, 4, 14).unwrap()),
    ]
}

fn check_sddmm(name: &str, s: &SparseTensor<f64>, r: usize, procs: usize) {
    let (m, n) = (s.shape()[0], s.shape()[1]);
    let csr = s.to_csr().unwrap();
    let (u, v) = (dense(m * r, 1), dense(n * r, 2));
    let plan = HaloPlan::build(&csr, r, procs).unwrap();
    let outs = on_ranks(procs, |comm| {
        let me = comm.rank();
        let (lo, hi) = (plan.a_cuts[me], plan.a_cuts[me + 1]);
        let (blo, bhi) = (plan.b_cuts()[me], plan.b_cuts()[me + 1]);
        halo::sddmm(
            comm,
            &plan,
            &csr.rows(lo, hi),
            &u[lo * r..hi * r],
            &v[blo * r..bhi * r],
        )
    });
    let mut got = Vec::new();
    for (q, (vals, recv, sent)) in outs.into_iter().enumerate() {
        assert_eq!(
            recv,
            8 * plan.received_words(q),
            "{name} P={procs} rank {q}"
        );
        assert_eq!(sent, 8 * plan.sent_words(q), "{name} P={procs} rank {q}");
        assert!(plan.received_words(q) <= plan.replication_words(q));
        got.extend(vals);
    }
    // Dense reference: S .* (U V^T), read back at S's pattern (the output's pattern).
    let sd = s.to_dense();
    let uv = dense_mm(&u, &transpose(&v, n, r), m, r, n);
    let out = SparseTensor::from_entries(
        vec![m, n],
        (0..s.nnz()).flat_map(|e| s.coord(e).to_vec()).collect(),
        got,
    )
    .unwrap()
    .to_dense();
    let want: Vec<f64> = sd.iter().zip(&uv).map(|(a, b)| a * b).collect();
    close(&out, &want, &format!("sddmm {name} P={procs}"));
}

fn transpose(x: &[f64], rows: usize, cols: usize) -> Vec<f64> {
    let mut t = vec![0.0; rows * cols];
    for i in 0..rows {
        for j in 0..cols {
            t[j * rows + i] = x[i * cols + j];
        }
    }
    t
}

#[test]
fn sddmm_equals_the_dense_reference_for_1_to_16_ranks() {
    for (name, s) in matrices() {
        for procs in 1..=16 {
            check_sddmm(name, &s, 3, procs);
        }
    }
}

fn check_spgemm(name: &str, a: &SparseTensor<f64>, b: &SparseTensor<f64>, procs: usize) {
    let (ac, bc) = (a.to_csr().unwrap(), b.to_csr().unwrap());
    let plan = SpgemmPlan::build(&ac, &bc, procs).unwrap();
    let outs = on_ranks(procs, |comm| {
        let me = comm.rank();
        let f = &plan.fetch;
        dist::spgemm(
            comm,
            &plan,
            &ac.rows(plan.a_cuts[me], plan.a_cuts[me + 1]),
            &bc.rows(f.cuts[me], f.cuts[me + 1]),
        )
    });
    let (m, n, k) = (ac.nrows, ac.ncols, bc.ncols);
    let mut got = Vec::new();
    for (q, (c, recv, sent)) in outs.into_iter().enumerate() {
        assert_eq!(recv, plan.received_bytes(q, 8), "{name} P={procs} rank {q}");
        assert_eq!(sent, plan.sent_bytes(q, 8), "{name} P={procs} rank {q}");
        assert!(plan.received_words(q) <= plan.replication_words(q));
        assert_eq!(c.nrows, plan.a_cuts[q + 1] - plan.a_cuts[q]);
        assert!(c.indptr.windows(2).all(|w| w[0] <= w[1]));
        for i in 0..c.nrows {
            let cols = &c.indices[c.indptr[i]..c.indptr[i + 1]];
            assert!(cols.windows(2).all(|w| w[0] < w[1]), "{name}: row order");
        }
        got.push(c);
    }
    let mut dense_c = Vec::new();
    for c in &got {
        dense_c.extend(c.to_tensor().to_dense());
    }
    let want = dense_mm(&a.to_dense(), &b.to_dense(), m, n, k);
    close(&dense_c, &want, &format!("spgemm {name} P={procs}"));
}

#[test]
fn spgemm_equals_the_dense_reference_for_1_to_16_ranks() {
    let b_rect = gen::uniform::<f64>(&[37, 19], 0.15, 21).unwrap();
    for (name, a) in matrices() {
        for procs in 1..=16 {
            if name == "rect" {
                check_spgemm(name, &a, &b_rect, procs);
            } else {
                check_spgemm(name, &a, &a, procs);
            }
        }
    }
}

/// The dense MTTKRP of `x` (densified) in `mode` with the factors `fs`.
fn dense_mttkrp(x: &SparseTensor<f64>, fs: &[Vec<f64>], mode: usize, r: usize) -> Vec<f64> {
    let shape = x.shape();
    let xd = x.to_dense();
    let mut out = vec![0.0; shape[mode] * r];
    let mut c = vec![0usize; shape.len()];
    for &v in &xd {
        for q in 0..r {
            let mut t = v;
            for (m, f) in fs.iter().enumerate() {
                if m != mode {
                    t *= f[c[m] * r + q];
                }
            }
            out[c[mode] * r + q] += t;
        }
        for d in (0..shape.len()).rev() {
            c[d] += 1;
            if c[d] < shape[d] {
                break;
            }
            c[d] = 0;
        }
    }
    out
}

/// The chosen grid's MTTKRP against the dense reference, with exact words, and the same for
/// every other grid of `procs` ranks (the 1D cut among them): the chosen one's imbalance is
/// within the slack of the least, and no other grid within it moves fewer words on its
/// busiest rank (nor as few, with fewer in all).
fn check_mttkrp(name: &str, x: &SparseTensor<f64>, mode: usize, r: usize, procs: usize) {
    let plan = MttkrpPlan::build(x, mode, r, procs).unwrap();
    check_mttkrp_plan(name, x, &plan);
    let chosen = plan.grid_words();
    let least = plan
        .considered
        .iter()
        .map(|g| g.imbalance)
        .fold(f64::INFINITY, f64::min);
    assert!(chosen.balanced(least), "{name}: {chosen:?}");
    assert!(plan.considered.contains(&chosen));
    let balanced = || plan.considered.iter().filter(|g| g.balanced(least));
    let band = dist::tie_band(balanced().map(|g| g.max_words).min().unwrap());
    assert!(chosen.max_words <= band, "{name}: {chosen:?}");
    for g in balanced().filter(|g| g.max_words <= band) {
        assert!(
            (g.words, g.max_words) >= (chosen.words, chosen.max_words),
            "{name} mode {mode} P={procs}: {g:?} beats {chosen:?}"
        );
    }
    assert!(plan.considered[0].splits.is_empty());
    for g in &plan.considered {
        let p = MttkrpPlan::build_grid(x, mode, r, procs, &g.splits).unwrap();
        assert_eq!(p.total_received(), g.words);
        assert_eq!(p.max_words(), g.max_words);
        assert_eq!(p.nnz.iter().sum::<usize>(), x.nnz());
        // Every grid's output rows are the output mode's P-way cut (the factor layout), its
        // slabs every boxes-th point of it.
        let nb: usize = g.splits.iter().map(|&(_, b)| b).product();
        assert_eq!(p.cuts[mode], plan.cuts[mode]);
        assert_eq!(
            p.slabs,
            p.cuts[mode].iter().step_by(nb).copied().collect::<Vec<_>>()
        );
        if !g.splits.is_empty() {
            check_mttkrp_plan(&format!("{name} grid {:?}", p.grid), x, &p);
        }
    }
}

fn check_mttkrp_plan(name: &str, x: &SparseTensor<f64>, plan: &MttkrpPlan) {
    let (mode, r, procs) = (plan.mode, plan.r, plan.procs);
    let fs: Vec<Vec<f64>> = (0..x.order())
        .map(|m| dense(x.shape()[m] * r, m + 3))
        .collect();
    let outs = on_ranks(procs, |comm| {
        let me = comm.rank();
        let local = plan.local_part(x, me)?;
        let views: Vec<&[f64]> = (0..x.order())
            .map(|m| &fs[m][plan.cuts[m][me] * r..plan.cuts[m][me + 1] * r])
            .collect();
        dist::mttkrp(comm, plan, &local, &views)
    });
    let mut got = Vec::new();
    for (q, (rows, recv, sent)) in outs.into_iter().enumerate() {
        assert_eq!(
            recv,
            8 * plan.received_words(q),
            "{name} mode {mode} P={procs} rank {q}"
        );
        assert_eq!(
            sent,
            8 * plan.sent_words(q),
            "{name} mode {mode} P={procs} rank {q}"
        );
        // The factor halos alone never exceed replication; the reduction is on top.
        assert!(plan.received_words(q) - plan.reduction_words(q) <= plan.replication_words(q));
        assert_eq!(rows.len(), plan.reduce.own_rows(q) * r);
        got.extend(rows);
    }
    let want = dense_mttkrp(x, &fs, mode, r);
    close(&got, &want, &format!("mttkrp {name} mode {mode} P={procs}"));
}

#[test]
fn sparse_mttkrp_equals_the_dense_reference_in_every_mode_for_1_to_16_ranks() {
    // Duplicates summed, an explicit zero, an empty slice (i = 2) in every mode.
    let dups = SparseTensor::from_entries(
        vec![5, 4, 3],
        vec![0, 1, 2, 4, 3, 0, 0, 1, 2, 1, 0, 0, 3, 3, 2, 1, 0, 0],
        vec![1.0, 2.0, 0.5, 0.0, -1.0, 0.0],
    )
    .unwrap();
    assert_eq!(dups.nnz(), 4);
    assert!(dups.values().contains(&0.0));
    let tensors = [
        ("uniform", gen::uniform::<f64>(&[9, 7, 6], 0.1, 5).unwrap()),
        ("duplicates", dups),
        (
            "order 4",
            gen::uniform::<f64>(&[5, 4, 6, 3], 0.15, 6).unwrap(),
        ),
        ("tiny", gen::uniform::<f64>(&[2, 3, 2], 0.5, 7).unwrap()),
    ];
    for (name, x) in &tensors {
        for mode in 0..x.order() {
            for procs in 1..=16 {
                check_mttkrp(name, x, mode, 3, procs);
            }
        }
    }
}

#[test]
fn the_grid_is_chosen_by_the_busiest_rank_not_the_total() {
    // A seeded 12 x 10 x 8 tensor at density 0.08: in mode 0 the 1D cut moves the fewest
    // words in all, but its busiest rank moves more than a 2D grid's (and holds more
    // nonzeros): the choice by the total alone would take the 1D cut.
    let x = gen::uniform::<f64>(&[12, 10, 8], 0.08, 0).unwrap();
    for procs in [8, 16] {
        let plan = MttkrpPlan::build(&x, 0, 4, procs).unwrap();
        let c = &plan.considered;
        let by_total = (0..c.len()).min_by_key(|&i| (c[i].words, i)).unwrap();
        let chosen = plan.grid_words();
        let old = &c[by_total];
        assert_ne!(old.splits, chosen.splits, "P={procs}");
        assert!(
            chosen.max_words < old.max_words,
            "P={procs}: {chosen:?} vs {old:?}"
        );
        assert!(chosen.words > old.words, "P={procs}: a real trade");
        assert!(chosen.imbalance < old.imbalance, "P={procs}");
        // Both grids compute the dense reference with exactly the planned words.
        check_mttkrp_plan("by the busiest rank", &x, &plan);
        let total_only = MttkrpPlan::build_grid(&x, 0, 4, procs, &old.splits).unwrap();
        check_mttkrp_plan("by the total", &x, &total_only);
        assert_eq!(total_only.max_words(), old.max_words);
    }
    // Figures of this tensor at P = 8: the total-only choice is the 1D cut (312 words, 108 on
    // the busiest rank, imbalance 1.28); the chosen grid is 4 slabs x 2 along mode 2 (316
    // words, 96 on the busiest rank, imbalance 1.17).
    let p8 = MttkrpPlan::build(&x, 0, 4, 8).unwrap();
    assert_eq!(p8.splits, vec![(2, 2)]);
    assert_eq!((p8.total_received(), p8.max_words()), (316, 96));
    assert_eq!(
        (p8.considered[0].words, p8.considered[0].max_words),
        (312, 108)
    );
}

#[test]
fn a_grid_that_piles_nonzeros_on_one_rank_is_not_chosen() {
    // Candidate figures by hand: the second moves the fewest words on its busiest rank but
    // its imbalance is past the slack of the least, so the third is chosen; the first, the
    // 1D cut, wins a tie on both words.
    let g = |splits: Vec<(usize, usize)>, words, max_words, imbalance| GridWords {
        slabs: 1,
        splits,
        words,
        max_words,
        imbalance,
    };
    let grids = vec![
        g(vec![], 100, 40, 1.0),
        g(vec![(1, 2)], 80, 20, 1.0 * IMBALANCE_SLACK + 0.01),
        g(vec![(2, 2)], 90, 30, 1.05),
    ];
    assert_eq!(choose_grid(&grids), Some(2));
    let tie = vec![g(vec![], 100, 40, 1.1), g(vec![(1, 2)], 100, 40, 1.0)];
    assert_eq!(choose_grid(&tie), Some(0));
    let by_total = vec![g(vec![], 100, 40, 1.0), g(vec![(1, 2)], 90, 40, 1.0)];
    assert_eq!(choose_grid(&by_total), Some(1));
    // Busiest-rank words within MAX_WORDS_TIE of the fewest tie: the fewer in all wins.
    let near = vec![g(vec![], 100, 1000, 1.0), g(vec![(1, 2)], 140, 990, 1.0)];
    assert_eq!(choose_grid(&near), Some(0));
    let far = vec![g(vec![], 100, 1000, 1.0), g(vec![(1, 2)], 140, 900, 1.0)];
    assert_eq!(choose_grid(&far), Some(1));
    assert_eq!(choose_grid(&[]), None);
}

#[test]
fn plans_state_balance_and_move_less_than_replication_on_rmat() {
    let a = gen::rmat::<f64>(10, 8, 21).unwrap();
    let csr = a.to_csr().unwrap();
    let g = SpgemmPlan::build(&csr, &csr, 4).unwrap();
    let total: u64 = (0..4).map(|r| g.received_words(r)).sum();
    let repl: u64 = (0..4).map(|r| g.replication_words(r)).sum();
    assert!(total < repl, "{total} vs {repl}");
    assert!(g.work_imbalance() < 1.5, "{}", g.work_imbalance());
    assert_eq!(
        g.madds.iter().sum::<usize>(),
        csr.indices.iter().map(|&j| g.b_row_len[j]).sum::<usize>()
    );
    let x = gen::uniform::<f64>(&[64, 64, 64], 0.01, 3).unwrap();
    let p = MttkrpPlan::build(&x, 1, 8, 4).unwrap();
    assert!(p.imbalance() < 1.2, "{}", p.imbalance());
    assert_eq!(p.nnz.iter().sum::<usize>(), x.nnz());
    let c = &p.cuts[1];
    assert!(c[0] == 0 && c[4] == 64 && c.windows(2).all(|w| w[0] <= w[1]));
    // Every grid of 4 ranks was considered (1D, then 2 and 4 boxes along modes 0 and 2, and
    // 2 x 2 along both in either order); the 2D ones reduce partial rows, the 1D one does not.
    let splits: Vec<_> = p.considered.iter().map(|g| g.splits.clone()).collect();
    assert_eq!(
        splits,
        [
            vec![],
            vec![(0, 2)],
            vec![(2, 2)],
            vec![(0, 2), (2, 2)],
            vec![(0, 4)],
            vec![(2, 2), (0, 2)],
            vec![(2, 4)]
        ]
    );
    let one_d = MttkrpPlan::build_grid(&x, 1, 8, 4, &[]).unwrap();
    assert_eq!((0..4).map(|q| one_d.reduction_words(q)).sum::<u64>(), 0);
    assert_eq!(one_d.grid, [1, 4, 1]);
    let two_d = MttkrpPlan::build_grid(&x, 1, 8, 4, &[(2, 2)]).unwrap();
    assert_eq!(two_d.grid, [1, 2, 2]);
    assert!((0..4).map(|q| two_d.reduction_words(q)).sum::<u64>() > 0);
    assert!(two_d.imbalance() < 1.2, "{}", two_d.imbalance());
    let three_d = MttkrpPlan::build_grid(&x, 1, 8, 8, &[(0, 2), (2, 2)]).unwrap();
    assert_eq!(three_d.grid, [2, 2, 2]);
    assert_eq!(three_d.levels[1].len(), 4);
    // A grid that does not divide the ranks, splits the output mode or a mode twice is an
    // error.
    assert!(MttkrpPlan::build_grid(&x, 1, 8, 4, &[(2, 3)]).is_err());
    assert!(MttkrpPlan::build_grid(&x, 1, 8, 4, &[(1, 2)]).is_err());
    assert!(MttkrpPlan::build_grid(&x, 1, 8, 4, &[(2, 2), (2, 2)]).is_err());
    // Zero ranks and mismatched shapes are errors, not panics.
    assert!(SpgemmPlan::build(&csr, &csr, 0).is_err());
    assert!(MttkrpPlan::build(&x, 3, 8, 2).is_err());
    let b = gen::uniform::<f64>(&[5, 5], 0.5, 1)
        .unwrap()
        .to_csr()
        .unwrap();
    assert!(SpgemmPlan::build(&csr, &b, 2).is_err());
}

/// A CSR matrix of `rows x cols` from proptest's entries.
fn csr_of(rows: usize, cols: usize, entries: &[(usize, usize, i8)]) -> Csr<f64> {
    let mut coords = Vec::new();
    let mut vals = Vec::new();
    for &(i, j, v) in entries {
        coords.extend([i % rows, j % cols]);
        vals.push(f64::from(v) / 8.0);
    }
    SparseTensor::from_entries(vec![rows, cols], coords, vals)
        .unwrap()
        .to_csr()
        .unwrap()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(32))]

    #[test]
    fn spgemm_and_mttkrp_hold_on_random_patterns(
        m in 1usize..12, n in 1usize..12, k in 1usize..12, procs in 1usize..9,
        ea in proptest::collection::vec((0usize..64, 0usize..64, -8i8..8), 0..40),
        eb in proptest::collection::vec((0usize..64, 0usize..64, -8i8..8), 0..40),
        mode in 0usize..3,
    ) {
        let a = csr_of(m, n, &ea).to_tensor();
        let b = csr_of(n, k, &eb).to_tensor();
        check_spgemm("random", &a, &b, procs);
        // The same entries as an order-3 tensor m x n x k.
        let mut coords = Vec::new();
        let mut vals = Vec::new();
        for (x, &(i, j, v)) in ea.iter().enumerate() {
            coords.extend([i % m, j % n, (x + usize::from(v as u8)) % k]);
            vals.push(f64::from(v));
        }
        let x = SparseTensor::from_entries(vec![m, n, k], coords, vals).unwrap();
        check_mttkrp("random", &x, mode, 2, procs);
        check_sddmm("random", &a, 2, procs);
    }
}
