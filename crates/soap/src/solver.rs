//! The SOAP geometric program, solved numerically in log space.
//!
//! For tile sides `t_v = exp(y_v)`, `0 <= y_v <= ln(extent_v)`, the dominator size is
//! `D(y) = sum_j exp(a_j . y)` (one monomial per access set) and `chi(X) = max exp(sum y)`
//! subject to `D(y) <= X`. `ln chi` is concave in `X`, so the Lagrangian path
//!
//! ```text
//! y(l) = argmin_y  -sum(y) + sum_j exp(a_j . y - l) + eps/2 |y|^2   over the box
//! ```
//!
//! traces the whole curve `X -> chi(X)` as the log-multiplier `l` runs from the saturation value
//! (every side at its extent) down to the all-ones tile: at `l`, `y(l)` is the maximiser of
//! `chi(D(y(l)))`. Each point is a smooth, strictly convex, box-constrained problem of a few
//! variables, solved by projected Newton (Bertsekas) warm-started from its neighbour.
//!
//! The I/O bound maximises `k(X) = ln(X - S) - ln chi(X)` over `S < X <= D(extents)`. `k` need
//! not be unimodal once sides saturate, so the search is global: a coarse sample of the path,
//! then branch and bound over the intervals between samples. Because `ln chi` is concave in
//! `ln X`, the chord between two samples is a lower bound of `ln chi` on their interval, which
//! bounds `k` there from above in closed form; intervals whose bound cannot beat the incumbent
//! by `K_TOL` are dropped, the others split. A bracket of the stationarity condition
//! `lambda (X - S) = 1` (`lambda = exp(-l)`) is split at its exact root (regula falsi).

/// Tiny proximal weight: makes every inner problem strictly convex (flat directions, such as
/// two indices that always occur together, get the balanced split) at a relative cost ~1e-9.
const EPS: f64 = 1e-9;
/// Largest exponent evaluated; keeps far-off warm starts finite.
const EXP_CAP: f64 = 700.0;
/// Largest step in `ln X` between the samples of the coarse path.
const MAX_LNX_GAP: f64 = 1.0;
/// Global optimality tolerance on `k = ln(X - S) - ln chi(X)`: Q is within 0.01% of the best.
const K_TOL: f64 = 1e-4;

/// A statement's geometric program over its non-trivial indices (extent > 1).
#[derive(Clone, Debug)]
pub(crate) struct Program {
    /// Upper bounds `ln extent` of the variables.
    hi: Vec<f64>,
    /// Per monomial (access set): the variables in it.
    mono: Vec<Vec<usize>>,
    /// Per variable: the monomials containing it.
    var_mono: Vec<Vec<usize>>,
}

/// One point of the Lagrangian path.
#[derive(Clone, Debug)]
pub(crate) struct PathPoint {
    /// The log-multiplier `l`.
    pub l: f64,
    /// The log tile sides.
    pub y: Vec<f64>,
    /// `D(y)`.
    pub x: f64,
    /// `ln chi = sum(y)`.
    pub lnchi: f64,
}

/// The solution of the SOAP problem for one fast-memory size.
#[derive(Clone, Debug)]
pub(crate) struct Solution {
    /// The maximising dominator size X0.
    pub x0: f64,
    /// Log tile sides at X0.
    pub y: Vec<f64>,
    /// `chi(X0) / (X0 - S)`; infinite when the whole statement fits in S.
    pub rho: f64,
}

impl Program {
    /// Builds the program from per-variable upper bounds and the monomials' variable lists.
    pub fn new(hi: Vec<f64>, mono: Vec<Vec<usize>>) -> Self {
        let mut var_mono = vec![Vec::new(); hi.len()];
        for (j, m) in mono.iter().enumerate() {
            for &v in m {
                var_mono[v].push(j);
            }
        }
        Program { hi, mono, var_mono }
    }

    /// Number of variables.
    pub fn len(&self) -> usize {
        self.hi.len()
    }

