#!/usr/bin/env python3
"""Executes the golden SQL of causal/sqlgen's two ClickHouse passes on the reference
data and checks the sums against the numpy reference (ols_reference.json;
the data and the reference sit in ../../stats/testdata).

ClickHouse is not needed: the golden queries use only nested subqueries,
count/sum/max and two ClickHouse functions, which are defined here for
SQLite (toFloat64 -> float, isFinite -> math.isfinite). This checks the
semantics of the generated text (residual and leverage expressions, meat
sums, row layout); TestDesignOnClickHouse runs the passes on the real server.

Run (from causal/sqlgen/testdata):  python3 sql_check.py   (standard library only)
"""
import csv
import json
import math
import sqlite3


def close(a, b, rel=1e-9):
    return abs(a - b) <= rel * max(abs(b), 1e-300)


def main():
    ref = json.load(open("../../stats/testdata/ols_reference.json"))
    db = sqlite3.connect(":memory:")
    db.create_function("toFloat64", 1, float, deterministic=True)
    db.create_function("isFinite", 1, lambda v: int(v is not None and math.isfinite(v)), deterministic=True)
    db.execute("CREATE TABLE ols_data (x1 REAL, x2 REAL, x3 REAL, y REAL)")
    with open("../../stats/testdata/ols_data.csv") as f:
        rows = [tuple(map(float, r)) for r in list(csv.reader(f))[1:]]
    db.executemany("INSERT INTO ols_data VALUES (?, ?, ?, ?)", rows)
    p = 4

    row = db.execute(open("ols_suffstats.golden.sql").read()).fetchone()
    k = 1
    assert row[0] == ref["n"], row[0]
    for i in range(p):
        for j in range(i, p):
            assert close(row[k], ref["xtx"][i][j]), ("xtx", i, j)
            k += 1
    for i in range(p):
        assert close(row[k], ref["xty"][i]), ("xty", i)
        k += 1
    assert close(row[k], ref["yty"]), "yty"

    row = db.execute(open("ols_meat_full.golden.sql").read()).fetchone()
    assert row[0] == ref["n"]
    assert close(row[1], ref["max_leverage"]), "h_max"
    k = 2
    for name in ["meat_hc0", "meat_hc3"]:
        for i in range(p):
            for j in range(i, p):
                assert close(row[k], ref[name][i][j]), (name, i, j, row[k], ref[name][i][j])
                k += 1

    row = db.execute(open("ols_meat_coef2.golden.sql").read()).fetchone()
    A = ref["xtx_inv"]
    for col, name, se in [(2, "meat_hc0", "HC0"), (3, "meat_hc3", "HC3")]:
        assert close(math.sqrt(row[col]), ref["se_explicit"][se][2]), (se, row[col])
    print("sql_check: ok (sqlite %s)" % sqlite3.sqlite_version)


if __name__ == "__main__":
    main()
