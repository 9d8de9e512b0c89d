//! Shared driver of the examples: pick the backend, run the compiled einsum, check the
//! distributed result against a serial evaluation and the measured volume against the plan.
//!
//! Without the `mpi` feature the example runs on `--procs P` in-process ranks (default 4); with
//! it, on the MPI world it was started in (`mpirun -n P`). Exit status 0 only when every check
//! passes on every rank.

#![allow(dead_code)]

use deinsum::exec::data::seeded_value;
use deinsum::exec::gather_reports;
use deinsum::expr::ExtentSpec;
use deinsum::report::{Backend, Check, ReferenceMethod, RunContext, RunSummary};
use deinsum::{Communicator, Einsum, ExecOptions, Inputs, Options};
use std::collections::BTreeMap;
use std::process::ExitCode;

/// One example: an einsum with extents and its own serial evaluation.
pub trait Example: Sync {
    /// Display name.
    fn name(&self) -> &str;
    /// The einsum expression.
    fn expr(&self) -> &str;
    /// Extent of every index.
    fn sizes(&self) -> BTreeMap<char, usize>;
    /// The output row-major, computed serially from `input(k, x)` (element `x` of operand `k`
    /// in storage order).
    fn serial(&self, input: &dyn Fn(usize, usize) -> f64) -> Vec<f64>;
    /// What to do with the gathered output on rank 0 after the check (the rest of a
    /// workflow, like the CP-ALS update); returns lines to print, or an error.
    fn after(
        &self,
        _out: &[f64],
        _input: &dyn Fn(usize, usize) -> f64,
    ) -> Result<Vec<String>, String> {
        Ok(Vec::new())
    }
    /// The example's own flags (each takes a positive integer): name and help line.
    fn flags(&self) -> Vec<(&'static str, &'static str)> {
        Vec::new()
    }
}

/// Checks the command line against the flags `ex` takes (and `--procs`): `--help` prints the
/// usage and exits 0; an unknown flag or a stray argument exits 2, before anything runs.
pub fn check_args<E: Example>(ex: &E) {
    let mut flags = ex.flags();
    flags.push((
        "procs",
        "number of in-process ranks (default 4); under MPI the world size",
    ));
    let usage = || {
        let mut u = format!(
            "{}: {}\n\nusage: {} [FLAGS]\n",
            ex.name(),
            ex.expr(),
            ex.name()
        );
        for (name, help) in &flags {
            u.push_str(&format!("  {:<12} {help}\n", format!("--{name} N")));
        }
        u.push_str(&format!("  {:<12} print this and exit\n", "--help"));
        u
    };
    // Under an MPI launcher every rank parses the same line: only rank 0 speaks.
    let speaks = ["OMPI_COMM_WORLD_RANK", "PMI_RANK"]
        .iter()
        .find_map(|v| std::env::var(v).ok())
        .is_none_or(|r| r.trim() == "0");
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut i = 0;
    while i < args.len() {
        let a = &args[i];
        if a == "--help" || a == "-h" {
            if speaks {
                print!("{}", usage());
            }
            std::process::exit(0);
        }
        let known = a
            .strip_prefix("--")
            .is_some_and(|n| flags.iter().any(|(f, _)| *f == n));
        if !known {
            if speaks {
                eprintln!("error: unexpected argument {a:?}\n\n{}", usage());
            }
            std::process::exit(2);
        }
        // The value is checked by `arg`.
        i += 2;
    }
}

/// The seed of every example's inputs.
pub const SEED: u64 = 2026;

/// Reads `--NAME VALUE` from the command line.
pub fn arg(name: &str) -> Option<usize> {
    let args: Vec<String> = std::env::args().collect();
    let flag = format!("--{name}");
    let i = args.iter().position(|a| *a == flag)?;
    match args.get(i + 1).map(|v| v.parse::<usize>()) {
        Some(Ok(v)) if v > 0 => Some(v),
        _ => {
            eprintln!("error: {flag} needs a positive integer");
            std::process::exit(2);
        }
    }
}

