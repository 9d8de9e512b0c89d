//! Times the inspector alone, exact against sketch, on two Parquet files on in-process ranks:
//! `cargo run --release -p deinsum-join --example inspect_time -- L.parquet R.parquet KEY P
//! [REPEAT]`. Prints, per mode, the slowest rank's median seconds, the bytes the busiest rank
//! sent, the output rows predicted and the strategy auto would take.

use deinsum_exec::{Communicator, InProcess};
use deinsum_join::dist::{choose, explain};
use deinsum_join::{io, InspectMode, JoinKind, JoinShape, Table};
use std::path::PathBuf;

#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() {
    let a: Vec<String> = std::env::args().collect();
    let (lp, rp) = (PathBuf::from(&a[1]), PathBuf::from(&a[2]));
    let on = vec![a[3].clone()];
    let p: usize = a[4].parse().expect("P");
    let repeat: usize = a.get(5).map_or(3, |r| r.parse().expect("REPEAT"));
    // Each rank's tables, read once.
    let parts: Vec<(Table, Table)> = (0..p)
        .map(|me| {
            (
                io::parquet::read_part(me, p, &lp).expect("left"),
                io::parquet::read_part(me, p, &rp).expect("right"),
            )
        })
        .collect();
    for mode in [InspectMode::Exact, InspectMode::Sketch] {
        let mut times = Vec::new();
        let mut last = None;
        for _ in 0..repeat {
            let outs = InProcess::new(p)
                .expect("ranks")
                .run(|comm| {
                    let (l, r) = &parts[comm.rank()];
                    let shape = JoinShape::new(l, r, &on, JoinKind::Inner, ("L", "R"))?;
                    let t0 = comm.traffic();
                    let start = std::time::Instant::now();
                    let ins = explain(comm, &shape, l, r, &deinsum_plan::Machine::default(), mode)?;
                    let secs = start.elapsed().as_secs_f64();
                    Ok::<_, deinsum_join::JoinError>((ins, secs, comm.traffic().sent - t0.sent))
                })
                .expect("inspect");
            times.push(outs.iter().map(|o| o.1).fold(0.0, f64::max));
            last = Some(outs);
        }
        times.sort_by(f64::total_cmp);
        let outs = last.expect("a run");
        let ins = &outs[0].0;
        println!(
            "{}: {:.3} s (median of {repeat}, slowest rank), max sent {} B, output rows {}, heavy keys {}, auto picks {}",
            mode.name(),
            times[times.len() / 2],
            outs.iter().map(|o| o.2).max().unwrap_or(0),
            ins.output_rows,
            ins.heavy_keys,
            choose(ins).name()
        );
    }
}
