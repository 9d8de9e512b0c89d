//! The geometric program against brute force on random access patterns.

use deinsum_soap::Statement;
use proptest::prelude::*;
use std::collections::BTreeMap;

/// Random statement over up to 3 indices with 2..4 access sets (bit masks over the indices).
fn statement(n: usize, masks: &[u8], extents: &[usize]) -> Statement {
    let idx: Vec<char> = "ijk".chars().take(n).collect();
    let e: BTreeMap<char, usize> = idx.iter().copied().zip(extents.iter().copied()).collect();
    let acc: Vec<Vec<char>> = masks
        .iter()
        .map(|m| {
            idx.iter()
                .enumerate()
                .filter(|(b, _)| m & (1 << b) != 0)
                .map(|(_, c)| *c)
                .collect()
        })
        .collect();
    Statement::new(&idx, &e, acc).unwrap()
}

/// max prod t over a log grid of tiles with D(t) <= x (a lower estimate of chi(x)).
fn brute_chi(st: &Statement, x: f64) -> f64 {
    let idx = &st.indices;
    let steps = 40;
    let mut best: f64 = 0.0;
    let mut counter = vec![0usize; idx.len()];
    loop {
        let tile: BTreeMap<char, f64> = idx
            .iter()
            .zip(&counter)
            .map(|(c, &k)| (*c, (st.extents[c] as f64).powf(k as f64 / steps as f64)))
            .collect();
        if st.dominator(&tile) <= x {
            best = best.max(tile.values().product());
        }
        let mut p = 0;
        loop {
            if p == idx.len() {
                return best;
            }
            counter[p] += 1;
            if counter[p] <= steps {
                break;
            }
            counter[p] = 0;
            p += 1;
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn chi_is_feasible_and_at_least_brute_force(
        n in 1usize..=3,
        masks in prop::collection::vec(1u8..8, 2..5),
        extents in prop::collection::vec(2usize..3000, 3),
        xf in 0.0f64..1.0,
    ) {
        let st = statement(n, &masks, &extents);
        let full: BTreeMap<char, f64> = st.extents.iter().map(|(c, &e)| (*c, e as f64)).collect();
        let (lo, hi) = (masks.len() as f64, st.dominator(&full));
        let x = lo + xf * (hi - lo);
        let (chi, tile) = st.chi(x);
        prop_assert!(st.dominator(&tile) <= x * (1.0 + 1e-6), "D {} > X {}", st.dominator(&tile), x);
        for (c, t) in &tile {
            prop_assert!(*t >= 1.0 && *t <= st.extents[c] as f64);
        }
        let brute = brute_chi(&st, x);
        prop_assert!(chi >= brute * (1.0 - 1e-6), "chi {} < brute force {}", chi, brute);
    }

    #[test]
    fn rho_is_the_minimum_over_x(
        n in 1usize..=3,
        masks in prop::collection::vec(1u8..8, 2..5),
        extents in prop::collection::vec(2usize..3000, 3),
        sf in 0.001f64..0.5,
        probes in prop::collection::vec(0.0f64..1.0, 16),
    ) {
        let st = statement(n, &masks, &extents);
        let full: BTreeMap<char, f64> = st.extents.iter().map(|(c, &e)| (*c, e as f64)).collect();
        let hi = st.dominator(&full);
        let s = (sf * hi).max(1.0);
        let sol = st.soap(s).unwrap();
        prop_assume!(sol.rho.is_finite());
        prop_assert!(sol.x0 > s && sol.x0 <= hi * (1.0 + 1e-9));
        prop_assert!(((sol.chi / (sol.x0 - s)) / sol.rho - 1.0).abs() < 1e-6);
        for p in probes {
            let x = s + p * (hi - s);
            if x <= s * (1.0 + 1e-9) { continue; }
            let (chi, _) = st.chi(x);
            prop_assert!(sol.rho <= chi / (x - s) * (1.0 + 1e-6),
                "rho {} > chi({})/(X-S) = {}", sol.rho, x, chi / (x - s));
        }
    }
}
