"""StagewiseLSRegressor on generated regression data with at least as many columns as rows,
against scikit-learn's Ridge (docs/benchmarks.md, "stagewise regression on wide data").

Each set: X (n + 1000 rows × d) with standard normal entries kept with probability `density`,
w standard normal (every entry, or 5 % of them: "sparse" targets), y = Xw + noise · sd(Xw) · ε;
the model is fitted on the first n rows and scored (R²) on the last 1000. Printed per set and
seed: RidgeCV (15 alphas 1e-2 … 1e5) and Ridge() on the training rows, stagewise with lam=1e-4
(the default) and with λ = c · v̄ for each --c (v̄ the columns' mean variance over the training
rows), Ridge(alpha = n · v̄), and the λ of {1e-4, v̄} that 5-fold cross-validation on the
training rows picks (--cv), with its R².

    OPENBLAS_NUM_THREADS=1 python tools/bench_regression_wide.py --sets tune --c 0.1,0.3,1,3
    OPENBLAS_NUM_THREADS=1 python tools/bench_regression_wide.py --sets held --c 1 --cv
    OPENBLAS_NUM_THREADS=1 python tools/bench_regression_wide.py --sets tune --blocks 128,256,512,1024
"""

from __future__ import annotations

import argparse
import warnings

import numpy as np
import scipy.sparse as sp

# (n, d, density, noise as a share of the signal's sd, target)
SETS = {
    "tune": [
        (1500, 3000, 0.13, 0.05, "dense"),
        (1500, 3000, 0.13, 0.5, "dense"),
        (1000, 3000, 0.05, 0.2, "sparse"),
        (2000, 2500, 0.3, 1.0, "dense"),
        (500, 2000, 1.0, 0.1, "sparse"),
        (3000, 20000, 0.01, 0.3, "dense"),
    ],
    "held": [
        (800, 5000, 0.02, 0.1, "sparse"),
        (2500, 4000, 0.5, 0.3, "dense"),
        (1200, 1600, 0.1, 0.05, "sparse"),
        (300, 800, 1.0, 0.2, "dense"),
        (2000, 1000, 0.2, 0.2, "dense"),
    ],
}
SEED_BASE = {"tune": 0, "held": 100}


def generated(n: int, d: int, density: float, noise: float, target: str, seed: int):
    rng = np.random.default_rng(seed)
    X = sp.csr_matrix(rng.normal(size=(n + 1000, d)) * (rng.random((n + 1000, d)) < density))
    w = rng.normal(size=d) * (rng.random(d) < (0.05 if target == "sparse" else 1.0))
    f = X @ w
    y = f + noise * f.std() * rng.normal(size=n + 1000)
    return X[:n], y[:n], X[n:], y[n:]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sets", choices=sorted(SETS), default="tune")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--c", default="1", help="comma-separated multiples of v̄ to fit at")
    parser.add_argument("--cv", action="store_true", help="5-fold CV on the training rows between 1e-4 and v̄")
    parser.add_argument("--blocks", default="", help="comma-separated block sizes to fit at lam=1e-4 instead")
    args = parser.parse_args()
    warnings.simplefilter("ignore")
    from sklearn.linear_model import Ridge, RidgeCV
    from sklearn.metrics import r2_score
    from sklearn.model_selection import KFold

    from streamfit import StagewiseLSRegressor

    for n, d, density, noise, target in SETS[args.sets]:
        for seed in range(args.seeds):
            Xt, yt, Xv, yv = generated(n, d, density, noise, target, SEED_BASE[args.sets] + seed)
            line = f"{n}x{d}@{density} noise {noise} {target} w, seed {seed}:"
            if args.blocks:
                for b in (int(v) for v in args.blocks.split(",")):
                    model = StagewiseLSRegressor(block_size=b, lam=1e-4).fit(Xt, yt)
                    line += f" block {b} {r2_score(yv, model.predict(Xv)):.3f}"
                print(line, flush=True)
                continue
            v = float(Xt.toarray().var(axis=0).mean())
            ridge_cv = RidgeCV(alphas=np.logspace(-2, 5, 15)).fit(Xt, yt)
            line += f" RidgeCV {r2_score(yv, ridge_cv.predict(Xv)):.3f}"
            line += f" Ridge() {r2_score(yv, Ridge().fit(Xt, yt).predict(Xv)):.3f}"
            r2 = {1e-4: r2_score(yv, StagewiseLSRegressor(lam=1e-4).fit(Xt, yt).predict(Xv))}
            line += f" | lam 1e-4 {r2[1e-4]:.3f}"
            for c in (float(c) for c in args.c.split(",")):
                r2[c * v] = r2_score(yv, StagewiseLSRegressor(lam=c * v).fit(Xt, yt).predict(Xv))
                line += f" | c={c:g}: {r2[c * v]:.3f}"
            line += f" | Ridge(n·v̄) {r2_score(yv, Ridge(alpha=n * v).fit(Xt, yt).predict(Xv)):.3f}"
            if args.cv:
                errors = np.zeros(2)
                for a, b in KFold(5, shuffle=True, random_state=0).split(np.arange(n)):
                    for j, lam in enumerate((1e-4, v)):
                        fold = StagewiseLSRegressor(lam=lam).fit(Xt[a], yt[a])
                        errors[j] += float(((fold.predict(Xt[b]) - yt[b]) ** 2).sum())
                pick = (1e-4, v)[int(np.argmin(errors))]
                if pick not in r2:
                    r2[pick] = r2_score(yv, StagewiseLSRegressor(lam=pick).fit(Xt, yt).predict(Xv))
                line += f" | CV picks {'v̄' if pick == v else '1e-4'}: {r2[pick]:.3f}"
            print(line, flush=True)


if __name__ == "__main__":
    main()
