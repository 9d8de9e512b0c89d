//! Redistribution schedules are exact covers, and their volumes equal a brute-force count.

use deinsum_plan::{
    received_words, redistribute, Block, Distribution, Grid, GridDim, Transfer, Window,
};
use proptest::prelude::*;
use std::collections::BTreeMap;

/// Every element of `b`, as global coordinates.
fn elements(b: &Block) -> Vec<Vec<usize>> {
    let mut out = vec![Vec::new()];
    for &(s, e) in &b.ranges {
        let mut next = Vec::new();
        for p in &out {
            for x in s..e {
                let mut q = p.clone();
                q.push(x);
                next.push(q);
            }
        }
        out = next;
    }
    out
}

fn contains(b: &Block, x: &[usize]) -> bool {
    b.ranges.iter().zip(x).all(|(&(s, e), &v)| s <= v && v < e)
}

/// The partial-replica identity of `rank` in `d`: its coordinates along the partial dims.
fn partial_id(d: &Distribution, rank: usize) -> Vec<usize> {
    let c = d.grid.coords(rank).unwrap();
    d.partial.iter().map(|&g| c[g]).collect()
}

/// Checks the contract of a schedule and returns the brute-force (sent, received) per rank.
fn check(
    shape: &[usize],
    from: &Distribution,
    to: &Distribution,
    sum: bool,
    procs: usize,
    transfers: &[Transfer],
) -> (BTreeMap<usize, u64>, BTreeMap<usize, u64>) {
    // One message per pair, sorted by (dst, src).
    for w in transfers.windows(2) {
        assert!(
            (w[0].dst, w[0].src) < (w[1].dst, w[1].src),
            "pairs sorted and unique"
        );
    }
    let partials: usize = if sum {
        from.partial
            .iter()
            .map(|&g| from.grid.dims[g].size)
            .product()
    } else {
        1
    };
    // element -> list of partial ids received, per destination
    let mut got: BTreeMap<(usize, Vec<usize>), Vec<Vec<usize>>> = BTreeMap::new();
    for t in transfers {
        assert!(t.src < procs && t.dst < procs);
        let sb = from
            .block(t.src, shape)
            .expect("sender inside the source grid");
        let db = to
            .block(t.dst, shape)
            .expect("receiver inside the target grid");
        for b in &t.boxes {
            assert!(!b.is_empty());
            for x in elements(b) {
                assert!(contains(&sb, &x), "sender {} holds {:?}", t.src, x);
                assert!(contains(&db, &x), "receiver {} needs {:?}", t.dst, x);
                got.entry((t.dst, x)).or_default().push(if sum {
                    partial_id(from, t.src)
                } else {
                    vec![]
                });
            }
        }
    }
    let mut sent = BTreeMap::new();
    let mut recv = BTreeMap::new();
    for d in 0..to.grid.size().min(procs) {
        let db = to.block(d, shape).unwrap();
        if db.is_empty() {
            continue;
        }
        for x in elements(&db) {
            let mut ids = got.remove(&(d, x.clone())).unwrap_or_default();
            assert_eq!(ids.len(), partials, "rank {d} element {x:?}: contributions");
            ids.sort();
            ids.dedup();
            assert_eq!(
                ids.len(),
                partials,
                "one contribution from each partial replica"
            );
            // Brute force: what d cannot take from its own source block is received.
            let own = if d < from.grid.size() {
                from.block(d, shape)
            } else {
                None
            };
            let local = own.as_ref().is_some_and(|o| contains(o, &x));
            *recv.entry(d).or_insert(0u64) += (partials - usize::from(local)) as u64;
        }
    }
    assert!(got.is_empty(), "nothing received that is not needed");
    for t in transfers.iter().filter(|t| t.src != t.dst) {
        *sent.entry(t.src).or_insert(0u64) += t.boxes.iter().map(|b| b.len()).sum::<u64>();
    }
    recv.retain(|_, w| *w > 0);
    (sent, recv)
}

