"""Writes opt_einsum_symbols.txt: opt_einsum's first 2,000 index symbols, and a 200-operand
einsum written with them together with the output opt_einsum infers for it.

Run with a Python that has opt_einsum (a scratch venv outside the repository will do). The
Rust tests (tests/symbols.rs) read the table, so the test suite itself needs no Python.
Symbols are written as hexadecimal code points, so the file stays plain ASCII.
"""

import random

import numpy as np
import opt_einsum as oe

N = 2000
symbols = [oe.get_symbol(i) for i in range(N)]
assert len(set(symbols)) == N

# A 200-operand network: a ring of matrices with a spare index on some operands, over the
# symbols from the end of the table (so most are far past 'Z').
rng = random.Random(20261202)
n_ops = 200
ring = symbols[N - n_ops:]
spare = symbols[N - 2 * n_ops:N - n_ops]
terms = []
for k in range(n_ops):
    t = ring[k] + ring[(k + 1) % n_ops]
    if rng.random() < 0.3:
        t += spare[k]
    terms.append(t)
expr = ",".join(terms)
shapes = [(2,) * len(t) for t in terms]
oe.contract_path(expr, *shapes, shapes=True, optimize="greedy")  # opt_einsum accepts it
# opt_einsum's own reading of the expression: its implicit output (the spare indices, sorted).
full = oe.parser.parse_einsum_input([expr] + [np.empty(s) for s in shapes])
output = full[1]

with open(__file__.replace(".py", ".txt"), "w") as f:
    f.write(f"# opt_einsum {oe.__version__}: get_symbol(i) for i < {N}, as hex code points\n")
    f.write(" ".join(f"{ord(c):x}" for c in symbols) + "\n")
    f.write("# a 200-operand einsum over those symbols (terms as hex code points, ',' between)\n")
    f.write(",".join(" ".join(f"{ord(c):x}" for c in t) for t in terms) + "\n")
    f.write("# the output opt_einsum infers for it (hex code points)\n")
    f.write(" ".join(f"{ord(c):x}" for c in output) + "\n")
