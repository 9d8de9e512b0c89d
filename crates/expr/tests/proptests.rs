//! Property tests: Display -> parse round-trips on random valid einsums, and no input panics.

use deinsum_expr::{parse, ExtentSpec, ParsedEinsum};
use proptest::prelude::*;
use std::collections::BTreeMap;

/// A small deterministic generator, so one u64 seed describes a whole random einsum.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        // splitmix64
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    fn chance(&mut self, percent: usize) -> bool {
        self.below(100) < percent
    }
}

/// Labels the generator draws from: ASCII, Greek (which the ellipsis labels then avoid), CJK.
const POOL: &[char] = &['a', 'b', 'i', 'j', 'k', 'A', 'Z', 'α', 'β', '名'];

/// A random valid einsum as text, with a spec that sizes it consistently.
fn random_case(seed: u64) -> (String, ExtentSpec) {
    let mut r = Rng(seed);
    let extent: BTreeMap<char, usize> = POOL.iter().map(|&c| (c, 1 + r.below(5))).collect();
    let nb_max = r.below(4);
    let bext: Vec<usize> = (0..nb_max).map(|_| 1 + r.below(4)).collect();
    let use_ellipsis = nb_max > 0 && r.chance(60);
    let nops = 1 + r.below(4);
    let mut terms = Vec::new();
    let mut shapes = Vec::new();
    let mut used = Vec::new();
    for _ in 0..nops {
        let nlab = r.below(5);
        let labels: Vec<char> = (0..nlab).map(|_| POOL[r.below(POOL.len())]).collect();
        used.extend_from_slice(&labels);
        let ell_at = (use_ellipsis && r.chance(70)).then(|| r.below(nlab + 1));
        let mut term = String::new();
        let mut shape = Vec::new();
        for (p, &c) in labels.iter().enumerate() {
            if ell_at == Some(p) {
                push_ellipsis(&mut r, &mut term, &mut shape, &bext);
            }
            term.push(c);
            shape.push(extent[&c]);
        }
        if ell_at == Some(nlab) {
            push_ellipsis(&mut r, &mut term, &mut shape, &bext);
        }
        terms.push(term);
        shapes.push(shape);
    }
    let mut expr = terms.join(if r.chance(20) { " , " } else { "," });
    if r.chance(60) {
        // Explicit output: a random subset of the input labels in random order, maybe '...'.
        used.sort_unstable();
        used.dedup();
        let mut out: Vec<String> = used
            .iter()
            .filter(|_| r.chance(50))
            .map(|c| c.to_string())
            .collect();
        for i in (1..out.len()).rev() {
            out.swap(i, r.below(i + 1));
        }
        if r.chance(50) {
            let at = r.below(out.len() + 1);
            out.insert(at, "...".to_string());
        }
        expr.push_str(if r.chance(20) { " -> " } else { "->" });
        expr.push_str(&out.concat());
    }
    let spec = if use_ellipsis || r.chance(40) {
        let mut spec = ExtentSpec {
            shapes: Some(shapes),
            ..Default::default()
        };
        // Sizes that agree with the shapes may be given as well.
        for &c in &used {
            if r.chance(20) {
                spec.sizes.insert(c, extent[&c]);
            }
        }
        spec
    } else {
        let mut spec = ExtentSpec {
            default: Some(1 + r.below(4)),
            ..Default::default()
        };
        for &c in &used {
            if r.chance(50) {
                spec.sizes.insert(c, extent[&c]);
            }
        }
        spec
    };
    (expr, spec)
}

/// Appends `...` covering a right-aligned suffix of the broadcast dims, some of them 1.
fn push_ellipsis(r: &mut Rng, term: &mut String, shape: &mut Vec<usize>, bext: &[usize]) {
    term.push_str("...");
    let n = r.below(bext.len() + 1);
    for &b in &bext[bext.len() - n..] {
        shape.push(if r.chance(30) { 1 } else { b });
    }
}

fn same(a: &ParsedEinsum, b: &ParsedEinsum) -> bool {
    a.inputs() == b.inputs()
        && a.output() == b.output()
        && a.extents() == b.extents()
        && a.ellipsis() == b.ellipsis()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1000, ..ProptestConfig::default() })]

    #[test]
    fn display_parse_round_trip(seed in any::<u64>()) {
        let (expr, spec) = random_case(seed);
        let e = parse(&expr, &spec).map_err(|err| {
            TestCaseError::fail(format!("generated {expr:?} {spec:?} failed: {err}"))
        })?;
        let shown = e.to_string();
        let back = parse(&shown, &spec).map_err(|err| {
            TestCaseError::fail(format!("{expr:?} displayed as {shown:?} fails: {err}"))
        })?;
        prop_assert!(same(&e, &back), "{expr:?} -> {shown:?}: {e:?} != {back:?}");
        prop_assert!(!back.implicit_output());
        prop_assert_eq!(back.to_string(), shown);
        // Every index has an extent, and shapes reproduce the given storage shapes.
        for (k, op) in e.inputs().iter().enumerate() {
            for c in &op.indices {
                prop_assert!(e.extents().contains_key(c));
            }
            if let Some(shapes) = &spec.shapes {
                prop_assert_eq!(&op.shape(e.extents()), &shapes[k]);
            }
        }
    }
}

/// Strings near the language (so parsing gets deep) and anything at all.
fn expr_strategy() -> impl Strategy<Value = String> {
    prop_oneof![
        "[ij,.\\->αA1 ]{0,24}",
        "[a-c]{0,3}(\\.\\.\\.)?[a-c]{0,3}(,[a-c]{0,3}(\\.\\.\\.)?){0,3}(->[a-c.]{0,5})?",
        any::<String>(),
    ]
}

fn flag_strategy() -> impl Strategy<Value = Option<String>> {
    prop_oneof![
        Just(None),
        "[a-cα0-9=, ]{0,16}".prop_map(Some),
        "[0-9x,]{0,16}".prop_map(Some),
        "(1844674407370955161[0-9]|4294967296|1|2)(x(1844674407370955161[0-9]|4294967296|1|2)){0,4}"
            .prop_map(Some),
        any::<String>().prop_map(Some),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    #[test]
    fn no_input_panics(
        expr in expr_strategy(),
        sizes in flag_strategy(),
        size in flag_strategy(),
        shapes in flag_strategy(),
        raw_shapes in proptest::option::of(proptest::collection::vec(
            proptest::collection::vec(prop_oneof![0usize..4, Just(usize::MAX), Just(1usize << 33)], 0..5),
            0..5,
        )),
    ) {
        if let Ok(spec) = ExtentSpec::from_flags(sizes.as_deref(), size.as_deref(), shapes.as_deref()) {
            if let Ok(e) = parse(&expr, &spec) {
                // Whatever parses displays and parses again.
                prop_assert!(parse(&e.to_string(), &spec).is_ok());
            }
        }
        // A hand-built spec may hold anything, including zeros and huge extents.
        let spec = ExtentSpec { shapes: raw_shapes, default: Some(3), ..Default::default() };
        let _ = parse(&expr, &spec);
    }
}
