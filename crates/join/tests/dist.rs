//! Every strategy against the serial nested-loop join, for the four kinds, P in {1, 2, 3, 5,
//! 8}, int, string and two-column keys, NULL keys, duplicates, empty and one-row tables; rows
//! compared as multisets, and every rank's measured bytes equal to the inspector's prediction.

mod common;

use common::{multiset, part, table, Keys, Rng, CASES};
use deinsum_exec::{Communicator, InProcess};
use deinsum_join::kernel::nested_loop_join;
use deinsum_join::{join, InspectMode, JoinKind, JoinOptions, JoinShape, Strategy, Table};

fn on(keys: Keys) -> Vec<String> {
    match keys {
        Keys::Multi => vec!["k".into(), "k2".into()],
        _ => vec!["k".into()],
    }
}

/// Runs every kind and strategy on `l`, `r` at `procs` ranks and checks them.
fn check(name: &str, l: &Table, r: &Table, keys: Keys, procs: usize) {
    let opts = |s| JoinOptions {
        strategy: s,
        machine: deinsum_plan::Machine::default(),
        output_limit: None,
        inspect: InspectMode::Exact,
    };
    for kind in JoinKind::ALL {
        let shape = JoinShape::new(l, r, &on(keys), kind, ("L", "R")).unwrap();
        let want = multiset(&nested_loop_join(&shape, l, r));
        for s in Strategy::ALL.map(Some).into_iter().chain([None]) {
            let outs = InProcess::new(procs)
                .unwrap()
                .run(|comm| {
                    let me = comm.rank();
                    let (lp, rp) = (part(l, me, procs), part(r, me, procs));
                    let shape = JoinShape::new(&lp, &rp, &on(keys), kind, ("L", "R"))?;
                    join(comm, &shape, &lp, &rp, &opts(s))
                })
                .unwrap();
            let tables: Vec<Table> = outs.iter().map(|o| o.table.clone()).collect();
            let got = multiset(&Table::concat(&tables).unwrap());
            let ran = outs[0].strategy;
            let what = format!("{name} {} {} P={procs}", kind.name(), ran.name());
            assert_eq!(got, want, "{what}");
            let pred = outs[0].inspection.prediction(ran);
            for (q, o) in outs.iter().enumerate() {
                assert_eq!(o.measured.sent, pred.sent[q], "{what}: rank {q} sent");
                assert_eq!(
                    o.measured.received, pred.received[q],
                    "{what}: rank {q} received"
                );
                assert_eq!(
                    o.table.rows() as u64,
                    pred.rows_out[q],
                    "{what}: rank {q} rows"
                );
            }
            assert_eq!(outs[0].inspection.output_rows, want.len() as u64, "{what}");
            if procs > 1 && l.rows() > 8 && r.rows() > 8 {
                // Rows do cross ranks here, so the equality above is not of zeros.
                assert!(
                    outs.iter().map(|o| o.measured.sent).sum::<u64>() > 0,
                    "{what}"
                );
            }
        }
    }
}

#[test]
fn strategies_match_the_serial_join() {
    let mut rng = Rng(7);
    for keys in [Keys::Int, Keys::Str, Keys::Multi] {
        for (name, nl, nr, distinct, nulls) in CASES {
            let l = table(&mut rng, nl, keys, distinct, nulls, "l");
            let r = table(&mut rng, nr, keys, distinct, nulls, "r");
            for procs in [1, 2, 3, 5, 8] {
                check(&format!("{keys:?} {name}"), &l, &r, keys, procs);
            }
        }
    }
}

