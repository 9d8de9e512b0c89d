//! The sketch inspector: HyperLogLog within 3 standard errors, Misra–Gries finds every heavy
//! key, merged sketches identical on every rank, and joins in sketch mode equal to the serial
//! join (the rows never depend on the estimates), with the shuffle's and broadcast's bytes
//! still exactly as predicted and the estimates within a stated tolerance.

mod common;

use common::{multiset, part, table, Keys, Rng, CASES};
use deinsum_exec::{Communicator, InProcess};
use deinsum_join::dist::explain;
use deinsum_join::kernel::{key_hash, nested_loop_join};
use deinsum_join::sketch::{hll_std_error, Hll, MisraGries};
use deinsum_join::{
    join, Column, InspectMode, Inspection, JoinKind, JoinOptions, JoinShape, Strategy, Table,
};

#[test]
fn hyperloglog_within_three_standard_errors() {
    let se = hll_std_error();
    for (n, seeds) in [(1_000u64, 4u64), (10_000, 4), (100_000, 3), (1_000_000, 2)] {
        for seed in 0..seeds {
            let mut rng = Rng(1000 * n + seed);
            let mut h = Hll::new();
            for _ in 0..n {
                // Random 8-byte keys (collisions among 10⁶ of 2⁶⁴ are negligible), some twice.
                let k = rng.next().to_le_bytes();
                h.add_hash(key_hash(&k));
                if rng.chance(30) {
                    h.add_hash(key_hash(&k));
                }
            }
            let rel = (h.estimate() - n as f64) / n as f64;
            assert!(
                rel.abs() <= 3.0 * se,
                "n={n} seed={seed}: estimate {} ({rel:+.4}, 3σ = {:.4})",
                h.estimate(),
                3.0 * se
            );
        }
    }
}

#[test]
fn hyperloglog_merge_is_the_sketch_of_the_union() {
    let keys: Vec<[u8; 8]> = (0..50_000u64).map(|i| i.to_le_bytes()).collect();
    let (mut a, mut b, mut all) = (Hll::new(), Hll::new(), Hll::new());
    for (i, k) in keys.iter().enumerate() {
        let h = key_hash(k);
        all.add_hash(h);
        // Overlapping halves.
        if i < 30_000 {
            a.add_hash(h);
        }
        if i >= 20_000 {
            b.add_hash(h);
        }
    }
    a.merge(&b);
    assert_eq!(a, all);
    assert_eq!(Hll::from_bytes(all.bytes()).unwrap(), all);
}

/// `n` keys from Zipf(`s`) over `distinct` values.
fn zipf_keys(rng: &mut Rng, n: usize, distinct: usize, s: f64) -> Vec<i64> {
    let mut cdf: Vec<f64> = (1..=distinct).map(|i| (i as f64).powf(-s)).collect();
    for i in 1..cdf.len() {
        cdf[i] += cdf[i - 1];
    }
    let total = cdf[distinct - 1];
    (0..n)
        .map(|_| {
            let u = rng.below(1 << 53) as f64 / (1u64 << 53) as f64 * total;
            cdf.partition_point(|&c| c < u) as i64
        })
        .collect()
}

