//! One group's bound (target < 1 ms) and the whole analysis of 10-operand einsums
//! (target < 50 ms). Trees come from the path crate's default search.

use criterion::{black_box, criterion_group, criterion_main, Criterion};
use deinsum_expr::{parse, ExtentSpec};
use deinsum_path::{optimize, ContractionTree, PathOptions};
use deinsum_soap::{analyze, bound_group, parallel_bound};
use std::collections::BTreeMap;

fn v(s: &str) -> Vec<char> {
    s.chars().collect()
}

fn tree_of(expr: &str, size: usize) -> ContractionTree {
    let spec = ExtentSpec {
        default: Some(size),
        ..ExtentSpec::default()
    };
    let e = parse(expr, &spec).expect("benchmark einsum parses");
    optimize(&e, &PathOptions::default()).expect("path").tree
}

fn group_bounds(c: &mut Criterion) {
    let e: BTreeMap<char, usize> = "ijklmnoa".chars().map(|c| (c, 4096)).collect();
    let s = 1.0e6;
    c.bench_function("bound/mm ik,kj->ij", |b| {
        b.iter(|| bound_group(&v("ikj"), &e, &[v("ik"), v("kj")], &v("ij"), black_box(s)).unwrap())
    });
    c.bench_function("bound/mttkrp3 ijk,ja,ka->ia", |b| {
        b.iter(|| {
            bound_group(
                &v("ijka"),
                &e,
                &[v("ijk"), v("ja"), v("ka")],
                &v("ia"),
                black_box(s),
            )
            .unwrap()
        })
    });
    let ins5 = [v("ijklm"), v("ja"), v("ka"), v("la"), v("ma")];
    c.bench_function("bound/mttkrp5 ijklm,ja,ka,la,ma->ia", |b| {
        b.iter(|| bound_group(&v("ijklma"), &e, &ins5, &v("ia"), black_box(s)).unwrap())
    });
    let mut sat = e.clone();
    sat.insert('k', 8);
    c.bench_function("bound/mm saturated k=8", |b| {
        b.iter(|| {
            bound_group(&v("ikj"), &sat, &[v("ik"), v("kj")], &v("ij"), black_box(s)).unwrap()
        })
    });
    let t = tree_of("ik,kj->ij", 4096);
    let f = analyze(&t, s).unwrap();
    c.bench_function("parallel_bound/mm P=64", |b| {
        b.iter(|| parallel_bound(&f.groups[0], black_box(64), s))
    });
}

fn whole_analysis(c: &mut Criterion) {
    let cases = [
        // Order-9 MTTKRP followed by a matrix product: 7 Khatri-Rao steps may fuse.
        ("mttkrp9+mm", "abcdefghi,bz,cz,dz,ez,fz,gz,hz,iz,zy->ay", 8),
        // A chain of 10 matrices: every step sums, one legal partition.
        ("chain10", "ab,bc,cd,de,ef,fg,gh,hi,ij,jk->ak", 512),
        // Khatri-Rao of 10 factors: 8 of 9 steps sum nothing.
        ("krp10", "ia,ja,ka,la,ma,na,oa,pa,qa,ra->ijklmnopqr", 6),
        // A small tensor network.
        (
            "network10",
            "abc,cde,efg,ghi,ija,bdk,fhl,klm,mno,no->jl",
            12,
        ),
    ];
    for (name, expr, size) in cases {
        let t = tree_of(expr, size);
        c.bench_function(&format!("analyze/{name} ({} steps)", t.steps.len()), |b| {
            b.iter(|| analyze(black_box(&t), 1.0e4).unwrap())
        });
    }
}

criterion_group!(benches, group_bounds, whole_analysis);
criterion_main!(benches);