/// `n` int64 keys drawn from Zipf(`s`) over `distinct` values, and a payload column.
fn zipf_table(rng: &mut Rng, n: usize, distinct: usize, s: f64, prefix: &str) -> Table {
    let mut cdf: Vec<f64> = (1..=distinct).map(|i| (i as f64).powf(-s)).collect();
    for i in 1..cdf.len() {
        cdf[i] += cdf[i - 1];
    }
    let total = cdf[distinct - 1];
    let keys = (0..n)
        .map(|_| {
            let u = rng.below(1 << 53) as f64 / (1u64 << 53) as f64 * total;
            Some(cdf.partition_point(|&c| c < u) as i64)
        })
        .collect();
    let payload = (0..n).map(|i| Some(i as i64)).collect();
    Table::new(
        vec!["k".into(), format!("{prefix}x")],
        vec![
            deinsum_join::Column::Int64(keys),
            deinsum_join::Column::Int64(payload),
        ],
    )
    .unwrap()
}

#[test]
fn heavy_keys_keep_the_shuffle_balanced() {
    // Zipf(1.2) keys on the left (a fact table), each key once on the right (a dimension):
    // the most frequent key holds about a sixth of the rows, which sent to one owner would
    // load it about 1.5x the mean at P = 4.
    let mut rng = Rng(11);
    let l = zipf_table(&mut rng, 20_000, 5_000, 1.2, "l");
    let r = Table::new(
        vec!["k".into(), "ry".into()],
        vec![
            deinsum_join::Column::Int64((0..5_000).map(Some).collect()),
            deinsum_join::Column::Float64((0..5_000).map(|i| Some(i as f64 / 2.0)).collect()),
        ],
    )
    .unwrap();
    let procs = 4;
    let opts = JoinOptions {
        strategy: Some(Strategy::Shuffle),
        machine: deinsum_plan::Machine::default(),
        output_limit: None,
        inspect: InspectMode::Exact,
    };
    let shape = JoinShape::new(&l, &r, &on(Keys::Int), JoinKind::Inner, ("L", "R")).unwrap();
    let want = multiset(&kernel_join(&shape, &l, &r));
    let outs = InProcess::new(procs)
        .unwrap()
        .run(|comm| {
            let me = comm.rank();
            let (lp, rp) = (part(&l, me, procs), part(&r, me, procs));
            let shape = JoinShape::new(&lp, &rp, &on(Keys::Int), JoinKind::Inner, ("L", "R"))?;
            join(comm, &shape, &lp, &rp, &opts)
        })
        .unwrap();
    let tables: Vec<Table> = outs.iter().map(|o| o.table.clone()).collect();
    assert_eq!(multiset(&Table::concat(&tables).unwrap()), want);
    let ins = &outs[0].inspection;
    assert!(ins.heavy_keys > 0, "no heavy key found");
    let pred = ins.prediction(Strategy::Shuffle);
    let ratio = |v: &[u64]| {
        let mean = v.iter().sum::<u64>() as f64 / v.len() as f64;
        *v.iter().max().unwrap() as f64 / mean
    };
    let rows_out: Vec<u64> = outs.iter().map(|o| o.table.rows() as u64).collect();
    for (q, o) in outs.iter().enumerate() {
        assert_eq!(o.measured.sent, pred.sent[q], "rank {q} sent");
        assert_eq!(o.measured.received, pred.received[q], "rank {q} received");
    }
    assert_eq!(rows_out, pred.rows_out);
    assert!(ratio(&pred.rows_in) <= 1.25, "rows in {:?}", pred.rows_in);
    assert!(ratio(&rows_out) <= 1.25, "rows out {rows_out:?}");
    // Without the heavy keys' broadcast the owner of the heaviest key would be over 1.25x.
    let naive: Vec<u64> = {
        let mut v = vec![0u64; procs];
        let k = deinsum_join::kernel::Keys::of(&l, &[0]);
        let kr = deinsum_join::kernel::Keys::of(&r, &[0]);
        for i in 0..k.len() {
            v[deinsum_join::kernel::owner(k.get(i).unwrap(), procs)] += 1;
        }
        for j in 0..kr.len() {
            v[deinsum_join::kernel::owner(kr.get(j).unwrap(), procs)] += 1;
        }
        v
    };
    assert!(
        ratio(&naive) > 1.25,
        "the keys are not skewed enough: {naive:?}"
    );
}

