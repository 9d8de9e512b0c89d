//! `deinsum plan --format dot`: the contraction tree and the SDG as Graphviz digraphs.

mod cli_support;
use cli_support::deinsum;

#[test]
fn dot_has_the_tree_and_the_sdg_of_the_plan() {
    for (expr, procs) in [
        ("ijk,ja,ka,al->il", "8"),
        ("ij,jk,kl,lm->im", "5"),
        ("ii->i", "3"),
    ] {
        let common = [expr, "--size", "6", "--procs", procs];
        let (code, json, err) = deinsum(&[&["plan"][..], &common, &["--format", "json"]].concat());
        assert_eq!(code, 0, "{err}");
        let plan: serde_json::Value = serde_json::from_str(&json).unwrap();
        let (code, dot, err) = deinsum(&[&["plan"][..], &common, &["--format", "dot"]].concat());
        assert_eq!(code, 0, "{err}");
        // Two digraphs: the tree, then the SDG.
        let graphs: Vec<&str> = dot.split("digraph {").skip(1).collect();
        assert_eq!(graphs.len(), 2, "{dot}");
        let steps = plan["tree"]["steps"].as_array().unwrap();
        let inputs = plan["tree"]["num_inputs"].as_u64().unwrap() as usize;
        let edges: usize = steps
            .iter()
            .map(|s| s["operands"].as_array().unwrap().len())
            .sum();
        for g in &graphs {
            assert_eq!(
                g.matches("->").count() - count_arrows_in_labels(g),
                edges,
                "{g}"
            );
            assert_eq!(g.matches("label = \"input ").count(), inputs, "{g}");
        }
        // Every step appears in the tree with its fused group as the plan has it.
        for (s, _) in steps.iter().enumerate() {
            let group = plan["groups"]
                .as_array()
                .unwrap()
                .iter()
                .position(|g| {
                    g["group"]["steps"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .any(|x| x.as_u64() == Some(s as u64))
                })
                .unwrap();
            let line = graphs[0]
                .lines()
                .find(|l| l.contains(&format!("\"step {s}: ")))
                .unwrap_or_else(|| panic!("step {s} in {}", graphs[0]));
            assert!(line.contains(&format!("fused group {group}")), "{line}");
            assert!(
                graphs[1].contains(&format!("result of step {s}: ")),
                "{}",
                graphs[1]
            );
        }
    }
}

/// Arrows inside labels (the steps' einsums, `ja,ka->jka`), which are not edges.
fn count_arrows_in_labels(g: &str) -> usize {
    g.lines()
        .filter(|l| l.contains("label = \"step ") && !l.contains(" -> "))
        .map(|l| l.matches("->").count())
        .sum()
}
