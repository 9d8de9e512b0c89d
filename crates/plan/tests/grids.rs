//! Grid choices: the Deinsum paper's example, matrix-multiplication cubes, primes, large P.

mod common;
use common::*;
use deinsum_plan::{build_from, PlanOptions};

fn sizes(p: &deinsum_plan::Plan, g: usize) -> Vec<(char, usize)> {
    p.groups[g]
        .grid
        .dims
        .iter()
        .map(|d| (d.index, d.size))
        .collect()
}

fn opts(p: usize) -> PlanOptions {
    PlanOptions {
        procs: p,
        ..Default::default()
    }
}

#[test]
fn deinsum_example_p8() {
    let (e, t, f) = mttkrp_mm(10);
    let p = build_from(&e, &t, vec![], &f, &opts(8)).unwrap();
    println!("{:?}\n{:?}", sizes(&p, 0), sizes(&p, 1));
    assert_eq!(sizes(&p, 0), vec![('j', 2), ('a', 1), ('k', 2), ('i', 2)]);
    assert_eq!(p.groups[1].grid.size(), 8);
}

#[test]
fn mm_cubes() {
    for (procs, c) in [(8, 2), (64, 4), (512, 8)] {
        let (e, t, f) = mm(64);
        let p = build_from(&e, &t, vec![], &f, &opts(procs)).unwrap();
        println!(
            "{procs}: {:?} {:?}",
            sizes(&p, 0),
            p.prediction.max_per_rank
        );
        assert_eq!(sizes(&p, 0), vec![('i', c), ('j', c), ('k', c)]);
        assert!(p.idle.is_none());
    }
}
