//! Derived transfers against a brute-force cover check and the old explicit scheduler.

#[path = "oracle.rs"]
mod oracle;

use super::MoveView;
use crate::{Block, Distribution, Grid, GridDim, Transfer, Window};
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

/// Words received per rank by a list of transfers (self-transfers excluded).
fn received(transfers: &[Transfer]) -> BTreeMap<usize, u64> {
    let mut m = BTreeMap::new();
    for t in transfers.iter().filter(|t| t.src != t.dst) {
        *m.entry(t.dst).or_insert(0) += t.boxes.iter().map(Block::len).sum::<u64>();
    }
    m
}

/// Checks that `transfers` (over all ranks) cover every target element exactly once per
/// partial replica, from senders that hold it.
fn check_cover(
    shape: &[usize],
    from: &Distribution,
    to: &Distribution,
    sum: bool,
    procs: usize,
    transfers: &[Transfer],
) {
    let partials: usize = if sum {
        from.partial
            .iter()
            .map(|&g| from.grid.dims[g].size)
            .product()
    } else {
        1
    };
    let mut got: BTreeMap<(usize, Vec<usize>), Vec<Vec<usize>>> = BTreeMap::new();
    for t in transfers {
        assert!(t.src < procs && t.dst < procs);
        let sb = from.block(t.src, shape).expect("sender in the source grid");
        let db = to.block(t.dst, shape).expect("receiver in the target grid");
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
            assert_eq!(ids.len(), partials, "one contribution per partial replica");
        }
    }
    assert!(got.is_empty(), "nothing received that is not needed");
}

/// A random distribution of a tensor with `nd` indices: a grid of up to 3 dims (sizes 1..=4),
/// each index split by up to two unused dims, some left-over dims partial when `partial`,
/// in balanced or ceil-sized blocks.
fn dist_strategy(nd: usize, partial: bool) -> impl Strategy<Value = Distribution> {
    (
        prop::collection::vec(1usize..=4, 0..=3),
        prop::collection::vec(0usize..8, nd * 2),
        prop::collection::vec(any::<bool>(), 3),
        any::<bool>(),
    )
        .prop_map(move |(sizes, picks, part, balanced)| {
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
                balanced,
            }
        })
}

type Case = (Vec<usize>, Distribution, Distribution, bool, usize);

