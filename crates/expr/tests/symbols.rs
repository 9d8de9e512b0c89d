//! opt_einsum's symbols: every one of `opt_einsum.get_symbol(i)` for i < 2,000 (the table in
//! tests/data/opt_einsum_symbols.txt, written by opt_einsum_symbols.py) is an index in the
//! expression and in `--sizes`, a 200-operand einsum written with them reads as opt_einsum
//! reads it, and ASCII digits, punctuation and non-ASCII whitespace stay refused with a caret.

use deinsum_expr::{is_index, parse, parse_sizes, ExprError, ExtentSpec};
use proptest::prelude::*;
use std::collections::BTreeSet;

const TABLE: &str = include_str!("data/opt_einsum_symbols.txt");

/// The data lines of the table (comments skipped), each a list of hex code points.
fn rows() -> Vec<&'static str> {
    TABLE.lines().filter(|l| !l.starts_with('#')).collect()
}

fn chars(hex: &str) -> Vec<char> {
    hex.split_whitespace()
        .map(|h| char::from_u32(u32::from_str_radix(h, 16).unwrap()).unwrap())
        .collect()
}

/// `get_symbol(i)` for i < 2,000.
fn symbols() -> Vec<char> {
    chars(rows()[0])
}

#[test]
fn the_table_is_opt_einsums_sequence() {
    let s = symbols();
    assert_eq!(s.len(), 2000);
    assert_eq!(s.iter().collect::<BTreeSet<_>>().len(), 2000, "distinct");
    // The two symbols of the report, at the positions opt_einsum gives them.
    assert_eq!(s[75], '×');
    assert_eq!(s[107], '÷');
    assert_eq!(
        s[..52].iter().collect::<String>().len(),
        52,
        "ASCII letters first"
    );
}

#[test]
fn every_symbol_is_an_index_in_the_expression_and_in_sizes() {
    for (i, &c) in symbols().iter().enumerate() {
        assert!(is_index(c), "get_symbol({i}) = {c:?}");
        let spec = ExtentSpec::from_flags(Some(&format!("{c}=3")), None, None).unwrap();
        let expr = format!("{c},{c}->{c}");
        let e = parse(&expr, &spec).unwrap_or_else(|err| panic!("get_symbol({i}): {err}"));
        assert_eq!(e.input_indices(0), &[c][..]);
        assert_eq!(e.extent(c), 3, "get_symbol({i})");
        assert_eq!(e.to_string(), expr);
    }
}

#[test]
fn a_200_operand_einsum_reads_as_opt_einsum_reads_it() {
    let r = rows();
    let terms: Vec<String> = r[1].split(',').map(|t| chars(t).iter().collect()).collect();
    assert_eq!(terms.len(), 200);
    let expected: Vec<char> = chars(r[2]);
    let expr = terms.join(",");
    // Extent 1: the implicit output has some 60 indices.
    let e = parse(
        &expr,
        &ExtentSpec::from_flags(None, Some("1"), None).unwrap(),
    )
    .unwrap();
    assert_eq!(e.num_inputs(), 200);
    for (k, t) in terms.iter().enumerate() {
        assert_eq!(e.input_indices(k), t.chars().collect::<Vec<_>>().as_slice());
    }
    // opt_einsum's implicit output (indices that occur once, sorted by code point) is ours.
    assert_eq!(e.output(), expected.as_slice());
    assert!(e.implicit_output());
}

#[test]
fn non_ascii_whitespace_is_refused_with_a_caret() {
    for ws in ['\u{a0}', '\u{2003}', '\u{3000}'] {
        let expr = format!("×j,j{ws}k");
        let e = parse(
            &expr,
            &ExtentSpec::from_flags(None, Some("2"), None).unwrap(),
        )
        .unwrap_err();
        assert!(matches!(e, ExprError::Syntax { .. }), "{e}");
        assert_eq!(e.position(), Some(4), "{e}");
        assert!(e.message().contains("is not a valid index"), "{e}");
        let sized = parse_sizes(&format!("{ws}=3"));
        // `--sizes` trims whitespace around names, so a lone space character names nothing.
        assert!(sized.is_err(), "{ws:?}");
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    /// Random einsums over random symbols of the table parse, size by name, print and read
    /// back; an ASCII character other than a letter or the syntax put anywhere is refused at
    /// its position, with the caret under it.
    #[test]
    fn random_einsums_over_get_symbol(
        picks in prop::collection::vec(0usize..2000, 2..12),
        ops in prop::collection::vec(prop::collection::vec(0usize..12, 0..4), 1..5),
        out_mask in any::<u16>(),
        bad in prop::sample::select(b"0123456789!#$%&*+/:;<=?@[]^_`{|}~\"'(".to_vec()),
        at in any::<prop::sample::Index>(),
    ) {
        let table = symbols();
        let mut pool: Vec<char> = picks.iter().map(|&i| table[i]).collect();
        pool.dedup();
        let terms: Vec<String> = ops
            .iter()
            .map(|t| t.iter().map(|&k| pool[k % pool.len()]).collect())
            .collect();
        let used: BTreeSet<char> = terms.iter().flat_map(|t| t.chars()).collect();
        let output: String = used
            .iter()
            .enumerate()
            .filter(|(k, _)| out_mask >> (k % 16) & 1 == 1)
            .map(|(_, &c)| c)
            .collect();
        let expr = format!("{}->{output}", terms.join(","));
        let sizes: Vec<String> = used
            .iter()
            .enumerate()
            .map(|(k, c)| format!("{c}={}", 1 + k % 4))
            .collect();
        let spec = ExtentSpec::from_flags(Some(&sizes.join(",")), None, None).unwrap();
        let e = parse(&expr, &spec).unwrap();
        prop_assert_eq!(e.to_string(), expr.clone());
        for (k, c) in used.iter().enumerate() {
            prop_assert_eq!(e.extent(*c), 1 + k % 4);
        }
        // Put one refused ASCII character at a random char position.
        let mut cs: Vec<char> = expr.chars().collect();
        let p = at.index(cs.len() + 1);
        cs.insert(p, bad as char);
        let broken: String = cs.iter().collect();
        let err = parse(&broken, &spec).unwrap_err();
        prop_assert!(matches!(err, ExprError::Syntax { .. } | ExprError::Semantic { .. }), "{}", err);
        if let ExprError::Syntax { position, caret, .. } = &err {
            // The parser stops at the bad char or, when it breaks `->`, at the dash before it.
            prop_assert!(*position == p || (*position + 1 == p && cs[*position] == '-'), "{}", err);
            prop_assert_eq!(caret.chars().filter(|&c| c == '^').count(), 1);
        }
    }
}