#[test]
fn misra_gries_finds_every_key_over_n_over_k_merged_over_ranks() {
    let n = 200_000;
    let mut rng = Rng(5);
    let keys: Vec<[u8; 8]> = zipf_keys(&mut rng, n, 100_000, 1.2)
        .into_iter()
        .map(|k| k.to_le_bytes())
        .collect();
    let mut exact = std::collections::HashMap::new();
    for k in &keys {
        *exact.entry(*k).or_insert(0u64) += 1;
    }
    for k in [16usize, 64, 256] {
        for procs in [1usize, 2, 3, 5, 8] {
            // Each rank's summary of its contiguous share, merged in rank order (as every rank
            // merges them) and in reverse (another order: other counters, the same bound).
            let parts: Vec<MisraGries> = (0..procs)
                .map(|q| {
                    let mut m = MisraGries::new(k);
                    for key in &keys[q * n / procs..(q + 1) * n / procs] {
                        m.add(key_hash(key), key, 1);
                    }
                    m
                })
                .collect();
            let mut merged = MisraGries::new(k);
            let mut reversed = MisraGries::new(k);
            for m in &parts {
                merged.merge(m);
            }
            for m in parts.iter().rev() {
                reversed.merge(m);
            }
            // Through the bytes a rank sends.
            let mut sent = Vec::new();
            merged.encode(&mut sent);
            let mut b = &sent[..];
            let back = MisraGries::decode(k, &mut b).unwrap();
            assert!(b.is_empty());
            assert_eq!(back.top(), merged.top(), "k={k} P={procs}");
            let mut heavy = 0;
            for m in [&merged, &reversed, &back] {
                assert_eq!(m.rows(), n as u64);
                assert!(m.error() <= n as u64 / (k as u64 + 1), "k={k} P={procs}");
                assert!(m.top().len() <= k);
                let top: std::collections::HashMap<&[u8], u64> = m.top().into_iter().collect();
                for (key, &f) in &exact {
                    if f > n as u64 / k as u64 {
                        heavy += 1;
                        let got = top.get(&key[..]).copied();
                        assert!(got.is_some(), "k={k} P={procs}: key of {f} rows missed");
                        let got = got.unwrap();
                        assert!(got <= f && f <= got + m.error(), "k={k}: {got} for {f}");
                    }
                }
            }
            assert!(heavy > 0, "k={k}: no key over n/k in the Zipf set");
        }
    }
}

fn opts(s: Option<Strategy>, inspect: InspectMode) -> JoinOptions {
    JoinOptions {
        strategy: s,
        machine: deinsum_plan::Machine::default(),
        output_limit: None,
        inspect,
    }
}

/// Every rank's inspection of `l` ⋈ `r` (split by rows) in `mode`.
fn inspections(l: &Table, r: &Table, procs: usize, mode: InspectMode) -> Vec<Inspection> {
    InProcess::new(procs)
        .unwrap()
        .run(|comm| {
            let me = comm.rank();
            let (lp, rp) = (part(l, me, procs), part(r, me, procs));
            let on = vec!["k".to_string()];
            let shape = JoinShape::new(&lp, &rp, &on, JoinKind::Inner, ("L", "R"))?;
            explain(
                comm,
                &shape,
                &lp,
                &rp,
                &deinsum_plan::Machine::default(),
                mode,
            )
        })
        .unwrap()
}

/// A fact table of Zipf(1.2) keys and a dimension of every key once.
fn fact_and_dimension(n: usize, distinct: usize, seed: u64) -> (Table, Table) {
    let mut rng = Rng(seed);
    let keys = zipf_keys(&mut rng, n, distinct, 1.2);
    let l = Table::new(
        vec!["k".into(), "lx".into()],
        vec![
            Column::Int64(keys.into_iter().map(Some).collect()),
            Column::Int64((0..n as i64).map(Some).collect()),
        ],
    )
    .unwrap();
    let r = Table::new(
        vec!["k".into(), "ry".into()],
        vec![
            Column::Int64((0..distinct as i64).map(Some).collect()),
            Column::Float64((0..distinct).map(|i| Some(i as f64)).collect()),
        ],
    )
    .unwrap();
    (l, r)
}

