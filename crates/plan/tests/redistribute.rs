//! Derived transfers of a few structured moves, checked by hand (the property test against
//! a brute-force cover and the old explicit scheduler is in `src/moves/tests.rs`).

use deinsum_plan::{Distribution, Grid, GridDim, MoveKind, MoveView};

fn grid(dims: &[(char, usize)]) -> Grid {
    Grid {
        dims: dims
            .iter()
            .map(|&(index, size)| GridDim { index, size })
            .collect(),
    }
}

fn dist(g: &Grid, split: Vec<Vec<usize>>, partial: Vec<usize>) -> Distribution {
    Distribution {
        grid: g.clone(),
        split,
        partial,
        window: vec![],
        balanced: false,
    }
}

#[test]
fn gather_to_root() {
    let from = dist(&grid(&[('i', 3), ('j', 2)]), vec![vec![0], vec![1]], vec![]);
    let to = Distribution::on_root(2);
    let m = MoveView::new(&[5, 3], &from, &to, false, 6);
    let v = m.volume(true);
    // Rank 0 holds rows 0..2, cols 0..2 (4 words); it receives the other 11.
    assert_eq!(v.received, vec![(0, 11)]);
    assert_eq!(v.total, 11);
    assert_eq!(m.kind(v.total), MoveKind::Gather);
    // Rank 0 gets one message from each of the 6 blocks' holders (its own is a local copy).
    let r0 = m.transfers_of(0);
    assert_eq!(r0.iter().filter(|t| t.dst == 0).count(), 6);
    assert!(m.transfers_of(5).iter().all(|t| t.src == 5 && t.dst == 0));
}

#[test]
fn all_gather_along_a_grid_dim() {
    // A matrix split by rows over i4 and replicated over j2 after gathering its columns.
    let g = grid(&[('i', 4), ('j', 2)]);
    let from = dist(&g, vec![vec![0], vec![1]], vec![]);
    let to = dist(&g, vec![vec![0], vec![]], vec![]);
    let m = MoveView::new(&[8, 6], &from, &to, false, 8);
    let v = m.volume(true);
    assert_eq!(m.kind(v.total), MoveKind::AllGather { dims: vec![1] });
    // Every rank receives the other half of its rows (2 x 3) from its fibre partner.
    assert_eq!(v.received, (0..8).map(|r| (r, 6)).collect::<Vec<_>>());
    assert_eq!(v.max_sent, 6);
    for r in 0..8 {
        let partner = r ^ 1;
        let t = m.transfers_of(r);
        assert!(t
            .iter()
            .all(|t| (t.src == r || t.src == partner) && (t.dst == r || t.dst == partner)));
    }
}

#[test]
fn reduce_scatter_of_partial_sums() {
    let g = grid(&[('i', 2), ('k', 3)]);
    let from = dist(&g, vec![vec![0]], vec![1]);
    let to = dist(&g, vec![vec![0, 1]], vec![]);
    let m = MoveView::new(&[12], &from, &to, true, 6);
    let v = m.volume(true);
    assert_eq!(m.kind(v.total), MoveKind::ReduceScatter { dims: vec![1] });
    // Each rank ends with 2 of its 6 rows summed: 2 from each of the 2 other partials.
    assert_eq!(v.received, (0..6).map(|r| (r, 4)).collect::<Vec<_>>());
    assert_eq!(v.max_sent, 4);
}
