//! Files read in the compute layout: by default `.npy` operands are `Anywhere`, so each rank
//! reads exactly its compute block of each file (C or Fortran order, any box) and no input is
//! redistributed. In process for P = 1..8 on extents that no P > 1 divides: the result is the
//! serial one, the run report's words for every input are 0 (measured and predicted), and
//! every step moves exactly the plan's words. The MPI case is in `mpi_kernels`.

mod cli_support;
mod npy_support;

use deinsum::dense_run::{run_in_process, Gathered, RunTasks};
use deinsum::exec::reference::naive_seeded;
use deinsum::expr::ExtentSpec;
use deinsum::plan::{Plan, PlanStep, TensorKind};
use deinsum::report::{Backend, RunContext, RunSummary};
use deinsum::{DType, Einsum, InProcess, Inputs, Options};
use npy_support::files;
use std::path::PathBuf;

const SEED: u64 = 5;

/// Kernels of the Deinsum paper at uneven extents (primes and odd sizes: most P cut them
/// into blocks of unequal lengths).
const KERNELS: &[(&str, &str)] = &[
    ("1MM", "i=13,j=11,k=9"),
    ("2MM", "i=7,j=11,k=5,l=9"),
    ("MTTKRP3", "i=9,j=7,k=11,a=5"),
    ("MTTKRP5", "i=5,j=3,k=4,l=5,m=3,a=3"),
    ("TTMc", "i=7,j=9,k=5,b=4,c=3"),
];

fn expr_of(name: &str) -> &'static str {
    match name {
        "1MM" => "ij,jk->ik",
        "2MM" => "ij,jk,kl->il",
        "MTTKRP3" => "ijk,ja,ka->ia",
        "MTTKRP5" => "ijklm,ja,ka,la,ma->ia",
        "TTMc" => "ijk,jb,kc->ibc",
        _ => unreachable!("{name}"),
    }
}

/// A scratch directory removed on drop.
struct Dir(PathBuf);

