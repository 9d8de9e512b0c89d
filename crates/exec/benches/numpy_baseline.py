"""numpy einsum(optimize=True) on the end-to-end benchmark kernels.

Usage: python numpy_baseline.py [--quick] [--repeat N] [--case NAME]
Prints one JSON line per kernel with the minimum and median time of N runs (after one
warm-up run) of the contraction alone (operands made beforehand). The BLAS thread count is
whatever OPENBLAS_NUM_THREADS / OMP_NUM_THREADS say (benches/e2e.sh sets 2). The kernels and
sizes are those of benches/e2e.sh (KERNELS below is the one list both read).
"""
import json
import statistics
import sys
import time

import numpy as np

# name, expression, extents (full size), extents (--quick)
KERNELS = [
    ("mm", "ij,jk->ik", {"i": 2048, "j": 2048, "k": 2048}, {"i": 256, "j": 256, "k": 256}),
    ("3mm", "ij,jk,kl->il", {"i": 1024, "j": 1024, "k": 1024, "l": 1024},
     {"i": 128, "j": 128, "k": 128, "l": 128}),
    ("mttkrp", "ijk,ja,ka->ia", {"i": 256, "j": 256, "k": 256, "a": 32},
     {"i": 64, "j": 64, "k": 64, "a": 8}),
    ("ttmc", "ijk,ja,kb->iab", {"i": 128, "j": 128, "k": 128, "a": 16, "b": 16},
     {"i": 32, "j": 32, "k": 32, "a": 4, "b": 4}),
    ("chain5", "ijk,ja,ka,al->il", {c: 64 for c in "ijkal"}, {c: 16 for c in "ijkal"}),
]


def arg(name, default):
    if name in sys.argv:
        return sys.argv[sys.argv.index(name) + 1]
    return default


def main():
    quick = "--quick" in sys.argv
    reps = int(arg("--repeat", "5"))
    only = arg("--case", None)
    rng = np.random.default_rng(1)
    for name, expr, full, small in KERNELS:
        if only is not None and name != only:
            continue
        ext = small if quick else full
        ins = expr.split("->")[0].split(",")
        ops = [rng.uniform(-1, 1, [ext[c] for c in op]) for op in ins]
        np.einsum(expr, *ops, optimize=True)
        times = []
        for _ in range(reps):
            t0 = time.perf_counter()
            np.einsum(expr, *ops, optimize=True)
            times.append(time.perf_counter() - t0)
        print(json.dumps({"case": name, "expr": expr, "min": min(times),
                          "median": statistics.median(times)}))


if __name__ == "__main__":
    if "--list" in sys.argv:
        # For e2e.sh: name, expression and --sizes value per kernel, tab-separated.
        quick = "--quick" in sys.argv
        for name, expr, full, small in KERNELS:
            ext = small if quick else full
            print(f"{name}\t{expr}\t" + ",".join(f"{c}={n}" for c, n in ext.items()))
    else:
        main()