    /// `D(y)`.
    pub fn dominator(&self, y: &[f64]) -> f64 {
        self.mono
            .iter()
            .map(|m| m.iter().map(|&v| y[v]).sum::<f64>().min(EXP_CAP).exp())
            .sum()
    }

    /// The objective `-sum y + sum_j exp(a_j.y - l) + eps/2 |y|^2` and the weights
    /// `w_j = exp(a_j.y - l)`.
    fn objective(&self, y: &[f64], l: f64, w: &mut [f64]) -> f64 {
        let mut f = 0.0;
        for (j, m) in self.mono.iter().enumerate() {
            let s: f64 = m.iter().map(|&v| y[v]).sum();
            w[j] = (s - l).min(EXP_CAP).exp();
            f += w[j];
        }
        for &yv in y {
            f += -yv + 0.5 * EPS * yv * yv;
        }
        f
    }

    /// Solves the inner problem at log-multiplier `l`, starting from `y` (updated in place).
    pub fn solve_at(&self, l: f64, y: &mut [f64]) {
        let n = self.len();
        let nm = self.mono.len();
        let mut w = vec![0.0; nm];
        let mut w_new = vec![0.0; nm];
        let mut g = vec![0.0; n];
        let mut free: Vec<usize> = Vec::with_capacity(n);
        let mut h = vec![0.0; n * n];
        let mut d = vec![0.0; n];
        let mut y_new = vec![0.0; n];
        for (yv, &h) in y.iter_mut().zip(&self.hi) {
            *yv = yv.clamp(0.0, h);
        }
        let mut f = self.objective(y, l, &mut w);
        for _iter in 0..200 {
            // Gradient.
            for v in 0..n {
                g[v] = -1.0 + EPS * y[v] + self.var_mono[v].iter().map(|&j| w[j]).sum::<f64>();
            }
            // Projected-gradient optimality and the (epsilon-)active set.
            let mut pg: f64 = 0.0;
            free.clear();
            for v in 0..n {
                let at_lo = y[v] <= 1e-12 && g[v] > 0.0;
                let at_hi = y[v] >= self.hi[v] - 1e-12 && g[v] < 0.0;
                if !(at_lo || at_hi) {
                    pg = pg.max(g[v].abs());
                }
                let near_lo = y[v] <= 1e-9 && g[v] > 0.0;
                let near_hi = y[v] >= self.hi[v] - 1e-9 && g[v] < 0.0;
                if !(near_lo || near_hi) {
                    free.push(v);
                }
            }
            if pg < 1e-12 {
                break;
            }
            // Newton direction on the free variables: H_FF d = -g_F (Cholesky; H is PD).
            let k = free.len();
            for (a, &u) in free.iter().enumerate() {
                for (b, &v) in free.iter().enumerate().take(a + 1) {
                    let mut s = if u == v { EPS } else { 0.0 };
                    for &j in &self.var_mono[u] {
                        if self.mono[j].contains(&v) {
                            s += w[j];
                        }
                    }
                    h[a * k + b] = s;
                }
            }
            if !cholesky(&mut h[..k * k], k) {
                // Numerically indefinite (cannot happen in exact arithmetic): gradient step.
                for (a, &v) in free.iter().enumerate() {
                    d[a] = -g[v];
                }
            } else {
                for (a, &v) in free.iter().enumerate() {
                    d[a] = -g[v];
                }
                cholesky_solve(&h[..k * k], k, &mut d[..k]);
            }
            // Armijo backtracking along the projected arc.
            let mut alpha = 1.0;
            let mut accepted = false;
            for _ in 0..60 {
                y_new.copy_from_slice(y);
                for (a, &v) in free.iter().enumerate() {
                    y_new[v] = (y[v] + alpha * d[a]).clamp(0.0, self.hi[v]);
                }
                let f_new = self.objective(&y_new, l, &mut w_new);
                let dec: f64 = (0..n).map(|v| g[v] * (y_new[v] - y[v])).sum();
                if f_new <= f + 1e-4 * dec || (f - f_new).abs() <= 1e-15 * f.abs().max(1.0) {
                    accepted = f_new <= f + 1e-13 * f.abs().max(1.0);
                    if accepted {
                        y.copy_from_slice(&y_new);
                        w.copy_from_slice(&w_new);
                        f = f_new;
                    }
                    break;
                }
                alpha *= 0.5;
            }
            if !accepted {
                break;
            }
        }
    }