/// Runs `ex` on every rank of `comm`; `Ok(true)` when all checks passed everywhere.
pub fn run_on<C: Communicator, E: Example>(
    comm: &C,
    ex: &E,
    backend: Backend,
) -> Result<bool, String> {
    let me = comm.rank();
    let p = comm.size();
    let spec = ExtentSpec {
        sizes: ex.sizes(),
        ..ExtentSpec::default()
    };
    let compiled =
        Einsum::compile(ex.expr(), &spec, &Options::procs(p)).map_err(|e| e.to_string())?;
    let inputs = Inputs::<f64>::Seeded { seed: SEED };
    let (out, report) = compiled
        .run_measured(comm, &inputs, &ExecOptions::default())
        .map_err(|e| e.to_string())?;
    let full = out.gather(comm).map_err(|e| e.to_string())?;
    // Every rank's measures on rank 0, folded there as `deinsum run` folds them.
    let reports = gather_reports(comm, &report).map_err(|e| e.to_string())?;

    let mut ok = true;
    if let (Some(got), Some(reports)) = (full, reports) {
        let plan = compiled.plan();
        let context = RunContext {
            backend,
            dtype: deinsum::plan::DType::F64,
            warmup: 0,
        };
        let summary = RunSummary::new(plan, &reports, &plan.prediction.step_seconds, context);
        let input = |k: usize, x: usize| seeded_value(SEED, k, x as u64);
        let mut want = ex.serial(&input);
        // A deliberate wrong reference, to show that the check can fail (used by .ci/mpi.sh).
        if std::env::var_os("DEINSUM_EXAMPLE_PERTURB").is_some() {
            if let Some(w) = want.first_mut() {
                *w += 1.0;
            }
        }
        let check = Check::compare(
            ReferenceMethod::Serial,
            &got,
            &want,
            deinsum::plan::DType::F64.tolerance(),
        );
        ok &= check.pass;
        println!(
            "{}: {}  ({} ranks, {})",
            ex.name(),
            ex.expr(),
            p,
            backend.label()
        );
        println!(
            "  check vs serial: max relative error {:.3e} over {} elements -> {}",
            check.max_rel,
            want.len(),
            if check.pass { "OK" } else { "MISMATCH" }
        );
        let off_plan = summary.steps_off_plan();
        println!(
            "  words received, busiest rank: measured {} / plan {}; steps off plan on some \
             rank: {} -> {}",
            summary.measured_max_per_rank,
            summary.predicted_max_per_rank,
            off_plan,
            if off_plan == 0 { "OK" } else { "MISMATCH" }
        );
        // The SOAP bound limits the words a rank touches (holds, received or resident), not
        // the words it receives: compare like with like.
        let pred = &plan.prediction;
        println!(
            "  words touched, busiest rank: plan {} >= SOAP lower bound {:.0} (ratio {:.2})",
            pred.touched_per_rank, pred.bound_per_rank, pred.ratio
        );
        ok &= off_plan == 0;
        match ex.after(&got, &input) {
            Ok(lines) => lines.iter().for_each(|l| println!("  {l}")),
            Err(e) => {
                println!("  {e}");
                ok = false;
            }
        }
    }
    let mut verdict = [u64::from(!ok)];
    comm.all_reduce_max_u64(&mut verdict)
        .map_err(|e| e.to_string())?;
    if me == 0 {
        println!(
            "{}: {}",
            ex.name(),
            if verdict[0] == 0 { "PASS" } else { "FAIL" }
        );
    }
    Ok(verdict[0] == 0)
}

/// Runs `ex` on the backend this build has and turns the outcome into the exit status.
pub fn main_for<E: Example>(ex: E) -> ExitCode {
    check_args(&ex);
    #[cfg(feature = "mpi")]
    {
        use deinsum::exec::mpi::MpiComm;
        // A panic on one rank aborts the job instead of leaving the others in a collective.
        let default_hook = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            default_hook(info);
            use mpi::traits::Communicator as _;
            mpi::topology::SimpleCommunicator::world().abort(101);
        }));
        let Some(universe) = mpi::initialize() else {
            eprintln!("error: MPI was already initialized");
            return ExitCode::FAILURE;
        };
        let world = MpiComm::world(&universe);
        if let Some(want) = arg("procs") {
            if want != world.size() {
                world.abort(
                    &format!(
                        "--procs {want} but the MPI world has {} ranks",
                        world.size()
                    ),
                    2,
                );
            }
        }
        // One rank's error aborts the job with its message instead of leaving the others waiting.
        let ok = world.or_abort(run_on(&world, &ex, Backend::Mpi));
        if ok {
            ExitCode::SUCCESS
        } else {
            ExitCode::FAILURE
        }
    }
    #[cfg(not(feature = "mpi"))]
    {
        let p = arg("procs").unwrap_or(4);
        let world = match deinsum::InProcess::new(p) {
            Ok(w) => w,
            Err(e) => {
                eprintln!("error: {e}");
                return ExitCode::FAILURE;
            }
        };
        match world.run(|comm| run_on(comm, &ex, Backend::Local)) {
            Ok(v) if v.iter().all(|&ok| ok) => ExitCode::SUCCESS,
            Ok(_) => ExitCode::FAILURE,
            Err(e) => {
                eprintln!("error: {e}");
                ExitCode::FAILURE
            }
        }
    }
}
