"""Writes numpy_cases.txt: random einsums with shapes and the output shape NumPy computes.

Run with /work/venv/bin/python (numpy). The Rust test tests/numpy.rs reads the table, so the
test suite itself needs no Python. The first 300 cases keep extent-1
broadcasting inside '...'; the 60 after them give named indices extent 1 in some operands,
which NumPy broadcasts too (the first of them is the attention-score example
`bhqd,bhkd->bhqk`). An explicit output keeps '...' when inputs have it.

The first 300 lines were written with an unrecorded PYTHONHASHSEED: their explicit outputs
take set order, so a rerun reorders those outputs (the shapes NumPy gives stay consistent).
The named-broadcast cases sort before they shuffle, so they do not depend on it.
"""

import random

import numpy as np

rng = random.Random(20261201)
labels = "abcijAZ"
lines = []
while len(lines) < 300:
    ext = {c: rng.randint(2, 4) for c in labels}
    nb = rng.randint(0, 3)
    bext = [rng.randint(1, 4) for _ in range(nb)]
    use_ell = nb > 0 and rng.random() < 0.6
    terms, shapes, used = [], [], []
    for _ in range(rng.randint(1, 3)):
        term = [rng.choice(labels) for _ in range(rng.randint(0, 3))]
        used += term
        shape = [ext[c] for c in term]
        text = "".join(term)
        if use_ell and rng.random() < 0.7:
            at = rng.randint(0, len(term))
            n = rng.randint(0, nb)
            dims = [b if rng.random() < 0.7 else 1 for b in bext[nb - n:]]
            text = "".join(term[:at]) + "..." + "".join(term[at:])
            shape = shape[:at] + dims + shape[at:]
        terms.append(text)
        shapes.append(shape)
    expr = ",".join(terms)
    if rng.random() < 0.5:
        out = sorted(set(used), key=lambda _: rng.random())
        out = [c for c in out if rng.random() < 0.5]
        if any("..." in t for t in terms):
            out.insert(rng.randint(0, len(out)), "...")
        expr += "->" + "".join(out)
    ops = [np.ones(s) for s in shapes]
    try:
        result = np.einsum(expr, *ops)
    except ValueError:
        continue
    shape_flag = ",".join("x".join(str(d) for d in s) for s in shapes)
    out_shape = "x".join(str(d) for d in np.shape(result))
    # '|' separates fields; an empty field is a scalar shape.
    lines.append(f"{expr}|{shape_flag}|{out_shape}|{float(np.sum(result))}")

# Named extent-1 broadcasting: a label's dim is 1 in some operands (the same in every dim of
# one operand, since a repeated label takes a diagonal). Cases are counted apart so the 300
# above stay as they were.
rng = random.Random(20261202)
named = 0
attention = [("bhqd,bhkd->bhqk", [[2, 1, 5, 4], [2, 3, 7, 4]])]
while named < 60:
    if attention:
        expr, shapes = attention.pop()
    else:
        ext = {c: rng.randint(2, 4) for c in labels}
        terms, shapes, used = [], [], []
        for _ in range(rng.randint(2, 3)):
            term = [rng.choice(labels) for _ in range(rng.randint(1, 4))]
            used += term
            ones = {c for c in term if rng.random() < 0.35}
            shapes.append([1 if c in ones else ext[c] for c in term])
            terms.append("".join(term))
        expr = ",".join(terms)
        if rng.random() < 0.5:
            out = sorted(set(used))
            rng.shuffle(out)
            expr += "->" + "".join(c for c in out if rng.random() < 0.6)
    try:
        result = np.einsum(expr, *[np.ones(s) for s in shapes])
    except ValueError:
        continue
    if all(1 not in s for s in shapes):
        continue
    shape_flag = ",".join("x".join(str(d) for d in s) for s in shapes)
    out_shape = "x".join(str(d) for d in np.shape(result))
    lines.append(f"{expr}|{shape_flag}|{out_shape}|{float(np.sum(result))}")
    named += 1

with open(__file__.replace("numpy_cases.py", "numpy_cases.txt"), "w") as f:
    f.write("# expr|--shapes|NumPy output shape|sum of einsum over all-ones inputs\n")
    f.write("\n".join(lines) + "\n")