/// The serial join by the local hash join (the nested loop is slow at this size).
fn kernel_join(shape: &JoinShape, l: &Table, r: &Table) -> Table {
    use deinsum_join::kernel::{assemble, hash_join, Keys};
    let (lk, rk) = (Keys::of(l, &shape.lkeys), Keys::of(r, &shape.rkeys));
    let (pairs, _, _) = hash_join(&lk, &rk, false, false);
    assemble(shape, l, r, &pairs)
}

/// Runs every kind and strategy on `l`, `r` placed on their own groups of `procs` ranks
/// (`Placement::Separate`) and checks them as [`check`] does.
fn check_separate(name: &str, l: &Table, r: &Table, keys: Keys, procs: usize) {
    use deinsum_join::placement::part_of;
    use deinsum_join::Placement;
    let pl = Placement::Separate;
    for kind in JoinKind::ALL {
        let shape = JoinShape::new(l, r, &on(keys), kind, ("L", "R")).unwrap();
        let want = multiset(&nested_loop_join(&shape, l, r));
        for s in Strategy::ALL.map(Some).into_iter().chain([None]) {
            let opts = JoinOptions {
                strategy: s,
                machine: deinsum_plan::Machine::default(),
                output_limit: None,
                inspect: InspectMode::Exact,
            };
            let outs = InProcess::new(procs)
                .unwrap()
                .run(|comm| {
                    let me = comm.rank();
                    let lp = part_of(l, pl.slice(true, me, procs));
                    let rp = part_of(r, pl.slice(false, me, procs));
                    let shape = JoinShape::new(&lp, &rp, &on(keys), kind, ("L", "R"))?;
                    join(comm, &shape, &lp, &rp, &opts)
                })
                .unwrap();
            let tables: Vec<Table> = outs.iter().map(|o| o.table.clone()).collect();
            let ran = outs[0].strategy;
            let what = format!("separate {name} {} {} P={procs}", kind.name(), ran.name());
            assert_eq!(multiset(&Table::concat(&tables).unwrap()), want, "{what}");
            let pred = outs[0].inspection.prediction(ran);
            for (q, o) in outs.iter().enumerate() {
                assert_eq!(o.measured.sent, pred.sent[q], "{what}: rank {q} sent");
                assert_eq!(
                    o.measured.received, pred.received[q],
                    "{what}: rank {q} recv"
                );
                assert_eq!(o.table.rows() as u64, pred.rows_out[q], "{what}: rank {q}");
            }
        }
    }
}

#[test]
fn strategies_on_tables_placed_apart_match_the_serial_join() {
    let mut rng = Rng(17);
    for keys in [Keys::Int, Keys::Str, Keys::Multi] {
        for (name, nl, nr, distinct, nulls) in CASES {
            let l = table(&mut rng, nl, keys, distinct, nulls, "l");
            let r = table(&mut rng, nr, keys, distinct, nulls, "r");
            for procs in [1, 2, 3, 5, 8] {
                check_separate(&format!("{keys:?} {name}"), &l, &r, keys, procs);
            }
        }
    }
}

/// `n` rows of int64 keys `first, first + step, ...` and a payload column.
fn stepped(n: i64, first: i64, step: i64, name: &str) -> Table {
    Table::new(
        vec!["k".into(), name.into()],
        vec![
            deinsum_join::Column::Int64((0..n).map(|i| Some(first + i * step)).collect()),
            deinsum_join::Column::Int64((0..n).map(Some).collect()),
        ],
    )
    .unwrap()
}

