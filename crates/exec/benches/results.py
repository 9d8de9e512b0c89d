"""Writes RESULTS.md (to stdout) from the JSON lines benches/e2e.sh collected (argv[1])."""
import json
import os
import sys

TARGETS = {"mm": 1.2, "3mm": 1.25, "mttkrp": 0.6, "ttmc": 1.0, "chain5": 1.0}
CONFIGS = [("p1t2", "P=1 x 2 threads"), ("p2t1", "P=2 x 1, in-process"),
           ("mpi2t1", "P=2 x 1, MPI")]

rows = [json.loads(line) for line in open(sys.argv[1]) if line.strip()]
quick = "--quick" in sys.argv
load = {k: v for r in rows for k, v in r.items() if k.startswith("load")}
numpy_info = next((r["numpy"] for r in rows if "numpy" in r), "?")
# Per (config, case), the best round's median (numpy and deinsum alike).
by = {}
for r in rows:
    if "config" not in r:
        continue
    key = (r["config"], r["case"])
    if key not in by or r["median"] < by[key]["median"]:
        by[key] = r
rounds = len({r.get("round", 1) for r in rows if "config" in r})
cases, exprs = [], {}
for r in rows:
    if r.get("config") == "numpy2" and r["case"] not in exprs:
        cases.append(r["case"])
        exprs[r["case"]] = r["expr"]
configs = [c for c in CONFIGS if any(k[0] == c[0] for k in by)]

print("# End-to-end results (issue 12)\n")
print("Written by `crates/exec/benches/e2e.sh`%s. Times are medians of the contraction alone "
      "(inputs made beforehand; deinsum: the slowest rank from the run's common start, `run --repeat --warmup 1`), "
      "in seconds; the ratio is deinsum's median over numpy's (`einsum(optimize=True)`, "
      "2 BLAS threads; numpy %s) measured in the same command. The set ran %d round(s), "
      "kernel by kernel; every configuration, numpy's included, keeps its best round. "
      "Target: the ratio at most the kernel's target in every configuration.\n"
      % (" --quick (small sizes)" if quick else "", numpy_info, rounds))
cpu = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo")
            if line.startswith("model name")), "?") if os.path.exists("/proc/cpuinfo") else "?"
print(f"- processor: {cpu}, {os.cpu_count()} logical cores")
for k, v in load.items():
    print(f"- {k.replace('_', ' ')}: `{v.strip()}`")
print()
loads = [float(v.split("load average:")[1].split(",")[0]) for v in load.values()
         if "load average:" in v]
cores = os.cpu_count() or 1
if loads and max(loads) > cores:
    print(f"**Caution:** the machine was shared (load average up to {max(loads):.1f} on {cores} "
          "cores). Every configuration then runs slower than on a quiet machine, and numpy's "
          "two spinning BLAS threads lose the most, so these ratios are not the quiet-machine "
          "ratios the targets are stated for; compare numpy's times with the issue's table to "
          "see how much the load weighed.\n")
head = "| kernel | expression | numpy 2 thr | " + " | ".join(
    f"{label} | ratio" for _, label in configs) + " | target |"
print(head)
print("|" + "---|" * (head.count("|") - 1))
for c in cases:
    np_t = by[("numpy2", c)]["median"]
    cells = [c, f"`{exprs[c]}`", f"{np_t:.4f}"]
    for key, _ in configs:
        r = by.get((key, c))
        if r is None:
            cells += ["-", "-"]
            continue
        ratio = r["median"] / np_t
        ok = "" if ratio <= TARGETS.get(c, 1.0) else " (over)"
        cells += [f"{r['median']:.4f}", f"{ratio:.2f}{ok}"]
    cells.append(f"<= {TARGETS.get(c, 1.0)}")
    print("| " + " | ".join(cells) + " |")
