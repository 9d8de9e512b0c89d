"""numpy baseline for examples/mpi_bench.rs: the same einsums with einsum(optimize=True).

Usage: python examples/bench/numpy_einsum.py [--reps 3]
Prints best-of-reps time and GFLOP/s with the same FLOP counts as mpi_bench.
"""
import sys
import time

import numpy as np


def best_of(reps, f):
    best = float("inf")
    for _ in range(reps):
        t0 = time.perf_counter()
        f()
        best = min(best, time.perf_counter() - t0)
    return best


def main():
    reps = int(sys.argv[sys.argv.index("--reps") + 1]) if "--reps" in sys.argv else 3
    rng = np.random.default_rng(1)
    n = 2048
    a = rng.uniform(-1, 1, (n, n))
    b = rng.uniform(-1, 1, (n, n))
    t = best_of(reps, lambda: np.einsum("ij,jk->ik", a, b, optimize=True))
    print(f"numpy ij,jk->ik n={n}: best of {reps} {t:.4f} s, {2 * n**3 / t * 1e-9:.2f} GFLOP/s")
    n, r = 256, 32
    x = rng.uniform(-1, 1, (n, n, n))
    bb = rng.uniform(-1, 1, (n, r))
    cc = rng.uniform(-1, 1, (n, r))
    t = best_of(reps, lambda: np.einsum("ijk,ja,ka->ia", x, bb, cc, optimize=True))
    print(
        f"numpy ijk,ja,ka->ia n={n} r={r}: best of {reps} {t:.4f} s, "
        f"{2 * n**3 * r / t * 1e-9:.2f} GFLOP/s (same FLOP count as mpi_bench)"
    )
    print(f"numpy {np.__version__}, BLAS threads as configured (OMP/OPENBLAS_NUM_THREADS)")


if __name__ == "__main__":
    main()
