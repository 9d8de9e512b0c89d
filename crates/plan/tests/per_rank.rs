//! `PerRank`: sparse per-rank figures, their lookups and their JSON (the bare pair list).

use deinsum_plan::{PerRank, UnorderedRanks};

#[test]
fn from_dense_drops_zeros_and_get_fills_them() {
    let p = PerRank::from_dense([0u64, 5, 0, 7]);
    assert_eq!(p, vec![(1, 5), (3, 7)]);
    assert_eq!(
        (0..5).map(|r| p.get(r)).collect::<Vec<_>>(),
        [0, 5, 0, 7, 0]
    );
    assert_eq!(p.values().sum::<u64>(), 12);
    assert_eq!(p.last_rank(), Some(3));
}

#[test]
fn json_is_the_bare_pair_list_and_order_is_checked() {
    let mut p = PerRank::new();
    p.push(2, 4u64);
    p.push(9, 1);
    let s = serde_json::to_string(&p).unwrap();
    assert_eq!(s, "[[2,4],[9,1]]");
    assert_eq!(serde_json::from_str::<PerRank>(&s).unwrap(), p);
    let err = serde_json::from_str::<PerRank>("[[3,1],[3,2]]").unwrap_err();
    assert!(
        err.to_string().contains(&UnorderedRanks(3).to_string()),
        "{err}"
    );
}
