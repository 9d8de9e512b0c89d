//! Where the data is, as a planning input: with more freedom the predicted time is never
//! higher (Anywhere <= Given <= Canonical), a `Given` layout is where the plan loads the
//! operand, and a layout that does not fit is refused.

use deinsum_expr::{parse, ExtentSpec, ParsedEinsum};
use deinsum_plan::{
    build, canonical_distribution, Distribution, Plan, PlanError, PlanOptions, Source,
};
use proptest::prelude::*;

fn einsum(expr: &str, sizes: &str) -> ParsedEinsum {
    parse(
        expr,
        &ExtentSpec::from_flags(Some(sizes), None, None).unwrap(),
    )
    .unwrap()
}

fn plan(e: &ParsedEinsum, procs: usize, sources: Vec<Source>) -> Plan {
    build(
        e,
        &PlanOptions {
            procs,
            sources,
            ..PlanOptions::default()
        },
    )
    .unwrap()
}

/// The distribution each input is loaded in, by operand.
fn loads(p: &Plan) -> Vec<Distribution> {
    (0..p.einsum.num_inputs())
        .map(|k| p.load_dist(k).expect("every operand is loaded").clone())
        .collect()
}

const KERNELS: [&str; 5] = [
    "ij,jk->ik",
    "ij,jk,kl->il",
    "ijk,ja,ka->ia",
    "ijk,ia,ka->ja",
    "ijkl,jb,kc->ibcl",
];

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    /// Anywhere <= Given (the layouts the Anywhere plan loads in) <= Canonical.
    #[test]
    fn more_freedom_never_predicts_slower(
        kernel in 0usize..KERNELS.len(),
        ext in proptest::collection::vec(3usize..40, 8),
        procs in 1usize..13,
    ) {
        let expr = KERNELS[kernel];
        let idx: Vec<char> = {
            let mut v: Vec<char> = expr.chars().filter(|c| c.is_ascii_lowercase()).collect();
            v.sort();
            v.dedup();
            v
        };
        let sizes: Vec<String> =
            idx.iter().zip(&ext).map(|(c, n)| format!("{c}={n}")).collect();
        let e = einsum(expr, &sizes.join(","));
        let n = e.num_inputs();
        let anywhere = plan(&e, procs, vec![Source::Anywhere; n]);
        let canonical = plan(&e, procs, vec![Source::Canonical; n]);
        let given = plan(&e, procs, loads(&anywhere).into_iter().map(Source::Given).collect());
        let (a, g, c) = (
            anywhere.prediction.seconds,
            given.prediction.seconds,
            canonical.prediction.seconds,
        );
        let tol = 1e-12 * c.max(1e-9);
        prop_assert!(a <= g + tol, "{expr} {sizes:?} P={procs}: anywhere {a} > given {g}");
        prop_assert!(g <= c + tol, "{expr} {sizes:?} P={procs}: given {g} > canonical {c}");
        // A given layout is where the operand is loaded.
        for (k, (d, want)) in loads(&given).iter().zip(loads(&anywhere)).enumerate() {
            let shape = &given.tensors[k].shape;
            for r in 0..procs {
                prop_assert_eq!(d.block(r, shape), want.block(r, shape));
            }
        }
    }
}

/// Deinsum's MTTKRP order 5 at P = 512: the tensor read where it is used instead of moved out
/// of the canonical layout (the figures: 1.005 s canonical, 0.326 s in place).
#[test]
fn mttkrp5_at_512_reads_the_tensor_where_it_computes() {
    let e = einsum(
        "ijklm,ja,ka,la,ma->ia",
        "i=192,j=192,k=192,l=192,m=192,a=68",
    );
    let machine = deinsum_plan::Machine::from_json(
        &std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../machines/cray-xc50.json"
        ))
        .unwrap(),
    )
    .unwrap();
    let o = |sources: Vec<Source>| PlanOptions {
        procs: 512,
        machine: machine.clone(),
        sources,
        ..PlanOptions::default()
    };
    let free = build(&e, &o(vec![Source::Anywhere; 5])).unwrap();
    let fixed = build(&e, &o(vec![Source::Canonical; 5])).unwrap();
    assert!(free.prediction.seconds < 0.5 * fixed.prediction.seconds);
    assert_eq!(free.input_words(0), 0, "the big tensor does not move");
    assert!(fixed.input_words(0) > 0);
}

/// A given layout is the Load step's distribution, and moving out of it is counted.
#[test]
fn a_given_layout_is_where_the_operand_loads() {
    let e = einsum("ij,jk->ik", "i=30,j=20,k=10");
    // j over the ranks: the product needs it whole or reduced.
    let d = canonical_distribution(&['j', 'i'], &[20, 30], 4);
    let mut layout = d.clone();
    layout.split = vec![vec![1], vec![0]];
    let p = plan(&e, 4, vec![Source::Given(layout.clone()), Source::Anywhere]);
    let first = &loads(&p)[0];
    for r in 0..4 {
        assert_eq!(first.block(r, &[30, 20]), layout.block(r, &[30, 20]));
    }
}

#[test]
fn a_layout_that_does_not_fit_is_refused_with_the_operand() {
    let e = einsum("ij,jk->ik", "i=30,j=20,k=10");
    let d = canonical_distribution(&['i'], &[30], 4);
    let err = build(
        &e,
        &PlanOptions {
            procs: 4,
            sources: vec![Source::Given(d)],
            ..PlanOptions::default()
        },
    )
    .unwrap_err();
    assert!(
        matches!(err, PlanError::BadSource { operand: 0, .. }),
        "{err}"
    );
    assert!(err.to_string().contains("operand 0"), "{err}");
}
