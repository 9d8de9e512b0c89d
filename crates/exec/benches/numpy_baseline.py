"""numpy einsum(optimize=True) on the end-to-end benchmark cases (min of 3 runs).

Run with /work/venv/bin/python; the BLAS thread count is whatever OPENBLAS_NUM_THREADS /
OMP_NUM_THREADS say (benches/e2e.sh sets 1 and 2 to match P=1 and P=2).
"""
import json
import sys
import time

import numpy as np

quick = "--quick" in sys.argv
n, t, r = (256, 64, 8) if quick else (2048, 256, 32)
rng = np.random.default_rng(1)
cases = [
    ("mm", "ij,jk->ik", [(n, n), (n, n)], 2.0 * n**3),
    ("mttkrp3", "ijk,ja,ka->ia", [(t, t, t), (t, r), (t, r)], 2.0 * t**3 * r),
]
for name, expr, shapes, flops in cases:
    ops = [rng.uniform(-1, 1, s) for s in shapes]
    best = float("inf")
    for _ in range(1 if quick else 3):
        t0 = time.perf_counter()
        np.einsum(expr, *ops, optimize=True)
        best = min(best, time.perf_counter() - t0)
    print(json.dumps({"case": name, "expr": expr, "seconds": round(best, 4),
                      "gflops": round(flops / best / 1e9, 2)}))
