//! The Deinsum kernels on MPI: distributed result equal to the naive serial evaluation, and the
//! measured words of every step equal to the plan's prediction, on every rank; inputs from the
//! seeded generator and from `.npy` files, output written back to `.npy` by all ranks.
//!
//! `cargo test -p deinsum --features mpi --test mpi_kernels` (relaunches under mpirun).

mod mpi_support;
mod npy_support;

use deinsum::exec::mpi::MpiComm;
use deinsum::exec::npy;
use deinsum::exec::reference::naive_seeded;
use deinsum::expr::ExtentSpec;
use deinsum::plan::Distribution;
use deinsum::{Communicator, Einsum, ExecOptions, Inputs, Options};
use mpi_support::{rel_err, Checks};
use std::path::PathBuf;
use std::process::ExitCode;

const SEED: u64 = 7;

/// A kernel: name, expression, extents.
type Kernel = (&'static str, &'static str, &'static [(char, usize)]);

/// The kernels of the Deinsum paper at small, uneven sizes.
const KERNELS: &[Kernel] = &[
    ("1MM", "ij,jk->ik", &[('i', 13), ('j', 11), ('k', 9)]),
    (
        "2MM",
        "ij,jk,kl->il",
        &[('i', 12), ('j', 7), ('k', 10), ('l', 9)],
    ),
    (
        "3MM",
        "ij,jk,kl,lm->im",
        &[('i', 9), ('j', 11), ('k', 6), ('l', 10), ('m', 7)],
    ),
    (
        "MTTKRP-3",
        "ijk,ja,ka->ia",
        &[('i', 9), ('j', 7), ('k', 8), ('a', 5)],
    ),
    (
        "MTTKRP-5",
        "ijklm,ja,ka,la,ma->ia",
        &[('i', 5), ('j', 4), ('k', 3), ('l', 4), ('m', 3), ('a', 3)],
    ),
    (
        "TTMc",
        "ijk,jb,kc->ibc",
        &[('i', 8), ('j', 9), ('k', 7), ('b', 4), ('c', 3)],
    ),
    (
        "paper",
        "ijk,ja,ka,al->il",
        &[('i', 7), ('j', 6), ('k', 8), ('a', 5), ('l', 9)],
    ),
];

/// Kernels planned under a memory budget that forces phases.
const PHASED: &[Kernel] = &[
    ("1MM", "ij,jk->ik", &[('i', 23), ('j', 29), ('k', 19)]),
    (
        "MTTKRP3",
        "ijk,ja,ka->ia",
        &[('i', 9), ('j', 11), ('k', 7), ('a', 5)],
    ),
];

/// A directory every rank sees (same node) and that rank 0 cleans up.
fn scratch_dir(world: &MpiComm) -> PathBuf {
    // Rank 0 picks the name (its pid) so that all ranks agree on it.
    let mut name = format!("deinsum-mpi-kernels-{}", std::process::id()).into_bytes();
    world.or_abort(world.broadcast(&mut name, 0));
    let dir = std::env::temp_dir().join(String::from_utf8_lossy(&name).into_owned());
    if world.rank() == 0 {
        world.or_abort(std::fs::create_dir_all(&dir));
    }
    world.or_abort(world.barrier());
    dir
}

/// Each structured move ran as its collective on MPI: a step whose moves are all of one
/// structured kind made no point-to-point exchange on this rank, and this rank's calls are
/// of the kind's collective only (a local move made no call at all).
fn paths(
    plan: &deinsum::plan::Plan,
    report: &deinsum::exec::RunReport,
    c: &mut Checks,
    name: &str,
) {
    use deinsum::exec::Collective;
    use deinsum::plan::{MoveKind, PlanStep};
    for st in &report.steps {
        let kinds: Vec<&MoveKind> = match &plan.steps[st.step] {
            PlanStep::Redistribute { pattern, .. } => vec![pattern],
            PlanStep::ComputePhase { fetch, .. } => fetch.iter().map(|f| &f.pattern).collect(),
            _ => continue,
        };
        let coll = |k: &MoveKind| match k {
            MoveKind::Local => None,
            MoveKind::AllGather { .. } => Some(Collective::AllGather),
            MoveKind::ReduceScatter { .. } => Some(Collective::ReduceScatter),
            MoveKind::AllReduce { .. } => Some(Collective::AllReduce),
            MoveKind::Reduce => Some(Collective::Reduce),
            MoveKind::Gather => Some(Collective::Gather),
            MoveKind::Broadcast => Some(Collective::Broadcast),
            MoveKind::Permute => Some(Collective::SendRecv),
            MoveKind::AllToAll => Some(Collective::Exchange),
        };
        let want: Vec<Option<Collective>> = kinds.iter().map(|k| coll(k)).collect();
        let other: u64 = deinsum::exec::Collective::ALL
            .iter()
            .filter(|k| !want.contains(&Some(**k)))
            .map(|&k| st.calls.of(k))
            .sum();
        c.check(other == 0, || {
            format!(
                "{name} step {} ({:?}): calls {:?}",
                st.step, kinds, st.calls
            )
        });
    }
}

fn body(world: &MpiComm, c: &mut Checks) {
    let p = world.size();
    let me = world.rank();
    let dir = scratch_dir(world);
    for &(name, expr, sizes) in KERNELS {
        let spec = ExtentSpec {
            sizes: sizes.iter().copied().collect(),
            ..ExtentSpec::default()
        };
        let compiled = world.or_abort(Einsum::compile(expr, &spec, &Options::procs(p)));
        let plan = compiled.plan();
        let want = naive_seeded(&plan.einsum, SEED);

        // Seeded inputs.
        let (out, report) = world.or_abort(compiled.run_measured(
            world,
            &Inputs::<f64>::Seeded { seed: SEED },
            &ExecOptions::default(),
        ));
        for s in &report.steps {
            c.eq(
                (s.sent, s.received),
                (s.predicted_sent, s.predicted_received),
                &format!(
                    "{name} step {} ({}) words (sent, received) vs plan",
                    s.step, s.kind
                ),
            );
        }
        paths(plan, &report, c, name);
        let gathered = world.or_abort(out.gather(world));
        if let Some(got) = &gathered {
            let e = rel_err(got, &want);
            c.check(e <= 1e-10, || {
                format!("{name}: relative error {e:.3e} vs naive serial")
            });
        }

        // The same inputs from .npy files: rank 0 writes them (a root distribution), every
        // rank reads only its blocks.
        let mut paths = Vec::new();
        for (k, op) in plan.einsum.inputs().iter().enumerate() {
            let shape = op.shape(plan.einsum.extents());
            let path = dir.join(format!("{name}-in{k}.npy"));
            let n: usize = shape.iter().product();
            let full: Vec<f64> = if me == 0 {
                (0..n as u64)
                    .map(|x| deinsum::exec::data::seeded_value(SEED, k, x))
                    .collect()
            } else {
                Vec::new()
            };
            let root = Distribution::on_root(shape.len());
            world.or_abort(npy::write_distributed(&path, world, &shape, &root, &full));
            paths.push(path);
        }
        let from_files = world.or_abort(compiled.run(world, &Inputs::<f64>::Npy(paths.clone())));
        // Every rank writes its own part of the output file.
        let out_path = dir.join(format!("{name}-out.npy"));
        let local = from_files
            .local
            .as_ref()
            .map(|l| l.data.clone())
            .unwrap_or_default();
        world.or_abort(npy::write_distributed(
            &out_path,
            world,
            &from_files.tensor.shape,
            &from_files.dist,
            &local,
        ));
        if me == 0 {
            let h = world.or_abort(npy::read_header(&out_path));
            c.eq(
                &h.shape,
                &from_files.tensor.shape,
                &format!("{name}: output .npy shape"),
            );
            let whole = deinsum::plan::Block::full(&from_files.tensor.shape);
            let op = deinsum::expr::Operand::new(
                from_files
                    .tensor
                    .indices
                    .iter()
                    .map(|&i| deinsum::expr::Dim::Index(i))
                    .collect(),
            );
            let back: Vec<f64> = world.or_abort(npy::read_operand_block(
                &out_path,
                &op,
                plan.einsum.extents(),
                &whole,
            ));
            let e = rel_err(&back, &want);
            c.check(e <= 1e-10, || {
                format!("{name}: .npy in/out relative error {e:.3e}")
            });
        }
        world.or_abort(world.barrier());
    }

    // Under a budget below whole blocks the plan computes in phases (2.5D); on MPI too the
    // result is the serial one, every step moves what the plan says and no rank exceeds the
    // budget.
    for &(name, expr, sizes) in PHASED {
        let spec = ExtentSpec {
            sizes: sizes.iter().copied().collect(),
            ..ExtentSpec::default()
        };
        // The path search's tree: these cases are chosen for the phasing of its groups (the
        // time objective may pick a tree whose groups fit without phases).
        let flops = Options {
            objective: deinsum::plan::Objective::Flops,
            ..Options::procs(p)
        };
        let free = world.or_abort(Einsum::compile(expr, &spec, &flops));
        // The tightest of a few budgets that still has a (phased) plan.
        let mut chosen = None;
        for num in [9u64, 8, 7, 6] {
            let s = free.plan().prediction.max_peak_memory * num / 10;
            let opts = Options {
                mem: Some(s),
                ..flops.clone()
            };
            if let Ok(comp) = Einsum::compile(expr, &spec, &opts) {
                if comp.plan().groups.iter().any(|g| g.phases.is_some()) {
                    chosen = Some((s, comp));
                }
            }
        }
        let Some((s, compiled)) = chosen else {
            // One rank holds everything: no replica to drop. On two ranks a block is
            // replicated twice at most and phasing saves under a tenth of the peak (1MM here:
            // 1089 of 1127 words at best), so no budget in the list needs it.
            c.check(p <= 2, || format!("{name}: no phased plan on {p} ranks"));
            continue;
        };
        let plan = compiled.plan();
        c.check(plan.groups.iter().any(|g| g.phases.is_some()), || {
            format!("{name}: the plan under S={s} is not phased")
        });
        let (out, report) = world.or_abort(compiled.run_measured(
            world,
            &Inputs::<f64>::Seeded { seed: SEED },
            &ExecOptions::default(),
        ));
        for st in &report.steps {
            c.eq(
                (st.sent, st.received),
                (st.predicted_sent, st.predicted_received),
                &format!(
                    "{name} (phased) step {} ({}) words (sent, received) vs plan",
                    st.step, st.kind
                ),
            );
        }
        paths(plan, &report, c, name);
        c.check(report.peak_words <= s, || {
            format!(
                "{name} (phased): rank {me} held {} words, budget {s}",
                report.peak_words
            )
        });
        let want = naive_seeded(&plan.einsum, SEED);
        if let Some(got) = world.or_abort(out.gather(world)) {
            let e = rel_err(&got, &want);
            c.check(e <= 1e-10, || {
                format!("{name} (phased): relative error {e:.3e} vs naive serial")
            });
        }
        world.or_abort(world.barrier());
    }

    // A wrong shape in an input file is reported on every rank, naming the file and both
    // shapes (ranks without a block check the header alone).
    let bad = dir.join("bad-A.npy");
    let zeros = if me == 0 {
        vec![0.0f64; 30]
    } else {
        Vec::new()
    };
    world.or_abort(npy::write_distributed(
        &bad,
        world,
        &[5, 6],
        &Distribution::on_root(2),
        &zeros,
    ));
    let op = deinsum::expr::Operand::new(vec![
        deinsum::expr::Dim::Index('i'),
        deinsum::expr::Dim::Index('j'),
    ]);
    let ext = [('i', 6), ('j', 5)].into_iter().collect();
    match npy::check_operand_file::<f64>(&bad, &op, &ext) {
        Ok(_) => c.check(false, || {
            "a (5, 6) file for a (6, 5) operand was accepted".into()
        }),
        Err(e) => {
            let m = e.to_string();
            c.check(
                m.contains("bad-A.npy")
                    && m.contains("expected shape (6, 5)")
                    && m.contains("found (5, 6)"),
                || format!("shape error does not name file and shapes: {m}"),
            );
        }
    }
    world.or_abort(world.barrier());
    if me == 0 {
        let _ = std::fs::remove_dir_all(&dir);
    }
}

/// Every kernel in c128 and c64 on MPI: seeded inputs against the serial complex reference,
/// words as planned; and c128 from complex `.npy` files written by rank 0, the output written
/// by all ranks and read back.
fn complex_kernels(world: &MpiComm, c: &mut Checks) {
    use deinsum::exec::reference::{max_error, naive_seeded_as};
    use deinsum::exec::scalar::{Complex32, Complex64};
    let p = world.size();
    let me = world.rank();
    let dir = scratch_dir(world);
    for &(name, expr, sizes) in KERNELS {
        let spec = ExtentSpec {
            sizes: sizes.iter().copied().collect(),
            ..ExtentSpec::default()
        };
        let compiled = world.or_abort(Einsum::compile(expr, &spec, &Options::procs(p)));
        let plan = compiled.plan();
        let want = naive_seeded_as::<Complex64>(&plan.einsum, SEED);
        let (out, report) = world.or_abort(compiled.run_measured(
            world,
            &Inputs::<Complex64>::Seeded { seed: SEED },
            &ExecOptions::default(),
        ));
        for s in &report.steps {
            c.eq(
                (s.sent, s.received),
                (s.predicted_sent, s.predicted_received),
                &format!("{name} c128 step {} words vs plan", s.step),
            );
        }
        if let Some(got) = world.or_abort(out.gather(world)) {
            let (_, e) = max_error(&got, &want);
            c.check(e <= 1e-10, || {
                format!("{name} c128: relative error {e:.3e}")
            });
        }
        let out32 =
            world.or_abort(compiled.run(world, &Inputs::<Complex32>::Seeded { seed: SEED }));
        if let Some(got) = world.or_abort(out32.gather(world)) {
            let (_, e) = max_error(&got, &want);
            c.check(e <= 1e-4, || format!("{name} c64: relative error {e:.3e}"));
        }
        let mut paths = Vec::new();
        for (k, op) in plan.einsum.inputs().iter().enumerate() {
            let shape = op.shape(plan.einsum.extents());
            let path = dir.join(format!("{name}-z{k}.npy"));
            let n: usize = shape.iter().product();
            let full: Vec<Complex64> = if me == 0 {
                (0..n as u64)
                    .map(|x| deinsum::exec::data::seeded::<Complex64>(SEED, k, x))
                    .collect()
            } else {
                Vec::new()
            };
            let root = Distribution::on_root(shape.len());
            world.or_abort(npy::write_distributed(&path, world, &shape, &root, &full));
            paths.push(path);
        }
        let from_files = world.or_abort(compiled.run(world, &Inputs::<Complex64>::Npy(paths)));
        if let Some(got) = world.or_abort(from_files.gather(world)) {
            let (_, e) = max_error(&got, &want);
            c.check(e <= 1e-10, || {
                format!("{name} c128 .npy: relative error {e:.3e}")
            });
        }
        world.or_abort(world.barrier());
    }
}

/// `.npy` inputs read in the compute layout, as `deinsum run --backend mpi --inputs` runs
/// them (`dense_run::run_rank`): rank 0 writes every operand whole in C, Fortran or mixed
/// order; each rank reads only its compute block of each file, no input moves (the report's
/// words for every input are 0, measured and predicted), every step moves exactly the plan's
/// words and the gathered result is the serial one.
fn npy_in_place(world: &MpiComm, c: &mut Checks) {
    use deinsum::dense_run::{run_rank, Gathered, RunTasks};
    use deinsum::report::{Backend, RunContext, RunSummary};
    let p = world.size();
    let me = world.rank();
    let dir = scratch_dir(world);
    for &(name, expr, sizes) in KERNELS {
        let spec = ExtentSpec {
            sizes: sizes.iter().copied().collect(),
            ..ExtentSpec::default()
        };
        let compiled = world.or_abort(Einsum::compile(expr, &spec, &Options::procs(p)));
        let plan = compiled.plan();
        let want = naive_seeded(&plan.einsum, SEED);
        for (order, fortran) in npy_support::ORDERS {
            let sub = dir.join(format!("{name}-{order}"));
            let files = if me == 0 {
                world.or_abort(std::fs::create_dir_all(&sub));
                npy_support::files(plan, &sub, SEED, fortran)
            } else {
                (0..plan.einsum.num_inputs())
                    .map(|k| sub.join(format!("in{k}.npy")))
                    .collect()
            };
            world.or_abort(world.barrier());
            let tasks = RunTasks {
                gather: true,
                ..RunTasks::default()
            };
            let outcome = world.or_abort(run_rank(plan, world, &Inputs::<f64>::Npy(files), &tasks));
            let what = format!("{name} ({order} files, P={p})");
            let Some(out) = outcome else {
                continue;
            };
            let ctx = RunContext {
                backend: Backend::Mpi,
                dtype: deinsum::DType::F64,
                warmup: 0,
            };
            let summary = RunSummary::new(plan, &out.reports, &[], ctx);
            c.check(summary.exact, || {
                format!("{what}: words differ from the plan")
            });
            for r in &summary.inputs {
                c.check(r.in_place() && r.exact, || {
                    format!(
                        "{what}: input {} moved {} words (predicted {})",
                        r.tensor, r.measured_total, r.predicted_total
                    )
                });
            }
            match &out.gathered {
                Some(Gathered::Real(got)) => {
                    let e = rel_err(got, &want);
                    c.check(e <= 1e-10, || format!("{what}: relative error {e:.3e}"));
                }
                _ => c.check(false, || format!("{what}: no real output gathered")),
            }
        }
        world.or_abort(world.barrier());
    }
    if me == 0 {
        let _ = std::fs::remove_dir_all(&dir);
    }
}

fn main() -> ExitCode {
    mpi_support::main_with("mpi_kernels", |w, c| {
        body(w, c);
        complex_kernels(w, c);
        npy_in_place(w, c);
    })
}
