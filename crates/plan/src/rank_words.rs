//! Per-rank words of a move, swept once per planning choice: [`RankWords`] holds each rank's
//! `(sent, received)` compactly (a palette of the distinct pairs and one small index per
//! rank), and [`MoveMemo`] keeps them by move, so the candidate trees of one choice (and the
//! scoring, the emission and the memory model of each) that meet the same move share one
//! O(P) sweep instead of repeating it: at a million ranks the sweeps are the planning time.

use crate::fasthash::FastMap;
use crate::moves::{BlockKey, MoveView, WordSink};
use crate::Distribution;
use std::ops::Range;
use std::sync::{Arc, Mutex};

/// Ranks one task sweeps when a move's ranks are swept on all cores (a sweep of a million
/// ranks is split so that the last tree planned does not finish on one core alone).
const CHUNK: usize = 1 << 16;

/// `sweep` over `0..n` in chunks of [`CHUNK`] ranks on the process's pool, each chunk's words
/// gathered into its own [`Builder`] (a palette and a small index per rank, never 16 bytes a
/// rank), in rank order.
fn swept(
    n: usize,
    has_sent: bool,
    sweep: impl Fn(Range<usize>, &mut Builder) + Sync,
) -> Vec<Builder> {
    let chunks: Vec<Range<usize>> = (0..n)
        .step_by(CHUNK)
        .map(|lo| lo..(lo + CHUNK).min(n))
        .collect();
    // One chunk (up to CHUNK ranks) is swept on the calling thread: no pool for it.
    deinsum_runtime::map_in_order(&chunks, chunks.len() > 1, |r| {
        let mut b = Builder::new(has_sent, r.len());
        sweep(r.clone(), &mut b);
        b
    })
}

/// The palette index of each rank, in the narrowest integer the palette's size allows.
#[derive(Debug)]
enum PaletteIndex {
    U8(Vec<u8>),
    U16(Vec<u16>),
    U32(Vec<u32>),
}

impl PaletteIndex {
    fn push(&mut self, i: usize) {
        match self {
            PaletteIndex::U8(v) if i <= u8::MAX as usize => v.push(i as u8),
            PaletteIndex::U16(v) if i <= u16::MAX as usize => v.push(i as u16),
            PaletteIndex::U32(v) => v.push(i as u32),
            PaletteIndex::U8(v) => {
                *self = PaletteIndex::U16(v.iter().map(|&x| x as u16).collect());
                self.push(i);
            }
            PaletteIndex::U16(v) => {
                *self = PaletteIndex::U32(v.iter().map(|&x| x as u32).collect());
                self.push(i);
            }
        }
    }

    /// Appends position `i` for `n` ranks.
    fn push_n(&mut self, i: usize, n: usize) {
        self.push(i);
        match self {
            PaletteIndex::U8(v) => v.resize(v.len() + n - 1, i as u8),
            PaletteIndex::U16(v) => v.resize(v.len() + n - 1, i as u16),
            PaletteIndex::U32(v) => v.resize(v.len() + n - 1, i as u32),
        }
    }

    /// Calls `f` with each rank's palette position in order.
    fn for_each(&self, f: impl FnMut(usize)) {
        match self {
            PaletteIndex::U8(v) => v.iter().map(|&i| i as usize).for_each(f),
            PaletteIndex::U16(v) => v.iter().map(|&i| i as usize).for_each(f),
            PaletteIndex::U32(v) => v.iter().map(|&i| i as usize).for_each(f),
        }
    }

    /// Appends the positions `pos` (none above `max`).
    fn extend(&mut self, pos: &[u32], max: u32) {
        match self {
            PaletteIndex::U8(v) if max <= u8::MAX as u32 => v.extend(pos.iter().map(|&i| i as u8)),
            PaletteIndex::U16(v) if max <= u16::MAX as u32 => {
                v.extend(pos.iter().map(|&i| i as u16))
            }
            PaletteIndex::U32(v) => v.extend_from_slice(pos),
            _ => pos.iter().for_each(|&i| self.push(i as usize)),
        }
    }

