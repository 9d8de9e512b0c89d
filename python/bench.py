#!/usr/bin/env python3
"""deinsum from Python against NumPy and opt_einsum, in one process.

  python bench.py [--full] [--repeat N] [--rounds R] [--procs P] [--skip-exec] [--skip-path]
  python bench.py --gemm [--rounds R]
  python bench.py --complex [--repeat N] [--rounds R] [--procs P]

Execution: the end-to-end kernels of crates/exec/benches/numpy_baseline.py (their --quick sizes
unless --full), timed as `deinsum.einsum(procs=P)` (default 2, one thread per rank),
`numpy.einsum(optimize=True)` and `opt_einsum.contract`; minimum of N runs (and of as many
more as fit in 0.2 s, at most 1000) after a warm-up and a pause that lets the previous contestant's idle BLAS threads stop spinning, operands made
beforehand. With R rounds (default 1) the three take turns R times per kernel and the table
gives the median of each one's times and the median (and range) of the per-round ratios: a
shared machine's speed drifts between minutes, and a ratio of times taken side by side keeps
that drift out. Planning: `deinsum.contract_path` against `opt_einsum.contract_path`
on the equations of crates/path/benches/cases.json (shapes only), per strategy, with the cost
each finds. Prints markdown tables with the ratios. Needs numpy and opt_einsum.

--gemm: the GEMM backend against NumPy's BLAS on one rank's product of mm at procs=2
(1024x2048x2048) on one thread each, in turn R times (default 5); run it with
OPENBLAS_NUM_THREADS=1. mm at procs=2 can be no faster than this ratio allows.

--complex: complex128 kernels (issue 38): mm at 2048, a 30-operand MPS (the norm of a 15-site
MPS, bond dimension 32, physical dimension 2: 15 ket and 15 bra tensors) and the CCSD-like
abij,cdab->cdij, timed as the execution table (deinsum at procs=P, numpy optimize=True,
opt_einsum) with the GFLOP/s of each (8 flops per complex multiply-add).
"""

import importlib.util
import json
import statistics
import os
import sys
import time

import numpy as np
import opt_einsum as oe

import deinsum

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
# opt_einsum's optimal search explodes past ~10 tensors: those rows are left out.
OPTIMAL_MAX_TENSORS = 10
# opt_einsum's dp does not finish within a minute on the 36-tensor lattice.
DP_MAX_TENSORS = 16
PLANNING_BUDGET_S = 0.5

# Execution: each contestant's timed runs span at least this long (more than N runs for the
# short kernels). On this VM a two-thread run falls into stretches of some 10-20 ms where the
# second core is not there (the chain at 64 on two ranks: 0.48 ms a call, or 0.86 ms, the
# time of one rank doing it all, for ten calls in a row): ten runs of 1 ms could all fall in one.
EXEC_SPAN_S = 0.2


def arg(name, default):
    if name in sys.argv:
        return sys.argv[sys.argv.index(name) + 1]
    return default


def settle():
    """Waits for idle BLAS threads to sleep: OpenBLAS's workers spin for about 0.1 s after a call
    (its thread timeout), and a contestant timed in that window shares the cores with them."""
    time.sleep(0.3)


def best_time(f, reps, at_least=0.0):
    """Minimum time of f over `reps` runs, and more while they took less than `at_least`
    seconds in all (at most 1000 runs)."""
    f()
    settle()
    times = []
    start = time.perf_counter()
    while len(times) < reps or (time.perf_counter() - start < at_least and len(times) < 1000):
        t0 = time.perf_counter()
        f()
        times.append(time.perf_counter() - t0)
    return min(times)


def timed_enough(f, budget=PLANNING_BUDGET_S, max_reps=200):
    """Minimum time of f over as many runs as fit the budget (at least 3)."""
    f()
    times, start = [], time.perf_counter()
    while len(times) < 3 or (time.perf_counter() - start < budget and len(times) < max_reps):
        t0 = time.perf_counter()
        f()
        times.append(time.perf_counter() - t0)
    return min(times)


def fmt(t):
    return f"{t * 1e3:.2f} ms" if t >= 1e-3 else f"{t * 1e6:.1f} µs"