#[test]
fn sampled_summaries_find_the_exact_inspectors_heavy_keys() {
    // Enough rows a rank that the summaries count every s-th row (s >= 3): the heavy keys
    // must still be the exact inspector's, for a uniform key order and for a sorted one.
    let n = 9 * deinsum_join::inspector::summary_rows(2) + 17;
    let (l, r) = fact_and_dimension(n, 40_000, 11);
    let sorted_l = {
        let mut keys: Vec<i64> = match &l.columns()[0] {
            Column::Int64(c) => c.iter().map(|x| x.unwrap()).collect(),
            _ => unreachable!("int keys"),
        };
        keys.sort_unstable();
        Table::new(
            vec!["k".into(), "lx".into()],
            vec![
                Column::Int64(keys.into_iter().map(Some).collect()),
                Column::Int64((0..n as i64).map(Some).collect()),
            ],
        )
        .unwrap()
    };
    for left in [&l, &sorted_l] {
        for procs in [2, 3] {
            let rows = n / procs;
            assert!(
                deinsum_join::inspector::summary_stride(rows, procs) >= 3,
                "P={procs}"
            );
            let ins = inspections(left, &r, procs, InspectMode::Sketch);
            let exact = inspections(left, &r, procs, InspectMode::Exact);
            let sorted = |h: &[(Vec<u8>, bool)]| {
                let mut h = h.to_vec();
                h.sort();
                h
            };
            assert!(!exact[0].heavy.is_empty(), "P={procs}: no heavy key");
            assert_eq!(sorted(&ins[0].heavy), sorted(&exact[0].heavy), "P={procs}");
        }
    }
    // Uniform keys: no heavy key, and the sampled summaries name no candidate to count.
    let mut rng = Rng(5);
    let uniform = Table::new(
        vec!["k".into(), "lx".into()],
        vec![
            Column::Int64((0..n).map(|_| Some((rng.next() % 40_000) as i64)).collect()),
            Column::Int64((0..n as i64).map(Some).collect()),
        ],
    )
    .unwrap();
    for procs in [2, 3] {
        let ins = inspections(&uniform, &r, procs, InspectMode::Sketch);
        assert!(ins[0].heavy.is_empty(), "P={procs}");
        assert_eq!(ins[0].sketch.as_ref().unwrap().candidates, 0, "P={procs}");
    }
}

#[test]
fn merged_sketches_are_identical_on_every_rank() {
    let (l, r) = fact_and_dimension(30_000, 5_000, 3);
    for procs in [1, 2, 3, 5, 8] {
        let ins = inspections(&l, &r, procs, InspectMode::Sketch);
        let first = serde_json::to_string(&ins[0]).unwrap();
        assert!(ins[0].sketch.is_some(), "P={procs}");
        for (q, i) in ins.iter().enumerate() {
            assert_eq!(
                serde_json::to_string(i).unwrap(),
                first,
                "P={procs} rank {q}"
            );
            assert_eq!(i.heavy, ins[0].heavy, "P={procs} rank {q}");
        }
        // The heavy keys are the exact inspector's (decided from exact counts).
        let exact = inspections(&l, &r, procs, InspectMode::Exact);
        let sorted = |h: &[(Vec<u8>, bool)]| {
            let mut h = h.to_vec();
            h.sort();
            h
        };
        assert_eq!(sorted(&ins[0].heavy), sorted(&exact[0].heavy), "P={procs}");
        if procs > 1 {
            assert!(!ins[0].heavy.is_empty(), "P={procs}: no heavy key");
        }
        // Figures exact in both modes.
        let (s, e) = (&ins[0], &exact[0]);
        for strategy in [Strategy::Shuffle, Strategy::Broadcast] {
            let (ps, pe) = (s.prediction(strategy), e.prediction(strategy));
            assert!(ps.bytes_exact, "{strategy:?}");
            assert_eq!(
                (&ps.sent, &ps.received),
                (&pe.sent, &pe.received),
                "{strategy:?}"
            );
            assert_eq!(ps.rows_in, pe.rows_in, "{strategy:?} P={procs}");
        }
        // Estimates within tolerance: the output within 10% (every fact row matches once),
        // the distinct keys within 3 standard errors.
        let k = s.sketch.as_ref().unwrap();
        let rel = |a: u64, b: u64| (a as f64 - b as f64).abs() / b as f64;
        assert!(
            rel(s.output_rows, e.output_rows) < 0.10,
            "{} vs {}",
            s.output_rows,
            e.output_rows
        );
        assert!(rel(s.output_bytes, e.output_bytes) < 0.10, "P={procs}");
        assert!(rel(k.right_distinct, 5_000) <= 3.0 * k.distinct_rel_error);
        for strategy in [Strategy::Semi, Strategy::Index, Strategy::Bloom] {
            let (ps, pe) = (s.prediction(strategy), e.prediction(strategy));
            assert!(!ps.bytes_exact);
            let (a, b) = (ps.sent.iter().sum(), pe.sent.iter().sum());
            if procs > 1 {
                assert!(rel(a, b) < 0.35, "{strategy:?} P={procs}: sent {a} vs {b}");
            }
        }
    }
}