    /// The positions from rank `start` on.
    fn tail(&self, start: usize) -> Vec<u32> {
        match self {
            PaletteIndex::U8(v) => v[start..].iter().map(|&i| i as u32).collect(),
            PaletteIndex::U16(v) => v[start..].iter().map(|&i| i as u32).collect(),
            PaletteIndex::U32(v) => v[start..].to_vec(),
        }
    }

    fn len(&self) -> usize {
        match self {
            PaletteIndex::U8(v) => v.len(),
            PaletteIndex::U16(v) => v.len(),
            PaletteIndex::U32(v) => v.len(),
        }
    }

    fn bytes(&self) -> usize {
        match self {
            PaletteIndex::U8(v) => v.len(),
            PaletteIndex::U16(v) => 2 * v.len(),
            PaletteIndex::U32(v) => 4 * v.len(),
        }
    }
}

/// Words sent and received by each rank of `0..len` in one move (ranks past `len` move
/// nothing), with the received maximum and total.
#[derive(Debug)]
pub(crate) struct RankWords {
    /// The distinct `(sent, received)` pairs.
    palette: Vec<(u64, u64)>,
    index: PaletteIndex,
    /// Whether `sent` was counted (a scoring sweep counts only what is received: sent is 0).
    has_sent: bool,
    /// Largest words received by one rank.
    pub(crate) max_received: u64,
    /// Largest words sent by one rank (0 unless sent was counted).
    pub(crate) max_sent: u64,
    /// Words received over all ranks.
    pub(crate) total_received: u64,
}

/// Palette length up to which [`Builder`] finds a pair by scanning the palette.
const SHORT_PALETTE: usize = 16;

/// Most distinct blocks one [`Builder`] keeps for replay.
const MAX_BLOCKS: usize = 1 << 10;

/// A block of ranks a [`Builder`] took once: its palette positions, the largest of them,
/// and its maxima (sent, received) and total received.
struct Recorded {
    pos: Vec<u32>,
    top: u32,
    max: (u64, u64),
    total: u64,
}

/// Builds a [`RankWords`] rank by rank.
struct Builder {
    words: RankWords,
    /// Palette position of each pair (beyond the last one, which is checked first).
    pos: FastMap<(u64, u64), usize>,
    last: Option<((u64, u64), usize)>,
    /// The blocks taken so far by key, replayed when a sweep meets the key again.
    blocks: FastMap<BlockKey, Recorded>,
    /// The key of the block being taken and the rank it starts at.
    recording: Option<(BlockKey, usize)>,
}

impl WordSink for Builder {
    fn run(&mut self, n: usize, sent: u64, received: u64) {
        self.push_run((sent, received), n)
    }

    fn begin_block(&mut self, key: &BlockKey) -> bool {
        if let Some(b) = self.blocks.get(key) {
            let w = &mut self.words;
            w.index.extend(&b.pos, b.top);
            w.max_sent = w.max_sent.max(b.max.0);
            w.max_received = w.max_received.max(b.max.1);
            w.total_received += b.total;
            return true;
        }
        if self.blocks.len() < MAX_BLOCKS {
            self.recording = Some((key.clone(), self.words.index.len()));
        }
        false
    }

    fn end_block(&mut self) {
        let Some((key, start)) = self.recording.take() else {
            return;
        };
        let pos = self.words.index.tail(start);
        let p = &self.words.palette;
        let mut b = Recorded {
            top: pos.iter().copied().max().unwrap_or(0),
            max: (0, 0),
            total: 0,
            pos: Vec::new(),
        };
        for &i in &pos {
            let (s, w) = p[i as usize];
            b.max = (b.max.0.max(s), b.max.1.max(w));
            b.total += w;
        }
        b.pos = pos;
        self.blocks.insert(key, b);
    }
}

