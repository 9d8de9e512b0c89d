//! Times `build` of the 15-site MPS norm as Python's `einsum` plans it (host machine,
//! `TreeSearch::WhenItPays`): `cargo run --release --example mps_compile -- P N`.

use deinsum_expr::{parse, ExtentSpec};
use deinsum_plan::{build, Machine, PlanOptions, TreeSearch};
use std::time::Instant;

#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() {
    let a: Vec<String> = std::env::args().collect();
    let procs: usize = a.get(1).map_or(2, |s| s.parse().expect("P"));
    let n: usize = a.get(2).map_or(50, |s| s.parse().expect("N"));
    let (sites, bond, phys) = (15usize, 32usize, 2usize);
    let mut names = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ".chars();
    let kb: Vec<char> = (0..sites - 1).map(|_| names.next().unwrap()).collect();
    let bb: Vec<char> = (0..sites - 1).map(|_| names.next().unwrap()).collect();
    let ph: Vec<char> = (0..sites).map(|_| names.next().unwrap()).collect();
    let mut terms = Vec::new();
    let mut sizes = Vec::new();
    for side in [&kb, &bb] {
        for k in 0..sites {
            let mut t = String::new();
            if k > 0 {
                t.push(side[k - 1]);
            }
            t.push(ph[k]);
            if k < sites - 1 {
                t.push(side[k]);
            }
            terms.push(t);
        }
        for c in side.iter() {
            sizes.push(format!("{c}={bond}"));
        }
    }
    for c in &ph {
        sizes.push(format!("{c}={phys}"));
    }
    let expr = format!("{}->", terms.join(","));
    let spec = ExtentSpec::from_flags(Some(&sizes.join(",")), None, None).expect("sizes");
    let e = parse(&expr, &spec).expect("einsum");
    let opts = PlanOptions {
        procs,
        machine: Machine::default().on_host(2, procs),
        inputs_in_place: true,
        tree_search: TreeSearch::WhenItPays,
        ..Default::default()
    };
    let mut times = Vec::new();
    let mut last = None;
    for _ in 0..n {
        let t = Instant::now();
        let p = build(&e, &opts).expect("plan");
        times.push(t.elapsed().as_secs_f64() * 1e3);
        last = Some(p);
    }
    let first = times[0];
    times.sort_by(f64::total_cmp);
    let p = last.unwrap();
    println!(
        "P={procs}: first {first:.3} ms, min {:.3} ms, median {:.3} ms; predicted {:.3} ms, {} groups",
        times[0],
        times[n / 2],
        p.prediction.seconds * 1e3,
        p.groups.len()
    );
}
