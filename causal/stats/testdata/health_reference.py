#!/usr/bin/env python3
"""Independent reference values for causal/stats' Bayesian health and breach code.

Writes health_reference.json with
  - regularized incomplete beta I_x(a, b) (scipy.special.betainc) and Beta
    quantiles (scipy.stats.beta.ppf) for a few (a, b, x);
  - the Beta-Binomial marginal-likelihood fit of a fixed peer set (the
    "peers" list below) by scipy.optimize.minimize (Nelder-Mead, then
    L-BFGS-B polish) on scipy.stats.betabinom.logpmf, and the health of a
    probe entity against it: I_q90(a + k, b + n - k), q90 = beta.ppf(0.9, a, b);
  - order-statistic ranks of the equal-tailed distribution-free interval for
    the 0.99-quantile at level 0.95, from scipy.stats.binom.cdf:
    l = largest rank with P(B <= l-1) <= 0.025, u = smallest with
    P(B <= u-1) >= 0.975, B ~ Binomial(n, 0.99).

Run (from causal/stats/testdata):
    /tmp/refenv/bin/python health_reference.py   # see ols_reference.py for the venv
"""
import json
import platform

import numpy as np
import scipy
from scipy import optimize, special, stats

PEERS = [  # (tail, n): tail requests of n per entity; overdispersed, so the MLE is finite
    (2, 400), (14, 520), (3, 310), (25, 800), (4, 450), (12, 390),
    (1, 280), (20, 610), (30, 700), (3, 330), (9, 480), (0, 150),
]
PROBE = (40, 500)


def fit_betabinom(peers):
    k = np.array([p[0] for p in peers], float)
    n = np.array([p[1] for p in peers], float)

    def nll(x):
        mu = 1 / (1 + np.exp(-x[0]))
        s = np.exp(x[1])
        return -np.sum(stats.betabinom.logpmf(k, n, mu * s, (1 - mu) * s))

    m = (k / n).mean()
    r = optimize.minimize(nll, [np.log(m / (1 - m)), np.log(50.0)], method="Nelder-Mead",
                          options={"xatol": 1e-10, "fatol": 1e-12, "maxiter": 20000})
    r = optimize.minimize(nll, r.x, method="L-BFGS-B")
    mu = 1 / (1 + np.exp(-r.x[0]))
    s = np.exp(r.x[1])
    return mu * s, (1 - mu) * s


def ranks(n, q=0.99, level=0.95):
    a = (1 - level) / 2
    cdf = stats.binom.cdf(np.arange(n + 1), n, q)  # P(B <= i)
    u = int(np.argmax(cdf >= 1 - a)) + 1
    l = int(np.argmax(cdf > a))  # first i with P(B <= i) > a  ==  l
    return l, u


def main():
    inc = []
    for a, b, x in [(2.0, 3.0, 0.4), (0.5, 0.5, 0.1), (12.5, 480.0, 0.03),
                    (45.0, 460.0, 0.02), (1.2, 95.0, 0.015), (300.0, 9700.0, 0.031)]:
        inc.append({"a": a, "b": b, "x": x, "betainc": float(special.betainc(a, b, x))})
    ppf = []
    for a, b, p in [(2.0, 3.0, 0.9), (1.2, 95.0, 0.9), (12.5, 480.0, 0.5)]:
        ppf.append({"a": a, "b": b, "p": p, "ppf": float(stats.beta.ppf(p, a, b))})
    a, b = fit_betabinom(PEERS)
    q90 = float(stats.beta.ppf(0.9, a, b))
    k, n = PROBE
    health = float(special.betainc(a + k, b + n - k, q90))
    k2, n2 = PEERS[0]
    health_peer = float(special.betainc(a + k2, b + n2 - k2, q90))
    rk = [{"n": n, "q": 0.99, "level": 0.95, "l": ranks(n)[0], "u": ranks(n)[1]}
          for n in [367, 400, 1000, 5000, 100000]]
    out = {
        "betainc": inc,
        "beta_ppf": ppf,
        "peers": [{"tail": p[0], "n": p[1]} for p in PEERS],
        "peer_prior_mle": {"alpha": a, "beta": b},
        "probe": {"tail": k, "n": n, "q90": q90, "health": health},
        "peer0_health": health_peer,
        "quantile_ranks": rk,
        "versions": {"python": platform.python_version(), "numpy": np.__version__, "scipy": scipy.__version__},
    }
    with open("health_reference.json", "w") as f:
        json.dump(out, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