impl Builder {
    fn new(has_sent: bool, ranks: usize) -> Builder {
        Builder {
            words: RankWords {
                palette: Vec::new(),
                index: PaletteIndex::U8(Vec::with_capacity(ranks)),
                has_sent,
                max_received: 0,
                max_sent: 0,
                total_received: 0,
            },
            pos: FastMap::default(),
            last: None,
            blocks: FastMap::default(),
            recording: None,
        }
    }

    /// Appends the words of the next `n` ranks (each moves `pair`).
    fn push_run(&mut self, pair: (u64, u64), n: usize) {
        if n == 0 {
            return;
        }
        let w = &mut self.words;
        w.max_sent = w.max_sent.max(pair.0);
        w.max_received = w.max_received.max(pair.1);
        w.total_received += pair.1 * n as u64;
        let i = match self.last {
            Some((p, i)) if p == pair => i,
            _ => {
                let i = self.slot(pair);
                self.last = Some((pair, i));
                i
            }
        };
        self.words.index.push_n(i, n);
    }

    /// `pair`'s palette position, appended to the palette when new.
    fn slot(&mut self, pair: (u64, u64)) -> usize {
        let w = &mut self.words;
        let next = w.palette.len();
        // A short palette is searched in place (cheaper than hashing the pair); `pos` still
        // files every pair, for when the palette grows past it.
        let i = match next <= SHORT_PALETTE {
            true => w.palette.iter().position(|&p| p == pair).unwrap_or(next),
            false => *self.pos.entry(pair).or_insert(next),
        };
        if i == next {
            w.palette.push(pair);
            if next <= SHORT_PALETTE {
                self.pos.insert(pair, next);
            }
        }
        i
    }

    /// Appends the ranks of `next` (the chunk after this builder's ranks): its palette merged
    /// into this one in first-use order (the palette a single sweep would have built).
    fn append(&mut self, next: Builder) {
        let n = next.words;
        let map: Vec<usize> = n.palette.iter().map(|&pair| self.slot(pair)).collect();
        let w = &mut self.words;
        w.max_sent = w.max_sent.max(n.max_sent);
        w.max_received = w.max_received.max(n.max_received);
        w.total_received += n.total_received;
        match (&mut w.index, &n.index) {
            // The chunk's palette is a prefix of this one in the same order (the usual case):
            // its index is copied as it is.
            (PaletteIndex::U8(a), PaletteIndex::U8(b))
                if map.iter().enumerate().all(|(i, &m)| i == m) =>
            {
                a.extend_from_slice(b)
            }
            _ => n.index.for_each(|i| w.index.push(map[i])),
        }
        self.last = None;
    }
}

impl RankWords {
    /// The received words of every rank of `view`'s target grid (sent not counted).
    pub(crate) fn received_of(view: &MoveView) -> RankWords {
        let n = view.dst_ranks();
        let parts = swept(n, false, |r, b| {
            view.received_by_runs(r, |n, w| b.push_run((0, w), n))
        });
        Self::joined(parts, false, n)
    }

    /// The sent and received words of every rank that takes part in `view`.
    pub(crate) fn words_of(view: &MoveView) -> RankWords {
        let n = view.ranks();
        let parts = swept(n, true, |r, b| view.words_into(r, b));
        Self::joined(parts, true, n)
    }

    /// The chunks' builders joined in rank order.
    fn joined(parts: Vec<Builder>, has_sent: bool, n: usize) -> RankWords {
        let mut parts = parts.into_iter();
        let Some(mut b) = parts.next() else {
            return Builder::new(has_sent, 0).words;
        };
        if let PaletteIndex::U8(v) = &mut b.words.index {
            v.reserve(n.saturating_sub(v.len()));
        }
        parts.for_each(|p| b.append(p));
        b.words
    }

    /// Ranks counted (every rank past them moves nothing).
    pub(crate) fn len(&self) -> usize {
        self.index.len()
    }

