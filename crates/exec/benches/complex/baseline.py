"""NumPy einsum(optimize=True) and opt_einsum.contract on the complex kernels of issue 38.

Usage: python baseline.py --list [--quick]
       python baseline.py --case NAME [--repeat N] [--quick]
--list prints, per kernel, its name, expression, --sizes value and multiply-adds (opt_einsum's
path), tab-separated, for complex.sh. --case prints one JSON line: the minimum and median of N
timed runs (after one warm-up) of numpy.einsum(expr, *ops, optimize=True) and of
opt_einsum.contract(expr, *ops) on complex128 operands with random real and imaginary parts,
made beforehand (each call includes its own path search, as a user's call does). The BLAS
thread count is what OPENBLAS_NUM_THREADS says (complex.sh sets 2).
"""
import json
import os
import statistics
import sys
import time

# NumPy as its users run it: this workplace's OPENBLAS_CORETYPE/OPENBLAS_L2_SIZE would put its
# OpenBLAS on a slower kernel; dropped in this process only, before OpenBLAS loads.
for _var in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE"):
    os.environ.pop(_var, None)

import numpy as np  # noqa: E402
import opt_einsum as oe  # noqa: E402


def mps_norm(sites, bond, phys):
    """<psi|psi> of an MPS of `sites` sites (bond dimension `bond`, physical `phys`): ket
    A_k[l_k, p_k, l_k+1] and bra B_k[m_k, p_k, m_k+1], open ends left out, 2 * sites operands,
    scalar output; the extents by index."""
    letters = iter(oe.get_symbol(i) for i in range(10 * sites))
    ket = [next(letters) for _ in range(sites - 1)]
    bra = [next(letters) for _ in range(sites - 1)]
    phys_ix = [next(letters) for _ in range(sites)]
    terms = []
    for side in (ket, bra):
        for k in range(sites):
            terms.append((side[k - 1] if k > 0 else "") + phys_ix[k] + (side[k] if k < sites - 1 else ""))
    ext = {c: bond for c in ket + bra}
    ext.update({c: phys for c in phys_ix})
    return ",".join(terms) + "->", ext


def kernels(quick):
    """name, expression, extents by index."""
    n = 256 if quick else 2048
    mps, mps_ext = mps_norm(15, 8 if quick else 32, 2)
    v, o = (16, 8) if quick else (48, 16)
    return [
        ("mm", "ij,jk->ik", {"i": n, "j": n, "k": n}),
        ("mps30", mps, mps_ext),
        ("ccsd", "abij,cdab->cdij", {"a": v, "b": v, "c": v, "d": v, "i": o, "j": o}),
    ]


def operands(expr, ext, rng):
    ins = expr.split("->")[0].split(",")
    shapes = [[ext[c] for c in op] for op in ins]
    return [rng.uniform(-1, 1, s) + 1j * rng.uniform(-1, 1, s) for s in shapes]


def madds(expr, ext):
    ins = expr.split("->")[0].split(",")
    shapes = [tuple(ext[c] for c in op) for op in ins]
    _, info = oe.contract_path(expr, *shapes, shapes=True, optimize="auto")
    return float(info.opt_cost) / 2


def timed(f, reps):
    f()
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        f()
        ts.append(time.perf_counter() - t0)
    return min(ts), statistics.median(ts)


def arg(name, default):
    return sys.argv[sys.argv.index(name) + 1] if name in sys.argv else default


def main():
    quick = "--quick" in sys.argv
    if "--list" in sys.argv:
        for name, expr, ext in kernels(quick):
            sizes = ",".join(f"{c}={n}" for c, n in ext.items())
            print(f"{name}\t{expr}\t{sizes}\t{madds(expr, ext):.0f}")
        return
    reps = int(arg("--repeat", "5"))
    only = arg("--case", None)
    rng = np.random.default_rng(1)
    for name, expr, ext in kernels(quick):
        if only is not None and name != only:
            continue
        ops = operands(expr, ext, rng)
        want = oe.contract(expr, *ops)
        got = np.einsum(expr, *ops, optimize=True)
        assert np.asarray(got).dtype == np.complex128
        np.testing.assert_allclose(got, want, rtol=1e-8, atol=1e-8 * float(np.abs(want).max()))
        n_min, n_med = timed(lambda: np.einsum(expr, *ops, optimize=True), reps)
        o_min, o_med = timed(lambda: oe.contract(expr, *ops), reps)
        print(json.dumps({"case": name, "numpy_min": n_min, "numpy_median": n_med,
                          "oe_min": o_min, "oe_median": o_med}))


if __name__ == "__main__":
    main()
