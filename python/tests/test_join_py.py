"""`deinsum.join` on pandas DataFrames and pyarrow Tables against DuckDB (the oracle): the
four kinds, every strategy, 1, 2, 3 and 5 ranks, int and string keys with NULLs and
duplicates, empty and one-row tables; rows compared as multisets, the result of the input's
type, and every rank's measured bytes equal to the predicted."""

import math
import random

import pytest

pa = pytest.importorskip("pyarrow")
pd = pytest.importorskip("pandas")
duckdb = pytest.importorskip("duckdb")

import deinsum  # noqa: E402

KINDS = ["inner", "left", "right", "full"]
STRATEGIES = ["shuffle", "broadcast", "semi", "index", "bloom", "auto"]
PROCS = [1, 2, 3, 5]


def _cell(v):
    """One cell as text both sides agree on (NULL and NaN alike, numbers as floats)."""
    if v is None or (isinstance(v, float) and math.isnan(v)) or v is pd.NA:
        return "NULL"
    if isinstance(v, bool):
        return str(v).lower()
    if isinstance(v, (int, float)):
        return repr(float(v))
    return str(v)


def _rows(t):
    if isinstance(t, list):
        return sorted("|".join(_cell(c) for c in row) for row in t)
    if isinstance(t, pd.DataFrame):
        t = pa.Table.from_pandas(t, preserve_index=False)
    cols = [c.to_pylist() for c in t.columns]
    return sorted("|".join(_cell(c[i]) for c in cols) for i in range(t.num_rows))


def _table(rng, rows, key_kind, distinct, null_pct, prefix):
    keys, xs, ss = [], [], []
    for _ in range(rows):
        if rng.random() * 100 < null_pct:
            keys.append(None)
        else:
            d = rng.randrange(distinct)
            keys.append(d - 2 if key_kind == "int" else f"key{d}")
        xs.append(None if rng.random() < 0.1 else rng.randrange(1000) / 4)
        ss.append(None if rng.random() < 0.1 else "s" * (1 + rng.randrange(4)))
    kt = pa.int64() if key_kind == "int" else pa.string()
    return pa.table({"k": pa.array(keys, kt), f"{prefix}x": pa.array(xs, pa.float64()),
                     f"{prefix}s": pa.array(ss, pa.string())})


# (key kind, left rows, right rows, distinct keys, NULL %)
CASES = [
    ("int", 50, 35, 8, 10),
    ("str", 30, 45, 11, 15),
    ("int", 0, 6, 3, 0),
    ("str", 1, 1, 1, 0),
    ("int", 7, 9, 3, 100),
]


def _duck(lt, rt, how):
    con = duckdb.connect()
    con.register("lt", lt)
    con.register("rt", rt)
    return _rows(con.execute(f"SELECT * FROM lt {how.upper()} JOIN rt USING (k)").fetchall())


@pytest.mark.parametrize("case", range(len(CASES)))
def test_join_equals_duckdb(case):
    key_kind, nl, nr, distinct, nulls = CASES[case]
    rng = random.Random(case)
    lt = _table(rng, nl, key_kind, distinct, nulls, "l")
    rt = _table(rng, nr, key_kind, distinct, nulls, "r")
    for how in KINDS:
        want = _duck(lt, rt, how)
        for strategy in STRATEGIES:
            for procs in PROCS:
                what = f"{how} {strategy} P={procs}"
                out, rep = deinsum.join(lt, rt, on="k", how=how, procs=procs,
                                        strategy=strategy, report=True)
                assert isinstance(out, pa.Table), what
                assert _rows(out) == want, what
                assert rep["procs"] == procs
                pred = next(p for p in rep["inspection"]["predictions"]
                            if p["strategy"] == rep["strategy"])
                assert rep["measured_sent"] == pred["sent"], what
                assert rep["measured_received"] == pred["received"], what
                if strategy != "auto":
                    assert rep["strategy"] == strategy


def test_pandas_in_pandas_out():
    rng = random.Random(9)
    lt = _table(rng, 40, "str", 7, 10, "l")
    rt = _table(rng, 25, "str", 7, 10, "r")
    ld, rd = lt.to_pandas(), rt.to_pandas()
    for how in KINDS:
        for procs in (1, 3):
            out = deinsum.join(ld, rd, on="k", how=how, procs=procs)
            assert isinstance(out, pd.DataFrame)
            assert list(out.columns) == ["k", "lx", "ls", "rx", "rs"]
            assert _rows(out) == _duck(lt, rt, how), f"{how} P={procs}"