#[test]
fn bloom_false_positives_come_back_and_match_nothing() {
    // Even keys on the left, odd on the right but for the last 50 (which match): the filters
    // pass some odd keys (false positives), which must come back and drop out, and a right
    // or full join must still keep them as unmatched.
    let l = stepped(1500, 0, 2, "lx");
    let r = Table::concat(&[stepped(1450, 1, 2, "rx"), stepped(50, 0, 2, "rx")]).unwrap();
    let procs = 3;
    for kind in JoinKind::ALL {
        let shape = JoinShape::new(&l, &r, &on(Keys::Int), kind, ("L", "R")).unwrap();
        let want = multiset(&nested_loop_join(&shape, &l, &r));
        let opts = JoinOptions {
            strategy: Some(Strategy::Bloom),
            machine: deinsum_plan::Machine::default(),
            output_limit: None,
            inspect: InspectMode::Exact,
        };
        let outs = InProcess::new(procs)
            .unwrap()
            .run(|comm| {
                let me = comm.rank();
                let (lp, rp) = (part(&l, me, procs), part(&r, me, procs));
                let shape = JoinShape::new(&lp, &rp, &on(Keys::Int), kind, ("L", "R"))?;
                join(comm, &shape, &lp, &rp, &opts)
            })
            .unwrap();
        let tables: Vec<Table> = outs.iter().map(|o| o.table.clone()).collect();
        assert_eq!(multiset(&Table::concat(&tables).unwrap()), want, "{kind:?}");
        let ins = &outs[0].inspection;
        let pred = ins.prediction(Strategy::Bloom);
        for (q, o) in outs.iter().enumerate() {
            assert_eq!(o.measured.sent, pred.sent[q], "{kind:?} rank {q} sent");
            assert_eq!(
                o.measured.received, pred.received[q],
                "{kind:?} rank {q} recv"
            );
        }
        // Rows into the local joins: the left's 1500 (put in the distinct-key sets, then
        // probed), the right's 1500 tested against each of the 3 filters, the 50 matches,
        // and the false positives.
        let rows_in: u64 = pred.rows_in.iter().sum();
        let base = 2 * 1500 + 3 * 1500 + 50;
        assert!(rows_in > base, "{kind:?}: no false positive ({rows_in})");
        assert!(
            rows_in < base + 150,
            "{kind:?}: too many false positives ({rows_in})"
        );
        // The filters are smaller than the key lists they replace.
        let semi = ins.prediction(Strategy::Semi);
        assert!(
            pred.sent.iter().sum::<u64>() < semi.sent.iter().sum::<u64>(),
            "{kind:?}"
        );
    }
}

/// Joins `l`, `r` split by columns over `procs` ranks (keys on the first ⌈P/2⌉, the other
/// columns on the rest) by the join index, for every kind, and checks the rows, every rank's
/// measured bytes against the prediction, and that only the key group produces rows.
fn check_columns(name: &str, l: &Table, r: &Table, on: &[String], procs: usize) {
    use deinsum_join::columns::{join_columns, ColumnPart};
    use deinsum_join::placement::part_of;
    use deinsum_join::Placement;
    let pl = Placement::Columns;
    for kind in JoinKind::ALL {
        let shape = JoinShape::new(l, r, on, kind, ("L", "R")).unwrap();
        let want = multiset(&nested_loop_join(&shape, l, r));
        for s in [None, Some(Strategy::Index)] {
            let opts = JoinOptions {
                strategy: s,
                machine: deinsum_plan::Machine::default(),
                output_limit: None,
                inspect: InspectMode::Exact,
            };
            let outs = InProcess::new(procs)
                .unwrap()
                .run(|comm| {
                    let me = comm.rank();
                    let lt = part_of(l, pl.slice(true, me, procs));
                    let rt = part_of(r, pl.slice(false, me, procs));
                    let shape = JoinShape::new(&lt, &rt, on, kind, ("L", "R"))?;
                    let lp = ColumnPart::split(&lt, &shape.lkeys, &shape.lrest, me, procs);
                    let rp = ColumnPart::split(&rt, &shape.rkeys, &shape.rrest, me, procs);
                    join_columns(comm, &shape, &lp, &rp, &opts)
                })
                .unwrap();
            let what = format!("columns {name} {} P={procs}", kind.name());
            let tables: Vec<Table> = outs.iter().map(|o| o.table.clone()).collect();
            assert_eq!(multiset(&Table::concat(&tables).unwrap()), want, "{what}");
            assert_eq!(outs[0].strategy, Strategy::Index, "{what}");
            let pred = outs[0].inspection.prediction(Strategy::Index);
            for (q, o) in outs.iter().enumerate() {
                assert_eq!(o.measured.sent, pred.sent[q], "{what}: rank {q} sent");
                assert_eq!(
                    o.measured.received, pred.received[q],
                    "{what}: rank {q} recv"
                );
                assert_eq!(
                    o.table.rows() as u64,
                    pred.rows_out[q],
                    "{what}: rank {q} rows"
                );
                if !pl.groups(procs).0.contains(&q) {
                    assert_eq!(o.table.rows(), 0, "{what}: rank {q} holds no keys");
                }
            }
            assert_eq!(outs[0].inspection.output_rows, want.len() as u64, "{what}");
        }
    }
}

