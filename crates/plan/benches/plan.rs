//! Time of `deinsum_plan::build` (path + SOAP + grids + schedules) for the Deinsum kernels.

use criterion::{criterion_group, criterion_main, Criterion};
use deinsum_expr::{parse, ExtentSpec};
use deinsum_plan::choose::choose_within_budget;
use deinsum_plan::{build, PlanOptions};
use std::hint::black_box;

/// Deinsum's ten benchmark kernels at their P=512 weak-scaling extents (matrices 32768; order
/// 3: 4872 and R=120; order 5 and TTMc: 192 and R=68): (name, einsum, sizes).
const KERNELS: &[(&str, &str, &str)] = &[
    ("1mm", "ij,jk->ik", "i=32768,j=32768,k=32768"),
    ("2mm", "ij,jk,kl->il", "i=32768,j=32768,k=32768,l=32768"),
    (
        "3mm",
        "ij,jk,kl,lm->im",
        "i=32768,j=32768,k=32768,l=32768,m=32768",
    ),
    (
        "mttkrp3_mode0",
        "ijk,ja,ka->ia",
        "i=4872,j=4872,k=4872,a=120",
    ),
    (
        "mttkrp3_mode1",
        "ijk,ia,ka->ja",
        "i=4872,j=4872,k=4872,a=120",
    ),
    (
        "mttkrp3_mode2",
        "ijk,ia,ja->ka",
        "i=4872,j=4872,k=4872,a=120",
    ),
    (
        "mttkrp5_mode0",
        "ijklm,ja,ka,la,ma->ia",
        "i=192,j=192,k=192,l=192,m=192,a=68",
    ),
    (
        "mttkrp5_mode2",
        "ijklm,ia,ja,la,ma->ka",
        "i=192,j=192,k=192,l=192,m=192,a=68",
    ),
    (
        "mttkrp5_mode4",
        "ijklm,ia,ja,ka,la->ma",
        "i=192,j=192,k=192,l=192,m=192,a=68",
    ),
    (
        "ttmc5_mode0",
        "ijklm,jb,kc,ld,me->ibcde",
        "i=192,j=192,k=192,l=192,m=192,b=68,c=68,d=68,e=68",
    ),
];

/// Cases beyond the kernels: (name, einsum, sizes, P). The first three are issue 37's
/// million-rank rows (target: each whole `deinsum plan` process under 0.5 s).
const LARGE: &[(&str, &str, &str, usize)] = &[
    (
        "mttkrp3_4096_r64_p2^20",
        "ijk,ja,ka->ia",
        "i=4096,j=4096,k=4096,a=64",
        1 << 20,
    ),
    (
        "ttmc5_96_r16_p3^12",
        "ijklm,jb,kc,ld,me->ibcde",
        "i=96,j=96,k=96,l=96,m=96,b=16,c=16,d=16,e=16",
        531_441,
    ),
    (
        "1mm_4096_p2^20",
        "ij,jk->ik",
        "i=4096,j=4096,k=4096",
        1 << 20,
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
    g.sample_size(10)
        .warm_up_time(std::time::Duration::from_millis(200))
        .measurement_time(std::time::Duration::from_secs(1));
    let cases = [512, 4096]
        .iter()
        .flat_map(|&p| {
            KERNELS
                .iter()
                .map(move |&(n, e, s)| (format!("{n}_p{p}"), e, s, p))
        })
        .chain(LARGE.iter().map(|&(n, e, s, p)| (n.to_string(), e, s, p)));
    for (name, expr, sizes, procs) in cases {
        let spec = ExtentSpec::from_flags(Some(sizes), None, None).expect("sizes");
        let e = parse(expr, &spec).expect("einsum");
        let opts = PlanOptions {
            procs,
            ..Default::default()
        };
        let p = build(&e, &opts).expect("plan");
        eprintln!(
            "{name}: P={procs} JSON {} bytes, groups {} ranks {} received/rank {} touched/rank {} bound {:.0} ratio {:.3}",
            serde_json::to_string(&p).expect("json").len(),
            p.groups.len(),
            p.ranks_used,
            p.prediction.max_per_rank,
            p.prediction.touched_per_rank,
            p.prediction.bound_per_rank,
            p.prediction.ratio
        );
        // The plan's drop is left out of the timing: it is freeing, not planning.
        g.bench_function(&name, |b| {
            b.iter_with_large_drop(|| build(black_box(&e), black_box(&opts)).unwrap())
        });
    }
    // Issue 37's million-rank rows as `deinsum plan` runs them: inputs readable in place
    // (each tree planned from where it loads them and canonically) and the choice among
    // candidate trees (crates/plan/benches/cli_million.sh times the whole process).
    for &(name, expr, sizes, procs) in &LARGE[..3] {
        let spec = ExtentSpec::from_flags(Some(sizes), None, None).expect("sizes");
        let e = parse(expr, &spec).expect("einsum");
        let opts = PlanOptions {
            procs,
            inputs_in_place: true,
            ..Default::default()
        };
        g.bench_function(format!("cli_{name}"), |b| {
            b.iter_with_large_drop(|| {
                choose_within_budget(black_box(&e), black_box(&opts)).unwrap()
            })
        });
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
