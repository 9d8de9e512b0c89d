//! End-to-end tests of `deinsum parse`: exit codes, caret output, the JSON shape.

use std::process::{Command, Output};

fn deinsum(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_deinsum"))
        .args(args)
        .output()
        .expect("the deinsum binary runs")
}

fn stdout(o: &Output) -> String {
    String::from_utf8(o.stdout.clone()).unwrap()
}

fn stderr(o: &Output) -> String {
    String::from_utf8(o.stderr.clone()).unwrap()
}

#[test]
fn text_output_with_default_size() {
    let o = deinsum(&["parse", "ijk,ja,ka,al->il"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let out = stdout(&o);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines[0], "einsum    ijk,ja,ka,al->il");
    assert_eq!(lines[1], "output    explicit");
    // Without extent flags every index is 10 (documented default).
    assert!(lines.contains(&"0        ijk         10x10x10"), "{out}");
    assert!(lines.contains(&"output   il          10x10"), "{out}");
    assert!(
        lines.contains(&"a      10      summed  1[1] 2[1] 3[0]"),
        "{out}"
    );
    assert!(
        lines.contains(&"i      10      free    0[0] out[0]"),
        "{out}"
    );
}

#[test]
fn implicit_output_and_sizes() {
    let o = deinsum(&["parse", "ij,jk", "--sizes", "i=64,j=32", "--size", "16"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(
        out.starts_with("einsum    ij,jk->ik\noutput    implicit"),
        "{out}"
    );
    assert!(out.contains("\noutput   ik          64x16\n"), "{out}");
    assert!(
        out.contains("\nj      32      summed  0[1] 1[0]\n"),
        "{out}"
    );
}

#[test]
fn json_shape() {
    let o = deinsum(&[
        "parse",
        "...ij,...jk->...ik",
        "--shapes",
        "2x1x3x4,5x4x6",
        "--format",
        "json",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(v["einsum"], "...ij,...jk->...ik");
    assert_eq!(v["implicit_output"], false);
    assert_eq!(v["ellipsis"], serde_json::json!(["α", "β"]));
    assert_eq!(
        v["inputs"][0]["dims"],
        serde_json::json!(["α", "1", "i", "j"])
    );
    assert_eq!(
        v["inputs"][0]["indices"],
        serde_json::json!(["α", "i", "j"])
    );
    assert_eq!(v["inputs"][0]["shape"], serde_json::json!([2, 1, 3, 4]));
    assert_eq!(v["output"]["subscripts"], "...ik");
    assert_eq!(v["output"]["shape"], serde_json::json!([2, 5, 3, 6]));
    let idx = v["indices"].as_array().unwrap();
    let names: Vec<&str> = idx.iter().map(|r| r["index"].as_str().unwrap()).collect();
    assert_eq!(names, ["i", "j", "k", "α", "β"]);
    let j = &idx[1];
    assert_eq!(j["extent"], 4);
    assert_eq!(j["role"], "summed");
    assert_eq!(j["ellipsis"], false);
    assert_eq!(
        j["inputs"],
        serde_json::json!([{"operand": 0, "dims": [3]}, {"operand": 1, "dims": [1]}])
    );
    assert_eq!(j["output"], serde_json::Value::Null);
    assert_eq!(idx[3]["ellipsis"], true);
    assert_eq!(idx[3]["output"], 0);
}

#[test]
fn syntax_error_exits_2_with_caret() {
    let o = deinsum(&["parse", "αβ,β1->α"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(o.stdout.is_empty());
    let err = stderr(&o);
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(
        lines[0],
        "error: syntax error at position 4: '1' is not a valid index (indices are ASCII letters or non-ASCII characters other than whitespace)"
    );
    assert_eq!(lines[1], "  αβ,β1->α");
    assert_eq!(lines[2], "      ^");
}

#[test]
fn semantic_errors_exit_2() {
    let o = deinsum(&["parse", "ij,jk->il"]);
    assert_eq!(o.status.code(), Some(2));
    let err = stderr(&o);
    assert!(
        err.starts_with("error: output index 'l' does not occur in any input (at position 8)\n"),
        "{err}"
    );
    assert_eq!(err.lines().nth(2), Some("          ^"));

    let o = deinsum(&["parse", "ij,jk->ik", "--sizes", "i=3"]);
    assert_eq!(o.status.code(), Some(2));
    assert_eq!(
        stderr(&o),
        "error: no extent for indices 'j', 'k' (give --sizes, --size N or --shapes)\n"
    );

    let o = deinsum(&["parse", "ij,jk->ik", "--shapes", "2x3,4x5"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("two different extents for index 'j'"));

    let o = deinsum(&["parse", "ij", "--size", "-1"]);
    assert_eq!(o.status.code(), Some(2));
}

#[test]
fn usage_errors_exit_2_and_help_exits_0() {
    let o = deinsum(&["parse"]);
    assert_eq!(o.status.code(), Some(2));
    let o = deinsum(&["parse", "ij", "--format", "yaml"]);
    assert_eq!(o.status.code(), Some(2));
    let o = deinsum(&["parse", "--help"]);
    assert_eq!(o.status.code(), Some(0));
    assert!(stdout(&o).contains("default: 10 when no extent flag is given"));
}

#[test]
fn opt_einsum_symbols_parse_in_the_expression_and_in_sizes() {
    // The report's example: get_symbol(75) is '×'.
    let o = deinsum(&["parse", "a×,×b->ab", "--size", "3"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(
        stdout(&o).contains("×      3       summed"),
        "{}",
        stdout(&o)
    );
    let o = deinsum(&["parse", "a×,×b->ab", "--sizes", "×=5,a=2,b=4"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(
        stdout(&o).contains("×      5       summed"),
        "{}",
        stdout(&o)
    );
    // Non-ASCII whitespace is still not an index: caret under it, exit 2.
    let o = deinsum(&["parse", "a×,×\u{3000}b", "--size", "3"]);
    assert_eq!(o.status.code(), Some(2));
    let err = stderr(&o);
    // The invisible character is named by its code point.
    let head = r"error: syntax error at position 4: '\u{3000}' is not a valid index";
    assert!(err.starts_with(head), "{err}");
    // U+3000 is wide: the caret counts two columns for it only after it, so it sits at 4.
    assert_eq!(err.lines().nth(2), Some("      ^"), "{err}");
}

#[test]
fn named_broadcast_dims_are_shown() {
    let o = deinsum(&["parse", "bhqd,bhkd->bhqk", "--shapes", "2x1x5x4,2x3x7x4"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(out.contains("output   bhqk        2x3x5x7"), "{out}");
    assert!(
        out.contains("h      3       free    1[1] 0[1]=1 (broadcast) out[1]"),
        "{out}"
    );
}