/// Every strategy and kind in sketch mode on `l`, `r` at `procs` ranks: the serial join's
/// rows, and the shuffle's and broadcast's measured bytes as predicted.
fn check_sketch(name: &str, l: &Table, r: &Table, on: &[String], procs: usize) {
    for kind in JoinKind::ALL {
        let shape = JoinShape::new(l, r, on, kind, ("L", "R")).unwrap();
        let want = multiset(&nested_loop_join(&shape, l, r));
        for s in Strategy::ALL.map(Some).into_iter().chain([None]) {
            let o = opts(s, InspectMode::Sketch);
            let outs = InProcess::new(procs)
                .unwrap()
                .run(|comm| {
                    let me = comm.rank();
                    let (lp, rp) = (part(l, me, procs), part(r, me, procs));
                    let shape = JoinShape::new(&lp, &rp, on, kind, ("L", "R"))?;
                    join(comm, &shape, &lp, &rp, &o)
                })
                .unwrap();
            let ran = outs[0].strategy;
            let what = format!("{name} {} {} P={procs}", kind.name(), ran.name());
            let tables: Vec<Table> = outs.iter().map(|o| o.table.clone()).collect();
            assert_eq!(multiset(&Table::concat(&tables).unwrap()), want, "{what}");
            let pred = outs[0].inspection.prediction(ran);
            assert!(outs[0].inspection.sketch.is_some(), "{what}");
            assert_eq!(
                pred.bytes_exact,
                matches!(ran, Strategy::Shuffle | Strategy::Broadcast),
                "{what}"
            );
            if pred.bytes_exact {
                for (q, o) in outs.iter().enumerate() {
                    assert_eq!(o.measured.sent, pred.sent[q], "{what}: rank {q} sent");
                    assert_eq!(o.measured.received, pred.received[q], "{what}: rank {q}");
                }
            }
        }
    }
}

#[test]
fn joins_in_sketch_mode_equal_the_serial_join() {
    let mut rng = Rng(29);
    for keys in [Keys::Int, Keys::Str, Keys::Multi] {
        let on: Vec<String> = match keys {
            Keys::Multi => vec!["k".into(), "k2".into()],
            _ => vec!["k".into()],
        };
        for (name, nl, nr, distinct, nulls) in CASES {
            let l = table(&mut rng, nl, keys, distinct, nulls, "l");
            let r = table(&mut rng, nr, keys, distinct, nulls, "r");
            for procs in [1, 2, 3, 5, 8] {
                check_sketch(&format!("{keys:?} {name}"), &l, &r, &on, procs);
            }
        }
    }
}

#[test]
fn skewed_join_in_sketch_mode_equals_exact_mode() {
    // Heavy keys split by the shuffle in both modes: the same rows, the same bytes.
    let (l, r) = fact_and_dimension(20_000, 3_000, 13);
    let on = vec!["k".to_string()];
    for procs in [2, 4] {
        let run = |mode| {
            InProcess::new(procs)
                .unwrap()
                .run(|comm| {
                    let me = comm.rank();
                    let (lp, rp) = (part(&l, me, procs), part(&r, me, procs));
                    let shape = JoinShape::new(&lp, &rp, &on, JoinKind::Left, ("L", "R"))?;
                    join(comm, &shape, &lp, &rp, &opts(Some(Strategy::Shuffle), mode))
                })
                .unwrap()
        };
        let (s, e) = (run(InspectMode::Sketch), run(InspectMode::Exact));
        assert!(s[0].inspection.heavy_keys > 0);
        for (q, (a, b)) in s.iter().zip(&e).enumerate() {
            assert_eq!(multiset(&a.table), multiset(&b.table), "P={procs} rank {q}");
            assert_eq!(a.measured.sent, b.measured.sent, "P={procs} rank {q}");
        }
    }
}

#[test]
fn auto_mode_sketches_large_inputs_only() {
    let (l, r) = fact_and_dimension(2_000, 100, 1);
    let ins = inspections(&l, &r, 2, InspectMode::Auto);
    assert!(ins[0].sketch.is_none(), "2,100 rows: exact");
    assert_eq!(
        InspectMode::from_name("SKETCH").unwrap(),
        InspectMode::Sketch
    );
    let err = InspectMode::from_name("fast").unwrap_err().to_string();
    assert!(err.contains("--inspect") && err.contains("fast"), "{err}");
}
