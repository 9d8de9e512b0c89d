"""Writes opt_einsum_dp.txt: random einsums whose operands carry indices of their own (in no
other operand and not in the output, or repeated inside one term), with the FLOP cost of the
path opt_einsum's `dp` finds (`contract_path(...)[1].opt_cost`).

Run with a Python that has opt_einsum (a scratch venv outside the repository will do). The Rust
test (tests/opt_einsum_dp.rs) holds deinsum's `dp`, `auto` and `optimal` to these costs, so
the test suite itself needs no Python.
"""

import random

import opt_einsum as oe

rng = random.Random(20261203)
shared = "abcdefghij"
own = "uvwxyzUVWXYZ"
lines = []
while len(lines) < 200:
    n = rng.randint(3, 10)
    ext = {c: rng.randint(1, 6) for c in shared + own}
    terms = []
    spare = list(own)
    rng.shuffle(spare)
    for _ in range(n):
        t = rng.sample(shared[: rng.randint(3, len(shared))], rng.randint(1, 3))
        if spare and rng.random() < 0.5:
            t.append(spare.pop())  # an index only this operand has
        if rng.random() < 0.15:
            t.append(t[0])  # a repeated index: a diagonal
        rng.shuffle(t)
        terms.append("".join(t))
    used = sorted({c for t in terms for c in t})
    counts = {c: sum(t.count(c) for t in terms) for c in used}
    out = [c for c in used if c in shared and counts[c] == 1 or rng.random() < 0.1]
    out = [c for c in out if c not in own]
    expr = ",".join(terms) + "->" + "".join(out)
    shapes = [tuple(ext[c] for c in t) for t in terms]
    try:
        _, info = oe.contract_path(expr, *shapes, shapes=True, optimize="dp")
    except (ValueError, RuntimeError):
        continue
    sizes = ",".join(f"{c}={ext[c]}" for c in used)
    lines.append(f"{expr}|{sizes}|{int(info.opt_cost)}")

with open(__file__.replace(".py", ".txt"), "w") as f:
    f.write(f"# opt_einsum {oe.__version__}: expr|sizes|opt_cost of optimize='dp'\n")
    f.write("\n".join(lines) + "\n")
