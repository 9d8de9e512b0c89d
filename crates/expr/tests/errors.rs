//! Every error the issue lists (and the others the parser has): the message and, for errors in
//! the expression, the caret position.

use deinsum_expr::{parse, ExprError, ExtentSpec};

fn flags(sizes: Option<&str>, size: Option<&str>, shapes: Option<&str>) -> ExtentSpec {
    ExtentSpec::from_flags(sizes, size, shapes).unwrap()
}

fn size(n: usize) -> ExtentSpec {
    flags(None, Some(&n.to_string()), None)
}

fn err(expr: &str, spec: &ExtentSpec) -> ExprError {
    match parse(expr, spec) {
        Ok(e) => panic!("{expr:?} parsed as {e}"),
        Err(e) => e,
    }
}

/// Checks the message, the position, and that the displayed caret sits under that char.
/// (Expressions here have no wide chars, so the caret column is the char position.)
fn located(e: &ExprError, expr: &str, message: &str, position: usize) {
    assert_eq!(e.message(), message, "{e}");
    assert_eq!(e.position(), Some(position), "{e}");
    let text = e.to_string();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 3, "{text}");
    assert_eq!(lines[1], format!("  {expr}"));
    let caret_col = lines[2].chars().position(|c| c == '^').unwrap();
    assert_eq!(caret_col, position + 2, "{text}");
    assert_eq!(lines[2].trim(), "^");
    // The caret points at a char of the expression (char positions, not bytes).
    assert!(position <= expr.chars().count());
}

fn unlocated(e: &ExprError, message: &str) {
    assert_eq!(e.message(), message);
    assert_eq!(e.position(), None);
    assert_eq!(e.to_string(), message, "one line");
}

#[test]
fn output_index_not_in_any_input() {
    let e = err("ij,jk->il", &size(3));
    assert!(matches!(e, ExprError::Semantic { .. }));
    located(
        &e,
        "ij,jk->il",
        "output index 'l' does not occur in any input",
        8,
    );
}

#[test]
fn index_twice_in_output() {
    let e = err("ij,jk->iki", &size(3));
    located(&e, "ij,jk->iki", "index 'i' appears twice in the output", 9);
}

#[test]
fn missing_extent() {
    let e = err("ij,jk->ik", &flags(Some("i=3,j=4"), None, None));
    unlocated(
        &e,
        "no extent for index 'k' (give --sizes k=N, --size N or --shapes)",
    );
    let e = err("ij,jk->ik", &flags(Some("j=4"), None, None));
    unlocated(
        &e,
        "no extent for indices 'i', 'k' (give --sizes, --size N or --shapes)",
    );
    let e = err("ij", &ExtentSpec::default());
    unlocated(
        &e,
        "no extent for indices 'i', 'j' (give --sizes, --size N or --shapes)",
    );
}

#[test]
fn two_extents_for_one_index() {
    let e = err("ij,jk->ik", &flags(None, None, Some("2x3,4x5")));
    unlocated(
        &e,
        "two different extents for index 'j': 3 (--shapes, operand 0 dimension 1) and 4 \
         (--shapes, operand 1 dimension 0) (NumPy broadcasts only extent 1 against another \
         extent)",
    );
    let e = err("ij,jk->ik", &flags(Some("j=7"), None, Some("2x3,3x5")));
    unlocated(
        &e,
        "two different extents for index 'j': 3 (--shapes, operand 0 dimension 1) and 7 (--sizes)",
    );
    // A diagonal needs equal extents, even when one is 1 (NumPy does not broadcast them).
    for shape in ["3x4", "1x4"] {
        let e = err("ii->i", &flags(None, None, Some(shape)));
        let (a, b) = shape.split_once('x').unwrap();
        unlocated(
            &e,
            &format!(
                "index 'i' repeats in operand 0 with extents {a} (dimension 0) and {b} \
                 (dimension 1); a repeated index takes a diagonal, so its extents must be equal"
            ),
        );
    }
    // Extent 1 broadcasts (as in NumPy), but --sizes must give the broadcast extent.
    let e = err("ij,ij->ij", &flags(Some("j=1"), None, Some("3x1,3x4")));
    unlocated(
        &e,
        "two different extents for index 'j': 4 (--shapes, operand 1 dimension 1) and 1 \
         (--sizes) (--sizes must give the extent after broadcasting)",
    );
}

#[test]
fn arrow_twice() {
    let e = err("ij->i->j", &size(2));
    assert!(matches!(e, ExprError::Syntax { .. }));
    located(&e, "ij->i->j", "'->' appears twice", 5);
    assert!(e
        .to_string()
        .starts_with("syntax error at position 5: '->' appears twice\n"));
}

