//! The harness of the MPI test binaries (`harness = false`, feature `mpi`).
//!
//! MPI initializes once per process, so each binary is a whole MPI program. Started by
//! `cargo test` (no `DEINSUM_MPI_EXPECT` in the environment) it relaunches itself under
//! `mpirun -n P` for every P of `DEINSUM_MPI_NPS` (default `1 2 3 4 8`) and fails when any run
//! fails. Started by mpirun with `DEINSUM_MPI_EXPECT=P` it asserts the world has P ranks (a
//! binary launched by another MPI's launcher runs as P singletons of size 1) and runs its checks.

#![allow(dead_code)]

use deinsum::exec::mpi::MpiComm;
use deinsum::Communicator;
use std::process::{Command, ExitCode};
use std::time::{Duration, Instant};

/// Passed checks and failure messages of one rank.
#[derive(Default)]
pub struct Checks {
    /// Number of checks that held.
    pub passed: usize,
    /// What failed.
    pub failed: Vec<String>,
}

impl Checks {
    /// Records `cond`; `what` describes the check when it fails.
    pub fn check(&mut self, cond: bool, what: impl FnOnce() -> String) {
        if cond {
            self.passed += 1;
        } else {
            self.failed.push(what());
        }
    }

    /// Records equality of two values.
    pub fn eq<T: PartialEq + std::fmt::Debug>(&mut self, got: T, want: T, what: &str) {
        let ok = got == want;
        self.check(ok, || format!("{what}: got {got:?}, want {want:?}"));
    }
}

/// Largest absolute difference over the largest magnitude of `want` (at least 1); infinite
/// when the lengths differ.
pub fn rel_err(got: &[f64], want: &[f64]) -> f64 {
    if got.len() != want.len() {
        return f64::INFINITY;
    }
    let scale = want.iter().fold(1.0f64, |m, v| m.max(v.abs()));
    got.iter()
        .zip(want)
        .fold(0.0f64, |m, (a, b)| m.max((a - b).abs()))
        / scale
}

/// Seconds one mpirun may take before the launcher kills it (a hang is a failure).
const RUN_TIMEOUT: Duration = Duration::from_secs(300);

/// Runs the test binary: launcher or MPI child, see the module docs.
pub fn main_with(name: &str, body: fn(&MpiComm, &mut Checks)) -> ExitCode {
    match std::env::var("DEINSUM_MPI_EXPECT") {
        Err(_) => launch(name),
        Ok(v) => match v.parse::<usize>() {
            Ok(n) if n > 0 => child(name, n, body),
            _ => {
                eprintln!("{name}: DEINSUM_MPI_EXPECT={v:?} is not a positive integer");
                ExitCode::FAILURE
            }
        },
    }
}

fn launch(name: &str) -> ExitCode {
    let exe = match std::env::current_exe() {
        Ok(e) => e,
        Err(e) => {
            eprintln!("{name}: cannot find my own executable: {e}");
            return ExitCode::FAILURE;
        }
    };
    let mpirun = std::env::var("DEINSUM_MPIRUN").unwrap_or_else(|_| "mpirun".into());
    let nps = std::env::var("DEINSUM_MPI_NPS").unwrap_or_else(|_| "1 2 3 4 8".into());
    let (mut passed, mut failed) = (0, 0);
    for n in nps.split_whitespace() {
        let mut cmd = Command::new(&mpirun);
        cmd.args(["-n", n]).arg(&exe).env("DEINSUM_MPI_EXPECT", n);
        // Open MPI refuses root and more ranks than cores unless told; harmless otherwise.
        for (k, v) in [
            ("OMPI_ALLOW_RUN_AS_ROOT", "1"),
            ("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1"),
            ("OMPI_MCA_rmaps_base_oversubscribe", "1"),
        ] {
            if std::env::var_os(k).is_none() {
                cmd.env(k, v);
            }
        }
        let ok = match cmd.spawn() {
            Err(e) => {
                eprintln!("{name} -n {n}: cannot start {mpirun}: {e}");
                false
            }
            Ok(mut child) => {
                let start = Instant::now();
                loop {
                    match child.try_wait() {
                        Ok(Some(st)) => break st.success(),
                        Ok(None) if start.elapsed() > RUN_TIMEOUT => {
                            let _ = child.kill();
                            let _ = child.wait();
                            eprintln!("{name} -n {n}: timed out after {RUN_TIMEOUT:?} (killed)");
                            break false;
                        }
                        Ok(None) => std::thread::sleep(Duration::from_millis(50)),
                        Err(e) => {
                            eprintln!("{name} -n {n}: {e}");
                            break false;
                        }
                    }
                }
            }
        };
        println!("{name} -n {n}: {}", if ok { "ok" } else { "FAILED" });
        if ok {
            passed += 1;
        } else {
            failed += 1;
        }
    }
    println!("{name}: {passed} passed, {failed} failed");
    if failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

fn child(name: &str, expect: usize, body: fn(&MpiComm, &mut Checks)) -> ExitCode {
    // A panic on one rank aborts the job instead of leaving the others in a collective.
    let default_hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        default_hook(info);
        use mpi::traits::Communicator as _;
        mpi::topology::SimpleCommunicator::world().abort(101);
    }));
    let Some(universe) = mpi::initialize() else {
        eprintln!("{name}: MPI was already initialized");
        return ExitCode::FAILURE;
    };
    let world = MpiComm::world(&universe);
    if world.size() != expect {
        world.abort(
            &format!(
                "{name}: the MPI world has {} ranks but {expect} were expected \
                 (started by a different MPI's launcher?)",
                world.size()
            ),
            3,
        );
    }
    let mut checks = Checks::default();
    body(&world, &mut checks);
    if checks.passed == 0 && checks.failed.is_empty() {
        checks.failed.push("no check ran".into());
    }
    for f in &checks.failed {
        eprintln!("{name} -n {expect} rank {}: FAILED {f}", world.rank());
    }
    // Max of failures, and of (MAX - passed) for the fewest passed checks on any rank.
    let mut agg = [checks.failed.len() as u64, u64::MAX - checks.passed as u64];
    world.or_abort(world.all_reduce_max_u64(&mut agg));
    if world.rank() == 0 {
        let verdict = if agg[0] == 0 {
            "all passed".to_string()
        } else {
            format!("FAILED (up to {} failures on a rank)", agg[0])
        };
        println!(
            "{name} -n {expect}: at least {} checks passed on every rank; {verdict}",
            u64::MAX - agg[1]
        );
    }
    if agg[0] == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
