//! The strategy table: every name and alias parses, prints back, and builds its search.

use deinsum_path::{strategy, strategy_list, StrategyKind, STRATEGIES, STRATEGY_NAMES};

#[test]
fn every_table_name_parses_and_round_trips() {
    for e in STRATEGIES {
        let kind: StrategyKind = e.name.parse().unwrap();
        assert_eq!(kind, e.kind, "{}", e.name);
        assert_eq!(kind.to_string(), e.name);
        assert_eq!(kind.to_string().parse::<StrategyKind>().unwrap(), kind);
        assert_eq!(strategy(e.name).unwrap().name(), e.name);
        for a in e.aliases {
            assert_eq!(a.parse::<StrategyKind>().unwrap(), e.kind, "{a}");
            // An alias reports the canonical name, as `branch` always reported `branch-2`.
            assert_eq!(strategy(a).unwrap().name(), e.name, "{a}");
        }
    }
}

#[test]
fn names_and_aliases_are_distinct_and_kinds_appear_once() {
    let all: Vec<&str> = STRATEGIES
        .iter()
        .flat_map(|e| std::iter::once(e.name).chain(e.aliases.iter().copied()))
        .collect();
    for (i, n) in all.iter().enumerate() {
        assert!(!all[..i].contains(n), "{n} listed twice");
    }
    for (i, e) in STRATEGIES.iter().enumerate() {
        assert!(
            STRATEGIES[..i].iter().all(|f| f.kind != e.kind),
            "{}",
            e.name
        );
    }
    let names: Vec<&str> = STRATEGIES.iter().map(|e| e.name).collect();
    assert_eq!(STRATEGY_NAMES.to_vec(), names);
}

#[test]
fn an_unknown_name_lists_the_table() {
    let err = "fastest".parse::<StrategyKind>().unwrap_err().to_string();
    assert_eq!(
        err,
        format!(
            "unknown path strategy `fastest` (known: {})",
            strategy_list()
        )
    );
    assert_eq!(
        strategy_list(),
        "auto, greedy, optimal, branch-2 (= branch), branch-all, branch-1, dp (= dynamic-programming)"
    );
}
