//! Minimum vertex cover of a bipartite graph: a maximum matching by Hopcroft-Karp, then
//! König's construction (the vertices reachable from the free left vertices by alternating
//! paths, Z; the cover is the left vertices outside Z and the right vertices inside it). Its
//! size equals the matching's, which proves it minimum. The fine-grain SpMV
//! ([`crate::fine`]) covers its cross nonzeros with it: a left vertex is a pushed partial y, a
//! right vertex a fetched x entry.

/// No vertex (an unmatched end, an unreached layer).
const NONE: u32 = u32::MAX;

/// A minimum vertex cover and the maximum matching that proves it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cover {
    /// Left vertices in the cover.
    pub left: Vec<bool>,
    /// Right vertices in the cover.
    pub right: Vec<bool>,
    /// Size of the maximum matching (= the number of covered vertices).
    pub matching: usize,
}

/// The minimum vertex cover of the bipartite graph whose left vertex `u` has the right
/// neighbours `adj[ptr[u]..ptr[u + 1]]` (repeated edges allowed), with `right` right vertices.
/// O(E sqrt(V)) time, O(V) space beyond the graph; no recursion, so long alternating paths
/// cannot overflow the stack.
///
/// # Panics
/// If `ptr` is empty or not ascending, a neighbour is not below `right`, or a side has
/// 2^32 - 1 vertices or more (they are numbered in 4 bytes).
pub fn min_vertex_cover(ptr: &[usize], adj: &[u32], right: usize) -> Cover {
    let left = ptr.len() - 1;
    assert!(
        left < NONE as usize && right < NONE as usize,
        "fewer than 2^32 - 1 vertices a side"
    );
    let g = Graph { ptr, adj };
    let mut m = Matching {
        mate_l: vec![NONE; left],
        mate_r: vec![NONE; right],
    };
    m.greedy(&g);
    let mut dist = vec![NONE; left];
    let mut next = vec![0usize; left];
    let mut queue = Vec::with_capacity(left);
    let mut stack = Vec::new();
    loop {
        let found = m.layers(&g, &mut dist, &mut queue);
        if found == NONE {
            break;
        }
        m.augment(&g, &mut dist, &mut next, &mut stack, found);
    }
    m.konig(&g, queue)
}

/// The bipartite graph: left vertex `u`'s right neighbours are `adj[ptr[u]..ptr[u + 1]]`.
struct Graph<'a> {
    ptr: &'a [usize],
    adj: &'a [u32],
}

impl Graph<'_> {
    fn neighbours(&self, u: usize) -> &[u32] {
        &self.adj[self.ptr[u]..self.ptr[u + 1]]
    }
}

/// A matching: each left vertex's right mate and each right vertex's left mate, or [`NONE`].
struct Matching {
    mate_l: Vec<u32>,
    mate_r: Vec<u32>,
}

impl Matching {
    /// A greedy matching first: most vertices match at once, leaving few phases.
    fn greedy(&mut self, g: &Graph) {
        for u in 0..self.mate_l.len() {
            if let Some(&v) = g
                .neighbours(u)
                .iter()
                .find(|&&v| self.mate_r[v as usize] == NONE)
            {
                self.mate_l[u] = v;
                self.mate_r[v as usize] = u as u32;
            }
        }
    }

    /// Layers from the free left vertices by alternating paths into `dist`; stops at the first
    /// layer that reaches a free right vertex (the shortest augmenting paths) and returns the
    /// length of those paths, or [`NONE`] when there is none (the matching is maximum).
    fn layers(&self, g: &Graph, dist: &mut [u32], queue: &mut Vec<u32>) -> u32 {
        let (mate_l, mate_r) = (&self.mate_l, &self.mate_r);
        queue.clear();
        for u in 0..mate_l.len() {
            if mate_l[u] == NONE {
                dist[u] = 0;
                queue.push(u as u32);
            } else {
                dist[u] = NONE;
            }
        }
        let (mut head, mut found) = (0, NONE);
        while head < queue.len() {
            let u = queue[head] as usize;
            head += 1;
            if dist[u] >= found {
                break;
            }
            for &v in g.neighbours(u) {
                let w = mate_r[v as usize];
                if w == NONE {
                    found = found.min(dist[u] + 1);
                } else if dist[w as usize] == NONE {
                    dist[w as usize] = dist[u] + 1;
                    queue.push(w);
                }
            }
        }
        found
    }

    /// Flips vertex-disjoint shortest augmenting paths (of length `found`), found by
    /// depth-first search along the layers `dist`.
    fn augment(
        &mut self,
        g: &Graph,
        dist: &mut [u32],
        next: &mut [usize],
        stack: &mut Vec<usize>,
        found: u32,
    ) {
        let (ptr, adj) = (g.ptr, g.adj);
        let left = self.mate_l.len();
        let (mate_l, mate_r) = (&mut self.mate_l, &mut self.mate_r);
        next.copy_from_slice(&ptr[..left]);
        for root in 0..left {
            if mate_l[root] != NONE || dist[root] != 0 {
                continue;
            }
            stack.clear();
            stack.push(root);
            while let Some(&u) = stack.last() {
                if next[u] == ptr[u + 1] {
                    // A dead end: no path through u in this phase.
                    dist[u] = NONE;
                    stack.pop();
                    continue;
                }
                let v = adj[next[u]] as usize;
                let w = mate_r[v];
                if w == NONE && dist[u] + 1 == found {
                    // Flip the path: each stacked vertex takes the edge it stands on.
                    for &s in stack.iter().rev() {
                        let v = adj[next[s]];
                        mate_r[v as usize] = s as u32;
                        mate_l[s] = v;
                    }
                    for &s in stack.iter() {
                        dist[s] = NONE;
                    }
                    break;
                }
                if w != NONE && dist[w as usize] == dist[u] + 1 {
                    stack.push(w as usize);
                } else {
                    next[u] += 1;
                }
            }
        }
    }

    /// König: Z from the free left vertices, left to right by any edge, right to left by the
    /// matching (every reached right vertex is matched, the matching being maximum); the cover
    /// is the left vertices outside Z and the right vertices inside it.
    fn konig(self, g: &Graph, mut queue: Vec<u32>) -> Cover {
        let (mate_l, mate_r) = (&self.mate_l, &self.mate_r);
        let left = mate_l.len();
        let mut in_z_left = vec![false; left];
        let mut in_z_right = vec![false; mate_r.len()];
        queue.clear();
        for u in 0..left {
            if mate_l[u] == NONE {
                in_z_left[u] = true;
                queue.push(u as u32);
            }
        }
        let mut head = 0;
        while head < queue.len() {
            let u = queue[head] as usize;
            head += 1;
            for &v in g.neighbours(u) {
                if !in_z_right[v as usize] {
                    in_z_right[v as usize] = true;
                    let w = mate_r[v as usize] as usize;
                    if !in_z_left[w] {
                        in_z_left[w] = true;
                        queue.push(w as u32);
                    }
                }
            }
        }
        let matching = mate_l.iter().filter(|&&v| v != NONE).count();
        Cover {
            left: in_z_left.iter().map(|&z| !z).collect(),
            right: in_z_right,
            matching,
        }
    }
}
