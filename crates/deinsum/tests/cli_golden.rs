//! Golden-file tests of the `deinsum` binary: the whole stdout, stderr and exit status of a
//! few representative commands, compared with `tests/golden/<case>.txt`.
//!
//! `DEINSUM_BLESS=1 cargo test -p deinsum --test cli_golden` rewrites the files from the
//! current binary (review the diff before committing it).

mod cli_support;
use cli_support::deinsum;
use std::path::PathBuf;

/// One command and whether its output holds timings to mask.
struct Case {
    name: &'static str,
    args: &'static [&'static str],
    timed: bool,
}

const CASES: &[Case] = &[
    Case {
        name: "parse_mttkrp",
        args: &["parse", "ijk,ja,ka,al->il", "--size", "6"],
        timed: false,
    },
    Case {
        name: "parse_mm_json",
        args: &[
            "parse",
            "ij,jk->ik",
            "--sizes",
            "i=3,j=4,k=5",
            "--format",
            "json",
        ],
        timed: false,
    },
    Case {
        name: "parse_refused",
        args: &["parse", "ij,jk->iz"],
        timed: false,
    },
    Case {
        name: "path_mttkrp",
        args: &["path", "ijk,ja,ka,al->il", "--size", "10"],
        timed: false,
    },
    Case {
        name: "bound_mm_p8",
        args: &["bound", "ij,jk->ik", "--size", "64", "--procs", "8"],
        timed: false,
    },
    Case {
        name: "plan_mm_p1",
        args: &["plan", "ij,jk->ik", "--size", "16", "--procs", "1"],
        timed: false,
    },
    Case {
        name: "plan_mttkrp_p5",
        args: &["plan", "ijk,ja,ka,al->il", "--size", "12", "--procs", "5"],
        timed: false,
    },
    Case {
        name: "plan_mm_p8_budget",
        args: &[
            "plan",
            "ij,jk->ik",
            "--size",
            "64",
            "--procs",
            "8",
            "--mem",
            "3000",
        ],
        timed: false,
    },
    Case {
        name: "plan_mm_p8_json",
        args: &[
            "plan",
            "ij,jk->ik",
            "--size",
            "12",
            "--procs",
            "8",
            "--format",
            "json",
        ],
        timed: false,
    },
    Case {
        name: "plan_refused_budget",
        args: &[
            "plan",
            "ij,jk->ik",
            "--size",
            "8",
            "--procs",
            "4",
            "--mem",
            "1",
        ],
        timed: false,
    },
    Case {
        name: "run_mm_p2_check",
        args: &[
            "run",
            "ij,jk->ik",
            "--size",
            "8",
            "--procs",
            "2",
            "--threads",
            "1",
            "--check",
        ],
        timed: true,
    },
    Case {
        name: "run_mm_p3_json",
        args: &[
            "run",
            "ij,jk->ik",
            "--size",
            "9",
            "--procs",
            "3",
            "--threads",
            "1",
            "--repeat",
            "2",
            "--check",
            "--format",
            "json",
        ],
        timed: true,
    },
];

