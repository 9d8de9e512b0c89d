//! Closed-form oracles of the SOAP bound (within 1%).

use deinsum_path::{ContractionTree, Step};
use deinsum_soap::{analyze, bound_group, parallel_bound, Statement};
use std::collections::BTreeMap;

fn ext(pairs: &[(char, usize)]) -> BTreeMap<char, usize> {
    pairs.iter().copied().collect()
}

fn v(s: &str) -> Vec<char> {
    s.chars().collect()
}

fn close(got: f64, want: f64, what: &str) {
    let rel = ((got - want) / want).abs();
    assert!(
        rel < 0.01,
        "{what}: got {got}, want {want} (rel err {rel:.2e})"
    );
}

#[test]
fn matrix_product_closed_form() {
    let s = 1.0e4;
    let e = ext(&[('i', 4000), ('j', 3000), ('k', 5000)]);
    let b = bound_group(&v("ikj"), &e, &[v("ik"), v("kj")], &v("ij"), s).unwrap();
    close(b.x0, 3.0 * s, "X0");
    close(b.rho, s.sqrt() / 2.0, "rho");
    for c in ['i', 'j', 'k'] {
        close(b.tile[&c], s.sqrt(), "tile");
    }
    close(b.q, 2.0 * 4000.0 * 3000.0 * 5000.0 / s.sqrt(), "Q");
}

#[test]
fn chi_of_matrix_product() {
    let e = ext(&[('i', 1000), ('j', 1000), ('k', 1000)]);
    let st = Statement::new(&v("ijk"), &e, vec![v("ik"), v("kj"), v("ij")]).unwrap();
    let x = 3.0e4;
    let (chi, tile) = st.chi(x);
    close(chi, (x / 3.0).powf(1.5), "chi");
    close(st.dominator(&tile), x, "D(tile)");
}

#[test]
fn matrix_product_saturated_k() {
    // K < sqrt(S): the k side saturates; rho = S K / (S + K^2), tile S/K on i and j.
    let (s, kk) = (1.0e4_f64, 10usize);
    let e = ext(&[('i', 100_000), ('j', 100_000), ('k', kk)]);
    let b = bound_group(&v("ikj"), &e, &[v("ik"), v("kj")], &v("ij"), s).unwrap();
    let k = kk as f64;
    assert_eq!(b.tile[&'k'], k);
    close(b.tile[&'i'], s / k, "tile i");
    close(b.tile[&'j'], s / k, "tile j");
    close(b.rho, s * k / (s + k * k), "rho");
    close(b.x0, (s / k).powi(2) + 2.0 * s, "X0");
    close(b.q, 1.0e10 * (1.0 + k * k / s), "Q");
}

#[test]
fn mttkrp_order3_fused() {
    let s = 1.0e6;
    let e = ext(&[('i', 2000), ('j', 3000), ('k', 2500), ('a', 20_000)]);
    let b = bound_group(&v("ijka"), &e, &[v("ijk"), v("ja"), v("ka")], &v("ia"), s).unwrap();
    close(b.rho, s.powf(2.0 / 3.0) / 3.0, "rho");
    close(b.x0, 2.5 * s, "X0");
    close(b.tile[&'i'], (2.0 * b.x0 / 5.0).cbrt(), "tile i");
    close(b.tile[&'a'], s.powf(2.0 / 3.0) / 2.0, "tile a");
    let vol = 2000.0 * 3000.0 * 2500.0 * 20_000.0;
    close(b.q, 3.0 * vol / s.powf(2.0 / 3.0), "Q");
}

#[test]
fn mttkrp_order_n_fused() {
    let s = 1.0e6_f64;
    for n in 3..=6usize {
        let modes: Vec<char> = "ijklmn".chars().take(n).collect();
        let mut e: BTreeMap<char, usize> = modes.iter().map(|&c| (c, 5000)).collect();
        e.insert('a', 100_000);
        let mut idx = modes.clone();
        idx.push('a');
        let mut inputs = vec![modes.clone()];
        for &c in &modes[1..] {
            inputs.push(vec![c, 'a']);
        }
        let out = vec![modes[0], 'a'];
        let b = bound_group(&idx, &e, &inputs, &out, s).unwrap();
        let nn = n as f64;
        let vol = 5000f64.powi(n as i32) * 1.0e5;
        close(
            b.q,
            nn * vol / s.powf((nn - 1.0) / nn),
            &format!("Q order {n}"),
        );
        close(
            b.x0,
            (2.0 * nn - 1.0) * s / (nn - 1.0),
            &format!("X0 order {n}"),
        );
    }
}

fn step(ops: &[usize], ins: &[&str], out: &str) -> Step {
    Step {
        operands: ops.iter().copied().map(deinsum_path::NodeId).collect(),
        operand_indices: ins.iter().map(|s| v(s)).collect(),
        output: v(out),
    }
}