    /// The saturation log-multiplier: at and above it every side sits at its extent.
    fn l_saturated(&self) -> f64 {
        let full: Vec<f64> = self
            .mono
            .iter()
            .map(|m| m.iter().map(|&v| self.hi[v]).sum::<f64>())
            .collect();
        (0..self.len())
            .map(|v| lse(self.var_mono[v].iter().map(|&j| full[j])))
            .fold(f64::NEG_INFINITY, f64::max)
    }

    /// A path point at `l`, warm-started from `y0`.
    pub fn point(&self, l: f64, y0: &[f64]) -> PathPoint {
        let mut y = y0.to_vec();
        self.solve_at(l, &mut y);
        let x = self.dominator(&y);
        let lnchi = y.iter().sum();
        PathPoint { l, y, x, lnchi }
    }

    /// Samples the path from full saturation down to `X <= stop_x` (or the all-ones tile),
    /// with consecutive samples at most `MAX_LNX_GAP` apart in `ln X`.
    pub fn path(&self, stop_x: f64) -> Vec<PathPoint> {
        self.path_until(|p| p.x <= stop_x)
    }

    /// [`Self::path`] stopped at the first sample where `stop` holds (that sample included):
    /// a caller that needs only the path's upper part does not walk the rest of it.
    fn path_until(&self, stop: impl Fn(&PathPoint) -> bool) -> Vec<PathPoint> {
        let n = self.len();
        let l0 = self.l_saturated();
        let mut pts = vec![self.point(l0, &self.hi)];
        if n == 0 {
            return pts;
        }
        let mut step = 0.25;
        loop {
            let last = pts.last().expect("path is non-empty");
            if stop(last) || last.y.iter().all(|&v| v <= 1e-12) {
                break;
            }
            let cand = self.point(last.l - step, &last.y);
            let gap = (last.x.ln() - cand.x.ln()).abs();
            if gap > MAX_LNX_GAP && step > 1e-9 {
                step *= 0.5;
                continue;
            }
            if gap < 0.3 * MAX_LNX_GAP {
                step *= 2.0;
            }
            pts.push(cand);
            if pts.len() > 100_000 {
                break;
            }
        }
        pts
    }

    /// The two ends of the search: full saturation and a point with `X <= S` (or the
    /// all-ones tile). Since `X = (dln chi/dln X) e^l` and the elasticity is at most the
    /// number of variables, `l = ln(S / n)` is already at or below S; it is lowered until so.
    fn ends(&self, s: f64) -> Vec<PathPoint> {
        let n = self.len();
        let top = self.point(self.l_saturated(), &self.hi);
        if n == 0 || top.x <= s {
            return vec![top];
        }
        let mut l = (s / n as f64).ln().min(top.l - 1.0);
        let mut bottom = self.point(l, &vec![0.0; n]);
        // Stops once X <= S or X no longer falls (sides in no access set stay at their extent).
        for _ in 0..1000 {
            if bottom.x <= s {
                break;
            }
            l -= 2.0;
            let next = self.point(l, &bottom.y);
            let stalled = next.x >= bottom.x * (1.0 - 1e-12);
            bottom = next;
            if stalled {
                break;
            }
        }
        vec![top, bottom]
    }

