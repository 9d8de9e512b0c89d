"""Rank-R CP-ALS on a deinsum.Session: X is placed once, at its first MTTKRP, and never moves
again; each sweep runs one MTTKRP per mode on the session, the Gram matrices of the factors,
their Hadamard product, an R x R solve and the fit as TensorLy's `parafac` computes it.

    python cp_als.py [--procs P] [--rank R] [--sweeps S] [--shape 12,10,9]
    mpirun -n P python cp_als.py --mpi ...   (a session on MPI.COMM_WORLD; needs mpi4py)

Without --shape: a 3-way and a 5-way tensor. With TensorLy installed, each sweep's fit is
compared with `tensorly.decomposition.parafac` from the same initial factors.
"""

import argparse
import sys
import time

import numpy as np

import deinsum

MODES = "ijklmnop"


def mttkrp_expr(order, n):
    """The MTTKRP of mode `n`: `ijk,jz,kz->iz` for n = 0 of an order-3 tensor."""
    others = ",".join(f"{MODES[m]}z" for m in range(order) if m != n)
    return f"{MODES[:order]},{others}->{MODES[n]}z"


def cp_als(session, x, rank, init, sweeps):
    """`sweeps` sweeps of CP-ALS of `x` (a DistArray of `session`, or a NumPy array) from the
    factors `init`; returns (factors, fits per sweep, seconds per sweep, X's words moved per
    sweep)."""
    if not isinstance(x, deinsum.DistArray):
        x = session.array(x)
    order = len(x.shape)
    factors = [np.array(f, dtype=np.float64) for f in init]
    arrays = [session.array(f) for f in factors]
    grams = [f.T @ f for f in factors]
    norm_x2 = None
    fits, seconds, x_words = [], [], []
    for _ in range(sweeps):
        t0 = time.perf_counter()
        calls = len(session.stats())
        for n in range(order):
            v = np.ones((rank, rank))
            for m in range(order):
                if m != n:
                    v *= grams[m]
            others = [arrays[m] for m in range(order) if m != n]
            mttkrp = session.einsum(mttkrp_expr(order, n), x, *others).numpy()
            factors[n] = np.linalg.solve(v.T, mttkrp.T).T
            arrays[n] = session.array(factors[n])
            grams[n] = factors[n].T @ factors[n]
        if norm_x2 is None:
            # After X's first placement, so that this einsum does not choose X's layout.
            idx = MODES[:order]
            norm_x2 = float(session.einsum(f"{idx},{idx}->", x, x).numpy())
        v = np.ones((rank, rank))
        for g in grams:
            v *= g
        iprod = float(np.sum(mttkrp * factors[-1]))
        fits.append(1.0 - np.sqrt(abs(norm_x2 + v.sum() - 2.0 * iprod)) / np.sqrt(norm_x2))
        seconds.append(time.perf_counter() - t0)
        sweep = session.stats()[calls:]
        x_words.append(
            sum(s["operand_words"][0] for s in sweep if s["expr"].startswith(MODES[:order]))
        )
    return factors, fits, seconds, x_words


def problem(shape, rank, seed=0):
    """A tensor near rank `rank` (a CP model plus 10% noise) and initial factors."""
    rng = np.random.default_rng(seed)
    truth = [rng.uniform(-1, 1, (n, rank)) for n in shape]
    x = np.zeros(shape)
    for a in range(rank):
        term = truth[0][:, a]
        for f in truth[1:]:
            term = np.multiply.outer(term, f[:, a])
        x += term
    x += 0.1 * rng.uniform(-1, 1, shape)
    init = [rng.uniform(-1, 1, (n, rank)) for n in shape]
    return x, init


def tensorly_fits(x, rank, init, sweeps):
    """TensorLy's parafac (NumPy backend) from the same factors: fit after each sweep."""
    import tensorly as tl
    from tensorly.cp_tensor import CPTensor
    from tensorly.decomposition import parafac

    tl.set_backend("numpy")
    _, errors = parafac(
        x,
        rank,
        n_iter_max=sweeps,
        init=CPTensor((np.ones(rank), [f.copy() for f in init])),
        tol=0,
        normalize_factors=False,
        return_errors=True,
    )
    return [1.0 - float(e) for e in errors]


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--procs", type=int, default=2)
    p.add_argument("--rank", type=int, default=None)
    p.add_argument("--sweeps", type=int, default=4)
    p.add_argument("--shape", default=None)
    p.add_argument("--mpi", action="store_true", help="run on the MPI world (under mpirun)")
    a = p.parse_args(argv)
    if a.shape:
        cases = [(tuple(int(n) for n in a.shape.split(",")), a.rank or 4)]
    else:
        cases = [((12, 10, 9), a.rank or 4), ((6, 5, 4, 5, 3), a.rank or 3)]
    try:
        import tensorly  # noqa: F401

        have_tl = True
    except ImportError:
        have_tl = False
    ok = True
    for shape, rank in cases:
        x, init = problem(shape, rank)
        session = deinsum.Session(comm="world") if a.mpi else deinsum.Session(procs=a.procs)
        with session as s:
            _, fits, seconds, x_words = cp_als(s, x, rank, init, a.sweeps)
            procs, me = s.procs, s.rank
        want = tensorly_fits(x, rank, init, a.sweeps) if have_tl else [None] * len(fits)
        out = print if me == 0 else (lambda *_: None)
        where = f"{procs} ranks" + (" (MPI)" if a.mpi else "")
        out(f"CP-ALS of a {shape} tensor, rank {rank}, on {where}")
        for t, (f, w) in enumerate(zip(fits, want)):
            line = f"  sweep {t + 1}: fit {f:.12f}  {seconds[t]:.4f} s  X moved {x_words[t]}"
            if w is not None:
                good = abs(f - w) <= 1e-8
                ok &= good
                line += f"  TensorLy {w:.12f} {'ok' if good else 'MISMATCH'}"
            if t > 0 and x_words[t] != 0:
                ok = False
                line += "  X MOVED"
            out(line)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