def test_multi_column_keys_and_name_clash():
    lt = pa.table({"a": [1, 1, 2, None], "b": ["x", "y", "x", "x"], "v": [1.0, 2.0, 3.0, 4.0]})
    rt = pa.table({"a": [1, 2, 2], "b": ["x", "x", "z"], "v": [10.0, 20.0, 30.0]})
    con = duckdb.connect()
    con.register("lt", lt)
    con.register("rt", rt)
    for how in KINDS:
        want = _rows(con.execute(f"SELECT * FROM lt {how.upper()} JOIN rt USING (a, b)").fetchall())
        out = deinsum.join(lt, rt, on=["a", "b"], how=how, procs=2)
        assert out.column_names == ["a", "b", "v", "v_1"]
        assert _rows(out) == want, how


def test_bad_input():
    lt = pa.table({"k": [1, 2]})
    with pytest.raises(ValueError, match="no column `z`"):
        deinsum.join(lt, lt, on="z")
    with pytest.raises(ValueError, match="--how"):
        deinsum.join(lt, lt, on="k", how="sideways")
    with pytest.raises(ValueError, match="key `k` is int64"):
        deinsum.join(lt, pa.table({"k": ["a"]}), on="k")
    with pytest.raises(MemoryError, match="over the limit"):
        deinsum.join(lt, lt, on="k", max_output_bytes=1)
    with pytest.raises(TypeError, match="pandas DataFrame or a pyarrow Table"):
        deinsum.join([1, 2], lt, on="k")


# (placement, strategies it takes): separate runs every row strategy on its two groups;
# columns is joined by the join index alone.
PLACEMENTS = [
    ("rows", ["shuffle", "broadcast", "semi", "index", "bloom", "auto"]),
    ("separate", ["shuffle", "broadcast", "semi", "index", "bloom", "auto"]),
    ("columns", ["index", "auto"]),
]


@pytest.mark.parametrize("placement,strategies", PLACEMENTS)
def test_placement_equals_duckdb(placement, strategies):
    rng = random.Random(77)
    lt = _table(rng, 40, "int", 9, 10, "l")
    rt = _table(rng, 23, "int", 9, 10, "r")
    for how in KINDS:
        want = _duck(lt, rt, how)
        for strategy in strategies:
            for procs in (1, 2, 3, 5):
                what = f"{placement} {how} {strategy} P={procs}"
                out, rep = deinsum.join(lt, rt, on="k", how=how, procs=procs,
                                        strategy=strategy, placement=placement, report=True)
                assert _rows(out) == want, what
                assert rep["placement"] == placement, what
                pred = next(p for p in rep["inspection"]["predictions"]
                            if p["strategy"] == rep["strategy"])
                assert rep["measured_sent"] == pred["sent"], what
                assert rep["measured_received"] == pred["received"], what
    # pandas in, pandas out, whatever the placement.
    out = deinsum.join(lt.to_pandas(), rt.to_pandas(), on="k", procs=3, placement=placement)
    assert isinstance(out, pd.DataFrame)
    assert _rows(out) == _duck(lt, rt, "inner")


def test_bad_placement():
    lt = pa.table({"k": [1, 2]})
    for bad in ("diagonal", "", None, 3):
        with pytest.raises(ValueError, match="placement"):
            deinsum.join(lt, lt, on="k", procs=2, placement=bad)
    with pytest.raises(ValueError, match="join index"):
        deinsum.join(lt, lt, on="k", procs=2, placement="columns", strategy="shuffle")


def test_inspect_sketch_gives_the_same_rows():
    """inspect="sketch" changes the figures behind the choice, never the rows; the shuffle's
    bytes stay exact and the report says which inspector ran."""
    rng = random.Random(5)
    lt = _table(rng, 60, "int", 12, 10, "l")
    rt = _table(rng, 30, "int", 12, 10, "r")
    for how in KINDS:
        want = _duck(lt, rt, how)
        for strategy in STRATEGIES:
            out, rep = deinsum.join(lt, rt, on="k", how=how, procs=3, strategy=strategy,
                                    inspect="sketch", report=True)
            assert _rows(out) == want, (how, strategy)
            assert rep["inspect"] == "sketch"
            assert rep["inspection"]["sketch"]["counters"] > 0
            pred = next(p for p in rep["inspection"]["predictions"]
                        if p["strategy"] == rep["strategy"])
            if rep["strategy"] in ("shuffle", "broadcast"):
                assert pred["bytes_exact"]
                assert rep["measured_sent"] == pred["sent"], (how, strategy)
    _, rep = deinsum.join(lt, rt, on="k", procs=2, report=True)
    assert rep["inspect"] == "exact"  # auto: 90 rows are far below the sketch threshold
    with pytest.raises(ValueError, match="inspect"):
        deinsum.join(lt, rt, on="k", procs=2, inspect="guess")