    /// Calls `f(rank, sent, received)` for each counted rank in order.
    pub(crate) fn for_each(&self, mut f: impl FnMut(usize, u64, u64)) {
        let p = &self.palette;
        match &self.index {
            PaletteIndex::U8(v) => v.iter().enumerate().for_each(|(r, &i)| {
                let (s, w) = p[i as usize];
                f(r, s, w)
            }),
            PaletteIndex::U16(v) => v.iter().enumerate().for_each(|(r, &i)| {
                let (s, w) = p[i as usize];
                f(r, s, w)
            }),
            PaletteIndex::U32(v) => v.iter().enumerate().for_each(|(r, &i)| {
                let (s, w) = p[i as usize];
                f(r, s, w)
            }),
        }
    }

    /// Calls `f(rank, sent, received)` for each counted rank of `ranks` in order.
    pub(crate) fn for_each_in(&self, ranks: Range<usize>, mut f: impl FnMut(usize, u64, u64)) {
        let n = self.len();
        let r = ranks.start.min(n)..ranks.end.min(n);
        let (lo, p) = (r.start, &self.palette);
        match &self.index {
            PaletteIndex::U8(v) => v[r].iter().enumerate().for_each(|(k, &i)| {
                let (s, w) = p[i as usize];
                f(lo + k, s, w)
            }),
            PaletteIndex::U16(v) => v[r].iter().enumerate().for_each(|(k, &i)| {
                let (s, w) = p[i as usize];
                f(lo + k, s, w)
            }),
            PaletteIndex::U32(v) => v[r].iter().enumerate().for_each(|(k, &i)| {
                let (s, w) = p[i as usize];
                f(lo + k, s, w)
            }),
        }
    }

    /// Words `rank` sends plus receives (0 past the counted ranks).
    pub(crate) fn buffer_of(&self, rank: usize) -> u64 {
        let i = match &self.index {
            PaletteIndex::U8(v) => v.get(rank).map(|&i| i as usize),
            PaletteIndex::U16(v) => v.get(rank).map(|&i| i as usize),
            PaletteIndex::U32(v) => v.get(rank).map(|&i| i as usize),
        };
        i.map_or(0, |i| self.palette[i].0 + self.palette[i].1)
    }

    /// The largest words sent plus received by one rank of `ranks` (0 for none counted).
    pub(crate) fn max_buffer_in(&self, ranks: Range<usize>) -> u64 {
        let n = self.len();
        let r = ranks.start.min(n)..ranks.end.min(n);
        let p = &self.palette;
        let words = |i: usize| p[i].0 + p[i].1;
        match &self.index {
            PaletteIndex::U8(v) => v[r].iter().map(|&i| words(i as usize)).max(),
            PaletteIndex::U16(v) => v[r].iter().map(|&i| words(i as usize)).max(),
            PaletteIndex::U32(v) => v[r].iter().map(|&i| words(i as usize)).max(),
        }
        .unwrap_or(0)
    }

    /// Adds each rank's received words into the dense per-rank `acc` (grown as needed).
    pub(crate) fn add_received_to(&self, acc: &mut Vec<u64>) {
        if acc.len() < self.len() {
            acc.resize(self.len(), 0);
        }
        self.for_each(|r, _, w| acc[r] += w);
    }

    fn bytes(&self) -> usize {
        self.index.bytes() + 16 * self.palette.len()
    }
}

/// What identifies a move's per-rank words: the tensor's shape, both distributions, whether
/// partial sums are reduced, and the ranks of the two grids within P.
type MoveKey = (Vec<usize>, Distribution, Distribution, bool, usize, usize);

/// Most bytes of per-rank words one [`MoveMemo`] keeps; moves past it are swept each time.
const MEMO_BYTES: usize = 96 << 20;

/// The per-rank words of the moves met while planning one choice (shared by its trees,
/// which are planned on several threads): a move's words are a function of the move alone,
/// so a second use takes them from here.
#[derive(Default)]
pub(crate) struct MoveMemo {
    entries: Mutex<(FastMap<MoveKey, Arc<RankWords>>, usize)>,
    /// Per-rank buffers [`Self::max_of_sum`] reuses (a fresh one each scoring paid its
    /// zeroed pages again); dropped with the memo, when the choice is planned.
    sums: Mutex<Vec<Vec<u64>>>,
}