impl Dir {
    fn new(tag: &str) -> Self {
        let d = std::env::temp_dir().join(format!("deinsum-in-place-{tag}-{}", std::process::id()));
        std::fs::create_dir_all(&d).expect("scratch dir");
        Dir(d)
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// No input is moved: each is loaded in the distribution its group computes it in, and no
/// step but its load and free names it.
fn assert_read_where_computed(plan: &Plan, what: &str) {
    for k in 0..plan.einsum.num_inputs() {
        let t = plan
            .tensors
            .iter()
            .find(|t| t.kind == TensorKind::Input(k))
            .expect("every operand has its tensor");
        let load = plan.load_dist(t.id).expect("every input is loaded");
        let used = plan
            .groups
            .iter()
            .find_map(|g| g.inputs.iter().find(|(id, _)| *id == t.id).map(|(_, d)| d))
            .expect("every input is used by a group");
        for r in 0..plan.procs {
            assert_eq!(
                load.block(r, &t.shape),
                used.block(r, &t.shape),
                "{what}: rank {r} reads another block of {} than it computes on",
                t.label()
            );
        }
        for (i, s) in plan.steps.iter().enumerate() {
            let moves = match s {
                PlanStep::Redistribute { tensor, .. } => *tensor == t.id,
                PlanStep::ComputePhase {
                    fetch, prefetch, ..
                } => fetch.iter().chain(prefetch).any(|f| f.tensor == t.id),
                _ => false,
            };
            assert!(!moves, "{what}: step {i} moves input {}", t.label());
        }
    }
}

/// The error of `got` against `want`, relative to the largest magnitude of `want` (>= 1).
fn rel_err(got: &[f64], want: &[f64]) -> f64 {
    assert_eq!(got.len(), want.len());
    let scale = want.iter().fold(1.0f64, |m, v| m.max(v.abs()));
    got.iter()
        .zip(want)
        .fold(0.0f64, |m, (a, b)| m.max((a - b).abs()))
        / scale
}

/// Runs `plan` on its ranks from `paths`; the summary and the gathered output.
fn run(plan: &Plan, paths: Vec<PathBuf>) -> (RunSummary, Vec<f64>) {
    let world = InProcess::new(plan.procs).expect("ranks");
    let tasks = RunTasks {
        gather: true,
        ..RunTasks::default()
    };
    let out = run_in_process(&world, plan, &Inputs::<f64>::Npy(paths), &tasks)
        .expect("run")
        .expect("rank 0's outcome");
    let ctx = RunContext {
        backend: Backend::Local,
        dtype: DType::F64,
        warmup: 0,
    };
    let s = RunSummary::new(plan, &out.reports, &[], ctx);
    let Some(Gathered::Real(v)) = out.gathered else {
        panic!("a real output gathered")
    };
    (s, v)
}

#[test]
fn npy_inputs_are_read_in_their_compute_blocks_for_p_1_to_8() {
    let dir = Dir::new("p1-8");
    for &(name, sizes) in KERNELS {
        let expr = expr_of(name);
        let spec = ExtentSpec::from_flags(Some(sizes), None, None).expect("sizes");
        for p in 1..=8 {
            let compiled = Einsum::compile(expr, &spec, &Options::procs(p)).expect("plan");
            let plan = compiled.plan();
            let what = format!("{name} P={p}");
            assert!(
                plan.inputs_in_place,
                "{what}: inputs are Anywhere by default"
            );
            assert_read_where_computed(plan, &what);
            let want = naive_seeded(&plan.einsum, SEED);
            // All C, all Fortran, and mixed.
            for (order, fortran) in npy_support::ORDERS {
                let (s, got) = run(plan, files(plan, &dir.0, SEED, fortran));
                let what = format!("{what} ({order} files)");
                let e = rel_err(&got, &want);
                assert!(e <= 1e-10, "{what}: relative error {e:.3e}");
                assert!(s.exact, "{what}: measured words differ from the plan\n{s}");
                assert_eq!(s.measured_total, s.predicted_total, "{what}");
                assert_eq!(s.inputs.len(), plan.einsum.num_inputs(), "{what}");
                for r in &s.inputs {
                    assert!(
                        r.in_place() && r.exact,
                        "{what}: input {} moved {} words (predicted {})",
                        r.tensor,
                        r.measured_total,
                        r.predicted_total
                    );
                }
            }
        }
    }
}

/// Started canonically (`inputs_anywhere: false`), the inputs move: the report counts their
/// words as measured, equal to the plan's, and says which.
#[test]
fn canonical_inputs_report_their_moves() {
    let dir = Dir::new("canonical");
    let spec = ExtentSpec::from_flags(Some("i=13,j=11,k=9"), None, None).expect("sizes");
    let o = Options {
        inputs_anywhere: false,
        ..Options::procs(6)
    };
    let compiled = Einsum::compile("ij,jk->ik", &spec, &o).expect("plan");
    let plan = compiled.plan();
    assert!(!plan.inputs_in_place);
    let (s, got) = run(plan, files(plan, &dir.0, SEED, |k| k == 0));
    assert!(rel_err(&got, &naive_seeded(&plan.einsum, SEED)) <= 1e-10);
    let moved: u64 = s.inputs.iter().map(|r| r.measured_total).sum();
    assert!(moved > 0, "canonical blocks move to a 2-D grid\n{s}");
    for r in &s.inputs {
        assert!(r.exact, "{}", r);
        assert_eq!(r.measured_total, r.predicted_total, "{}", r);
    }
    let text = s.to_string();
    assert!(
        text.contains("input T0 (ij): words moved to its compute layout"),
        "{text}"
    );
}

/// `deinsum run --inputs` reads the files in place by default (the JSON report's inputs are
/// all `in_place`, the check passes); `--inputs-canonical` moves them, and `--inputs-in-place`
/// is still accepted.
#[test]
fn cli_run_reads_files_in_place_by_default() {
    let dir = Dir::new("cli");
    let spec = ExtentSpec::from_flags(Some("i=9,j=7,k=11,a=5"), None, None).expect("sizes");
    let plan = Einsum::compile("ijk,ja,ka->ia", &spec, &Options::procs(5))
        .expect("plan")
        .plan()
        .clone();
    let paths = files(&plan, &dir.0, SEED, |k| k == 0);
    let list: Vec<String> = paths.iter().map(|p| p.display().to_string()).collect();
    let list = list.join(",");
    let json = |extra: &[&str]| {
        let mut args = vec![
            "run",
            "ijk,ja,ka->ia",
            "--procs",
            "5",
            "--inputs",
            &list,
            "--check",
            "--format",
            "json",
        ];
        args.extend_from_slice(extra);
        let (code, out, err) = cli_support::deinsum(&args);
        assert_eq!(code, 0, "{args:?}: {err}{out}");
        let v: serde_json::Value = serde_json::from_str(&out).expect("JSON report");
        assert_eq!(v["check"]["pass"], true, "{out}");
        assert_eq!(v["volume_exact"], true, "{out}");
        v
    };
    for extra in [&[][..], &["--inputs-in-place"][..]] {
        let v = json(extra);
        let inputs = v["inputs"].as_array().expect("inputs");
        assert_eq!(inputs.len(), 3);
        for i in inputs {
            assert_eq!(i["in_place"], true, "{i}");
            assert_eq!(i["words_total"], 0, "{i}");
        }
    }
    let v = json(&["--inputs-canonical"]);
    let moved: u64 = v["inputs"]
        .as_array()
        .expect("inputs")
        .iter()
        .map(|i| {
            assert_eq!(i["words_total"], i["predicted_total"], "{i}");
            i["words_total"].as_u64().expect("words")
        })
        .sum();
    assert!(moved > 0, "{v}");
    let (code, _, err) = cli_support::deinsum(&[
        "run",
        "ij,jk->ik",
        "--inputs-canonical",
        "--inputs-in-place",
    ]);
    assert_eq!(code, 2, "the two flags conflict: {err}");
    let (code, out, _) = cli_support::deinsum(&["run", "--help"]);
    assert_eq!(code, 0);
    assert!(
        out.contains("--inputs-canonical") && out.contains("The default"),
        "{out}"
    );
}
