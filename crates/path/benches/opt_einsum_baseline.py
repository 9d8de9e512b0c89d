#!/usr/bin/env python3
"""Baseline for deinsum-path's path-search benchmark: opt_einsum on the same equations.

  generate            (re)write benches/cases.json (seeded, deterministic)
  compare [--no-bench] [--timeout S]
                      run `cargo bench -p deinsum-path --bench paths` (unless --no-bench) and
                      the `path_costs` example, time opt_einsum's strategy of the same name on
                      each equation, replay deinsum's linear paths through opt_einsum, and print
                      a markdown table. Run both in one command so the machine load is shared.

Run with /work/venv/bin/python (numpy + opt_einsum). The product never depends on Python.
"""

import json
import os
import random
import signal
import statistics
import subprocess
import sys
import time

import opt_einsum as oe

HERE = os.path.dirname(os.path.abspath(__file__))
CASES = os.path.join(HERE, "cases.json")
ROOT = os.path.abspath(os.path.join(HERE, "..", "..", ".."))


def alphabet():
    """Alphabetic symbols: ASCII letters, Greek lowercase, then CJK ideographs."""
    for c in "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ":
        yield c
    for o in range(0x3B1, 0x3CA):
        yield chr(o)
    o = 0x4E00
    while True:
        yield chr(o)
        o += 1


def from_rand(n, reg, n_out, seed, d_min=2, d_max=9):
    """A random network like opt_einsum's rand_equation: n*reg/2 indices, each joining two
    distinct tensors, plus n_out output indices on one tensor each (seeded)."""
    rng = random.Random(seed)
    gen = alphabet()
    inputs = [[] for _ in range(n)]
    sizes = {}
    for _ in range(n * reg // 2):
        a, b = rng.sample(range(n), 2)
        c = next(gen)
        inputs[a].append(c)
        inputs[b].append(c)
        sizes[c] = rng.randint(d_min, d_max)
    output = ""
    for _ in range(n_out):
        c = next(gen)
        inputs[rng.randrange(n)].append(c)
        sizes[c] = rng.randint(d_min, d_max)
        output += c
    for t in inputs:
        if not t:  # no empty operand: give it a fresh output index
            c = next(gen)
            t.append(c)
            sizes[c] = rng.randint(d_min, d_max)
            output += c
    return ["".join(t) for t in inputs], output, sizes


def chain(k, seed):
    rng = random.Random(seed)
    letters = "abcdefghijklmnopqrstuvwxyz"
    inputs = [letters[i] + letters[i + 1] for i in range(k)]
    sizes = {letters[i]: rng.randint(2, 100) for i in range(k + 1)}
    return inputs, letters[0] + letters[k], sizes


def lattice(rows, cols, bond):
    """A rows x cols grid of tensors, one index per nearest-neighbour bond, contracted fully."""
    gen = alphabet()
    h = {(r, c): next(gen) for r in range(rows) for c in range(cols - 1)}
    v = {(r, c): next(gen) for r in range(rows - 1) for c in range(cols)}
    inputs = []
    for r in range(rows):
        for c in range(cols):
            t = ""
            if c > 0:
                t += h[(r, c - 1)]
            if c < cols - 1:
                t += h[(r, c)]
            if r > 0:
                t += v[(r - 1, c)]
            if r < rows - 1:
                t += v[(r, c)]
            inputs.append(t)
    sizes = {s: bond for s in list(h.values()) + list(v.values())}
    return inputs, "", sizes


def with_own(spec, seed):
    """`spec` with an index of its own (in no other operand, not in the output, extent 6..12)
    added to about half the operands: summing it out of that operand first can pay."""
    inputs, output, sizes = spec
    rng = random.Random(seed)
    o = 0x5E00  # past every symbol alphabet() gives the networks here
    out = []
    for t in inputs:
        if rng.random() < 0.5:
            c = chr(o)
            o += 1
            t += c
            sizes[c] = rng.randint(6, 12)
        out.append(t)
    return out, output, sizes


def generate():
    small = ["optimal", "branch-all", "branch-2", "branch-1", "dp", "greedy", "auto"]
    cases = []

    def add(name, spec, strategies):
        inputs, output, sizes = spec
        cases.append({"name": name, "inputs": inputs, "output": output, "sizes": sizes, "strategies": strategies})

    add("issue_ijk_ja_ka_al", (["ijk", "ja", "ka", "al"], "il", {c: 10 for c in "ijkal"}), small)
    add("chain8", chain(8, 7), small)
    add("rand8", from_rand(8, 3, 2, 11), small)
    add("rand10", from_rand(10, 3, 2, 12), ["optimal", "branch-2", "branch-1", "dp", "greedy", "auto"])
    add("rand14", from_rand(14, 3, 2, 13), ["optimal", "branch-1", "dp", "greedy", "auto"])
    add("rand100", from_rand(100, 3, 2, 14), ["greedy", "auto"])
    add("lattice6x6", lattice(6, 6, 2), ["dp", "greedy"])
    add("own10", with_own(from_rand(10, 3, 2, 15), 16), ["optimal", "dp", "greedy", "auto"])
    with open(CASES, "w") as f:
        json.dump(cases, f, ensure_ascii=False, indent=1)
        f.write("\n")
    print(f"wrote {CASES} ({len(cases)} cases)")


class Timeout(Exception):
    pass


def _alarm(_sig, _frame):
    raise Timeout()


def time_oe(eq, shapes, strategy, timeout):
    """Median seconds of opt_einsum.contract_path, or None after `timeout` seconds."""
    signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(int(timeout))
    try:
        t0 = time.perf_counter()
        _, info = oe.contract_path(eq, *shapes, shapes=True, optimize=strategy)
        first = time.perf_counter() - t0
    except Timeout:
        return None, None
    finally:
        signal.alarm(0)
    reps = max(1, min(50, int(1.0 / max(first, 1e-6))))
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        oe.contract_path(eq, *shapes, shapes=True, optimize=strategy)
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts + [first]), info


