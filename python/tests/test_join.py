"""`deinsum join` against DuckDB (the oracle) on random tables: the four kinds, every
strategy, several rank counts, int and string keys with NULLs and duplicates, empty and
one-row tables; CSV and Parquet outputs; rows compared as multisets. Also GROUP BY sum and
count, and the exit status of bad input."""

import csv
import json
import os
import random
import subprocess

import duckdb
import pytest

from conftest import _find_cli

KINDS = ["inner", "left", "right", "full"]
STRATEGIES = ["shuffle", "broadcast", "semi", "index", "bloom", "auto"]


def _norm(v):
    """One cell as text that both sides agree on."""
    if v is None or v == "":
        return "NULL"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(float(v)) if isinstance(v, float) else str(v)
    for conv in (int, float):
        try:
            return _norm(conv(v))
        except ValueError:
            pass
    if v in ("true", "false"):
        return v
    return v


def _write(path, rows, key_kind, distinct, null_pct, prefix, rng):
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["k", f"{prefix}x", f"{prefix}s"])
        for _ in range(rows):
            if rng.random() * 100 < null_pct:
                k = ""
            else:
                d = rng.randrange(distinct)
                k = d - 2 if key_kind == "int" else f"key{d}"
            x = "" if rng.random() < 0.1 else f"{rng.randrange(1000) / 4}"
            s = "" if rng.random() < 0.1 else "s" * (1 + rng.randrange(4))
            w.writerow([k, x, s])


def _ours(path):
    with open(path, newline="") as f:
        rows = list(csv.reader(f))[1:]
    return sorted("|".join(_norm(c) for c in r) for r in rows)


def _duck(sql):
    return sorted("|".join(_norm(c) for c in r) for r in duckdb.sql(sql).fetchall())


def _run(*args):
    exe = _find_cli()
    return subprocess.run([exe, *args], capture_output=True, text=True)


CASES = [
    ("int", 60, 40, 9, 10),
    ("str", 35, 50, 12, 10),
    ("int", 0, 7, 3, 0),
    ("str", 1, 1, 1, 0),
    ("int", 8, 9, 3, 100),
]


@pytest.mark.parametrize("case", range(len(CASES)))
def test_join_equals_duckdb(tmp_path, case):
    key_kind, nl, nr, distinct, nulls = CASES[case]
    rng = random.Random(case)
    lp, rp = tmp_path / "l.csv", tmp_path / "r.csv"
    _write(lp, nl, key_kind, distinct, nulls, "l", rng)
    _write(rp, nr, key_kind, distinct, nulls, "r", rng)
    # Empty and all-NULL columns read as VARCHAR in DuckDB; give the types explicitly.
    kt = "BIGINT" if key_kind == "int" else "VARCHAR"
    cols = lambda p: f"{{'k': '{kt}', '{p}x': 'DOUBLE', '{p}s': 'VARCHAR'}}"
    lt = f"read_csv('{lp}', header=true, columns={cols('l')}) AS l"
    rt = f"read_csv('{rp}', header=true, columns={cols('r')}) AS r"
    schema = f"k:{'int64' if key_kind == 'int' else 'string'},lx:float64,rx:float64,ls:string,rs:string"
    for how in KINDS:
        want = _duck(f"SELECT * FROM {lt} {how.upper()} JOIN {rt} USING (k)")
        for strategy in STRATEGIES:
            for procs, ext in [(1, "csv"), (3, "parquet"), (5, "csv")]:
                out = tmp_path / f"o.{ext}"
                r = _run("join", str(lp), str(rp), "--on", "k", "--how", how,
                         "--strategy", strategy, "--procs", str(procs), "--schema", schema,
                         "--output", str(out))
                assert r.returncode == 0, r.stderr
                if ext == "csv":
                    got = _ours(out)
                else:
                    got = _duck(f"SELECT * FROM read_parquet('{out}')")
                assert got == want, f"{how} {strategy} P={procs} {ext}"


# (placement, strategies it runs): tables on their own groups of ranks run every strategy;
# tables split by columns run the join index (auto takes it).
PLACEMENTS = [("separate", STRATEGIES), ("columns", ["index", "auto"])]


@pytest.mark.parametrize("case", [0, 1, 2, 3, 4])
@pytest.mark.parametrize("placement", [p for p, _ in PLACEMENTS])
def test_placements_equal_duckdb(tmp_path, case, placement):
    """Each table on its own group of ranks, and tables split by columns (keys on one group,
    the other columns on another), against DuckDB: every kind, the placement's strategies,
    one to five ranks; NULL keys, duplicates, an empty and a one-row table among the cases.
    Every run's measured bytes equal the prediction on every rank."""
    import json

    key_kind, nl, nr, distinct, nulls = CASES[case]
    rng = random.Random(40 + case)
    lp, rp = tmp_path / "l.csv", tmp_path / "r.csv"
    _write(lp, nl, key_kind, distinct, nulls, "l", rng)
    _write(rp, nr, key_kind, distinct, nulls, "r", rng)
    kt = "BIGINT" if key_kind == "int" else "VARCHAR"
    cols = lambda p: f"{{'k': '{kt}', '{p}x': 'DOUBLE', '{p}s': 'VARCHAR'}}"
    lt = f"read_csv('{lp}', header=true, columns={cols('l')}) AS l"
    rt = f"read_csv('{rp}', header=true, columns={cols('r')}) AS r"
    schema = f"k:{'int64' if key_kind == 'int' else 'string'},lx:float64,rx:float64,ls:string,rs:string"
    strategies = dict(PLACEMENTS)[placement]
    for how in KINDS:
        want = _duck(f"SELECT * FROM {lt} {how.upper()} JOIN {rt} USING (k)")
        for si, strategy in enumerate(strategies):
            procs = 1 + (case + si + KINDS.index(how)) % 5
            out = tmp_path / "o.csv"
            r = _run("join", str(lp), str(rp), "--on", "k", "--how", how,
                     "--strategy", strategy, "--procs", str(procs), "--schema", schema,
                     "--placement", placement, "--format", "json", "--output", str(out))
            what = f"{placement} {how} {strategy} P={procs}"
            assert r.returncode == 0, f"{what}: {r.stderr}"
            rep = json.loads(r.stdout)
            assert rep["placement"] == placement, what
            pred = next(p for p in rep["inspection"]["predictions"]
                        if p["strategy"] == rep["strategy"])
            assert rep["measured_sent"] == pred["sent"], what
            assert rep["measured_received"] == pred["received"], what
            assert _ours(out) == want, what


