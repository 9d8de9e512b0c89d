//! GROUP BY sum and count over the join, computed without materializing it, against the same
//! aggregates over the serial join's rows, for P in {1, 2, 3, 5, 8}.

mod common;

use common::{part, table, Keys, Rng};
use deinsum_exec::{Communicator, InProcess};
use deinsum_join::agg::{group_join, Aggregate, GroupBy};
use deinsum_join::kernel::nested_loop_join;
use deinsum_join::{Column, JoinKind, JoinShape, Table};
use std::collections::BTreeMap;

/// Group → (count, sum of the column's non-NULL values, whether any) over the joined rows.
fn reference(joined: &Table, g: &str, x: Option<&str>) -> BTreeMap<String, (i64, f64, bool)> {
    let gc = joined.column(g).unwrap();
    let mut out = BTreeMap::new();
    for i in 0..joined.rows() {
        let key = if gc.is_null(i) {
            "NULL".into()
        } else {
            gc.text(i)
        };
        let e = out.entry(key).or_insert((0i64, 0.0f64, false));
        e.0 += 1;
        if let Some(x) = x {
            match joined.column(x).unwrap() {
                Column::Int64(v) => {
                    if let Some(a) = v.get(i) {
                        e.1 += a as f64;
                        e.2 = true;
                    }
                }
                Column::Float64(v) => {
                    if let Some(a) = v.get(i) {
                        e.1 += a;
                        e.2 = true;
                    }
                }
                _ => {}
            }
        }
    }
    out
}

#[test]
fn group_by_sum_and_count_equal_the_joined_rows() {
    let mut rng = Rng(11);
    for (keys, nl, nr) in [(Keys::Int, 50, 30), (Keys::Str, 20, 45), (Keys::Int, 0, 5)] {
        let l = table(&mut rng, nl, keys, 7, 10, "l");
        let r = table(&mut rng, nr, keys, 7, 10, "r");
        let on = vec!["k".to_string()];
        let shape = JoinShape::new(&l, &r, &on, JoinKind::Inner, ("L", "R")).unwrap();
        let joined = nested_loop_join(&shape, &l, &r);
        // Group by a left column, sum a right one; group by the right's, sum the left's.
        for (g, agg) in [
            ("ls", Aggregate::Sum("rf".into())),
            ("v", Aggregate::Sum("lf".into())),
            ("rs", Aggregate::Sum("lf".into())),
            ("ls", Aggregate::Count),
            ("k", Aggregate::Count),
        ] {
            let x = match &agg {
                Aggregate::Sum(x) => Some(x.clone()),
                Aggregate::Count => None,
            };
            let want = reference(&joined, g, x.as_deref());
            let gb = GroupBy {
                group: g.into(),
                aggregate: agg.clone(),
            };
            for procs in [1, 2, 3, 5, 8] {
                let outs = InProcess::new(procs)
                    .unwrap()
                    .run(|comm| {
                        let me = comm.rank();
                        let (lp, rp) = (part(&l, me, procs), part(&r, me, procs));
                        let shape = JoinShape::new(&lp, &rp, &on, JoinKind::Inner, ("L", "R"))?;
                        group_join(comm, &shape, &lp, &rp, &gb, ("L", "R"))
                    })
                    .unwrap();
                let t =
                    Table::concat(&outs.iter().map(|o| o.0.clone()).collect::<Vec<_>>()).unwrap();
                let mut got = BTreeMap::new();
                for i in 0..t.rows() {
                    let key = if t.columns()[0].is_null(i) {
                        "NULL".into()
                    } else {
                        t.columns()[0].text(i)
                    };
                    let v = &t.columns()[1];
                    let val = if v.is_null(i) {
                        None
                    } else {
                        Some(v.text(i).parse::<f64>().unwrap())
                    };
                    assert!(got.insert(key, val).is_none(), "a group twice");
                }
                assert_eq!(got.len(), want.len(), "{g} {agg:?} P={procs}");
                for (k, &(n, s, any)) in &want {
                    let v = got[k];
                    match &agg {
                        Aggregate::Count => assert_eq!(v, Some(n as f64), "{g} {k} P={procs}"),
                        Aggregate::Sum(_) if !any => assert_eq!(v, None, "{g} {k} P={procs}"),
                        Aggregate::Sum(_) => {
                            let v = v.unwrap();
                            assert!(
                                (v - s).abs() <= 1e-9 * s.abs().max(1.0),
                                "{g} {k} P={procs}: {v} vs {s}"
                            );
                        }
                    }
                }
            }
        }
    }
}
