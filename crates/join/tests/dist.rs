//! Every strategy against the serial nested-loop join, for the four kinds, P in {1, 2, 3, 5,
//! 8}, int, string and two-column keys, NULL keys, duplicates, empty and one-row tables; rows
//! compared as multisets, and every rank's measured bytes equal to the inspector's prediction.

mod common;

use common::{multiset, part, table, Keys, Rng};
use deinsum_exec::{Communicator, InProcess};
use deinsum_join::kernel::nested_loop_join;
use deinsum_join::{join, JoinKind, JoinOptions, JoinShape, Strategy, Table};

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
        let cases = [
            ("dups", 40, 25, 8, 10),
            ("sparse matches", 30, 30, 60, 0),
            ("empty left", 0, 12, 5, 10),
            ("empty right", 9, 0, 5, 10),
            ("one row each", 1, 1, 1, 0),
            ("all null keys", 6, 5, 3, 100),
        ];
        for (name, nl, nr, distinct, nulls) in cases {
            let l = table(&mut rng, nl, keys, distinct, nulls, "l");
            let r = table(&mut rng, nr, keys, distinct, nulls, "r");
            for procs in [1, 2, 3, 5, 8] {
                check(&format!("{keys:?} {name}"), &l, &r, keys, procs);
            }
        }
    }
}
