//! The benchmark equations (benches/cases.json, written by opt_einsum_baseline.py), shared by
//! the criterion bench and the `path_costs` example.

use deinsum_expr::{Dim, Operand, ParsedEinsum};
use std::collections::BTreeMap;

/// One benchmark equation and the strategies to run on it.
pub struct Case {
    /// Group name.
    pub name: String,
    /// The einsum.
    pub einsum: ParsedEinsum,
    /// Strategy names (the same names as opt_einsum's).
    pub strategies: Vec<String>,
}

/// Parses benches/cases.json.
pub fn load(text: &str) -> Vec<Case> {
    let v: serde_json::Value = serde_json::from_str(text).expect("cases.json is JSON");
    v.as_array()
        .expect("a list of cases")
        .iter()
        .map(|c| {
            let inputs: Vec<Operand> = c["inputs"]
                .as_array()
                .unwrap()
                .iter()
                .map(|t| Operand::new(t.as_str().unwrap().chars().map(Dim::Index).collect()))
                .collect();
            let extents: BTreeMap<char, usize> = c["sizes"]
                .as_object()
                .unwrap()
                .iter()
                .map(|(k, n)| (k.chars().next().unwrap(), n.as_u64().unwrap() as usize))
                .collect();
            Case {
                name: c["name"].as_str().unwrap().to_string(),
                einsum: ParsedEinsum::new(
                    inputs,
                    c["output"].as_str().unwrap().chars().collect(),
                    extents,
                )
                .expect("a valid einsum"),
                strategies: c["strategies"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|s| s.as_str().unwrap().to_string())
                    .collect(),
            }
        })
        .collect()
}