#[test]
fn non_letter_character() {
    let e = err("ij,j1->i", &size(2));
    located(
        &e,
        "ij,j1->i",
        "'1' is not a valid index (indices are ASCII letters or non-ASCII characters other than whitespace)",
        4,
    );
    let e = err("ij,jk->i_", &size(2));
    located(
        &e,
        "ij,jk->i_",
        "'_' is not a valid index (indices are ASCII letters or non-ASCII characters other than whitespace)",
        8,
    );
    let e = err("ij;jk", &size(2));
    located(
        &e,
        "ij;jk",
        "';' is not a valid index (indices are ASCII letters or non-ASCII characters other than whitespace)",
        2,
    );
    // Positions count chars, not bytes: 'α' and 'β' take two bytes each.
    let e = err("αβ,β1", &size(2));
    located(
        &e,
        "αβ,β1",
        "'1' is not a valid index (indices are ASCII letters or non-ASCII characters other than whitespace)",
        4,
    );
    // Wide CJK chars take two terminal columns: the caret moves, the position does not.
    let e = err("名名,名1", &size(2));
    assert_eq!(e.position(), Some(4));
    assert_eq!(
        e.to_string().lines().nth(2),
        Some(format!("  {}^", " ".repeat(7)).as_str())
    );
    // A control character is shown as '?' so the caret stays aligned.
    let e = err("i\u{7}j", &size(2));
    assert_eq!(
        e.message(),
        "'\\u{7}' is not a valid index (indices are ASCII letters or non-ASCII characters other than whitespace)"
    );
    assert_eq!(e.position(), Some(1));
    assert_eq!(e.to_string().lines().nth(1), Some("  i?j"));
}

#[test]
fn broken_arrow_and_dots() {
    let e = err("ij-k", &size(2));
    located(
        &e,
        "ij-k",
        "'-' must be followed by '>' (the output arrow is '->')",
        2,
    );
    let e = err("ij>k", &size(2));
    located(
        &e,
        "ij>k",
        "'>' without '-' before it (the output arrow is '->')",
        2,
    );
    let e = err("i..j", &size(2));
    located(
        &e,
        "i..j",
        "a '.' that is not part of '...' (an ellipsis is three dots)",
        1,
    );
    let e = err("i....j", &flags(None, None, Some("2x2")));
    located(
        &e,
        "i....j",
        "a '.' that is not part of '...' (an ellipsis is three dots)",
        4,
    );
    let e = err("ij,jk->i,k", &size(2));
    located(
        &e,
        "ij,jk->i,k",
        "',' in the output (the output is a single term)",
        8,
    );
}

#[test]
fn ellipsis_twice_in_a_term() {
    let e = err("i...j...,k", &size(2));
    located(&e, "i...j...,k", "'...' appears twice in operand 0", 5);
    let e = err("i...->......", &size(2));
    located(&e, "i...->......", "'...' appears twice in the output", 9);
}

#[test]
fn ellipsis_needs_shapes() {
    let e = err("ij,...jk->...ik", &size(2));
    located(
        &e,
        "ij,...jk->...ik",
        "the dimensions of '...' in operand 1 must be given by --shapes",
        3,
    );
}

#[test]
fn shape_with_wrong_number_of_dimensions() {
    let e = err("ij,jk->ik", &flags(None, None, Some("2x3,3")));
    unlocated(
        &e,
        "--shapes: shape 3 of operand 1 has 1 dimension but its term 'jk' needs 2",
    );
    let e = err("ij...,jk->ik", &flags(None, None, Some("2,3x4")));
    unlocated(
        &e,
        "--shapes: shape 2 of operand 0 has 1 dimension but its term 'ij...' needs at least 2",
    );
    let e = err(",ij->ij", &flags(None, None, Some("2,2x2")));
    unlocated(
        &e,
        "--shapes: shape 2 of operand 0 has 1 dimension but its term '' needs 0",
    );
    let e = err("ij,jk->ik", &flags(None, None, Some("2x3")));
    unlocated(&e, "--shapes gives 1 shape but the einsum has 2 operands");
}

#[test]
fn ellipsis_shapes_that_do_not_broadcast() {
    let e = err("...i,...i->...i", &flags(None, None, Some("2x3,4x3")));
    unlocated(
        &e,
        "'...' shapes do not broadcast: operand 0 has extent 2 and operand 1 has extent 4 at \
         broadcast dimension 0 (counted from the left of the longest '...')",
    );
    // Right-aligned, as NumPy: (5,2) against (2,5) fails at both positions; the first is named.
    let e = err("...,...->...", &flags(None, None, Some("7x5x2,2x5")));
    unlocated(
        &e,
        "'...' shapes do not broadcast: operand 0 has extent 5 and operand 1 has extent 2 at \
         broadcast dimension 1 (counted from the left of the longest '...')",
    );
}