def execution(full, reps, procs, rounds):
    spec = importlib.util.spec_from_file_location(
        "numpy_baseline", os.path.join(ROOT, "crates/exec/benches/numpy_baseline.py")
    )
    base = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(base)
    rng = np.random.default_rng(1)
    size = "full" if full else "quick"
    print(f"## execution ({size} sizes, procs={procs}, min of {reps} runs and of all in {EXEC_SPAN_S} s, median of {rounds} round(s))\n")
    print("| kernel | einsum | deinsum | numpy optimize=True | opt_einsum | numpy / deinsum | opt_einsum / deinsum |")
    print("|---|---|---|---|---|---|---|")
    for name, expr, big, small in base.KERNELS:
        ext = big if full else small
        ins = expr.split("->")[0].split(",")
        ops = [rng.uniform(-1, 1, [ext[c] for c in op]) for op in ins]
        got = deinsum.einsum(expr, *ops, procs=procs, threads=1)
        np.testing.assert_allclose(got, np.einsum(expr, *ops, optimize=True), rtol=1e-8, atol=1e-8)
        times = {"d": [], "n": [], "o": []}
        for _ in range(rounds):
            times["d"].append(
                best_time(lambda: deinsum.einsum(expr, *ops, procs=procs, threads=1), reps, EXEC_SPAN_S)
            )
            times["n"].append(best_time(lambda: np.einsum(expr, *ops, optimize=True), reps, EXEC_SPAN_S))
            times["o"].append(best_time(lambda: oe.contract(expr, *ops), reps, EXEC_SPAN_S))
        td, tn, to = (statistics.median(times[k]) for k in "dno")

        def ratio(k):
            r = [b / a for a, b in zip(times["d"], times[k])]
            spread = f" ({min(r):.2f}-{max(r):.2f})" if rounds > 1 else ""
            return f"{statistics.median(r):.2f}×{spread}"

        print(f"| {name} | {expr} | {fmt(td)} | {fmt(tn)} | {fmt(to)} | {ratio('n')} | {ratio('o')} |")
    print()


def planning():
    with open(os.path.join(ROOT, "crates/path/benches/cases.json")) as f:
        cases = json.load(f)
    print("## planning: contract_path in process\n")
    print("| case | tensors | strategy | deinsum cost | opt_einsum cost | deinsum | opt_einsum | speedup |")
    print("|---|---|---|---|---|---|---|---|")
    for case in cases:
        eq = ",".join(case["inputs"]) + "->" + case["output"]
        shapes = [tuple(case["sizes"][c] for c in op) for op in case["inputs"]]
        n = len(shapes)
        for strat in case["strategies"]:
            if strat in ("optimal", "branch-all") and n > OPTIMAL_MAX_TENSORS:
                continue
            if strat == "dp" and n > DP_MAX_TENSORS:
                continue
            _, di = deinsum.contract_path(eq, *shapes, shapes=True, optimize=strat)
            _, oi = oe.contract_path(eq, *shapes, shapes=True, optimize=strat)
            td = timed_enough(lambda: deinsum.contract_path(eq, *shapes, shapes=True, optimize=strat))
            to = timed_enough(lambda: oe.contract_path(eq, *shapes, shapes=True, optimize=strat))
            print(
                f"| {case['name']} | {n} | {strat} | {int(di.opt_cost):,} | {int(oi.opt_cost):,} "
                f"| {fmt(td)} | {fmt(to)} | {to / td:.1f}× |"
            )
    print()


def gemm(rounds):
    rng = np.random.default_rng(1)
    a, b = rng.random((1024, 2048)), rng.random((2048, 2048))
    flops = 2 * 1024 * 2048 * 2048
    print("## one rank's GEMM of mm at procs=2 (1024x2048x2048), one thread each, min of 5\n")
    print("| round | numpy a @ b | deinsum procs=1 threads=1 | numpy / deinsum |")
    print("|---|---|---|---|")
    ratios = []
    for r in range(rounds):
        tn = best_time(lambda: a @ b, 5)
        td = best_time(lambda: deinsum.einsum("ij,jk->ik", a, b, procs=1, threads=1), 5)
        ratios.append(tn / td)
        print(f"| {r} | {fmt(tn)} ({flops / tn / 1e9:.1f} GFLOP/s) | {fmt(td)} ({flops / td / 1e9:.1f} GFLOP/s) | {tn / td:.3f} |")
    print(f"\nmedian numpy / deinsum: {statistics.median(ratios):.3f}\n")


