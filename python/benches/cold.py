#!/usr/bin/env python3
"""The first call's time against the next ones' (issue 37 item 5: cold within 2x warm).

  python benches/cold.py [--runs N] [--procs P] [--numpy]

Each run is a fresh interpreter: it imports numpy and deinsum and makes the operands (not
timed), then times the first `deinsum.einsum(expr, *ops, procs=P)` (cold) and the minimum of
the next 20 (warm). Kernels: attention scores bhqd,bhkd->bhqk at 8x16x512x64 and the norm of
a 15-site MPS at bond 32 (30 operands, float64). Prints the median over N runs (default 5)
of cold, warm and cold/warm per kernel; --numpy times numpy.einsum(optimize=True) the same
way, with OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE unset in its interpreter only (NumPy's own
OpenBLAS kernel, as its users get it).
"""

import json
import os
import statistics
import subprocess
import sys

CHILD = r"""
import json, sys, time
t0 = time.perf_counter()
import numpy as np
import deinsum
t_import = time.perf_counter() - t0
kernel, procs, who = sys.argv[1], int(sys.argv[2]), sys.argv[3]
rng = np.random.default_rng(0)
if kernel == "attention":
    expr = "bhqd,bhkd->bhqk"
    ops = [rng.random((8, 16, 512, 64)), rng.random((8, 16, 512, 64))]
else:
    sites, bond, phys = 15, 32, 2
    names = iter("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")
    kb = [next(names) for _ in range(sites - 1)]
    bb = [next(names) for _ in range(sites - 1)]
    ph = [next(names) for _ in range(sites)]
    terms, shapes = [], []
    for side in (kb, bb):
        for k in range(sites):
            t = (side[k - 1] if k > 0 else "") + ph[k] + (side[k] if k < sites - 1 else "")
            terms.append(t)
            shapes.append(tuple(bond if c in side else phys for c in t))
    expr = ",".join(terms) + "->"
    ops = [rng.random(s) / 4 for s in shapes]
if who == "numpy":
    f = lambda: np.einsum(expr, *ops, optimize=True)
else:
    f = lambda: deinsum.einsum(expr, *ops, procs=procs)
t = time.perf_counter(); f(); cold = time.perf_counter() - t
warm = []
for _ in range(20):
    t = time.perf_counter(); f(); warm.append(time.perf_counter() - t)
print(json.dumps({"import": t_import, "cold": cold, "warm": min(warm)}))
"""


def arg(name, default):
    return sys.argv[sys.argv.index(name) + 1] if name in sys.argv else default


def child(kernel, procs, who):
    # NumPy runs as its users get it: this workplace's OpenBLAS overrides (an AVX2 kernel) are
    # unset for the baseline's interpreter only; deinsum's gets the environment as given.
    env = dict(os.environ)
    if who == "numpy":
        env.pop("OPENBLAS_CORETYPE", None)
        env.pop("OPENBLAS_L2_SIZE", None)
    # -P: the installed package, not a source tree in the working directory.
    r = subprocess.run(
        [sys.executable, "-P", "-c", CHILD, kernel, str(procs), who],
        capture_output=True, text=True, check=False, env=env,
    )
    if r.returncode != 0:
        sys.exit(r.stderr)
    return json.loads(r.stdout)


def main():
    runs, procs = int(arg("--runs", "5")), int(arg("--procs", "2"))
    who = ["deinsum"] + (["numpy"] if "--numpy" in sys.argv else [])
    print("| kernel | who | import | cold | warm | cold / warm |")
    print("|---|---|---|---|---|---|")
    for kernel in ("attention", "mps"):
        for w in who:
            rs = [child(kernel, procs, w) for _ in range(runs)]
            med = {k: statistics.median(r[k] for r in rs) for k in ("import", "cold", "warm")}
            ratio = statistics.median(r["cold"] / r["warm"] for r in rs)
            print(
                f"| {kernel} | {w} | {med['import'] * 1e3:.1f} ms | {med['cold'] * 1e3:.2f} ms "
                f"| {med['warm'] * 1e3:.2f} ms | {ratio:.2f}x |"
            )


if __name__ == "__main__":
    main()
