//! Benchmark of one einsum on the backend of this build: wall time (max over ranks, best of
//! `--reps`), GFLOP/s, and the words received by the busiest rank against the plan's prediction
//! and the SOAP lower bound.
//!
//! `cargo run --release --example mpi_bench -- --kernel mm --n 2048 --procs 2` (in-process), or
//! built with `--features mpi`: `mpirun -n 2 target/release/examples/mpi_bench --kernel mm`.
//! Kernels: `mm` ("ij,jk->ik", n³) and `mttkrp` ("ijk,ja,ka->ia", n³ × r).
//! The numpy baseline is examples/bench/numpy_einsum.py.

mod common;

use common::arg;
use deinsum::expr::ExtentSpec;
use deinsum::{Communicator, Einsum, ExecOptions, Inputs, Options};
use std::collections::BTreeMap;
use std::process::ExitCode;
use std::time::Instant;

struct Bench {
    expr: &'static str,
    sizes: BTreeMap<char, usize>,
    flops: f64,
    reps: usize,
}

fn bench_of_args() -> Result<Bench, String> {
    let args: Vec<String> = std::env::args().collect();
    let kernel = args
        .iter()
        .position(|a| a == "--kernel")
        .and_then(|i| args.get(i + 1))
        .map(String::as_str)
        .unwrap_or("mm");
    let reps = arg("reps").unwrap_or(3);
    match kernel {
        "mm" => {
            let n = arg("n").unwrap_or(2048);
            Ok(Bench {
                expr: "ij,jk->ik",
                sizes: [('i', n), ('j', n), ('k', n)].into(),
                flops: 2.0 * (n as f64).powi(3),
                reps,
            })
        }
        "mttkrp" => {
            let n = arg("n").unwrap_or(256);
            let r = arg("r").unwrap_or(32);
            // Fused: X[i,j,k]·B[j,a]·C[k,a] summed, 2 multiplies + 1 add per point; opt_einsum
            // counts the same kernel as 3 n³ r with its own pairwise path.
            Ok(Bench {
                expr: "ijk,ja,ka->ia",
                sizes: [('i', n), ('j', n), ('k', n), ('a', r)].into(),
                flops: 2.0 * (n as f64).powi(3) * r as f64,
                reps,
            })
        }
        other => Err(format!("unknown --kernel {other} (mm or mttkrp)")),
    }
}

fn bench_on<C: Communicator>(comm: &C, b: &Bench, backend: &str) -> Result<(), String> {
    let p = comm.size();
    let spec = ExtentSpec {
        sizes: b.sizes.clone(),
        ..ExtentSpec::default()
    };
    let compiled = Einsum::compile(b.expr, &spec, &Options::procs(p)).map_err(|e| e.to_string())?;
    let inputs = Inputs::<f64>::Seeded { seed: 1 };
    let mut best = f64::INFINITY;
    let mut best_total = f64::INFINITY;
    let mut words = [0u64; 2];
    for _ in 0..b.reps {
        comm.barrier().map_err(|e| e.to_string())?;
        let t0 = Instant::now();
        let (_out, report) = compiled
            .run_measured(comm, &inputs, &ExecOptions::default())
            .map_err(|e| e.to_string())?;
        comm.barrier().map_err(|e| e.to_string())?;
        let dt = t0.elapsed().as_secs_f64();
        // Max over ranks of the time (in ns) and of the words received.
        let recv: u64 = report.steps.iter().map(|s| s.received).sum();
        let pred: u64 = report.steps.iter().map(|s| s.predicted_received).sum();
        // Input generation (Load steps) is not part of the kernel: time the rest too.
        let load: f64 = report
            .steps
            .iter()
            .filter(|s| s.kind == deinsum::exec::StepKind::Load)
            .map(|s| s.seconds)
            .sum();
        let mut agg = [
            (dt * 1e9) as u64,
            ((dt - load).max(0.0) * 1e9) as u64,
            recv,
            pred,
        ];
        comm.all_reduce_max_u64(&mut agg)
            .map_err(|e| e.to_string())?;
        if (agg[1] as f64 * 1e-9) < best {
            best = agg[1] as f64 * 1e-9;
            best_total = agg[0] as f64 * 1e-9;
        }
        words = [agg[2], agg[3]];
    }
    if comm.rank() == 0 {
        let plan = compiled.plan();
        let grids: Vec<String> = plan
            .groups
            .iter()
            .map(|g| {
                g.grid
                    .dims
                    .iter()
                    .map(|d| format!("{}={}", d.index, d.size))
                    .collect::<Vec<_>>()
                    .join("x")
            })
            .collect();
        println!(
            "{} {:?} P={p} {backend}: best of {} {:.4} s without input generation ({:.4} s with), \
             {:.2} GFLOP/s; grid [{}]; words received by the busiest rank: measured {} plan {} \
             SOAP bound {:.0}",
            b.expr,
            b.sizes,
            b.reps,
            best,
            best_total,
            b.flops / best * 1e-9,
            grids.join("; "),
            words[0],
            words[1],
            plan.prediction.bound_per_rank,
        );
    }
    Ok(())
}

fn run_local(b: &Bench) -> ExitCode {
    let p = arg("procs").unwrap_or(2);
    let world = match deinsum::InProcess::new(p) {
        Ok(w) => w,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::FAILURE;
        }
    };
    match world.run(|comm| bench_on(comm, b, "in-process")) {
        Ok(_) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

fn main() -> ExitCode {
    let b = match bench_of_args() {
        Ok(b) => b,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    // `--local`: the in-process backend even in an MPI build (same binary for both figures).
    if std::env::args().any(|a| a == "--local") || cfg!(not(feature = "mpi")) {
        return run_local(&b);
    }
    #[cfg(feature = "mpi")]
    {
        let Some(universe) = mpi::initialize() else {
            eprintln!("error: MPI was already initialized");
            return ExitCode::FAILURE;
        };
        let world = deinsum::exec::mpi::MpiComm::world(&universe);
        world.or_abort(bench_on(&world, &b, "MPI"));
    }
    ExitCode::SUCCESS
}
