"""`deinsum join` under mpirun (the MPI backend) against DuckDB on random tables: 1 to 5
ranks, the four kinds, every strategy, int and string keys with NULLs and duplicates, an
empty table, CSV and Parquet inputs (each rank reads its own row range: byte ranges cut at
line ends, row groups); rows compared as multisets. Every run also asserts the MPI world has
the ranks asked for and that each rank moved exactly the predicted bytes.

Runs when DEINSUM_MPI_CLI names a `deinsum` built with `--features mpi` (.ci/mpi.sh sets it);
skipped otherwise."""

import json
import os
import random
import subprocess

import duckdb
import pytest

from test_join import KINDS, STRATEGIES, _duck, _ours, _write

CLI = os.environ.get("DEINSUM_MPI_CLI")
MPIRUN = os.environ.get("DEINSUM_MPIRUN", "mpirun")
pytestmark = pytest.mark.skipif(not CLI, reason="DEINSUM_MPI_CLI (an MPI build) not set")

# (key kind, left rows, right rows, distinct keys, NULL %, inputs)
CASES = [
    ("int", 70, 45, 9, 10, "csv"),
    ("str", 40, 60, 12, 10, "parquet"),
    ("int", 0, 9, 3, 0, "csv"),
    ("str", 25, 1, 4, 20, "csv"),
    ("int", 53, 38, 6, 5, "parquet"),
]
NPS = [1, 2, 3, 4, 5]


def _mpirun(n, *args):
    env = dict(os.environ)
    env.update(
        OMPI_ALLOW_RUN_AS_ROOT="1",
        OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
        OMPI_MCA_rmaps_base_oversubscribe="1",
    )
    return subprocess.run(
        [MPIRUN, "-n", str(n), CLI, *args],
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        env=env,
        timeout=300,
    )


@pytest.fixture(scope="module")
def tables(tmp_path_factory):
    """Each case's two tables (as CSV, and as Parquet of small row groups where asked) and
    the DuckDB expression reading each."""
    root = tmp_path_factory.mktemp("join_mpi")
    out = []
    for c, (key_kind, nl, nr, distinct, nulls, fmt) in enumerate(CASES):
        rng = random.Random(100 + c)
        lp, rp = root / f"l{c}.csv", root / f"r{c}.csv"
        _write(lp, nl, key_kind, distinct, nulls, "l", rng)
        _write(rp, nr, key_kind, distinct, nulls, "r", rng)
        kt = "BIGINT" if key_kind == "int" else "VARCHAR"
        cols = lambda p: f"{{'k': '{kt}', '{p}x': 'DOUBLE', '{p}s': 'VARCHAR'}}"
        lsrc = f"read_csv('{lp}', header=true, columns={cols('l')})"
        rsrc = f"read_csv('{rp}', header=true, columns={cols('r')})"
        schema = (f"k:{'int64' if key_kind == 'int' else 'string'},"
                  "lx:float64,rx:float64,ls:string,rs:string")
        if fmt == "parquet":
            lq, rq = root / f"l{c}.parquet", root / f"r{c}.parquet"
            duckdb.sql(f"COPY (SELECT * FROM {lsrc}) TO '{lq}' (FORMAT parquet, ROW_GROUP_SIZE 8)")
            duckdb.sql(f"COPY (SELECT * FROM {rsrc}) TO '{rq}' (FORMAT parquet, ROW_GROUP_SIZE 8)")
            lp, rp = lq, rq
        out.append((lp, rp, lsrc, rsrc, schema))
    return out


@pytest.mark.parametrize("n", NPS)
@pytest.mark.parametrize("how", KINDS)
def test_join_under_mpirun_equals_duckdb(tmp_path, tables, n, how):
    for si, strategy in enumerate(STRATEGIES):
        c = (n + si + KINDS.index(how)) % len(CASES)
        lp, rp, lsrc, rsrc, schema = tables[c]
        want = _duck(f"SELECT * FROM {lsrc} AS l {how.upper()} JOIN {rsrc} AS r USING (k)")
        out = tmp_path / f"o{si}.csv"
        r = _mpirun(n, "join", str(lp), str(rp), "--on", "k", "--how", how,
                    "--strategy", strategy, "--schema", schema, "--format", "json",
                    "--output", str(out))
        what = f"{how} {strategy} case {c} -n {n}"
        assert r.returncode == 0, f"{what}: {r.stderr}"
        rep = json.loads(r.stdout)
        assert rep["inspection"]["procs"] == n, f"{what}: the world is not {n} ranks"
        pred = next(p for p in rep["inspection"]["predictions"]
                    if p["strategy"] == rep["strategy"])
        assert rep["measured_sent"] == pred["sent"], what
        assert rep["measured_received"] == pred["received"], what
        assert _ours(out) == want, what


def test_group_by_under_mpirun_equals_duckdb(tmp_path, tables):
    lp, rp, lsrc, rsrc, schema = tables[0]
    for agg, flag in [("sum(rx)", ["--sum", "rx"]), ("count(*)", ["--count"])]:
        want = _duck(f"SELECT ls, {agg} FROM {lsrc} AS l JOIN {rsrc} AS r USING (k) GROUP BY ls")
        for n in (2, 3):
            out = tmp_path / "g.csv"
            r = _mpirun(n, "join", str(lp), str(rp), "--on", "k", "--group-by", "ls", *flag,
                        "--schema", schema, "--output", str(out))
            assert r.returncode == 0, r.stderr
            assert _ours(out) == want, f"{agg} -n {n}"


def test_input_errors_under_mpirun(tmp_path):
    lp, rp = tmp_path / "l.csv", tmp_path / "r.csv"
    lp.write_text("k,a\n1,2\n")
    rp.write_text("k,b\n1,2\n3,4,5\n")
    # Exit 2, said once (by rank 0), naming the file and column or line.
    r = _mpirun(3, "join", str(lp), str(lp), "--on", "z")
    assert r.returncode == 2 and r.stderr.count("no column `z`") == 1, r.stderr
    r = _mpirun(3, "join", str(lp), str(rp), "--on", "k")
    assert r.returncode == 2 and r.stderr.count("r.csv:3") == 1, r.stderr
    r = _mpirun(2, "join", str(lp), str(lp), "--on", "k", "--procs", "3")
    assert r.returncode == 2 and "the MPI world has 2 ranks" in r.stderr, r.stderr
