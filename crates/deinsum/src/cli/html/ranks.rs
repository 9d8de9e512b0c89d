//! How a report shows P ranks when P is large: consecutive ranks grouped into at most a few
//! dozen blocks (in the grids' row-major order, so a block of ranks is a range of the outer
//! grid coordinates), and per-rank figures evaluated at every rank or at a stated sample.

/// Ranks `0..p` in blocks of `width` consecutive ranks.
#[derive(Clone, Copy, Debug)]
pub struct Buckets {
    /// Number of ranks.
    pub p: usize,
    /// Ranks per block (1: a block per rank).
    pub width: usize,
    /// Number of blocks.
    pub n: usize,
}

impl Buckets {
    /// At most `max` blocks over `p` ranks.
    pub fn new(p: usize, max: usize) -> Buckets {
        let p = p.max(1);
        let width = p.div_ceil(max.max(1)).max(1);
        Buckets {
            p,
            width,
            n: p.div_ceil(width),
        }
    }

    /// The block of rank `r`.
    pub fn of(&self, r: usize) -> usize {
        r / self.width
    }

    /// The ranks `[first, end)` of block `b`.
    pub fn range(&self, b: usize) -> (usize, usize) {
        (b * self.width, ((b + 1) * self.width).min(self.p))
    }

    /// Block `b` as a label: `7`, or `128–255`.
    pub fn label(&self, b: usize) -> String {
        let (a, e) = self.range(b);
        if e - a == 1 {
            a.to_string()
        } else {
            format!("{a}–{}", e - 1)
        }
    }

    /// Every block's label.
    pub fn labels(&self) -> Vec<String> {
        (0..self.n).map(|b| self.label(b)).collect()
    }

    /// What one bar or cell stands for, in words.
    pub fn describe(&self) -> String {
        if self.width == 1 {
            "a bar or cell per rank".into()
        } else {
            format!(
                "ranks grouped in {} blocks of {} consecutive ranks (row-major grid order: a block \
                 is a range of the outer grid coordinates)",
                self.n, self.width
            )
        }
    }
}

/// The ranks a per-rank figure is evaluated at: every rank when `p <= all_up_to`, else
/// `per_block` ranks of each block, evenly spaced, its first and last among them. The flag says
/// whether that is every rank.
pub fn sample(b: &Buckets, all_up_to: usize, per_block: usize) -> (Vec<usize>, bool) {
    if b.p <= all_up_to {
        return ((0..b.p).collect(), true);
    }
    let mut out = Vec::new();
    for k in 0..b.n {
        let (a, e) = b.range(k);
        let n = e - a;
        let m = per_block.clamp(1, n);
        for j in 0..m {
            let r = if m == 1 { a } else { a + j * (n - 1) / (m - 1) };
            if out.last() != Some(&r) {
                out.push(r);
            }
        }
    }
    (out, false)
}

/// Per block, the `(min, max)` of `f` over the evaluated `ranks` (`(0, 0)` for a block none of
/// them is in).
pub fn fold(b: &Buckets, ranks: &[usize], f: impl Fn(usize) -> f64) -> Vec<(f64, f64)> {
    let mut out = vec![(f64::INFINITY, f64::NEG_INFINITY); b.n];
    for &r in ranks {
        let v = f(r);
        let slot = &mut out[b.of(r)];
        slot.0 = slot.0.min(v);
        slot.1 = slot.1.max(v);
    }
    out.into_iter()
        .map(|(lo, hi)| if hi < lo { (0.0, 0.0) } else { (lo, hi) })
        .collect()
}

/// How the evaluated ranks were chosen, for a caption.
pub fn sample_note(b: &Buckets, all: bool, per_block: usize) -> String {
    if all {
        format!("Every rank evaluated; {}", b.describe())
    } else {
        format!(
            "{}; evaluated at {per_block} evenly spaced ranks of each block (its first and last \
             among them): bars show the largest of them, the darker part the smallest",
            capital(&b.describe())
        )
    }
}

/// `s` with its first letter in upper case.
fn capital(s: &str) -> String {
    let mut c = s.chars();
    c.next()
        .map(|f| f.to_uppercase().chain(c).collect())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_cover_the_ranks() {
        let b = Buckets::new(1_000_000, 48);
        assert_eq!(b.width, 20834);
        assert_eq!(b.n, 48);
        assert_eq!(b.range(47).1, 1_000_000);
        assert_eq!(b.of(999_999), 47);
        let small = Buckets::new(5, 48);
        assert_eq!((small.width, small.n), (1, 5));
        assert_eq!(small.label(3), "3");
        assert_eq!(Buckets::new(100, 48).label(0), "0–2");
    }

    #[test]
    fn samples_take_first_and_last_of_each_block() {
        let b = Buckets::new(1000, 10);
        let (all, every) = sample(&b, 2000, 4);
        assert!(every);
        assert_eq!(all.len(), 1000);
        let (s, every) = sample(&b, 10, 4);
        assert!(!every);
        assert_eq!(&s[..4], &[0, 33, 66, 99]);
        assert_eq!(s.len(), 40);
        let f = fold(&b, &s, |r| r as f64);
        assert_eq!(f[0], (0.0, 99.0));
    }
}