def mps_norm(sites, bond, phys):
    """The einsum of <psi|psi> for an MPS of `sites` sites: ket A_k[l_k, p_k, l_k+1] and bra
    B_k[m_k, p_k, m_k+1], open ends of extent 1 left out, 2 * sites operands, scalar output."""
    letters = iter(oe.get_symbol(i) for i in range(10 * sites))
    ket_bonds = [next(letters) for _ in range(sites - 1)]
    bra_bonds = [next(letters) for _ in range(sites - 1)]
    physical = [next(letters) for _ in range(sites)]
    terms, shapes = [], []
    for side in (ket_bonds, bra_bonds):
        for k in range(sites):
            t = (side[k - 1] if k > 0 else "") + physical[k] + (side[k] if k < sites - 1 else "")
            terms.append(t)
            shapes.append(tuple(bond if c in side else phys for c in t))
    return ",".join(terms) + "->", shapes


def complex_kernels(reps, procs, rounds):
    rng = np.random.default_rng(1)
    mps, mps_shapes = mps_norm(15, 32, 2)
    cases = [
        ("mm 2048", "ij,jk->ik", [(2048, 2048), (2048, 2048)]),
        ("mps 30 operands, bond 32", mps, mps_shapes),
        ("ccsd abij,cdab->cdij", "abij,cdab->cdij", [(48, 48, 16, 16), (48, 48, 48, 48)]),
    ]
    print(f"## complex128 (procs={procs}, min of {reps} runs and of all in {EXEC_SPAN_S} s, median of {rounds} round(s))\n")
    print("| kernel | deinsum | numpy optimize=True | opt_einsum | numpy / deinsum | opt_einsum / deinsum | deinsum GFLOP/s |")
    print("|---|---|---|---|---|---|---|")
    for name, expr, shapes in cases:
        ops = [rng.uniform(-1, 1, s) + 1j * rng.uniform(-1, 1, s) for s in shapes]
        _, info = oe.contract_path(expr, *ops, optimize="auto")
        madds = float(info.opt_cost) / 2
        got = deinsum.einsum(expr, *ops, procs=procs, threads=1)
        want = oe.contract(expr, *ops)
        assert np.asarray(got).dtype == np.complex128
        np.testing.assert_allclose(got, want, rtol=1e-8, atol=1e-8 * np.abs(want).max())
        times = {"d": [], "n": [], "o": []}
        for _ in range(rounds):
            times["d"].append(
                best_time(lambda: deinsum.einsum(expr, *ops, procs=procs, threads=1), reps, EXEC_SPAN_S)
            )
            times["n"].append(best_time(lambda: np.einsum(expr, *ops, optimize=True), reps, EXEC_SPAN_S))
            times["o"].append(best_time(lambda: oe.contract(expr, *ops), reps, EXEC_SPAN_S))
        td, tn, to = (statistics.median(times[k]) for k in "dno")

        def ratio(k):
            r = [b / a for a, b in zip(times["d"], times[k])]
            spread = f" ({min(r):.2f}-{max(r):.2f})" if rounds > 1 else ""
            return f"{statistics.median(r):.2f}×{spread}"

        print(
            f"| {name} | {fmt(td)} | {fmt(tn)} | {fmt(to)} | {ratio('n')} | {ratio('o')} "
            f"| {8 * madds / td / 1e9:.1f} |"
        )
    print()


def main():
    if "--complex" in sys.argv:
        complex_kernels(int(arg("--repeat", "3")), int(arg("--procs", "2")), int(arg("--rounds", "1")))
        return
    if "--gemm" in sys.argv:
        gemm(int(arg("--rounds", "5")))
        return
    reps = int(arg("--repeat", "3"))
    procs = int(arg("--procs", "2"))
    if "--skip-exec" not in sys.argv:
        execution("--full" in sys.argv, reps, procs, int(arg("--rounds", "1")))
    if "--skip-path" not in sys.argv:
        planning()


if __name__ == "__main__":
    main()
