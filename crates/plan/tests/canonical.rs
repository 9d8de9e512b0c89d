//! The canonical input distribution: balanced blocks on every rank of its grid, the grid as
//! large as the size allows (`P' = min(P, ceil(size / MIN_CANONICAL_BLOCK))`), and the blocks an
//! exact cover of the tensor.

use deinsum_plan::{
    balanced_range, block_range, canonical_distribution, split_range, Distribution,
    MIN_CANONICAL_BLOCK,
};
use proptest::prelude::*;

/// The ranks the canonical distribution of `shape` may use on `procs` ranks.
fn target(shape: &[usize], procs: usize) -> usize {
    let size: u64 = shape.iter().map(|&n| n as u64).product();
    procs
        .min(size.div_ceil(MIN_CANONICAL_BLOCK) as usize)
        .max(1)
}

fn indices(nd: usize) -> Vec<char> {
    "abcdef".chars().take(nd).collect()
}

/// Random shapes of 1 to 4 indices (at most 30 000 elements) and P in 1..=64.
fn shape_and_procs() -> impl Strategy<Value = (Vec<usize>, usize)> {
    (1usize..=4)
        .prop_flat_map(|nd| {
            let most = [0, 200, 150, 30, 12][nd];
            (prop::collection::vec(1usize..=most, nd), 1usize..=64)
        })
        .prop_filter("small enough to check element by element", |(s, _)| {
            s.iter().product::<usize>() <= 30_000
        })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn canonical_blocks_fill_their_grid_and_cover_the_tensor((shape, procs) in shape_and_procs()) {
        let d = canonical_distribution(&indices(shape.len()), &shape, procs);
        let want = target(&shape, procs);
        let used = d.grid.size();
        // As many ranks as any grid with p_k <= n_k can use within P' (exactly P' when the
        // first index alone can take them), and at least the C-order split's (more than P'/2).
        prop_assert!(used <= want && 2 * used > want, "{used} ranks of {want}");
        prop_assert_eq!(used, most_ranks(&shape, want), "{:?} on {}", shape, want);
        if shape[0] >= want {
            prop_assert_eq!(used, want);
        }
        // Every rank of the grid holds data; the others hold nothing.
        let size: usize = shape.iter().product();
        let mut seen = vec![0u8; size];
        for r in 0..procs {
            match d.block(r, &shape) {
                None => prop_assert!(r >= used),
                Some(b) => {
                    prop_assert!(r < used);
                    prop_assert!(!b.is_empty(), "rank {} of {} holds nothing", r, used);
                    mark(&b.ranges, &shape, &mut seen);
                }
            }
        }
        // Exact cover: every element on exactly one rank.
        prop_assert!(seen.iter().all(|&c| c == 1));
        // Balanced: along each index the blocks are ceil(n/p) or floor(n/p), the longer first,
        // and the flag is set exactly when that differs from ceil-sized blocks.
        for (k, &n) in shape.iter().enumerate() {
            let p = d.grid.dims[k].size;
            let lens: Vec<usize> = (0..p).map(|x| { let (s, e) = d.cut((0, n), k, x); e - s }).collect();
            let long = n % p;
            prop_assert!(lens.iter().enumerate().all(|(x, &l)| l == n / p + usize::from(x < long)));
        }
        prop_assert_eq!(d.balanced, shape.iter().zip(&d.grid.dims).any(|(&n, g)| n % g.size != 0));
    }

    #[test]
    fn balanced_ranges_are_contiguous_and_within_one(n in 0usize..300, parts in 1usize..70, lo in 0usize..50) {
        let mut at = lo;
        for x in 0..parts {
            let (s, e) = balanced_range(lo, lo + n, parts, x);
            prop_assert_eq!(s, at);
            prop_assert!(e - s == n / parts || e - s == n.div_ceil(parts));
            prop_assert!(x >= n % parts || e - s == n.div_ceil(parts));
            at = e;
        }
        prop_assert_eq!(at, lo + n);
        prop_assert_eq!(balanced_range(lo, lo + n, parts, parts), (lo + n, lo + n));
        // Where parts divide n both blockings agree.
        if n % parts == 0 {
            for x in 0..parts {
                prop_assert_eq!(split_range(true, lo, lo + n, parts, x), block_range(lo, lo + n, parts, x));
            }
        }
    }
}

/// The most ranks a grid with `p_k <= n_k` over `shape` uses within `most`, by brute force.
fn most_ranks(shape: &[usize], most: usize) -> usize {
    match shape.split_first() {
        None => 1,
        Some((&n, rest)) => (1..=n.min(most))
            .map(|p| p * most_ranks(rest, most / p))
            .max()
            .unwrap_or(1),
    }
}

/// Counts every element of the box `ranges` of a row-major tensor of `shape` in `seen`.
fn mark(ranges: &[(usize, usize)], shape: &[usize], seen: &mut [u8]) {
    let mut idx: Vec<usize> = ranges.iter().map(|r| r.0).collect();
    loop {
        let flat = idx.iter().zip(shape).fold(0, |a, (&i, &n)| a * n + i);
        seen[flat] += 1;
        let mut k = idx.len();
        loop {
            if k == 0 {
                return;
            }
            k -= 1;
            idx[k] += 1;
            if idx[k] < ranges[k].1 {
                break;
            }
            idx[k] = ranges[k].0;
        }
    }
}

#[test]
fn ten_rows_over_eight_ranks() {
    // 10 x 64: 640 words allow 8 ranks; ceil blocks of 2 rows would fill only 5.
    let d = canonical_distribution(&['i', 'j'], &[10, 64], 8);
    assert_eq!(d.grid.size(), 8);
    assert!(d.balanced);
    let rows: Vec<(usize, usize)> = (0..8)
        .map(|r| d.block(r, &[10, 64]).unwrap().ranges[0])
        .collect();
    assert_eq!(
        rows,
        [
            (0, 2),
            (2, 4),
            (4, 5),
            (5, 6),
            (6, 7),
            (7, 8),
            (8, 9),
            (9, 10)
        ]
    );
    // 10 x 10: 100 words allow 8 ranks (no block under 8 words on average): rows 2,2,1,...
    assert_eq!(
        canonical_distribution(&['i', 'j'], &[10, 10], 8)
            .grid
            .size(),
        8
    );
    // 3 x 100 on 8 ranks: the C-order split (3 x 2) would leave 2 ranks empty; 2 x 4 fills
    // them all.
    let d = canonical_distribution(&['i', 'j'], &[3, 100], 8);
    let sizes: Vec<usize> = d.grid.dims.iter().map(|g| g.size).collect();
    assert_eq!(sizes, [2, 4]);
}

#[test]
fn the_flag_is_written_only_when_set() {
    let even = canonical_distribution(&['i', 'j'], &[64, 64], 8);
    assert!(!even.balanced);
    let json = serde_json::to_string(&even).unwrap();
    assert!(!json.contains("balanced"), "{json}");
    let back: Distribution = serde_json::from_str(&json).unwrap();
    assert_eq!(back, even);
    let uneven = canonical_distribution(&['i', 'j'], &[10, 64], 8);
    let json = serde_json::to_string(&uneven).unwrap();
    assert!(json.contains("\"balanced\":true"), "{json}");
    let back: Distribution = serde_json::from_str(&json).unwrap();
    assert_eq!(back, uneven);
}
