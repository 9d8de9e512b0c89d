//! Ordinary einsums: letters, commas, `->`, implicit output, named and default extents.

use deinsum_expr::{parse, Dim, ExtentSpec};

fn sizes(s: &str) -> ExtentSpec {
    ExtentSpec::from_flags(Some(s), None, None).unwrap()
}

fn size(n: usize) -> ExtentSpec {
    ExtentSpec {
        default: Some(n),
        ..Default::default()
    }
}

#[test]
fn mttkrp_explicit() {
    let e = parse("ijk,ja,ka,al->il", &size(10)).unwrap();
    assert_eq!(e.num_inputs(), 4);
    assert_eq!(e.input_indices(0), &['i', 'j', 'k']);
    assert_eq!(e.input_indices(3), &['a', 'l']);
    assert_eq!(e.output(), &['i', 'l']);
    assert!(!e.implicit_output());
    assert!(e.ellipsis().is_empty());
    assert_eq!(e.all_indices(), vec!['a', 'i', 'j', 'k', 'l']);
    assert!(e.extents().values().all(|&n| n == 10));
    assert_eq!(e.to_string(), "ijk,ja,ka,al->il");
}

#[test]
fn named_sizes_and_default() {
    let spec = ExtentSpec::from_flags(Some("i=64, j=32"), Some("7"), None).unwrap();
    let e = parse("ij,jk->ik", &spec).unwrap();
    assert_eq!(e.extent('i'), 64);
    assert_eq!(e.extent('j'), 32);
    assert_eq!(e.extent('k'), 7);
    assert_eq!(e.inputs()[0].shape(e.extents()), vec![64, 32]);
}

#[test]
fn whitespace_between_tokens() {
    let e = parse("  i j , j k ->  i k ", &size(3)).unwrap();
    assert_eq!(e.to_string(), "ij,jk->ik");
}

#[test]
fn implicit_output_is_sorted_once_indices() {
    let e = parse("kj,ji", &sizes("i=2,j=3,k=4")).unwrap();
    assert!(e.implicit_output());
    assert_eq!(e.output(), &['i', 'k']);
    assert_eq!(e.to_string(), "kj,ji->ik");
    // Upper case sorts before lower case (code point order, as NumPy).
    let e = parse("bA", &size(2)).unwrap();
    assert_eq!(e.output(), &['A', 'b']);
}

#[test]
fn diagonal_trace_and_scalar() {
    let e = parse("ii->i", &size(5)).unwrap();
    assert_eq!(e.inputs()[0].dims, vec![Dim::Index('i'), Dim::Index('i')]);
    assert_eq!(e.input_indices(0), &['i']);
    assert!(e.inputs()[0].has_diagonal());
    // Implicit trace: 'i' occurs twice, so the output is a scalar.
    let e = parse("ii", &size(5)).unwrap();
    assert!(e.output().is_empty());
    assert_eq!(e.to_string(), "ii->");
    let e = parse("iij,jk->ik", &size(5)).unwrap();
    assert_eq!(e.input_indices(0), &['i', 'j']);
    let e = parse("ij,ij->", &size(5)).unwrap();
    assert!(e.output().is_empty());
}

#[test]
fn single_operand_and_scalar_operand() {
    let e = parse("ijk->kji", &size(2)).unwrap();
    assert_eq!(e.output(), &['k', 'j', 'i']);
    let e = parse("ij->", &size(2)).unwrap();
    assert_eq!(e.to_string(), "ij->");
    let e = parse(",ij->ij", &size(2)).unwrap();
    assert_eq!(e.num_inputs(), 2);
    assert!(e.inputs()[0].dims.is_empty());
    assert!(e.inputs()[0].indices.is_empty());
    assert_eq!(e.to_string(), ",ij->ij");
}

#[test]
fn new_checks_what_from_parts_does_not() {
    use deinsum_expr::{Operand, ParsedEinsum};
    let ops = |ts: &[&str]| -> Vec<Operand> {
        ts.iter()
            .map(|t| Operand::new(t.chars().map(Dim::Index).collect()))
            .collect()
    };
    let ext = |s: &str, n: usize| s.chars().map(|c| (c, n)).collect();
    let e = ParsedEinsum::new(ops(&["ij", "jk"]), vec!['i', 'k'], ext("ijk", 4)).unwrap();
    assert_eq!(e, parse("ij,jk->ik", &size(4)).unwrap());
    assert!(!e.implicit_output());
    assert!(e.ellipsis().is_empty());
    assert_eq!(e.extents().len(), 3);
    let bad = [
        (vec!['i', 'z'], ext("ijk", 4)),          // output index in no input
        (vec!['i', 'i'], ext("ijk", 4)),          // output index twice
        (vec!['i', 'k'], ext("ij", 4)),           // 'k' has no extent
        (vec!['i', 'k'], ext("ijkq", 4)),         // extent for an index no operand has
        (vec!['i', 'k'], ext("ijk", usize::MAX)), // too many elements
    ];
    for (out, extents) in bad {
        assert!(ParsedEinsum::new(ops(&["ij", "jk"]), out.clone(), extents.clone()).is_err());
        let raw = ParsedEinsum::from_parts(ops(&["ij", "jk"]), out.clone(), extents);
        assert_eq!(raw.output(), &out[..]);
    }
}
