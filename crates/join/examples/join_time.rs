//! Times the in-memory join of two Parquet files on in-process ranks, as `deinsum join`
//! does but without linking the CLI (a quick build for profiling the join crate alone):
//! `cargo run --release -p deinsum-join --example join_time -- L.parquet R.parquet KEY P
//! [STRATEGY]`. Prints each rank's join seconds, output rows and bytes sent.

use deinsum_exec::{Communicator, InProcess};
use deinsum_join::{io, join, InspectMode, JoinKind, JoinOptions, JoinShape, Strategy};
use std::path::PathBuf;

#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() {
    let a: Vec<String> = std::env::args().collect();
    let (lp, rp) = (PathBuf::from(&a[1]), PathBuf::from(&a[2]));
    let on = vec![a[3].clone()];
    let p: usize = a[4].parse().expect("P");
    let strategy = a.get(5).map(|s| Strategy::from_name(s).expect("strategy"));
    let opts = JoinOptions {
        strategy: strategy.flatten(),
        machine: deinsum_plan::Machine::default(),
        output_limit: None,
        inspect: std::env::var("JOIN_INSPECT")
            .map_or(Ok(InspectMode::Auto), |m| InspectMode::from_name(&m))
            .expect("JOIN_INSPECT"),
    };
    let outs = InProcess::new(p)
        .expect("ranks")
        .run(|comm| {
            let (me, p) = (comm.rank(), comm.size());
            let l = io::parquet::read_part(me, p, &lp)?;
            let r = io::parquet::read_part(me, p, &rp)?;
            let shape = JoinShape::new(&l, &r, &on, JoinKind::Inner, ("L", "R"))?;
            join(comm, &shape, &l, &r, &opts)
        })
        .expect("join");
    for (q, o) in outs.iter().enumerate() {
        let pred = o.inspection.prediction(o.strategy);
        println!(
            "rank {q}: {} {:.3} s, {} rows, sent {} (predicted {})",
            o.strategy.name(),
            o.seconds,
            o.table.rows(),
            o.measured.sent,
            pred.sent[q]
        );
    }
}
