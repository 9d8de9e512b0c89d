//! Held to opt_einsum's `dp` on the norm of an MPS (a ladder of ket and bra tensors,
//! `ab,ac,dcf,dbe,...` over opt_einsum's symbols) from 30 to 300 operands: one connected piece,
//! beyond 128 operands from 130 on. tests/data/opt_einsum_mps.py wrote the table with
//! opt_einsum: our `dp` must find a path costing no more than its `dp`, and `auto` (greedy at
//! this many operands, as opt_einsum's) no more than its greedy.

mod common;
use common::es;
use deinsum_path::{evaluate, optimize, tree_from_linear, Flops, PathError, PathOptions};

const TABLE: &str = include_str!("data/opt_einsum_mps.txt");
const SYMBOLS: &str = include_str!("../../expr/tests/data/opt_einsum_symbols.txt");

/// opt_einsum's `get_symbol(i)` for `i < 2000`, from the table it wrote.
fn symbols() -> Vec<char> {
    let row = SYMBOLS.lines().find(|l| !l.starts_with('#')).unwrap();
    row.split_whitespace()
        .map(|h| char::from_u32(u32::from_str_radix(h, 16).unwrap()).unwrap())
        .collect()
}

/// The MPS norm of `sites` sites as opt_einsum_mps.py builds it: site 0 is `ab,ac` (ket, bra:
/// physical index, bond), each later site a bra then a ket term (physical, bond in, bond out),
/// the last without a bond out; symbols in the order the script draws them.
fn mps_norm(sites: usize) -> String {
    let sym = symbols();
    let mut next = 0;
    let mut new = || {
        next += 1;
        sym[next - 1]
    };
    let (p, mut k, mut b) = (new(), new(), new());
    let mut terms = vec![format!("{p}{k}"), format!("{p}{b}")];
    for s in 1..sites {
        let p = new();
        if s + 1 < sites {
            let (k2, b2) = (new(), new());
            terms.push(format!("{p}{b}{b2}"));
            terms.push(format!("{p}{k}{k2}"));
            (k, b) = (k2, b2);
        } else {
            terms.push(format!("{p}{b}"));
            terms.push(format!("{p}{k}"));
        }
    }
    terms.join(",") + "->"
}

#[test]
fn dp_on_mps_networks_never_costs_more_than_opt_einsums_dp() {
    let mut sizes_seen = Vec::new();
    for line in TABLE.lines().filter(|l| !l.starts_with('#')) {
        let f: Vec<&str> = line.split('|').collect();
        let ops: usize = f[0].parse().unwrap();
        let (phys, bond): (usize, usize) = (f[1].parse().unwrap(), f[2].parse().unwrap());
        let (their_dp, their_greedy): (u128, u128) = (f[3].parse().unwrap(), f[4].parse().unwrap());
        let expr = mps_norm(ops / 2);
        assert_eq!(expr, f[5], "the table's einsum of {ops} operands");
        // Each term's first index is physical, the others bonds.
        let mut sizes = Vec::new();
        for t in expr.trim_end_matches("->").split(',') {
            let mut cs = t.chars();
            sizes.push((cs.next().unwrap(), phys));
            sizes.extend(cs.map(|c| (c, bond)));
        }
        let e = es(&expr, &sizes, bond);
        assert_eq!(e.num_inputs(), ops);
        for (s, theirs) in [("dp", their_dp), ("auto", their_greedy)] {
            let info = optimize(&e, &PathOptions::with_strategy(s))
                .unwrap_or_else(|err| panic!("{ops} operands, {s}: {err}"));
            assert_eq!(
                info.path.len(),
                ops - 1,
                "{ops} operands, {s}: pairwise steps"
            );
            // The cost is opt_einsum's count of the path we print, replayed from it.
            let replay = evaluate(&e, tree_from_linear(&e, &info.path).unwrap(), &Flops, s);
            assert_eq!(replay.flops, info.flops, "{ops} operands: {s}");
            let ours = info.flops.exact().unwrap();
            assert!(
                ours <= theirs,
                "{ops} operands, bond {bond}: {s} costs {ours} > opt_einsum's {theirs}"
            );
        }
        sizes_seen.push(ops);
    }
    // Below and above 128 and 256 operands in one connected piece.
    assert!(sizes_seen.iter().any(|&n| n < 128) && sizes_seen.iter().any(|&n| n > 256));
}

/// Where dp's one limit remains (a connected piece of more than 1024 operands), the message
/// says so and names strategies that take the einsum; those do.
#[test]
fn dp_names_what_works_beyond_its_limit() {
    let expr = mps_norm(520); // 1040 operands in one piece
    let e = es(&expr, &[], 2);
    let err = optimize(&e, &PathOptions::with_strategy("dp")).unwrap_err();
    assert!(matches!(
        err,
        PathError::TooLargeComponent {
            max: 1024,
            n: 1040,
            ..
        }
    ));
    assert_eq!(
        err.to_string(),
        "the dp strategy handles at most 1024 operands joined through summed indices, this \
         einsum joins 1040; use greedy"
    );
    let info = optimize(&e, &PathOptions::with_strategy("greedy")).unwrap();
    assert_eq!(info.path.len(), 1039);
    // optimal's limit is 20 operands; dp takes a piece of 300, so the advice names it.
    let e = es(&mps_norm(150), &[], 2);
    let err = optimize(&e, &PathOptions::with_strategy("optimal")).unwrap_err();
    assert_eq!(
        err.to_string(),
        "the optimal strategy handles at most 20 operands, this einsum has 300; use dp or greedy"
    );
}