    /// Maximises `ln(X - S) - ln chi(X)` over `S < X <= D(extents)`.
    pub fn solve(&self, s: f64) -> Solution {
        let mut pts = self.ends(s);
        let top = &pts[0];
        if top.x <= s {
            // The whole statement fits in fast memory: no X > S exists.
            return Solution {
                x0: self.dominator(&self.hi),
                y: self.hi.clone(),
                rho: f64::INFINITY,
            };
        }
        let k = |p: &PathPoint| {
            if p.x > s {
                (p.x - s).ln() - p.lnchi
            } else {
                f64::NEG_INFINITY
            }
        };
        // r > 0: k decreases with X here; r < 0: k increases with X.
        let r = |p: &PathPoint| (-p.l).exp() * (p.x - s) - 1.0;
        let mut best = pts
            .iter()
            .max_by(|a, b| k(a).total_cmp(&k(b)))
            .expect("path is non-empty")
            .clone();
        // Points found as exact roots are not bracketed again.
        let mut is_root = vec![false; pts.len()];
        let mut i = 0;
        while i + 1 < pts.len() {
            let (a, b) = (&pts[i], &pts[i + 1]);
            if a.x <= s {
                break;
            }
            let splittable = (a.l - b.l).abs() > 1e-12 * a.l.abs().max(1.0);
            if !splittable || chord_bound(a, b, s) <= k(&best) + K_TOL {
                i += 1;
                continue;
            }
            let bracket = b.x > s && r(a) > 0.0 && r(b) < 0.0 && !is_root[i] && !is_root[i + 1];
            let m = if bracket {
                self.refine(s, a, b)
            } else {
                self.point(0.5 * (a.l + b.l), &a.y)
            };
            let inside = m.l < a.l && m.l > b.l;
            if !inside {
                // The root search landed on an end: fall back to halving.
                let m = self.point(0.5 * (a.l + b.l), &a.y);
                pts.insert(i + 1, m);
                is_root.insert(i + 1, false);
            } else {
                pts.insert(i + 1, m);
                is_root.insert(i + 1, bracket);
            }
            if k(&pts[i + 1]) > k(&best) {
                best = pts[i + 1].clone();
            }
            if pts.len() > 10_000 {
                break;
            }
        }
        let rho = best.lnchi.exp() / (best.x - s);
        Solution {
            x0: best.x,
            y: best.y,
            rho,
        }
    }

    /// Finds `lambda (X - S) = 1` between two bracketing path points.
    fn refine(&self, s: f64, a: &PathPoint, b: &PathPoint) -> PathPoint {
        self.root(a, b, |p| (-p.l).exp() * (p.x - s) - 1.0)
    }

    /// Illinois regula falsi in `l` for `f(point) = 0`, `f(a)` and `f(b)` of opposite signs.
    fn root(&self, a: &PathPoint, b: &PathPoint, f: impl Fn(&PathPoint) -> f64) -> PathPoint {
        let (mut pa, mut pb) = (a.clone(), b.clone());
        let (mut fa, mut fb) = (f(&pa), f(&pb));
        if fa == 0.0 {
            return pa;
        }
        if fb == 0.0 {
            return pb;
        }
        let mut side = 0i32;
        for _ in 0..100 {
            if (pa.l - pb.l).abs() < 1e-13 * pa.l.abs().max(1.0) {
                break;
            }
            let mut lm = (pa.l * fb - pb.l * fa) / (fb - fa);
            if !lm.is_finite() || (lm - pa.l) * (lm - pb.l) >= 0.0 {
                lm = 0.5 * (pa.l + pb.l);
            }
            let warm = if (lm - pa.l).abs() < (lm - pb.l).abs() {
                &pa.y
            } else {
                &pb.y
            };
            let pm = self.point(lm, &warm.clone());
            let fm = f(&pm);
            if fm.abs() < 1e-13 {
                return pm;
            }
            if (fm > 0.0) == (fa > 0.0) {
                pa = pm;
                fa = fm;
                if side == -1 {
                    fb *= 0.5;
                }
                side = -1;
            } else {
                pb = pm;
                fb = fm;
                if side == 1 {
                    fa *= 0.5;
                }
                side = 1;
            }
        }
        if fa.abs() < fb.abs() {
            pa
        } else {
            pb
        }
    }

