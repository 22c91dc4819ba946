#!/usr/bin/env python3
"""Independent reference values for causal/stats' OLS and robust standard errors.

Reads ols_data.csv (columns x1,x2,x3,y; the design matrix is [1, x1, x2, x3])
and writes ols_reference.json with
  - coefficients, residual variance, classical SEs and HC0/HC1/HC3 SEs
    computed with numpy by the explicit formulas
        beta = (X'X)^-1 X'y,  e = y - X beta,  h_i = x_i'(X'X)^-1 x_i,
        HC0 = A (sum e_i^2 x_i x_i') A,          A = (X'X)^-1
        HC1 = n/(n-k) HC0
        HC3 = A (sum e_i^2/(1-h_i)^2 x_i x_i') A
  - the same from statsmodels OLS(y, X).fit(cov_type='HC0'/'HC1'/'HC3'),
    asserted equal to the explicit ones to 1e-10 (relative).
  - the two meat matrices M0 and M3 (for the SQL-pass parse test).

Run (from causal/stats/testdata):
    python3 -m venv /tmp/refenv && /tmp/refenv/bin/pip install numpy scipy statsmodels
    /tmp/refenv/bin/python ols_reference.py            # writes ols_reference.json
    /tmp/refenv/bin/python ols_reference.py --make-data  # regenerates ols_data.csv first
The versions used are recorded in the JSON ("versions").
"""
import json
import platform
import sys

import numpy as np
import scipy
import statsmodels
import statsmodels.api as sm


def make_data():
    # Seeded; values rounded to 3 decimals so the CSV is exact and readable.
    rng = np.random.default_rng(20240917)
    n = 30
    x1 = np.round(rng.uniform(0, 10, n), 3)
    x2 = (rng.uniform(size=n) < 0.4).astype(float)
    x3 = np.round(rng.normal(5, 2, n), 3)
    x3[7] = 19.5  # one high-leverage row so HC3 differs visibly from HC0
    noise = rng.normal(0, 1, n) * (0.5 + 0.3 * x1)  # heteroskedastic
    y = np.round(2.0 + 0.8 * x1 + 3.0 * x2 - 0.4 * x3 + noise, 3)
    with open("ols_data.csv", "w") as f:
        f.write("x1,x2,x3,y\n")
        for r in zip(x1, x2, x3, y):
            f.write("%.3f,%.0f,%.3f,%.3f\n" % r)


def main():
    if "--make-data" in sys.argv:
        make_data()
    d = np.loadtxt("ols_data.csv", delimiter=",", skiprows=1)
    X = np.column_stack([np.ones(len(d)), d[:, 0], d[:, 1], d[:, 2]])
    y = d[:, 3]
    n, k = X.shape
    A = np.linalg.inv(X.T @ X)
    beta = A @ X.T @ y
    e = y - X @ beta
    h = np.einsum("ij,jk,ik->i", X, A, X)
    sigma2 = e @ e / (n - k)
    M0 = (X * (e**2)[:, None]).T @ X
    M3 = (X * (e**2 / (1 - h) ** 2)[:, None]).T @ X
    cov = {
        "classical": sigma2 * A,
        "HC0": A @ M0 @ A,
        "HC1": n / (n - k) * (A @ M0 @ A),
        "HC3": A @ M3 @ A,
    }
    se = {kname: np.sqrt(np.diag(c)).tolist() for kname, c in cov.items()}

    sm_se = {}
    for kname in ["nonrobust", "HC0", "HC1", "HC3"]:
        res = sm.OLS(y, X).fit(cov_type=kname)
        assert np.allclose(res.params, beta, rtol=1e-10, atol=0), kname
        key = "classical" if kname == "nonrobust" else kname
        assert np.allclose(res.bse, se[key], rtol=1e-10, atol=0), kname
        sm_se[key] = res.bse.tolist()

    out = {
        "data": "ols_data.csv",
        "regressors": ["1", "x1", "x2", "x3"],
        "n": n,
        "xtx": (X.T @ X).tolist(),
        "xty": (X.T @ y).tolist(),
        "yty": float(y @ y),
        "coef": beta.tolist(),
        "xtx_inv": A.tolist(),
        "rss": float(e @ e),
        "sigma2": float(sigma2),
        "max_leverage": float(h.max()),
        "meat_hc0": M0.tolist(),
        "meat_hc3": M3.tolist(),
        "se_explicit": se,
        "se_statsmodels": sm_se,
        "versions": {
            "python": platform.python_version(),
            "numpy": np.__version__,
            "scipy": scipy.__version__,
            "statsmodels": statsmodels.__version__,
        },
    }
    with open("ols_reference.json", "w") as f:
        json.dump(out, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