def fmt_t(s):
    if s is None:
        return "-"
    if s < 1e-3:
        return f"{s * 1e6:.1f} µs"
    if s < 1:
        return f"{s * 1e3:.2f} ms"
    return f"{s:.2f} s"


def compare(run_bench, timeout):
    target = os.environ.get("CARGO_TARGET_DIR", os.path.join(ROOT, "target"))
    if run_bench:
        subprocess.run(["cargo", "bench", "-p", "deinsum-path", "--bench", "paths"], cwd=ROOT, check=True,
                       stdout=subprocess.DEVNULL)
    ours_json = subprocess.run(
        ["cargo", "run", "-q", "--release", "-p", "deinsum-path", "--example", "path_costs"],
        cwd=ROOT, check=True, capture_output=True, text=True).stdout
    ours = json.loads(ours_json)
    with open(CASES) as f:
        cases = json.load(f)
    print("| case | n | strategy | deinsum flops | opt_einsum flops | deinsum time | opt_einsum time | speed-up |")
    print("|---|---|---|---|---|---|---|---|")
    bad = 0
    for c in cases:
        eq = ",".join(c["inputs"]) + "->" + c["output"]
        shapes = [tuple(c["sizes"][x] for x in t) for t in c["inputs"]]
        for s in c["strategies"]:
            mine = ours[c["name"]][s]
            # Replay our linear path through opt_einsum: its count must equal ours.
            _, replay = oe.contract_path(eq, *shapes, shapes=True, optimize=[tuple(p) for p in mine["path"]])
            if int(replay.opt_cost) != int(mine["flops"]):
                bad += 1
                print(f"REPLAY MISMATCH {c['name']} {s}: opt_einsum {replay.opt_cost} vs deinsum {mine['flops']}",
                      file=sys.stderr)
            est = os.path.join(target, "criterion", c["name"], s, "new", "estimates.json")
            t_ours = None
            if os.path.exists(est):
                with open(est) as f:
                    t_ours = json.load(f)["median"]["point_estimate"] * 1e-9
            t_oe, info = time_oe(eq, shapes, s, timeout)
            oe_cost = f"{int(info.opt_cost):,}" if info else f"timeout > {timeout:.0f} s"
            if t_oe is None:
                ratio = f"> {timeout / t_ours:,.0f}×" if t_ours else "-"
            else:
                ratio = f"{t_oe / t_ours:,.1f}×" if t_ours else "-"
            print(f"| {c['name']} | {len(c['inputs'])} | {s} | {int(mine['flops']):,} | {oe_cost} | "
                  f"{fmt_t(t_ours)} | {fmt_t(t_oe)} | {ratio} |", flush=True)
    if bad:
        sys.exit(f"{bad} replay mismatches")


def main():
    args = sys.argv[1:]
    if not args or args[0] not in ("generate", "compare"):
        sys.exit(__doc__)
    if args[0] == "generate":
        generate()
    else:
        timeout = 60.0
        if "--timeout" in args:
            timeout = float(args[args.index("--timeout") + 1])
        compare("--no-bench" not in args, timeout)


if __name__ == "__main__":
    main()