    /// The maximiser of `chi(x)`: the path point with `D(y) = x` (clamped to the path's ends).
    pub fn y_for_x(&self, x: f64) -> Vec<f64> {
        let pts = self.path(x);
        let top = &pts[0];
        if x >= top.x || pts.len() == 1 {
            return top.y.clone();
        }
        let (a, b) = (&pts[pts.len() - 2], &pts[pts.len() - 1]);
        if b.x > x {
            return b.y.clone();
        }
        // X(l) increases with l: a has X > x, b has X <= x.
        self.root(a, b, |p| (p.x / x).ln()).y
    }

    /// The smallest X with `ln chi(X) >= target` (the memory-independent per-rank dominator).
    pub fn x_for_lnchi(&self, target: f64) -> f64 {
        // ln chi falls along the path: below the target, the rest of it cannot cross again.
        let pts = self.path_until(|p| p.lnchi <= target);
        let top = &pts[0];
        if target >= top.lnchi {
            return top.x;
        }
        for w in pts.windows(2) {
            let (a, b) = (&w[0], &w[1]);
            if a.lnchi >= target && b.lnchi <= target {
                return self.root(a, b, |p| p.lnchi - target).x;
            }
        }
        pts.last().map_or(top.x, |p| p.x)
    }
}

/// log-sum-exp of a sequence (`-inf` when empty).
fn lse(it: impl Iterator<Item = f64>) -> f64 {
    let v: Vec<f64> = it.collect();
    let m = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    if m == f64::NEG_INFINITY {
        return m;
    }
    m + v.iter().map(|x| (x - m).exp()).sum::<f64>().ln()
}

/// In-place lower Cholesky factor of a k x k row-major matrix (lower triangle used).
fn cholesky(a: &mut [f64], k: usize) -> bool {
    for i in 0..k {
        for j in 0..=i {
            let mut s = a[i * k + j];
            for p in 0..j {
                s -= a[i * k + p] * a[j * k + p];
            }
            if i == j {
                if s <= 0.0 || !s.is_finite() {
                    return false;
                }
                a[i * k + i] = s.sqrt();
            } else {
                a[i * k + j] = s / a[j * k + j];
            }
        }
    }
    true
}

/// Solves `L L^T x = b` in place given the factor from [`cholesky`].
fn cholesky_solve(l: &[f64], k: usize, b: &mut [f64]) {
    for i in 0..k {
        let mut s = b[i];
        for p in 0..i {
            s -= l[i * k + p] * b[p];
        }
        b[i] = s / l[i * k + i];
    }
    for i in (0..k).rev() {
        let mut s = b[i];
        for p in i + 1..k {
            s -= l[p * k + i] * b[p];
        }
        b[i] = s / l[i * k + i];
    }
}

/// An upper bound of `k(u) = ln(e^u - S) - ln chi(u)` between two path points, from the chord
/// of the concave `ln chi(u)` (a lower bound of it on the interval).
fn chord_bound(a: &PathPoint, b: &PathPoint, s: f64) -> f64 {
    let (ua, ub) = (a.x.ln(), b.x.ln());
    let lo = ub.max(s.ln());
    if ua <= lo {
        return f64::NEG_INFINITY;
    }
    let f = |u: f64, slope: f64| (u.exp() - s).ln() - (b.lnchi + slope * (u - ub));
    if ua - ub < 1e-12 {
        return f(ua, 0.0).max((a.x - s).ln() - b.lnchi);
    }
    let slope = (a.lnchi - b.lnchi) / (ua - ub);
    // f is concave in u; its stationary point is e^u = slope S / (slope - 1) when slope > 1.
    let u = if slope > 1.0 {
        (slope * s / (slope - 1.0)).ln()
    } else {
        ua
    };
    let u = u.clamp(lo, ua);
    if u <= s.ln() {
        // The bound tends to -inf at X = S; the interval's upper end decides.
        return f(ua, slope);
    }
    f(u, slope)
}
