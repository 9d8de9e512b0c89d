//! Tables through CSV and Parquet read back by P ranks (each its own row range), and the
//! typed errors of bad input.

mod common;

use common::{multiset, table, Keys, Rng};
use deinsum_exec::InProcess;
use deinsum_join::io::{self, Schema};
use deinsum_join::{Column, DataType, JoinError, JoinKind, JoinShape, Table};
use std::path::PathBuf;

fn tmp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("deinsum-join-io-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d.join(name)
}

/// Reads `path` on `procs` ranks and concatenates the parts.
fn read(path: &std::path::Path, procs: usize, schema: &Schema) -> Result<Table, JoinError> {
    let parts = InProcess::new(procs)
        .unwrap()
        .run(|comm| io::read_part(comm, path, schema))
        .map_err(|e| match e {
            deinsum_exec::RankFailure::Error { error, .. } => error,
            other => panic!("{other}"),
        })?;
    Ok(Table::concat(&parts).unwrap())
}

#[test]
fn round_trips_on_any_rank_count() {
    let mut rng = Rng(3);
    let t = table(&mut rng, 57, Keys::Multi, 9, 10, "a");
    for ext in ["csv", "parquet"] {
        let path = tmp(&format!("t.{ext}"));
        io::write(&path, &t).unwrap();
        for procs in [1, 2, 3, 5, 8, 64] {
            let back = read(&path, procs, &Schema::default()).unwrap();
            assert_eq!(back.names(), t.names(), "{ext} P={procs}");
            assert_eq!(multiset(&back), multiset(&t), "{ext} P={procs}");
            if ext == "parquet" {
                assert_eq!(back, t, "parquet P={procs}");
            }
            assert_eq!(back.dtypes(), t.dtypes(), "{ext} P={procs}");
        }
    }
}

#[test]
fn csv_types_are_inferred_and_agreed_across_ranks() {
    let path = tmp("infer.csv");
    // Rank 0's lines are all ints; a later line has a float: every rank must read float.
    let mut text = String::from("a,b,c,d\n");
    for i in 0..20 {
        text.push_str(&format!("{i},true,x{i},\n"));
    }
    text.push_str("2.5,false,y,\n");
    std::fs::write(&path, text).unwrap();
    for procs in [1, 4] {
        let t = read(&path, procs, &Schema::default()).unwrap();
        assert_eq!(
            t.dtypes(),
            vec![
                DataType::Float64,
                DataType::Bool,
                DataType::Utf8,
                DataType::Null
            ],
            "P={procs}"
        );
        assert_eq!(t.rows(), 21);
    }
    let s = Schema::parse("a:string,d:int64").unwrap();
    let t = read(&path, 3, &s).unwrap();
    assert_eq!(t.dtypes()[0], DataType::Utf8);
    assert_eq!(t.dtypes()[3], DataType::Int64);
    assert_eq!(
        t.column("a"),
        Some(&Column::Utf8(
            (0..20)
                .map(|i| Some(i.to_string()))
                .chain([Some("2.5".to_string())])
                .collect()
        ))
    );
}

#[test]
fn malformed_csv_line_is_named() {
    let path = tmp("bad.csv");
    let mut text = String::from("k,v\n");
    for i in 0..30 {
        text.push_str(&format!("{i},{i}\n"));
    }
    text.push_str("31,1,extra\n");
    std::fs::write(&path, text).unwrap();
    for procs in [1, 3] {
        let e = read(&path, procs, &Schema::default()).unwrap_err();
        // Every rank reports the failing rank's error, whichever fails first.
        assert!(
            e.to_string().contains("bad.csv:32: 3 fields"),
            "P={procs}: {e}"
        );
        assert!(e.is_input());
    }
    let e = read(&path, 1, &Schema::parse("v:int64,k:bool").unwrap()).unwrap_err();
    assert!(matches!(e, JoinError::Csv { line: 2, .. }), "{e}");
}

#[test]
fn not_parquet_and_missing_columns_and_key_types() {
    let path = tmp("fake.parquet");
    std::fs::write(&path, "k,v\n1,2\n").unwrap();
    let e = read(&path, 2, &Schema::default()).unwrap_err();
    assert!(matches!(e, JoinError::NotParquet { .. }), "{e}");
    assert!(e.to_string().contains("fake.parquet"));

    let l = Table::new(
        vec!["k".into(), "a".into()],
        vec![
            Column::Int64(vec![Some(1)].into()),
            Column::Int64(vec![Some(2)].into()),
        ],
    )
    .unwrap();
    let r = Table::new(
        vec!["k".into(), "b".into()],
        vec![
            Column::Utf8(vec![Some("1".into())]),
            Column::Int64(vec![Some(2)].into()),
        ],
    )
    .unwrap();
    let e = JoinShape::new(
        &l,
        &r,
        &["a".to_string()],
        JoinKind::Inner,
        ("l.csv", "r.csv"),
    )
    .unwrap_err();
    assert!(
        matches!(&e, JoinError::MissingColumn { file, column, .. } if file == "r.csv" && column == "a"),
        "{e}"
    );
    let e = JoinShape::new(
        &l,
        &r,
        &["k".to_string()],
        JoinKind::Inner,
        ("l.csv", "r.csv"),
    )
    .unwrap_err();
    assert!(
        matches!(&e, JoinError::KeyTypes { left, right, .. } if left == "int64" && right == "string"),
        "{e}"
    );
    assert!(e.is_input());
}
