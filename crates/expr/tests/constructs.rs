//! Ellipsis and broadcasting, Unicode indices, shapes, and how `...` prints.

use deinsum_expr::{parse, Dim, ExtentSpec, ParsedEinsum};

fn shapes(s: &str) -> ExtentSpec {
    ExtentSpec::from_flags(None, None, Some(s)).unwrap()
}

fn reparse(e: &ParsedEinsum, spec: &ExtentSpec) -> ParsedEinsum {
    parse(&e.to_string(), spec).unwrap()
}

#[test]
fn batched_matmul_with_broadcasting() {
    // NumPy: (2,1,3,4) @ (5,4,6) broadcasts to (2,5,3,6).
    let spec = shapes("2x1x3x4,5x4x6");
    let e = parse("...ij,...jk->...ik", &spec).unwrap();
    assert_eq!(e.ellipsis(), vec!['α', 'β']);
    assert_eq!(
        e.inputs()[0].dims,
        vec![
            Dim::Index('α'),
            Dim::Broadcast,
            Dim::Index('i'),
            Dim::Index('j')
        ]
    );
    assert_eq!(e.inputs()[0].indices, vec!['α', 'i', 'j']);
    assert_eq!(
        e.inputs()[1].dims,
        vec![Dim::Index('β'), Dim::Index('j'), Dim::Index('k')]
    );
    assert_eq!(e.output(), &['α', 'β', 'i', 'k']);
    assert_eq!(e.extent('α'), 2);
    assert_eq!(e.extent('β'), 5);
    assert_eq!(e.inputs()[0].shape(e.extents()), vec![2, 1, 3, 4]);
    assert_eq!(e.to_string(), "...ij,...jk->...ik");
    let back = reparse(&e, &spec);
    assert_eq!(
        (back.inputs(), back.output(), back.extents()),
        (e.inputs(), e.output(), e.extents())
    );
}

#[test]
fn implicit_output_puts_ellipsis_first() {
    let e = parse("ij...,jk", &shapes("3x4x7,4x5")).unwrap();
    assert!(e.implicit_output());
    assert_eq!(e.ellipsis(), vec!['α']);
    assert_eq!(e.output(), &['α', 'i', 'k']);
    assert_eq!(e.to_string(), "ij...,jk->...ik");
}

#[test]
fn ellipsis_summed_when_output_lacks_it() {
    let e = parse("...i,...i->i", &shapes("2x3,2x3")).unwrap();
    assert_eq!(e.output(), &['i']);
    assert_eq!(e.inputs()[0].indices, vec!['α', 'i']);
    assert_eq!(e.to_string(), "...i,...i->i");
}

#[test]
fn ellipsis_of_zero_dims_prints_nothing() {
    let e = parse("...ij,jk->...ik", &shapes("2x3,3x4")).unwrap();
    assert!(e.ellipsis().is_empty());
    assert_eq!(e.to_string(), "ij,jk->ik");
    // An output '...' with no input '...' is empty too (no shapes needed).
    let e = parse(
        "ij->...ji",
        &ExtentSpec {
            default: Some(2),
            ..Default::default()
        },
    )
    .unwrap();
    assert_eq!(e.output(), &['j', 'i']);
}

#[test]
fn all_extent_one_ellipsis_is_an_index_not_a_broadcast() {
    let e = parse("...i,...i->...", &shapes("1x3,1x3")).unwrap();
    assert_eq!(e.inputs()[0].dims, vec![Dim::Index('α'), Dim::Index('i')]);
    assert_eq!(e.extent('α'), 1);
}

#[test]
fn ellipsis_in_the_middle_and_diagonal_inside() {
    let spec = shapes("3x2x5x3");
    let e = parse("i...i->...i", &spec).unwrap();
    assert_eq!(
        e.inputs()[0].dims,
        vec![
            Dim::Index('i'),
            Dim::Index('α'),
            Dim::Index('β'),
            Dim::Index('i')
        ]
    );
    assert_eq!(e.output(), &['α', 'β', 'i']);
    assert_eq!(e.to_string(), "i...i->...i");
    assert_eq!(reparse(&e, &spec).inputs(), e.inputs());
}

#[test]
fn fresh_labels_avoid_the_expressions_labels() {
    let e = parse("αi...,βi->...", &shapes("2x3x4,5x3")).unwrap();
    assert_eq!(e.ellipsis(), vec!['γ']);
    assert_eq!(e.extent('γ'), 4);
}

#[test]
fn unicode_indices() {
    let spec = ExtentSpec::from_flags(Some("α=3,名=4"), Some("2"), None).unwrap();
    let e = parse("αβ,β名->α名", &spec).unwrap();
    assert_eq!(e.input_indices(0), &['α', 'β']);
    assert_eq!(e.extent('α'), 3);
    assert_eq!(e.extent('β'), 2);
    assert_eq!(e.extent('名'), 4);
    assert_eq!(e.to_string(), "αβ,β名->α名");
    // More than 52 distinct indices in one einsum.
    let labels: String = (0x3B1u32..0x3C9)
        .chain(0x61..0x7B)
        .chain(0x41..0x5B)
        .filter_map(char::from_u32)
        .collect();
    assert!(labels.chars().count() > 52);
    let expr = format!("{labels}->");
    let e = parse(
        &expr,
        &ExtentSpec {
            default: Some(1),
            ..Default::default()
        },
    )
    .unwrap();
    assert_eq!(e.all_indices().len(), labels.chars().count());
}

#[test]
fn shapes_give_every_extent_and_agree_with_sizes() {
    let spec = ExtentSpec::from_flags(Some("j=32"), None, Some("64x32, 32x16")).unwrap();
    let e = parse("ij,jk->ik", &spec).unwrap();
    assert_eq!(e.extent('i'), 64);
    assert_eq!(e.extent('k'), 16);
    // A scalar operand is an empty shape.
    let e = parse(",ij->ij", &shapes(",2x3")).unwrap();
    assert!(e.inputs()[0].dims.is_empty());
    assert_eq!(e.extent('j'), 3);
    // --size is only a fallback: shapes win, no conflict.
    let spec = ExtentSpec::from_flags(None, Some("9"), Some("2x3")).unwrap();
    assert_eq!(parse("ij", &spec).unwrap().extent('i'), 2);
}
