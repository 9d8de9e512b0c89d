//! Paths with single-operand reduction steps mid-tree, NumPy broadcasting of named extent-1
//! dims, and opt_einsum's all-at-once step under a memory limit, through the whole pipeline:
//! distributed equals serial for many P (primes and uneven extents), volumes as planned.

use deinsum::expr::ExtentSpec;
use deinsum::{Einsum, Options};

const PROCS: &[usize] = &[1, 2, 3, 4, 5, 7, 8, 11, 12];

mod pipeline_support;
use pipeline_support::{check_run, sizes};

fn shapes(s: &str) -> ExtentSpec {
    ExtentSpec::from_flags(None, None, Some(s)).unwrap()
}

/// A distributed run of `c` on `p` ranks, checked as every facade test checks it.
fn check(c: &Einsum, what: &str, p: usize) {
    check_run(c, what, p, 5);
}

#[test]
fn unary_reduction_steps_mid_tree_match_serial() {
    // Each einsum has an operand with an index of its own (or a private diagonal) that is
    // large enough that `optimal` sums it out of that operand first.
    let cases: Vec<(&str, ExtentSpec)> = vec![
        (
            "aib,bc,cd->ad",
            sizes(&[('a', 3), ('i', 23), ('b', 5), ('c', 6), ('d', 7)]),
        ),
        (
            "ab,bxc,cd->ad",
            sizes(&[('a', 5), ('b', 4), ('x', 19), ('c', 3), ('d', 6)]),
        ),
        (
            "aii,ab,bc->c",
            sizes(&[('a', 4), ('i', 13), ('b', 5), ('c', 7)]),
        ),
    ];
    for (expr, spec) in &cases {
        // The path search's tree (the one with the unary step), not the time objective's pick.
        let opts = Options {
            objective: deinsum::plan::Objective::Flops,
            ..Options::default()
        };
        let c = Einsum::compile(expr, spec, &opts).unwrap();
        let tree = &c.plan().tree;
        let unary = tree.steps.iter().position(|s| s.operands.len() == 1);
        // The reduction is a step of its own before the last one, not the whole einsum.
        assert!(
            unary.is_some_and(|u| u + 1 < tree.steps.len()),
            "{expr}: path {:?}",
            c.plan().path
        );
        for &p in PROCS {
            let o = Options {
                objective: deinsum::plan::Objective::Flops,
                ..Options::procs(p)
            };
            let c = Einsum::compile(expr, spec, &o).unwrap_or_else(|e| panic!("{expr} P={p}: {e}"));
            check(&c, expr, p);
        }
    }
}

#[test]
fn named_extent_one_dims_broadcast_as_numpy_and_match_serial() {
    // NumPy: (2,1,5,4) and (2,3,7,4) give (2,3,5,7).
    let cases = [
        ("bhqd,bhkd->bhqk", "2x1x5x4,2x3x7x4", vec![2, 3, 5, 7]),
        ("ij,jk->ik", "5x1,3x4", vec![5, 4]),
        ("ij,ij->ij", "1x6,5x1", vec![5, 6]),
        ("ijk,k->ij", "3x1x7,1", vec![3, 1]),
    ];
    for (expr, sh, want) in &cases {
        let spec = shapes(sh);
        let e = deinsum::expr::parse(expr, &spec).unwrap();
        let out: Vec<usize> = e.output().iter().map(|&c| e.extent(c)).collect();
        assert_eq!(&out, want, "{expr} {sh}");
        for &p in PROCS {
            let c = Einsum::compile(expr, &spec, &Options::procs(p))
                .unwrap_or_else(|e| panic!("{expr} P={p}: {e}"));
            check(&c, expr, p);
        }
    }
}

#[test]
fn a_path_of_one_step_over_every_operand_is_refused_clearly() {
    let mut opts = Options::procs(4);
    opts.path.memory_limit = Some(5000);
    let Err(err) = Einsum::compile("ijk,ja,ka,al->il", &sizes(&[]).with_default(64), &opts) else {
        panic!("a path of one step over four operands was planned");
    };
    let msg = err.to_string();
    assert!(msg.contains("one step over all operands"), "{msg}");
    assert!(msg.contains("[[0, 1, 2, 3]]"), "{msg}");
    assert!(msg.contains("raise the path memory limit"), "{msg}");
}

trait WithDefault {
    fn with_default(self, n: usize) -> Self;
}

impl WithDefault for ExtentSpec {
    fn with_default(mut self, n: usize) -> Self {
        self.default = Some(n);
        self
    }
}

#[test]
fn opt_einsum_symbols_survive_the_plan_json_and_run() {
    // get_symbol(75), (107) and (397): '×', '÷' and 'ș', as indices in the plan JSON too.
    let spec = ExtentSpec::from_flags(Some("×=5,÷=3,ș=4"), None, None).unwrap();
    let c = Einsum::compile("ș×,×÷->ș÷", &spec, &Options::procs(3)).unwrap();
    let json = serde_json::to_string(c.plan()).unwrap();
    let back: deinsum::plan::Plan = serde_json::from_str(&json).unwrap();
    assert_eq!(&back, c.plan());
    check(&Einsum::from_plan(back), "ș×,×÷->ș÷", 3);
}