/// Replaces every decimal number (`12.345`, `1.5e-3`, `5e-6`) with `#`: timings and rates vary from
/// run to run, while word counts, steps and names are integers or text.
fn mask_decimals(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = String::with_capacity(s.len());
    let mut i = 0;
    while i < b.len() {
        let start_of_number =
            b[i].is_ascii_digit() && (i == 0 || !b[i - 1].is_ascii_alphanumeric());
        if start_of_number {
            let mut j = i;
            while j < b.len() && b[j].is_ascii_digit() {
                j += 1;
            }
            let mut decimal = false;
            if j + 1 < b.len() && b[j] == b'.' && b[j + 1].is_ascii_digit() {
                decimal = true;
                j += 1;
                while j < b.len() && b[j].is_ascii_digit() {
                    j += 1;
                }
            }
            // An exponent, as `{:.3e}` and JSON write it (JSON drops the point: `5e-6`).
            let mut k = j;
            if k < b.len() && (b[k] == b'e' || b[k] == b'E') {
                k += 1;
                if k < b.len() && (b[k] == b'-' || b[k] == b'+') {
                    k += 1;
                }
                if k < b.len() && b[k].is_ascii_digit() {
                    while k < b.len() && b[k].is_ascii_digit() {
                        k += 1;
                    }
                    decimal = true;
                    j = k;
                }
            }
            if decimal {
                // A column's padding depends on the number's width: one space stands for it.
                if out.ends_with("  ") {
                    out.truncate(out.trim_end_matches(' ').len());
                    out.push(' ');
                }
                out.push('#');
                i = j;
                continue;
            }
            out.push_str(&s[i..j]);
            i = j;
            continue;
        }
        // Whole characters, so non-ASCII text (index letters, arrows) is kept intact.
        let c = s[i..]
            .chars()
            .next()
            .expect("a character at a char boundary");
        out.push(c);
        i += c.len_utf8();
    }
    out
}

/// The file a case's output is held in.
fn golden_path(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/golden")
        .join(format!("{name}.txt"))
}

/// A case's whole output in the golden file's form.
fn transcript(case: &Case) -> String {
    let (code, out, err) = deinsum(case.args);
    let text = format!(
        "$ deinsum {}\nexit: {code}\n--- stdout\n{out}--- stderr\n{err}",
        case.args.join(" ")
    );
    if case.timed {
        mask_host_cores(&mask_decimals(&text))
    } else {
        text
    }
}

/// Replaces the host's core count in a run's machine name (`as this host: 2 core(s)`) with `#`:
/// a run plans for the host it is on, and CI's host may have other cores than this one.
fn mask_host_cores(s: &str) -> String {
    const KEY: &str = "as this host: ";
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(at) = rest.find(KEY) {
        let (head, tail) = rest.split_at(at + KEY.len());
        out.push_str(head);
        let digits = tail.bytes().take_while(u8::is_ascii_digit).count();
        out.push_str(if digits > 0 { "#" } else { "" });
        rest = &tail[digits..];
    }
    out.push_str(rest);
    out
}

#[test]
fn masking_hides_decimals_and_keeps_integers() {
    assert_eq!(
        mask_decimals("min 0.123 ms, 1.500e3 madds, words 42, T1 (ij) 2e-4 x3.5"),
        "min # ms, # madds, words 42, T1 (ij) # x3.5"
    );
    assert_eq!(mask_decimals("\"seconds\": 1.25e-5,"), "\"seconds\": #,");
    assert_eq!(
        mask_decimals("out    12.345   0.1 ms"),
        mask_decimals("out     2.345  10.1 ms")
    );
    assert_eq!(
        mask_host_cores("default, as this host: 16 core(s), 2 rank(s)"),
        "default, as this host: # core(s), 2 rank(s)"
    );
}

#[test]
fn whole_outputs_match_the_golden_files() {
    let bless = std::env::var_os("DEINSUM_BLESS").is_some_and(|v| v == "1");
    let mut differ = Vec::new();
    for case in CASES {
        let got = transcript(case);
        let path = golden_path(case.name);
        if bless {
            std::fs::create_dir_all(path.parent().expect("a parent directory")).unwrap();
            std::fs::write(&path, &got).unwrap();
            continue;
        }
        let want = std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("{}: {e} (bless with DEINSUM_BLESS=1)", path.display()));
        if got != want {
            differ.push(format!(
                "{}:\n--- want\n{want}\n--- got\n{got}",
                path.display()
            ));
        }
    }
    assert!(
        differ.is_empty(),
        "{} case(s) differ from their golden files (DEINSUM_BLESS=1 rewrites them):\n{}",
        differ.len(),
        differ.join("\n")
    );
}