#[test]
fn the_join_index_on_tables_split_by_columns_matches_the_serial_join() {
    let mut rng = Rng(23);
    for keys in [Keys::Int, Keys::Str, Keys::Multi] {
        for (name, nl, nr, distinct, nulls) in CASES {
            let l = table(&mut rng, nl, keys, distinct, nulls, "l");
            let r = table(&mut rng, nr, keys, distinct, nulls, "r");
            for procs in [1, 2, 3, 5, 8] {
                check_columns(&format!("{keys:?} {name}"), &l, &r, &on(keys), procs);
            }
        }
    }
    // A table of key columns alone (nothing to fetch for it).
    let l = table(&mut rng, 20, Keys::Int, 6, 10, "l");
    let r = l.select(&[0]);
    for procs in [1, 2, 3, 4] {
        check_columns("keys only", &l, &r, &on(Keys::Int), procs);
        check_columns("keys only, swapped", &r, &l, &on(Keys::Int), procs);
    }
}

#[test]
fn tables_split_by_columns_refuse_row_strategies() {
    use deinsum_join::columns::{join_columns, ColumnPart};
    let mut rng = Rng(3);
    let l = table(&mut rng, 5, Keys::Int, 3, 0, "l");
    let shape = JoinShape::new(&l, &l, &on(Keys::Int), JoinKind::Inner, ("L", "R")).unwrap();
    let opts = JoinOptions {
        strategy: Some(Strategy::Shuffle),
        machine: deinsum_plan::Machine::default(),
        output_limit: None,
        inspect: InspectMode::Exact,
    };
    let err = InProcess::new(2)
        .unwrap()
        .run(|comm| {
            let p = ColumnPart::split(&l, &shape.lkeys, &shape.lrest, comm.rank(), 2);
            join_columns(comm, &shape, &p, &p, &opts)
        })
        .unwrap_err();
    assert!(err.to_string().contains("join index"), "{err}");
}

/// A forced sketch inspector is refused on tables split by columns (whose inspector is exact
/// only) rather than ignored; auto runs there, exact.
#[test]
fn tables_split_by_columns_refuse_a_forced_sketch() {
    use deinsum_join::columns::{join_columns, ColumnPart};
    let mut rng = Rng(4);
    let l = table(&mut rng, 7, Keys::Int, 3, 0, "l");
    let shape = JoinShape::new(&l, &l, &on(Keys::Int), JoinKind::Inner, ("L", "R")).unwrap();
    let run = |inspect| {
        let opts = JoinOptions {
            strategy: None,
            machine: deinsum_plan::Machine::default(),
            output_limit: None,
            inspect,
        };
        InProcess::new(2)
            .unwrap()
            .run(|comm| {
                let p = ColumnPart::split(&l, &shape.lkeys, &shape.lrest, comm.rank(), 2);
                join_columns(comm, &shape, &p, &p, &opts).map(|j| j.inspection.mode())
            })
            .map_err(|e| e.to_string())
    };
    let err = run(InspectMode::Sketch).unwrap_err();
    assert!(err.contains("--inspect sketch"), "{err}");
    let modes = run(InspectMode::Auto).expect("auto joins");
    assert!(modes.iter().all(|&m| m == InspectMode::Exact), "{modes:?}");
}
