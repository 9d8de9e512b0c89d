"""Writes opt_einsum_mps.txt: the norm <psi|psi> of an MPS (a ladder of ket and bra tensors,
`ab,ac,dcf,dbe,...` over opt_einsum's symbols, contracted to a scalar) at several lengths and
bond dimensions, with the FLOP cost of the path opt_einsum's `dp` finds
(`DynamicProgramming(minimize='flops')`, `contract_path(...)[1].opt_cost`) and of its greedy.

Run with a Python that has opt_einsum (a scratch venv outside the repository will do). The Rust
test (tests/opt_einsum_mps.rs) builds the same einsums, checks them against the expressions
stored here, and holds deinsum's `dp` to these costs, so the test suite itself needs no Python.
"""

import time

import opt_einsum as oe


def mps_norm(sites):
    """The einsum of an MPS norm with `sites` sites: site 0 is `ab,ac` (ket, bra: physical
    index, bond); each later site a bra then a ket term (physical index, bond in, bond out),
    the last without a bond out; symbols in the order the terms first use them."""
    count = 0

    def new():
        nonlocal count
        count += 1
        return oe.get_symbol(count - 1)

    p, k, b = new(), new(), new()
    terms = [p + k, p + b]
    for s in range(1, sites):
        p = new()
        if s + 1 < sites:
            # Bond out of the ket before that of the bra, as `dcf,dbe` numbers them.
            k2, b2 = new(), new()
            terms += [p + b + b2, p + k + k2]
            k, b = k2, b2
        else:
            terms += [p + b, p + k]
    return ",".join(terms) + "->", count


# (sites, physical extent, bond extent); one line each, written as soon as it is found (the
# largest take opt_einsum minutes).
CASES = [(15, 2, 2), (15, 2, 16), (65, 2, 8), (100, 2, 8), (100, 4, 32), (150, 2, 8)]

with open(__file__.replace(".py", ".txt"), "w", encoding="utf-8") as f:
    f.write(f"# opt_einsum {oe.__version__}: operands|physical extent|bond extent|opt_cost of"
            " DynamicProgramming(minimize='flops')|opt_cost of greedy|expr\n")
    for sites, phys, bond in CASES:
        expr, _ = mps_norm(sites)
        terms = expr[:-2].split(",")
        ext = {}
        for t in terms:
            ext.setdefault(t[0], phys)  # each term's first index is physical
            for c in t[1:]:
                ext.setdefault(c, bond)
        shapes = [tuple(ext[c] for c in t) for t in terms]
        t0 = time.perf_counter()
        _, info = oe.contract_path(
            expr, *shapes, shapes=True, optimize=oe.paths.DynamicProgramming(minimize="flops")
        )
        dt = time.perf_counter() - t0
        _, greedy = oe.contract_path(expr, *shapes, shapes=True, optimize="greedy")
        print(f"{len(terms)} operands, phys {phys}, bond {bond}: dp {int(info.opt_cost)} in"
              f" {dt:.2f} s, greedy {int(greedy.opt_cost)}", flush=True)
        f.write(f"{len(terms)}|{phys}|{bond}|{int(info.opt_cost)}|{int(greedy.opt_cost)}|{expr}\n")
        f.flush()
