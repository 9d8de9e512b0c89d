//! Time of `deinsum_plan::build` (path + SOAP + grids + schedules) for the Deinsum kernels.

use criterion::{criterion_group, criterion_main, Criterion};
use deinsum_expr::{parse, ExtentSpec};
use deinsum_plan::{build, PlanOptions};
use std::hint::black_box;

/// (name, einsum, sizes, P)
const CASES: &[(&str, &str, &str, usize)] = &[
    ("1mm", "ij,jk->ik", "i=4096,j=4096,k=4096", 512),
    ("2mm", "ij,jk,kl->il", "i=2048,j=2048,k=2048,l=2048", 512),
    (
        "3mm",
        "ij,jk,kl,lm->im",
        "i=2048,j=2048,k=2048,l=2048,m=2048",
        512,
    ),
    (
        "mttkrp3_mode0",
        "ijk,ja,ka->ia",
        "i=512,j=512,k=512,a=24",
        512,
    ),
    (
        "mttkrp3_mode1",
        "ijk,ia,ka->ja",
        "i=512,j=512,k=512,a=24",
        512,
    ),
    (
        "mttkrp3_mode2",
        "ijk,ia,ja->ka",
        "i=512,j=512,k=512,a=24",
        512,
    ),
    (
        "mttkrp5_mode0",
        "ijklm,ja,ka,la,ma->ia",
        "i=48,j=48,k=48,l=48,m=48,a=24",
        512,
    ),
    (
        "mttkrp5_mode2",
        "ijklm,ia,ja,la,ma->ka",
        "i=48,j=48,k=48,l=48,m=48,a=24",
        512,
    ),
    (
        "mttkrp5_mode4",
        "ijklm,ia,ja,ka,la->ma",
        "i=48,j=48,k=48,l=48,m=48,a=24",
        512,
    ),
    (
        "ttmc5_mode0",
        "ijklm,jb,kc,ld,me->ibcde",
        "i=48,j=48,k=48,l=48,m=48,b=8,c=8,d=8,e=8",
        512,
    ),
    (
        "deinsum_example_p2^20",
        "ijk,ja,ka,al->il",
        "i=10,j=10,k=10,a=10,l=10",
        1 << 20,
    ),
];

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("plan");
    g.sample_size(10);
    for &(name, expr, sizes, procs) in CASES {
        let spec = ExtentSpec::from_flags(Some(sizes), None, None).expect("sizes");
        let e = parse(expr, &spec).expect("einsum");
        let opts = PlanOptions {
            procs,
            ..Default::default()
        };
        let p = build(&e, &opts).expect("plan");
        eprintln!(
            "{name}: P={procs} groups {} ranks {} received/rank {} touched/rank {} bound {:.0} ratio {:.3}",
            p.groups.len(),
            p.ranks_used,
            p.prediction.max_per_rank,
            p.prediction.touched_per_rank,
            p.prediction.bound_per_rank,
            p.prediction.ratio
        );
        // The plan's drop (up to ~P^2 messages at P = 512) is left out of the timing: it is
        // freeing, not planning. `plan_time` reports both.
        g.bench_function(name, |b| {
            b.iter_with_large_drop(|| build(black_box(&e), black_box(&opts)).unwrap())
        });
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
