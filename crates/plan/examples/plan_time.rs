//! Times the stages of `build` for one einsum: `cargo run --release --example plan_time -- EXPR SIZES P`.

use deinsum_expr::{parse, ExtentSpec};
use deinsum_plan::{build, PlanOptions};
use std::time::Instant;

fn main() {
    let a: Vec<String> = std::env::args().collect();
    let spec = ExtentSpec::from_flags(Some(&a[2]), None, None).expect("sizes");
    let e = parse(&a[1], &spec).expect("einsum");
    let procs: usize = a[3].parse().expect("P");
    let t = Instant::now();
    let info = deinsum_path::optimize(&e, &Default::default()).expect("path");
    let t_path = t.elapsed();
    let t = Instant::now();
    let f = deinsum_soap::analyze(&info.tree, 1e6).expect("soap");
    let t_soap = t.elapsed();
    let t = Instant::now();
    let p = build(
        &e,
        &PlanOptions {
            procs,
            ..Default::default()
        },
    )
    .expect("plan");
    let t_all = t.elapsed();
    // Time to free a plan of the same size (a second build, dropped at once).
    let extra = build(
        &e,
        &PlanOptions {
            procs,
            ..Default::default()
        },
    )
    .expect("plan");
    let t = Instant::now();
    drop(extra);
    let t_drop = t.elapsed();
    for g in &p.groups {
        let ext: Vec<usize> = g.group.indices.iter().map(|c| e.extent(*c)).collect();
        let t = Instant::now();
        let n = deinsum_plan::enumerate_grids(&ext, procs, 0.25).len();
        println!(
            "  group {}: {} grids enumerated in {:?}, {} admissible",
            g.group.einsum_string(),
            n,
            t.elapsed(),
            g.candidates_considered
        );
    }
    let json = serde_json::to_string(&p).expect("json").len();
    println!("  {} steps, JSON {} bytes", p.steps.len(), json);
    println!(
        "path {:?} soap {:?} build total {:?} (drop {:?}); groups {} ranks {} max/rank {} ratio {:.3}",
        t_path,
        t_soap,
        t_all,
        t_drop,
        f.groups.len(),
        p.ranks_used,
        p.prediction.max_per_rank,
        p.prediction.ratio
    );
}