fn tree(leaves: &[&str], steps: Vec<Step>, e: BTreeMap<char, usize>) -> ContractionTree {
    ContractionTree {
        num_inputs: leaves.len(),
        leaf_indices: leaves.iter().map(|s| v(s)).collect(),
        steps,
        extents: e,
    }
}

#[test]
fn mttkrp_then_matrix_product_is_two_groups() {
    // ijk,ja,ka,al->il along ja,ka->jka; ijk,jka->ia; ia,al->il.
    let s = 1024.0;
    let e = ext(&[('i', 64), ('j', 64), ('k', 64), ('a', 64), ('l', 64)]);
    let t = tree(
        &["ijk", "ja", "ka", "al"],
        vec![
            step(&[1, 2], &["ja", "ka"], "jka"),
            step(&[0, 4], &["ijk", "jka"], "ia"),
            step(&[5, 3], &["ia", "al"], "il"),
        ],
        e,
    );
    let f = analyze(&t, s).unwrap();
    assert_eq!(f.groups.len(), 2);
    assert_eq!(f.groups[0].steps, vec![0, 1]);
    assert_eq!(f.groups[0].einsum_string(), "ijk,ja,ka->ia");
    assert_eq!(f.groups[1].steps, vec![2]);
    assert_eq!(f.groups[1].einsum_string(), "ia,al->il");
    let sum: f64 = f.groups.iter().map(|g| g.bound.q).sum();
    // One intermediate (ia) crosses: written once, read once.
    close(f.q_total, sum + 2.0 * 64.0 * 64.0, "q_total");
    let runner = f.runner_up_q.expect("the unfused partition exists");
    assert!(runner > f.q_total);
}

#[test]
fn unfused_chain_sums_per_step_bounds() {
    // pi,qj,ijkl,rk,sl->pqrs: every step sums an index, so nothing fuses.
    let s = 64.0;
    let n = 2000usize;
    let e: BTreeMap<char, usize> = "pqrsijkl".chars().map(|c| (c, n)).collect();
    let t = tree(
        &["pi", "qj", "ijkl", "rk", "sl"],
        vec![
            step(&[0, 2], &["pi", "ijkl"], "pjkl"),
            step(&[1, 5], &["qj", "pjkl"], "pqkl"),
            step(&[3, 6], &["rk", "pqkl"], "pqrl"),
            step(&[4, 7], &["sl", "pqrl"], "pqrs"),
        ],
        e,
    );
    let f = analyze(&t, s).unwrap();
    assert_eq!(f.groups.len(), 4);
    let want = 4.0 * 2.0 * (n as f64).powi(5) / s.sqrt();
    let sum: f64 = f.groups.iter().map(|g| g.bound.q).sum();
    close(sum, want, "sum of group bounds");
    close(
        f.q_total,
        want,
        "q_total (intermediates are small next to the bounds)",
    );
    assert_eq!(f.runner_up_q, None, "only one partition is legal");
}

#[test]
fn two_matrix_products() {
    let s = 64.0;
    let (i, j, k, l) = (3000usize, 2000usize, 4000usize, 2500usize);
    let e = ext(&[('i', i), ('j', j), ('k', k), ('l', l)]);
    let t = tree(
        &["ij", "jk", "kl"],
        vec![
            step(&[0, 1], &["ij", "jk"], "ik"),
            step(&[3, 2], &["ik", "kl"], "il"),
        ],
        e,
    );
    let f = analyze(&t, s).unwrap();
    let want = 2.0 * (i * k) as f64 * (j + l) as f64 / s.sqrt();
    let sum: f64 = f.groups.iter().map(|g| g.bound.q).sum();
    close(sum, want, "2MM");
    close(f.q_total, want, "2MM total");
}

#[test]
fn parallel_matrix_product() {
    let s = 1.0e4;
    let e = ext(&[('i', 4096), ('j', 4096), ('k', 4096)]);
    let t = tree(&["ik", "kj"], vec![step(&[0, 1], &["ik", "kj"], "ij")], e);
    let f = analyze(&t, s).unwrap();
    let g = &f.groups[0];
    let vol = 4096f64.powi(3);
    for p in [1usize, 7, 64, 1000] {
        let b = parallel_bound(g, p, s);
        if p > 1 {
            close(
                b.memory_independent,
                3.0 * (vol / p as f64).powf(2.0 / 3.0),
                "memory-independent",
            );
        }
        close(
            b.memory_dependent,
            2.0 * vol / (p as f64 * s.sqrt()),
            "memory-dependent",
        );
        assert_eq!(b.binding(), b.memory_independent.max(b.memory_dependent));
    }
    // Few ranks: the memory-dependent bound binds; many: the memory-independent one.
    assert_eq!(parallel_bound(g, 2, s).binds(), "memory_dependent");
    assert_eq!(parallel_bound(g, 100_000, s).binds(), "memory_independent");
}