fn case() -> impl Strategy<Value = Case> {
    (1usize..=3, any::<bool>()).prop_flat_map(|(nd, sum)| {
        (
            prop::collection::vec(1usize..=7, nd),
            dist_strategy(nd, sum),
            dist_strategy(nd, false),
            Just(sum),
            0usize..3,
            // Sometimes the target is one phase window of a phased compute.
            prop::option::of((0..nd, 1usize..=4, 0usize..4)),
            any::<bool>(),
        )
            .prop_map(|(shape, from, mut to, sum, extra, window, same)| {
                // Often a same-grid move (the structured kinds), else a grid change.
                if same && !sum {
                    to.grid = from.grid.clone();
                    to.split = from
                        .split
                        .iter()
                        .map(|s| s[..s.len().min(1)].to_vec())
                        .collect();
                }
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
    fn derived_transfers_are_exact_covers((shape, from, to, sum, procs) in case()) {
        let view = MoveView::new(&shape, &from, &to, sum, procs);
        let all: Vec<Transfer> = (0..procs).flat_map(|d| view.receives(d)).collect();
        check_cover(&shape, &from, &to, sum, procs, &all);
        // Sender and receiver views agree, pair by pair.
        let mut sent_all: Vec<Transfer> = (0..procs).flat_map(|s| view.sends(s)).collect();
        let mut recv_all = all.clone();
        let key = |t: &Transfer| (t.src, t.dst);
        sent_all.sort_by_key(key);
        recv_all.sort_by_key(key);
        prop_assert_eq!(&sent_all, &recv_all);
        // transfers_of(rank) is exactly the rank's part of the whole list.
        for r in 0..procs {
            let mut mine = view.transfers_of(r);
            mine.sort_by_key(key);
            let want: Vec<Transfer> =
                recv_all.iter().filter(|t| t.src == r || t.dst == r).cloned().collect();
            prop_assert_eq!(mine, want);
        }
        // Closed-form volumes equal the derived transfers' counts.
        let recv = received(&all);
        let vol = view.volume(true);
        prop_assert_eq!(&vol.received, &recv.iter().map(|(&r, &w)| (r, w)).collect::<Vec<_>>());
        let mut sent: BTreeMap<usize, u64> = BTreeMap::new();
        for t in all.iter().filter(|t| t.src != t.dst) {
            *sent.entry(t.src).or_insert(0) += t.boxes.iter().map(Block::len).sum::<u64>();
        }
        prop_assert_eq!(&vol.sent, &sent.iter().map(|(&r, &w)| (r, w)).collect::<Vec<_>>());
        prop_assert_eq!(vol.total, recv.values().sum::<u64>());
        prop_assert_eq!(vol.max_sent, sent.values().copied().max().unwrap_or(0));
        // No rank receives more than under the old explicit schedule (P <= 64 here).
        let old = received(&oracle::redistribute(&shape, &from, &to, sum, procs));
        for r in 0..procs {
            let new_w = recv.get(&r).copied().unwrap_or(0);
            prop_assert!(new_w <= old.get(&r).copied().unwrap_or(0), "rank {} receives {}", r, new_w);
        }
    }
}

#[test]
fn replicas_spread_the_sends() {
    // A vector replicated on 4 ranks goes to an 8-way split: ranks 4..8 receive one word each,
    // from 4 different replicas.
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
        balanced: false,
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
        balanced: false,
    };
    let v = MoveView::new(&[8], &from, &to, false, 8).volume(true);
    assert_eq!(v.received, vec![(4, 1), (5, 1), (6, 1), (7, 1)]);
    assert_eq!(v.sent.len(), 4);
    assert_eq!(v.max_sent, 1);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    /// The sweeps by runs and by table offsets give every rank of any part of the ranks the
    /// words the rank-by-rank sweep gives (and its received words alone, the same).
    #[test]
    fn run_and_tabled_sweeps_equal_the_rank_sweep(
        (shape, from, to, sum, procs) in case(),
        cut in 0usize..64,
    ) {
        let view = MoveView::new(&shape, &from, &to, sum, procs);
        let n = view.ranks();
        let lo = cut % (n + 1);
        let mut want = Vec::new();
        view.words_in(lo..n, |_, s, w| want.push((s, w)));
        let mut got = Vec::new();
        view.words_by_runs(lo..n, |len, s, w| got.extend(std::iter::repeat_n((s, w), len)));
        prop_assert_eq!(&got, &want);
        let d = view.dst_ranks();
        let lo = lo.min(d);
        let mut want = Vec::new();
        view.received_in(lo..d, |w| want.push(w));
        let mut got = Vec::new();
        view.received_by_runs(lo..d, |len, w| got.extend(std::iter::repeat_n(w, len)));
        prop_assert_eq!(&got, &want);
    }
}

/// A sink that replays whole blocks by key (as the per-rank words' builder does), flat.
#[derive(Default)]
struct Replay {
    out: Vec<(u64, u64)>,
    seen: std::collections::HashMap<super::BlockKey, Vec<(u64, u64)>>,
    taking: Option<(super::BlockKey, usize)>,
}

impl super::WordSink for Replay {
    fn run(&mut self, n: usize, sent: u64, received: u64) {
        self.out.extend(std::iter::repeat_n((sent, received), n));
    }
    fn begin_block(&mut self, key: &super::BlockKey) -> bool {
        if let Some(b) = self.seen.get(key) {
            self.out.extend_from_slice(b);
            return true;
        }
        self.taking = Some((key.clone(), self.out.len()));
        false
    }
    fn end_block(&mut self) {
        let (key, start) = self.taking.take().expect("a block begun");
        self.seen.insert(key, self.out[start..].to_vec());
    }
}

/// Distributions on grids that often share a suffix of dims (so that blocks apply): sizes
/// include primes, extents that no grid divides, dims of size 1, unsplit (replica) target
/// dims and indices split by two dims.
fn block_case(seed: u64) -> (Vec<usize>, Distribution, Distribution, usize) {
    let mut s = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    let mut next = |n: usize| {
        s = s
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((s >> 33) % n as u64) as usize
    };
    let nd = 1 + next(3);
    let extents = [1, 5, 7, 12, 13, 31, 64];
    let shape: Vec<usize> = (0..nd).map(|_| extents[next(extents.len())]).collect();
    let sizes = [1, 2, 3, 4, 5, 7, 8, 9];
    let common: Vec<usize> = (0..next(3)).map(|_| sizes[next(sizes.len())]).collect();
    let grid = |replicas: bool, next: &mut dyn FnMut(usize) -> usize| {
        let mut dims: Vec<usize> = (0..next(3)).map(|_| sizes[next(sizes.len())]).collect();
        dims.extend(&common);
        let mut split = vec![Vec::new(); nd];
        for g in 0..dims.len() {
            // Without replicas every dim splits an index (one holder per piece).
            if replicas && next(3) == 0 {
                continue;
            }
            split[next(nd)].push(g);
        }
        Distribution {
            grid: Grid {
                dims: dims
                    .iter()
                    .enumerate()
                    .map(|(k, &size)| GridDim {
                        index: (b'p' + k as u8) as char,
                        size,
                    })
                    .collect(),
            },
            split,
            partial: vec![],
            window: vec![],
            balanced: next(2) == 0,
        }
    };
    let from = grid(false, &mut next);
    let to = grid(true, &mut next);
    let procs = from.grid.size().max(to.grid.size()) + next(3);
    (shape, from, to, procs)
}

/// The sweep per class of coordinates gives every rank of any part of the ranks the words of
/// the rank-by-rank sweep, whether or not the sink replays blocks, and the per-rank words
/// built from it (palette, maxima, total) are those of the rank sweep.
#[test]
fn block_sweeps_equal_the_rank_sweep() {
    let mut used = 0;
    for seed in 0..3000 {
        let (shape, from, to, procs) = block_case(seed);
        let view = MoveView::new(&shape, &from, &to, false, procs);
        let n = view.ranks();
        let mut want = Vec::new();
        view.words_in(0..n, |_, s, w| want.push((s, w)));
        let blocked = view.one_holder
            && view
                .kernel
                .get_or_init(|| super::Kernel::new(&view))
                .as_ref()
                .is_some_and(|k| k.blocks.is_some());
        used += blocked as usize;
        for lo in [0, n / 3, n.saturating_sub(1)] {
            let mut sink = Replay::default();
            view.words_into(lo..n, &mut sink);
            assert_eq!(sink.out, want[lo..], "seed {seed} from rank {lo}");
        }
        let words = crate::rank_words::RankWords::words_of(&view);
        let mut got = Vec::new();
        words.for_each(|_, s, w| got.push((s, w)));
        assert_eq!(got, want, "seed {seed}");
        let recv = want.iter().map(|p| p.1);
        assert_eq!(words.max_received, recv.clone().max().unwrap_or(0));
        assert_eq!(words.total_received, recv.sum::<u64>());
        assert_eq!(words.max_sent, want.iter().map(|p| p.0).max().unwrap_or(0));
    }
    assert!(used > 300, "blocks used in {used} of 3000 cases");
}