impl MoveMemo {
    /// The largest per-rank sum of `words` (each rank's received words added over the moves
    /// of one candidate): one move's own maximum, else added up in a kept buffer.
    pub(crate) fn max_of_sum(&self, words: &[Arc<RankWords>]) -> u64 {
        if let [one] = words {
            return one.max_received;
        }
        let lock = || self.sums.lock().unwrap_or_else(|p| p.into_inner());
        let mut acc = lock().pop().unwrap_or_default();
        acc.clear();
        words.iter().for_each(|w| w.add_received_to(&mut acc));
        let max = acc.iter().copied().max().unwrap_or(0);
        lock().push(acc);
        max
    }

    /// `view`'s received words per rank (with or without its sent words: they are counted
    /// too when they cost little beside the sweep, so that emitting the move later finds them).
    pub(crate) fn received(&self, view: &MoveView) -> Arc<RankWords> {
        self.get(view, false).unwrap_or_else(|| {
            let words = match view.sends_in_closed_form() {
                true => RankWords::words_of(view),
                false => RankWords::received_of(view),
            };
            self.put(view, words)
        })
    }

    /// `view`'s sent and received words per rank.
    pub(crate) fn words(&self, view: &MoveView) -> Arc<RankWords> {
        self.get(view, true)
            .unwrap_or_else(|| self.put(view, RankWords::words_of(view)))
    }

    fn get(&self, view: &MoveView, sent: bool) -> Option<Arc<RankWords>> {
        let e = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        e.0.get(&view.key())
            .filter(|w| w.has_sent || !sent)
            .cloned()
    }

    /// Keeps `words` (replacing a received-only entry) unless the memo is full.
    fn put(&self, view: &MoveView, words: RankWords) -> Arc<RankWords> {
        let words = Arc::new(words);
        let mut e = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        let key = view.key();
        if let Some(kept) = e.0.get(&key).filter(|w| w.has_sent || !words.has_sent) {
            return kept.clone();
        }
        let old = e.0.get(&key).map_or(0, |w| w.bytes());
        if e.1 - old + words.bytes() <= MEMO_BYTES {
            e.1 = e.1 - old + words.bytes();
            e.0.insert(key, words.clone());
        }
        words
    }
}

impl MoveView {
    /// The key of this move in a [`MoveMemo`].
    fn key(&self) -> MoveKey {
        let (shape, from, to, sum, src, dst) = self.identity();
        (shape.to_vec(), from.clone(), to.clone(), sum, src, dst)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Chunks joined in order give the palette, index and figures of one builder fed every
    /// rank (the palette in first-use order, past the short palette and past a u8 index).
    #[test]
    fn joined_chunks_equal_one_sweep() {
        let pair = |r: usize| -> (u64, u64) {
            let k = (r * 7919 + r / 13) % (r / 50 + 3);
            (k as u64 % 5, k as u64)
        };
        for n in [0, 1, 40, 700, 20_000] {
            let mut one = Builder::new(true, n);
            (0..n).for_each(|r| one.push_run(pair(r), 1));
            let parts: Vec<Builder> = (0..n)
                .step_by(333)
                .map(|lo| {
                    let mut b = Builder::new(true, 333);
                    (lo..(lo + 333).min(n)).for_each(|r| b.push_run(pair(r), 1));
                    b
                })
                .collect();
            let (a, b) = (one.words, RankWords::joined(parts, true, n));
            assert_eq!(a.palette, b.palette);
            assert_eq!(a.bytes(), b.bytes());
            assert_eq!(
                (a.max_sent, a.max_received, a.total_received),
                (b.max_sent, b.max_received, b.total_received)
            );
            let (mut x, mut y) = (Vec::new(), Vec::new());
            a.for_each(|r, s, w| x.push((r, s, w)));
            b.for_each(|r, s, w| y.push((r, s, w)));
            assert_eq!(x, y);
            assert_eq!(y.len(), n);
        }
    }
}