/// A random distribution of a tensor with `nd` indices: a grid of up to 3 dims (sizes 1..=4),
/// each index split by up to two unused dims, some left-over dims partial when `partial`.
fn dist_strategy(nd: usize, partial: bool) -> impl Strategy<Value = Distribution> {
    (
        prop::collection::vec(1usize..=4, 0..=3),
        prop::collection::vec(0usize..8, nd * 2),
        prop::collection::vec(any::<bool>(), 3),
    )
        .prop_map(move |(sizes, picks, part)| {
            let dims: Vec<GridDim> = sizes
                .iter()
                .enumerate()
                .map(|(k, &s)| GridDim {
                    index: (b'p' + k as u8) as char,
                    size: s,
                })
                .collect();
            let g = dims.len();
            let mut used = vec![false; g];
            let mut split = vec![Vec::new(); nd];
            for v in 0..nd {
                for k in 0..2 {
                    let pick = picks[2 * v + k];
                    if g > 0 && pick < g && !used[pick] {
                        used[pick] = true;
                        split[v].push(pick);
                    }
                }
            }
            let partial_dims = if partial {
                (0..g).filter(|&k| !used[k] && part[k]).collect()
            } else {
                Vec::new()
            };
            Distribution {
                grid: Grid { dims },
                split,
                partial: partial_dims,
                window: vec![],
            }
        })
}

fn case() -> impl Strategy<Value = (Vec<usize>, Distribution, Distribution, bool, usize)> {
    (1usize..=3, any::<bool>()).prop_flat_map(|(nd, sum)| {
        (
            prop::collection::vec(1usize..=7, nd),
            dist_strategy(nd, sum),
            dist_strategy(nd, false),
            Just(sum),
            0usize..3,
            // Sometimes the target is one phase window of a phased compute.
            prop::option::of((0..nd, 1usize..=4, 0usize..4)),
        )
            .prop_map(|(shape, from, mut to, sum, extra, window)| {
                if let Some((dim, parts, part)) = window {
                    to.window.push(Window {
                        dim,
                        parts,
                        part: part % parts,
                    });
                }
                let procs = from.grid.size().max(to.grid.size()) + extra;
                (shape, from, to, sum, procs)
            })
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    #[test]
    fn schedules_are_exact_covers((shape, from, to, sum, procs) in case()) {
        let (transfers, volume) = redistribute(&shape, &from, &to, sum, procs);
        let (sent, recv) = check(&shape, &from, &to, sum, procs, &transfers);
        let recv_v: Vec<(usize, u64)> = recv.into_iter().collect();
        let sent_v: Vec<(usize, u64)> = sent.into_iter().filter(|&(_, w)| w > 0).collect();
        prop_assert_eq!(&volume.received, &recv_v);
        prop_assert_eq!(&received_words(&shape, &from, &to, sum, procs).received, &recv_v);
        prop_assert_eq!(&volume.sent, &sent_v);
        prop_assert_eq!(volume.total, recv_v.iter().map(|x| x.1).sum::<u64>());
        prop_assert_eq!(volume.max_per_rank, recv_v.iter().map(|x| x.1).max().unwrap_or(0));
    }
}

#[test]
fn gather_to_root() {
    let shape = [5, 3];
    let from = Distribution {
        grid: Grid {
            dims: vec![
                GridDim {
                    index: 'i',
                    size: 3,
                },
                GridDim {
                    index: 'j',
                    size: 2,
                },
            ],
        },
        split: vec![vec![0], vec![1]],
        partial: vec![],
        window: vec![],
    };
    let to = Distribution::on_root(2);
    let (t, v) = redistribute(&shape, &from, &to, false, 6);
    check(&shape, &from, &to, false, 6, &t);
    // Rank 0 holds rows 0..2, cols 0..2 (4 words); it receives the other 11.
    assert_eq!(v.received, vec![(0, 11)]);
    assert_eq!(v.total, 11);
}

#[test]
fn replicas_spread_the_sends() {
    // A vector replicated on 4 ranks goes to a 4-way split on 4 other ranks' worth of grid.
    let shape = [8];
    let from = Distribution {
        grid: Grid {
            dims: vec![GridDim {
                index: 'r',
                size: 4,
            }],
        },
        split: vec![vec![]],
        partial: vec![],
        window: vec![],
    };
    let to = Distribution {
        grid: Grid {
            dims: vec![GridDim {
                index: 'x',
                size: 8,
            }],
        },
        split: vec![vec![0]],
        partial: vec![],
        window: vec![],
    };
    let (t, v) = redistribute(&shape, &from, &to, false, 8);
    check(&shape, &from, &to, false, 8, &t);
    // Ranks 4..8 receive one word each, from 4 different replicas.
    assert_eq!(v.received, vec![(4, 1), (5, 1), (6, 1), (7, 1)]);
    assert_eq!(v.sent.len(), 4);
    assert_eq!(v.max_sent(), 1);
}