def test_columns_placement_refuses_row_strategies(tmp_path):
    lp = tmp_path / "l.csv"
    lp.write_text("k,a\n1,2\n")
    r = _run("join", str(lp), str(lp), "--on", "k", "--placement", "columns",
             "--strategy", "shuffle", "--procs", "2")
    assert r.returncode == 2 and "join index" in r.stderr, r.stderr
    r = _run("join", str(lp), str(lp), "--on", "k", "--placement", "diagonal")
    assert r.returncode == 2 and "--placement" in r.stderr, r.stderr


def test_group_by_equals_duckdb(tmp_path):
    rng = random.Random(5)
    lp, rp = tmp_path / "l.csv", tmp_path / "r.csv"
    _write(lp, 80, "int", 10, 5, "l", rng)
    _write(rp, 50, "int", 10, 5, "r", rng)
    for agg, flag in [("sum(rx)", ["--sum", "rx"]), ("count(*)", ["--count"])]:
        want = _duck(f"SELECT ls, {agg} FROM '{lp}' JOIN '{rp}' USING (k) GROUP BY ls")
        for procs in (1, 4):
            out = tmp_path / "g.csv"
            r = _run("join", str(lp), str(rp), "--on", "k", "--group-by", "ls", *flag,
                     "--procs", str(procs), "--output", str(out))
            assert r.returncode == 0, r.stderr
            assert _ours(out) == want, f"{agg} P={procs}"


def test_bad_input_exits_2(tmp_path):
    lp, rp = tmp_path / "l.csv", tmp_path / "r.csv"
    lp.write_text("k,a\n1,2\n")
    rp.write_text("k,b\n1,2\n3,4,5\n")
    r = _run("join", str(lp), str(lp), "--on", "z")
    assert r.returncode == 2 and "no column `z`" in r.stderr and "l.csv" in r.stderr
    r = _run("join", str(lp), str(rp), "--on", "k")
    assert r.returncode == 2 and "r.csv:3" in r.stderr
    (tmp_path / "x.parquet").write_text("not parquet")
    r = _run("join", str(lp), str(tmp_path / "x.parquet"), "--on", "k")
    assert r.returncode == 2 and "not a Parquet file" in r.stderr
    # --backend mpi: refused by a build without the `mpi` feature; a build with it runs as a
    # world of one rank (MPI's singleton start) and gives the join.
    r = _run("join", str(lp), str(lp), "--on", "k", "--backend", "mpi")
    if r.returncode == 2:
        assert "`mpi` feature" in r.stderr
    else:
        assert r.returncode == 0, r.stderr
        assert r.stdout.splitlines() == ["k,a,a_1", "1,2,2"]


def test_repeat_runs_the_same_join_again(tmp_path):
    """--repeat N: the last run's rows equal DuckDB's, the JSON lists N runs' seconds and
    reports their median; 0, or with --explain/--group-by, exits 2."""
    rng = random.Random(7)
    lp, rp = tmp_path / "l.csv", tmp_path / "r.csv"
    _write(lp, 70, "int", 9, 10, "l", rng)
    _write(rp, 40, "int", 9, 10, "r", rng)
    want = _duck(f"SELECT * FROM '{lp}' LEFT JOIN '{rp}' USING (k)")
    for strategy, procs in [("shuffle", 3), ("broadcast", 2), ("auto", 5), ("semi", 1)]:
        out = tmp_path / "o.csv"
        r = _run("join", str(lp), str(rp), "--on", "k", "--how", "left", "--strategy", strategy,
                 "--procs", str(procs), "--repeat", "3", "--format", "json", "--output", str(out))
        assert r.returncode == 0, r.stderr
        rep = json.loads(r.stdout)
        runs = rep["join_seconds_runs"]
        assert len(runs) == 3 and all(t > 0 for t in runs), runs
        assert rep["join_seconds"] == sorted(runs)[1]
        assert _ours(out) == want, f"{strategy} P={procs}"
    for bad in (["--repeat", "0"], ["--repeat", "2", "--explain"],
                ["--repeat", "2", "--group-by", "ls", "--count"]):
        r = _run("join", str(lp), str(rp), "--on", "k", *bad)
        assert r.returncode == 2 and "--repeat" in r.stderr, (bad, r.stderr)