#[test]
fn zero_extents_are_accepted_with_numpy_meaning() {
    // Extent 0 (NumPy's empty arrays) is an extent like any other, from every source.
    let spec = ExtentSpec::from_flags(Some("i=0"), Some("3"), None).unwrap();
    assert_eq!(parse("ij,jk->ik", &spec).unwrap().extent('i'), 0);
    let spec = ExtentSpec::from_flags(None, Some("0"), None).unwrap();
    assert_eq!(parse("ij", &spec).unwrap().extent('j'), 0);
    let spec = ExtentSpec::from_flags(None, None, Some("2x0,0x3")).unwrap();
    let e = parse("ij,jk->ik", &spec).unwrap();
    assert_eq!((e.extent('i'), e.extent('j'), e.extent('k')), (2, 0, 3));
    // A (0, 0) trace, and extent 1 broadcast against 0 as NumPy does (named and in `...`).
    let e = parse("ii->", &flags(None, None, Some("0x0"))).unwrap();
    assert_eq!(e.extent('i'), 0);
    let e = parse("ij,ij->ij", &flags(None, None, Some("0x3,1x3"))).unwrap();
    assert_eq!(e.extent('i'), 0);
    assert_eq!(e.inputs()[1].named_broadcast.len(), 1);
    let e = parse("...i,...i->...i", &flags(None, None, Some("0x2,1x2"))).unwrap();
    assert_eq!(e.inputs()[1].shape(e.extents()), vec![1, 2]);
    assert_eq!(e.output().len(), 2);
    // 0 against another extent does not broadcast (NumPy's rule: only 1 does).
    let e = err("ij,ij->ij", &flags(None, None, Some("0x3,2x3")));
    assert!(
        e.to_string()
            .contains("two different extents for index 'i'"),
        "{e}"
    );
    // Still no negative or non-numeric extent.
    assert!(ExtentSpec::from_flags(Some("i=-1"), None, None).is_err());
}

#[test]
fn element_count_overflow() {
    let big = (1usize << (usize::BITS / 2)).to_string();
    let spec = flags(Some(&format!("i={big},j={big}")), Some("1"), None);
    unlocated(
        &err("ij,k->k", &spec),
        "operand 0 ('ij') has more elements than fit in usize",
    );
    unlocated(
        &err("i,j->ij", &spec),
        "the output has more elements than fit in usize",
    );
    // One below the limit is fine.
    let half = ((1usize << (usize::BITS / 2)) - 1).to_string();
    let spec = flags(Some(&format!("i={half},j={half}")), None, None);
    assert!(parse("ij->ij", &spec).is_ok());
}

#[test]
fn sizes_for_an_unknown_index() {
    let e = err("ij->i", &flags(Some("i=2,j=3,z=4"), None, None));
    unlocated(
        &e,
        "--sizes names index 'z', which does not occur in the einsum",
    );
}

/// `--sizes`, `--size`, `--shapes` and the expected message.
type FlagCase<'a> = (Option<&'a str>, Option<&'a str>, Option<&'a str>, &'a str);

#[test]
fn malformed_flags() {
    let cases: &[FlagCase] = &[
        (
            Some("i64"),
            None,
            None,
            "--sizes: \"i64\" is not of the form INDEX=N (such as i=64)",
        ),
        (
            Some("i=64,"),
            None,
            None,
            "--sizes: empty entry (expected INDEX=N, such as i=64)",
        ),
        (
            Some("ij=4"),
            None,
            None,
            "--sizes: \"ij\" is not an index (an index is one character: indices are ASCII letters or non-ASCII characters other than whitespace)",
        ),
        (
            Some("1=4"),
            None,
            None,
            "--sizes: \"1\" is not an index (an index is one character: indices are ASCII letters or non-ASCII characters other than whitespace)",
        ),
        (
            Some("i=3,i=3"),
            None,
            None,
            "--sizes: index 'i' is given twice",
        ),
        (
            Some("i=-3"),
            None,
            None,
            "--sizes: index 'i': \"-3\" is not an extent (expected a non-negative integer)",
        ),
        (
            None,
            Some("ten"),
            None,
            "--size: \"ten\" is not an extent (expected a non-negative integer)",
        ),
        (
            None,
            Some(""),
            None,
            "--size: \"\" is not an extent (expected a non-negative integer)",
        ),
        (
            None,
            Some("99999999999999999999999"),
            None,
            "--size: extent 99999999999999999999999 is too large (at most 18446744073709551615)",
        ),
        (
            None,
            None,
            Some("2x,3"),
            "--shapes: shape 0 (\"2x\"): \"\" is not an extent (expected a non-negative integer)",
        ),
        (
            None,
            None,
            Some("2*3"),
            "--shapes: shape 0 (\"2*3\"): \"2*3\" is not an extent (expected a non-negative integer)",
        ),
    ];
    for &(sizes, size, shapes, message) in cases {
        if usize::BITS != 64 && message.contains("18446744073709551615") {
            continue;
        }
        let e = ExtentSpec::from_flags(sizes, size, shapes).unwrap_err();
        unlocated(&e, message);
    }
}
