//! The applications in examples/ (CP-ALS and Tucker HOOI on a Session) at small sizes, as CI
//! runs them: each sweep equals a serial run of the same algorithm, and X never moves after
//! its first placement.

// Both examples are whole programs, each with its own copy of examples/session_backend.rs.
#![allow(clippy::duplicate_mod)]

#[allow(dead_code)]
#[path = "../../../examples/cp_als.rs"]
mod cp_als;

#[allow(dead_code)]
#[path = "../../../examples/tucker_hooi.rs"]
mod tucker_hooi;

use deinsum::Session;

#[test]
fn cp_als_equals_serial_and_x_stays_put() {
    // Rank 3 for the order-5 tensor: at rank 2 on 4 ranks the plan splits the rank index and
    // replicates X along it by a fetch in every MTTKRP (see the issue 36 report).
    for (shape, r) in [(vec![9, 7, 8], 3), (vec![5, 4, 3, 4, 3], 3)] {
        let (x, init) = cp_als::problem(&shape, r, 3);
        let want = cp_als::cp_als_serial(&x, &shape, r, init.clone(), 3);
        for p in [1, 2, 3, 4] {
            let s = Session::local(p).unwrap();
            let xa = s.array(&shape, x.clone()).unwrap();
            let got = cp_als::cp_als(&s, &xa, r, init.clone(), 3).unwrap();
            for (t, (g, w)) in got.fits.iter().zip(&want).enumerate() {
                assert!(
                    (g - w).abs() <= 1e-10,
                    "{shape:?} P={p} sweep {t}: {g} vs {w}"
                );
            }
            assert!(
                got.fits[2] > got.fits[0] - 1e-12,
                "the fit does not decrease"
            );
            for (t, w) in got.x_words.iter().enumerate().skip(1) {
                let calls: Vec<String> = s
                    .stats()
                    .iter()
                    .map(|e| format!("{} {:?} cached={}", e.expr, e.operand_words, e.cached))
                    .collect();
                assert_eq!(*w, 0, "{shape:?} P={p}: X moved in sweep {t}: {calls:#?}");
            }
        }
    }
}

#[test]
fn cp_als_example_runs() {
    assert!(cp_als::run_case(cp_als::Backend::Local, 2, 2, &[8, 6, 5], 3, 2, true).unwrap());
}

#[test]
fn tucker_hooi_equals_serial() {
    for (shape, ranks) in [
        (vec![8, 7, 6], vec![3, 2, 2]),
        (vec![5, 4, 3, 4, 3], vec![2, 2, 2, 2, 2]),
    ] {
        let (x, init) = tucker_hooi::problem(&shape, &ranks, 5);
        let (norms, factors) = tucker_hooi::hooi_serial(&x, &shape, &ranks, init.clone(), 2);
        for p in [1, 3] {
            let s = Session::local(p).unwrap();
            let xa = s.array(&shape, x.clone()).unwrap();
            let got = tucker_hooi::hooi(&s, &xa, &ranks, init.clone(), 2).unwrap();
            for (g, w) in got.core_norms.iter().zip(&norms) {
                assert!(
                    (g - w).abs() <= 1e-9 * w.max(1.0),
                    "{shape:?} P={p}: {g} vs {w}"
                );
            }
            for n in 0..shape.len() {
                let gap =
                    tucker_hooi::projector_gap(&got.factors[n], &factors[n], shape[n], ranks[n]);
                assert!(gap <= 1e-8, "{shape:?} P={p} factor {n}: gap {gap}");
            }
            assert_eq!(got.x_words[1], 0, "{shape:?} P={p}: X moved in sweep 2");
        }
    }
}
