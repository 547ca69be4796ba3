"""StagewiseLSRegressor on generated regression data with at least as many columns as rows,
against scikit-learn's Ridge (docs/benchmarks.md, "stagewise regression on wide data").

Each set: X (n + 1000 rows × d) with standard normal entries kept with probability `density`,
w standard normal (every entry, or 5 % of them: "sparse" targets), y = Xw + noise · sd(Xw) · ε;
the model is fitted on the first n rows and scored (R²) on the last 1000. Printed per set and
seed: RidgeCV (15 alphas 1e-2 … 1e5) and Ridge() on the training rows, stagewise's stages with
lam=1e-4 (the default before session 32) and with λ = c · v̄ for each --c (v̄ the columns' mean variance over the training
rows), Ridge(alpha = n · v̄), and the λ of {1e-4, v̄} that 5-fold cross-validation on the
training rows picks (--cv), with its R².

    OPENBLAS_NUM_THREADS=1 python tools/bench_regression_wide.py --sets tune --c 0.1,0.3,1,3
    OPENBLAS_NUM_THREADS=1 python tools/bench_regression_wide.py --sets held --c 1 --cv
    OPENBLAS_NUM_THREADS=1 python tools/bench_regression_wide.py --sets tune --blocks 128,256,512,1024

--validated (session 31, reg32) prints instead, per set and seed, RidgeCV, Ridge(), "stages" (the
default before session 32: the stages at lam None, `STAGES`) and the candidate default "V2" (`validated`), each with its R² and fit seconds: on wide data
(active columns ≥ n/2, `WIDE_SHARE`) hold out every 5th training row (row i with i mod 5 = 4),
fit StagewiseLSRegressor on the other rows at each λ of {1e-4, v̄/10, v̄} (v̄ the fit rows'
mean column variance), take the (λ, number of stages t) of the least squared error on the held
rows, t = 0 being the fit rows' mean, then refit on every training row at that λ and keep its first
t stages (t = 0: the training mean). Narrower data keeps the stages. A prototype that measures
the rule (it uses the fitted model's stages), not the solver's default. Sets: the wide "tune" and
"held" shapes; "qa31", qa31's sparse wide set regenerated (2000 × 20 000 at 0.5 %, 5 % of w
non-zero, y = Xw + 0.1 ε + 3; the first 1500 rows fitted, R² on the last 500; seeds 0-2); "real",
n ≫ d sets: diabetes and randhie as tools/bench_regression.py splits them, and digits' pixel 36
from the other 63 pixels (75/25, seed 0).

    OPENBLAS_NUM_THREADS=1 python tools/bench_regression_wide.py --validated --sets tune
    OPENBLAS_NUM_THREADS=1 python tools/bench_regression_wide.py --validated --sets held,qa31,real

--dual (session 32, wide33) prints the same line with the candidate "D" in V2's place: on wide
data (active columns ≥ DUAL_WIDE_SHARE · n) with n ≤ DUAL_N_MAX training rows, the exact ridge
model that the stages' block descent converges to on one block of every active column (λ on the
summed squared error over n, so Ridge(alpha = n·λ)), solved in dual form from the eigenvectors
of the n × n centred Gram matrix, λ = c · v̄ with c of DUAL_GRID chosen by the exact
leave-one-out squared error (the intercept-aware hat matrix's diagonal, as RidgeCV computes it);
otherwise the stages. Since session 32 D is StagewiseLSRegressor's default
(streamfit.solvers.stagewise_dual), which `dual` fits; the prototype that the pre-registered
held-out run measured is `dual` of commit 281f337. Held-out sets, fresh for session 32 (seeds 200-202): "fresh", generated
shapes with n/d from 0.05 to 1; "text", real tf-idf rows of 20 Newsgroups' training part and of
sector (LIBSVM's scaled training file) with targets planted from a sparse or a dense w plus
noise, or a nonlinear function of three words (`text_set`). Both need /work/shared/data.

    OPENBLAS_NUM_THREADS=1 python tools/bench_regression_wide.py --dual --sets fresh,text,qa31,real

--check-dual compares D with scikit-learn on two small generated sets (`check_dual`).

--large (session 33, wide34) measures wide regression above DUAL_N_MAX rows (`LARGE_SETS`,
`LARGE_TEXT`): per set, the 5-fold RidgeCV (`ridge_cv5`), Ridge() and the default; --look prints
instead the quick look's prototypes of candidate S (c by leave-one-out on a subsample, the ridge
model by conjugate gradients: `subsample_ridge`), --after prototype H (alpha by a held-out fifth
of every row: `holdout_ridge`) beside S. The pre-registered held-out run measured S as the
solver's default, `--large --candidates` at commit f77828f; S failed its rule and was reverted.

    OPENBLAS_NUM_THREADS=1 python tools/bench_regression_wide.py --large --sets large,largetext
    OPENBLAS_NUM_THREADS=1 python tools/bench_regression_wide.py --large --after --sets largeheld,large

--large --candidate (session 34, wide35) prints per set the 5-fold RidgeCV, "stages" (the default
above DUAL_N_MAX rows before session 34: `STAGES`, the same model bit for bit) and "H":
StagewiseLSRegressor(), whose default there is H as streamfit.solvers.stagewise_cg fits it
(alpha by a held-out fifth of the rows, conjugate gradients), with its c, its conjugate-gradient
iterations and passes over the data. Its pre-registered held-out sets (seed 500, never looked at
before the commit that registered them): "largefresh" and "largetextfresh".

    OPENBLAS_NUM_THREADS=1 python tools/bench_regression_wide.py --large --candidate --sets largefresh,largetextfresh

Session 35 (wide36) measured candidate M the same way (`--large --choice` at commit 6432b83: per
set RidgeCV5, the stages, H and M, StagewiseLSRegressor() of that commit: the stages and the ridge
model's walk each fitted on the rows i mod 5 ≠ 4, the one of lower squared error on the others
refitted on every row) on its pre-registered held-out sets, seed 600: "choicefresh" (generated;
target "wN": N informative columns) and "choicetextfresh", spent by that run. M failed its rule
(R1 and T) and was reverted (docs/benchmarks.md, "Wide regression above 4000 rows: the stages or the
ridge model, chosen on the held fifth").

"stages" are `StagewiseLSRegressor(**STAGES)`: generator="gradient" given, which lam None
resolved to for real-valued targets before session 32, and which turns the exact wide fit off.
"""

from __future__ import annotations

import argparse
import functools
import warnings

import numpy as np
import scipy.sparse as sp

from streamfit.solvers.stagewise_dual import DUAL_GRID

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
SEED_BASE = {"tune": 0, "held": 100, "fresh": 200, "text": 200}
# --dual's held-out shapes (session 32): n/d 0.05, 0.1, 0.25, 0.5, 0.5, 1.0
SETS["fresh"] = [
    (250, 5000, 0.05, 0.3, "sparse"),
    (600, 6000, 0.2, 0.2, "dense"),
    (1000, 4000, 0.02, 0.1, "sparse"),
    (700, 1400, 0.5, 1.0, "dense"),
    (1500, 3000, 1.0, 0.5, "dense"),
    (2400, 2400, 0.05, 0.3, "sparse"),
]
# --dual's text sets: (corpus, training rows, target: "sparse" / "dense" planted w or "words", noise)
TEXT_SETS = [
    ("20news", 1500, "sparse", 0.2),
    ("20news", 1500, "dense", 0.5),
    ("20news", 1500, "words", 0.2),
    ("sector", 2000, "sparse", 0.2),
    ("sector", 2000, "words", 0.2),
]
TEXT_TEST_ROWS = 1000
DATA = "/work/shared/data"


def generated(n: int, d: int, density: float, noise: float, target: str, seed: int):
    rng = np.random.default_rng(seed)
    X = sp.csr_matrix(rng.normal(size=(n + 1000, d)) * (rng.random((n + 1000, d)) < density))
    w = rng.normal(size=d) * (rng.random(d) < (0.05 if target == "sparse" else 1.0))
    f = X @ w
    y = f + noise * f.std() * rng.normal(size=n + 1000)
    return X[:n], y[:n], X[n:], y[n:]


HOLD_EVERY = 5  # --validated: row i of the training rows is held out when i % HOLD_EVERY == HOLD_EVERY - 1
WIDE_SHARE = 0.5  # --validated applies where the active columns number at least WIDE_SHARE · n
V2_GRID = (0.1, 1.0)  # --validated: the λ candidates beside 1e-4, as multiples of v̄
STAGES = {"generator": "gradient"}  # the stages at lam None: the default before session 32, bit for bit


def qa31_set(seed: int):
    """qa31's wide set, regenerated: 1500 training and 500 test rows."""
    rng = np.random.default_rng(seed)
    X = sp.random(2000, 20000, density=0.005, format="csr", random_state=rng, data_rvs=rng.standard_normal)
    w = rng.normal(size=20000) * (rng.random(20000) < 0.05)
    y = X @ w + 0.1 * rng.normal(size=2000) + 3.0
    return X[:1500], y[:1500], X[1500:], y[1500:]


def real_set(name: str):
    """(X_train, y_train, X_test, y_test) of an n ≫ d set."""
    if name == "digits pixel 36":
        from sklearn.datasets import load_digits

        D = load_digits().data
        X, y = np.delete(D, 36, axis=1), D[:, 36]
        order = np.random.default_rng(0).permutation(len(y))
        tr, te = order[: int(0.75 * len(y))], order[int(0.75 * len(y)) :]
        return X[tr], y[tr], X[te], y[te]
    import sys

    sys.path.insert(0, __file__.rsplit("/", 1)[0])
    from bench_regression import load_set

    return load_set(name)


def stage_predictions(model, X, stages: int) -> np.ndarray:
    """The predictions of the first `stages` stages of a fitted StagewiseLSRegressor (one output)."""
    P = np.zeros(X.shape[0])
    for block, W in zip(model.model_.blocks[:stages], model.model_.weights[:stages]):
        P += W[0, 0] + X[:, block] @ W[1:, 0]
    return P


def validated(X, y, grid: tuple[float, ...] = V2_GRID):
    """V2 (see the module docstring; `grid`: the multiples of v̄ beside 1e-4): (predict function,
    chosen λ's name, stages kept)."""
    from streamfit import StagewiseLSRegressor

    n = X.shape[0]
    if sp.csr_matrix(X).getnnz(axis=0).astype(bool).sum() < WIDE_SHARE * n:
        model = StagewiseLSRegressor(**STAGES).fit(X, y)
        return model.predict, "stages (narrow)", model.n_iter_
    held = np.arange(n) % HOLD_EVERY == HOLD_EVERY - 1
    Xf, yf, Xh, yh = X[~held], y[~held], X[held], y[held]
    Xd = sp.csr_matrix(Xf)
    v = float((np.asarray(Xd.multiply(Xd).mean(axis=0)) - np.asarray(Xd.mean(axis=0)) ** 2).mean())
    lams = {"1e-4": 1e-4} | {f"{c:g}v": c * v for c in grid}
    best = (float(((yh - yf.mean()) ** 2).mean()), "mean", 0)
    for name, lam in lams.items():
        model = StagewiseLSRegressor(lam=lam).fit(Xf, yf)
        for t in range(1, model.n_iter_ + 1):
            error = float(((yh - stage_predictions(model, Xh, t)) ** 2).mean())
            if error < best[0]:
                best = (error, name, t)
    _, name, t = best
    if t == 0:
        mean = float(y.mean())
        return (lambda Z: np.full(Z.shape[0], mean)), name, 0
    model = StagewiseLSRegressor(lam=lams[name]).fit(X, y)
    return (lambda Z: stage_predictions(model, Z, t)), name, t


def dual(X, y):
    """D, StagewiseLSRegressor's default since session 32 (module docstring): (predict function,
    the chosen c = λ / v̄ or "stages" where D does not apply, the number of stages)."""
    from streamfit import StagewiseLSRegressor

    model = StagewiseLSRegressor().fit(X, y)
    c = model.model_.info.get("wide_ridge_c")
    return model.predict, "stages" if c is None else f"{c:.2g}", model.n_iter_


def check_dual() -> None:
    """D against scikit-learn on two small wide sets (dense and sparse X, its values float32's as a
    store holds them): the λ that RidgeCV's leave-one-out picks on D's grid (alphas n · c · v̄),
    and the largest difference between D's coefficients and intercept and those of
    Ridge(alpha = n · c · v̄) at D's c, relative to the largest coefficient."""
    from sklearn.linear_model import Ridge, RidgeCV

    from streamfit import StagewiseLSRegressor

    for n, d, density, noise, target in [(120, 400, 1.0, 0.3, "dense"), (200, 900, 0.05, 0.2, "sparse")]:
        Xt, yt, _, _ = generated(n, d, density, noise, target, 7)
        X = Xt.toarray().astype(np.float32).astype(np.float64)
        model = StagewiseLSRegressor().fit(X, yt)
        alphas = n * DUAL_GRID * float(X.var(axis=0).mean())
        picked = RidgeCV(alphas=alphas).fit(X, yt).alpha_
        c = int(np.argmin(np.abs(np.log(DUAL_GRID / model.model_.info["wide_ridge_c"]))))
        ridge = Ridge(alpha=alphas[c], solver="cholesky").fit(X, yt)
        scale = np.abs(ridge.coef_).max()
        print(
            f"{n}x{d}@{density}: D's c {DUAL_GRID[c]:.3g}, RidgeCV's {picked / alphas[c] * DUAL_GRID[c]:.3g}; "
            f"max |D - Ridge| / max |Ridge| over the coefficients {np.abs(model.coef_ - ridge.coef_).max() / scale:.1e}, "
            f"intercepts {abs(model.intercept_ - ridge.intercept_) / scale:.1e}"
        )


@functools.cache
def _tar_docs(whole: bool = False) -> list[str]:
    """20 Newsgroups' training documents (whole: the test part's after them), in the archive's
    order (latin-1)."""
    import tarfile

    parts = ("20news-bydate-train/", "20news-bydate-test/") if whole else ("20news-bydate-train/",)
    with tarfile.open(f"{DATA}/20newsgroups/20news-bydate.tar.gz") as tar:
        members = [m for m in tar.getmembers() if m.isfile()]
        return [
            tar.extractfile(m).read().decode("latin-1") for part in parts for m in members if m.name.startswith(part)
        ]


@functools.cache
def _sector_rows(whole: bool = False):
    """sector's scaled tf-idf rows: LIBSVM's training file (whole: its test file's rows after them,
    on the same 55 197 columns)."""
    import bz2

    from sklearn.datasets import load_svmlight_file

    names = ("sector.scale.bz2", "sector.t.scale.bz2") if whole else ("sector.scale.bz2",)
    parts = []
    for name in names:
        with bz2.open(f"{DATA}/libsvm/sector/{name}") as f:
            parts.append(load_svmlight_file(f, n_features=55197)[0])
    return sp.vstack(parts).tocsr()


def text_set(corpus: str, n: int, target: str, noise: float, seed: int, whole: bool = False):
    """(X_train, y_train, X_test, y_test) of n + TEXT_TEST_ROWS rows drawn (seeded) from a corpus
    (whole: from its training and test parts together, for --large).

    20news: TfidfVectorizer (scikit-learn's defaults) fitted on the n training documents; sector:
    LIBSVM's scaled tf-idf rows. Target "sparse" / "dense": y = Xw + noise · sd(Xw) · ε, w standard
    normal on 5 % / all columns; "words": three columns whose document frequency in the training
    rows is 5-30 %, with counts (20news) or 100 × tf-idf (sector) u1, u2, u3:
    f = log(1 + u1) + 2 log(1 + u2) · [u3 > 0], y = f + noise · sd(f) · ε."""
    from sklearn.feature_extraction.text import CountVectorizer, TfidfVectorizer

    rng = np.random.default_rng(seed)
    if corpus == "20news":
        docs = _tar_docs(whole)
        pick = rng.permutation(len(docs))[: n + TEXT_TEST_ROWS]
        train, test = [docs[i] for i in pick[:n]], [docs[i] for i in pick[n:]]
        tfidf = TfidfVectorizer().fit(train)
        X = sp.vstack([tfidf.transform(train), tfidf.transform(test)]).tocsr()
        counts = CountVectorizer(vocabulary=tfidf.vocabulary_)
        U = sp.vstack([counts.transform(train), counts.transform(test)]).tocsr().astype(np.float64)
    else:
        X_all = _sector_rows(whole)
        X = X_all[rng.permutation(X_all.shape[0])[: n + TEXT_TEST_ROWS]].tocsr()
        U = 100.0 * X
    if target == "words":
        share = X[:n].getnnz(axis=0) / n
        words = rng.choice(np.flatnonzero((share >= 0.05) & (share <= 0.3)), 3, replace=False)
        u = U[:, words].toarray()
        f = np.log1p(u[:, 0]) + 2.0 * np.log1p(u[:, 1]) * (u[:, 2] > 0)
    else:
        d = X.shape[1]
        f = X @ (rng.normal(size=d) * (rng.random(d) < (0.05 if target == "sparse" else 1.0)))
    y = f + noise * f.std() * rng.normal(size=X.shape[0])
    return X[:n], y[:n], X[n:], y[n:]


# --large (session 33, wide34): wide sets above DUAL_N_MAX training rows, (n, d, density, noise,
# w) generated by `sparse_generated` and (corpus, n, target, noise) drawn from both parts of a
# corpus by `text_set(..., whole=True)`. "large" / "largetext" (seed 300): the measurement of step 1
# and the quick look at the candidates, spent; "largeheld" / "largetextheld" (seed 400): fresh for
# the pre-registered run (docs/benchmarks.md, session 33), spent by it; "largefresh" /
# "largetextfresh" (seed 500): fresh for session 34's pre-registered run of H (`--candidate`), spent by
# it; "choicefresh" / "choicetextfresh" (seed 600): fresh for session 35's pre-registered run of M
# (`--choice` at commit 6432b83), spent by it.
LARGE_SETS = {
    "large": [
        (5000, 20000, 0.005, 0.3, "dense"),
        (8000, 8000, 0.01, 1.0, "dense"),
        (12000, 60000, 0.002, 0.2, "sparse"),
        (25000, 262144, 0.0004, 0.3, "dense"),
        (50000, 100000, 0.001, 0.5, "dense"),
    ],
    "largeheld": [
        (4500, 9000, 0.02, 0.5, "dense"),
        (6000, 30000, 0.003, 0.1, "sparse"),
        (10000, 10000, 0.005, 0.3, "dense"),
        (15000, 131072, 0.001, 1.0, "dense"),
        (40000, 200000, 0.0005, 0.2, "sparse"),
    ],
    "choicefresh": [
        (6000, 15000, 0.008, 0.4, "dense"),
        (8000, 30000, 0.003, 0.2, "w20"),
        (11000, 11000, 0.005, 0.5, "dense"),
        (15000, 50000, 0.0015, 0.3, "w300"),
        (22000, 70000, 0.001, 0.3, "sparse"),
        (36000, 90000, 0.0007, 0.6, "dense"),
    ],
    "largefresh": [
        (5500, 12000, 0.01, 0.4, "dense"),
        (7000, 40000, 0.002, 0.2, "sparse"),
        (9000, 9000, 0.006, 0.5, "dense"),
        (20000, 60000, 0.001, 0.8, "dense"),
        (30000, 90000, 0.0007, 0.3, "sparse"),
        (48000, 120000, 0.0008, 0.6, "dense"),
    ],
}
LARGE_TEXT = {
    "largetext": [
        ("20news", 6000, "dense", 0.5),
        ("20news", 12000, "sparse", 0.2),
        ("20news", 17000, "words", 0.2),
        ("sector", 5000, "dense", 0.5),
        ("sector", 8000, "words", 0.2),
    ],
    "largetextheld": [
        ("20news", 8000, "sparse", 0.2),
        ("20news", 15000, "dense", 0.5),
        ("20news", 10000, "words", 0.2),
        ("sector", 7000, "sparse", 0.2),
        ("sector", 6000, "dense", 0.5),
        ("sector", 8500, "words", 0.2),
    ],
    "choicetextfresh": [
        ("20news", 6000, "sparse", 0.3),
        ("20news", 7000, "dense", 0.4),
        ("20news", 5000, "words", 0.3),
        ("sector", 5500, "sparse", 0.3),
        ("sector", 5000, "dense", 0.4),
        ("sector", 6500, "words", 0.3),
    ],
    "largetextfresh": [
        ("20news", 6500, "sparse", 0.3),
        ("20news", 7500, "dense", 0.4),
        ("20news", 5500, "words", 0.3),
        ("sector", 5000, "sparse", 0.3),
        ("sector", 5500, "dense", 0.4),
        ("sector", 6000, "words", 0.3),
    ],
}
LARGE_SEEDS = {
    "large": (300,),
    "largetext": (300,),
    "largeheld": (400,),
    "largetextheld": (400,),
    "largefresh": (500,),
    "largetextfresh": (500,),
    "choicefresh": (600,),
    "choicetextfresh": (600,),
}
LARGE_TEST_ROWS = 2000
CV_GRID = np.logspace(-6, 2, 9)  # RidgeCV's alphas, as multiples c of n · v̄ (one a decade over DUAL_GRID's range)


def sparse_generated(n: int, d: int, density: float, noise: float, target: str, seed: int):
    """As `generated`, with X drawn sparse (scipy.sparse.random, standard normal values) so that
    (n + LARGE_TEST_ROWS) × d never exists dense; scored on the last LARGE_TEST_ROWS rows. Target
    "wN": w standard normal on N columns drawn at random, zero elsewhere."""
    rng = np.random.default_rng(seed)
    rows = n + LARGE_TEST_ROWS
    X = sp.random(rows, d, density=density, format="csr", random_state=rng, data_rvs=rng.standard_normal)
    if target.startswith("w"):
        w = np.zeros(d)
        w[rng.choice(d, int(target[1:]), replace=False)] = rng.normal(size=int(target[1:]))
    else:
        w = rng.normal(size=d) * (rng.random(d) < (0.05 if target == "sparse" else 1.0))
    f = X @ w
    y = f + noise * f.std() * rng.normal(size=rows)
    return X[:n], y[:n], X[n:], y[n:]


def mean_variance(X) -> float:
    """v̄: the active columns' mean variance over the rows of X (sparse)."""
    X = sp.csr_matrix(X, dtype=np.float64)
    mean = np.asarray(X.mean(axis=0)).ravel()
    variance = np.asarray(X.multiply(X).mean(axis=0)).ravel() - mean**2
    return float(variance[X.getnnz(axis=0) > 0].mean())


def ridge_cv5(X, y):
    """The peer: RidgeCV's rule with cv=5 — 5 folds (KFold, unshuffled), each alpha of
    n · v̄ · CV_GRID fitted by Ridge(solver="sparse_cg") on four and scored on the fifth, the alpha
    of least mean squared error refitted on every row. (predict, the chosen c)."""
    from sklearn.linear_model import Ridge
    from sklearn.model_selection import GridSearchCV, KFold

    alphas = X.shape[0] * mean_variance(X) * CV_GRID
    search = GridSearchCV(
        Ridge(solver="sparse_cg"), {"alpha": alphas}, cv=KFold(5), scoring="neg_mean_squared_error"
    ).fit(X, y)
    return search.best_estimator_.predict, float(CV_GRID[list(alphas).index(search.best_params_["alpha"])])


SUBSAMPLE_SEED = 0  # the candidate's subsample of DUAL_N_MAX rows: numpy's default_rng(SUBSAMPLE_SEED)
CG_RTOLS = (1e-3, 1e-4, 1e-6)  # the quick look's stops on ‖r‖ / ‖b‖
CG_MAX_ITER = 1000


def ridge_cg(X, y, alpha: float, w, stops: tuple[float, ...], max_iter: int = CG_MAX_ITER):
    """The ridge model at `alpha` (summed convention) on the rows of X (CSR float64) by conjugate
    gradients on the centred normal equations (XcᵀXc + alpha I) w = Xcᵀ(y − ȳ), Jacobi
    preconditioned (diagonal n·var_j + alpha), started from w: {stop: (w, b, iterations)} at the
    first iterate with ‖r‖ ≤ stop · ‖Xcᵀ(y − ȳ)‖ (the last iterate where max_iter comes first)."""
    n = X.shape[0]
    mean = np.asarray(X.mean(axis=0)).ravel()
    diagonal = n * (np.asarray(X.multiply(X).mean(axis=0)).ravel() - mean**2) + alpha

    def normal(v):  # (XcᵀXc + alpha I) v
        u = X @ v - mean @ v
        return X.T @ u - mean * u.sum() + alpha * v

    yc = y - y.mean()
    b = X.T @ yc - mean * yc.sum()
    w = w.copy()
    r = b - normal(w)
    z = r / diagonal
    p, rz = z.copy(), float(r @ z)
    b_norm, iterations, kept = float(np.linalg.norm(b)), 0, {}
    pending = sorted(stops, reverse=True)
    while pending:
        while pending and (np.linalg.norm(r) <= pending[0] * b_norm or iterations == max_iter):
            kept[pending.pop(0)] = (w.copy(), float(y.mean() - mean @ w), iterations)
        if not pending:
            break
        q = normal(p)
        step = rz / float(p @ q)
        w += step * p
        r -= step * q
        z = r / diagonal
        rz, rz_old = float(r @ z), rz
        p = z + (rz / rz_old) * p
        iterations += 1
    return kept


def _predictor(w, b):
    return lambda Z: Z @ w + b


def subsample_ridge(
    X, y, carry: str = "alpha", rtol: float = 1e-6, record: tuple[float, ...] = (), rows: int | None = None
):
    """Candidate S (docs/benchmarks.md, session 33; the solver's implementation that the held-out
    run measured is streamfit/solvers/stagewise_cg.py of commit f77828f): c = λ/v̄ by the exact
    leave-one-out fit (stagewise_dual.DualFit, D's code) on a seeded subsample of m = `rows`
    (DUAL_N_MAX) rows, v̄ over every training row; carried to the n rows as alpha = m·λ ("alpha":
    the summed convention's penalty kept) or λ ("lam": the averaged one's); then the ridge model
    at that alpha on every row (`ridge_cg`), warm-started from the subsample's w, stopped at
    `rtol`. (predict, c, iterations; with `record`, the predict functions at the first iterate
    below each of those rtols, and their iterations.)"""
    from streamfit.solvers.stagewise_dual import DUAL_N_MAX, DualFit

    X = sp.csr_matrix(X, dtype=np.float64)
    n = X.shape[0]
    v_bar = mean_variance(X)
    m = min(n, rows or DUAL_N_MAX)
    sample = np.sort(np.random.default_rng(SUBSAMPLE_SEED).choice(n, m, replace=False))
    Xs, ys = X[sample], y[sample]
    fit = DualFit((Xs @ Xs.T).toarray(), ys[:, None], v_bar)
    alpha = m * fit.lam if carry == "alpha" else n * fit.lam
    mean_s = np.asarray(Xs.mean(axis=0)).ravel()
    w = np.asarray(Xs.T @ fit.A).ravel() - mean_s * fit.A.sum()
    kept = {t: (_predictor(v, b), i) for t, (v, b, i) in ridge_cg(X, y, alpha, w, (*record, rtol)).items()}
    return kept[rtol][0], fit.c, kept[rtol][1], {t: kept[t] for t in record}


HOLDOUT_EVERY = 5  # H: row i is held out when i % HOLDOUT_EVERY == HOLDOUT_EVERY - 1
HOLDOUT_GRID = np.logspace(2, -6, 9)  # H: c = alpha / (n_fit · v̄), largest first (each fit warm-starts the next)


def holdout_ridge(X, y, rtol: float = 1e-4, max_iter: int = 200):
    """Prototype H (docs/benchmarks.md, session 33, "what a next round would try"; not
    pre-registered): alpha chosen on every training row rather than a subsample. Hold out every
    HOLDOUT_EVERY-th row; on the others fit the ridge model (`ridge_cg`) at alpha = n_fit · c · v̄
    for each c of HOLDOUT_GRID, largest first, each warm-started from the last, and score the held
    rows; refit on every row at the alpha of least held-out squared error, from that fold's w.
    (predict, c, total conjugate-gradient iterations = passes over the fit rows, {})."""
    X = sp.csr_matrix(X, dtype=np.float64)
    n = X.shape[0]
    held = np.arange(n) % HOLDOUT_EVERY == HOLDOUT_EVERY - 1
    Xf, yf, Xh, yh = X[~held], y[~held], X[held], y[held]
    v_bar = mean_variance(X)
    w, best, total = np.zeros(X.shape[1]), (np.inf, 0.0, np.zeros(X.shape[1])), 0
    for c in HOLDOUT_GRID:
        alpha = Xf.shape[0] * c * v_bar
        ((w, b, iterations),) = ridge_cg(Xf, yf, alpha, w, (rtol,), max_iter).values()
        total += iterations
        error = float(((yh - Xh @ w - b) ** 2).mean())
        if error < best[0]:
            best = (error, c, w)
    _, c, w_fold = best
    ((w, b, iterations),) = ridge_cg(X, y, Xf.shape[0] * c * v_bar, w_fold, (rtol,), max_iter).values()
    return _predictor(w, b), c, total + iterations, {}


def solver_h(X, y):
    """H, StagewiseLSRegressor()'s default above DUAL_N_MAX rows since session 34: (predict, c,
    conjugate-gradient iterations in all, {}, passes over the data)."""
    from streamfit import StagewiseLSRegressor

    model = StagewiseLSRegressor().fit(X, y)
    info = model.model_.info
    return model.predict, info.get("wide_ridge_c"), sum(info.get("cg_iterations", [0])), {}, info["data_passes"]


def main_large(sets: list[str], look: bool, after: bool, candidate: bool = False) -> None:
    """One line per set and seed: R² and fit seconds of the 5-fold RidgeCV (`ridge_cv5`), Ridge()
    (sparse_cg) and "default": StagewiseLSRegressor(), the stages above DUAL_N_MAX rows before
    session 34 (lam 1e-4, gradient blocks); with `look` instead the quick look's prototypes of S
    (`subsample_ridge`) at each carry and CG stop, and S itself (m 2000, stop 1e-4); with `after`
    instead prototype H (`holdout_ridge`) and S beside it; with `candidate` RidgeCV5, the stages
    (`STAGES`) and the solver's H (`solver_h`)."""
    import time

    from sklearn.linear_model import Ridge
    from sklearn.metrics import r2_score

    from streamfit import StagewiseLSRegressor

    StagewiseLSRegressor().fit(np.random.default_rng(0).normal(size=(50, 3)), np.arange(50.0))  # numba compiles
    fits = [
        ("RidgeCV5", ridge_cv5),
        ("Ridge()", lambda X, y: (Ridge(solver="sparse_cg").fit(X, y).predict, None)),
        ("default", lambda X, y: (StagewiseLSRegressor().fit(X, y).predict, None)),
    ]
    S = ("S", functools.partial(subsample_ridge, rtol=1e-4, rows=2000))
    if look:
        fits = [("S-alpha", functools.partial(subsample_ridge, carry="alpha", record=CG_RTOLS))]
        fits += [("S-lam", functools.partial(subsample_ridge, carry="lam", record=CG_RTOLS)), S]
    if after:
        fits = [("H", holdout_ridge), S]
    if candidate:
        fits = [
            fits[0],
            ("stages", lambda X, y: (StagewiseLSRegressor(**STAGES).fit(X, y).predict, None)),
            ("H", solver_h),
        ]
    for which in sets:
        for seed in LARGE_SEEDS[which]:
            if which in LARGE_SETS:
                cases = [
                    (
                        f"{n}x{d}@{density} noise {noise} {target} w, seed {seed}",
                        sparse_generated,
                        (n, d, density, noise, target, seed),
                        {},
                    )
                    for n, d, density, noise, target in LARGE_SETS[which]
                ]
            else:
                cases = [
                    (f"{c} {n} rows, {t} target, noise {e}, seed {seed}", text_set, (c, n, t, e, seed), {"whole": True})
                    for c, n, t, e in LARGE_TEXT[which]
                ]
            for label, make, args, kwargs in cases:
                Xt, yt, Xv, yv = make(*args, **kwargs)
                line = f"{label} [{Xt.shape[0]}x{Xt.shape[1]}, nnz {Xt.nnz}]:"
                for name, fit in fits:
                    start = time.perf_counter()
                    made = fit(Xt, yt)
                    seconds = time.perf_counter() - start
                    line += f" | {name} {r2_score(yv, made[0](Xv)):.3f} {seconds:.1f}s"
                    if made[1] is not None:
                        line += f" c={made[1]:.2g}"
                    if len(made) > 2:
                        line += f" it {made[2]}"
                    if len(made) > 4:
                        line += f" passes {made[4]}"
                    if len(made) > 2 and made[3]:
                        stops = ", ".join(f"{t:g}: {r2_score(yv, f(Xv)):.3f} it {i}" for t, (f, i) in made[3].items())
                        line += f" [{stops}]"
                print(line, flush=True)


def compare(label: str, Xt, yt, Xv, yv, candidate) -> None:
    """One line: RidgeCV, Ridge(), the stages and the candidate (V2 or D: a function of (X, y)
    giving (predict, choice, stages)), R² and fit seconds each."""
    import time

    from sklearn.linear_model import Ridge, RidgeCV
    from sklearn.metrics import r2_score

    from streamfit import StagewiseLSRegressor

    line, seconds = label + ":", {}
    for name, fit in [
        ("RidgeCV", lambda: RidgeCV(alphas=np.logspace(-2, 5, 15)).fit(Xt, yt).predict),
        ("Ridge()", lambda: Ridge().fit(Xt, yt).predict),
        ("stages", lambda: StagewiseLSRegressor(**STAGES).fit(Xt, yt).predict),
        ("candidate", lambda: candidate(Xt, yt)),
    ]:
        start = time.perf_counter()
        made = fit()
        seconds[name] = time.perf_counter() - start
        predict, chosen = (made[0], f" ({made[1]}, {made[2]} stages)") if name == "candidate" else (made, "")
        line += f" {name} {r2_score(yv, predict(Xv)):.3f}{chosen}"
    line += " | s: " + " ".join(f"{name} {t:.2f}" for name, t in seconds.items())
    print(line, flush=True)


def main_validated(sets: list[str], seeds: int, candidate) -> None:
    from streamfit import StagewiseLSRegressor

    StagewiseLSRegressor().fit(np.random.default_rng(0).normal(size=(50, 3)), np.arange(50.0))  # numba compiles
    for which in sets:
        if which == "real":
            for name in ("diabetes", "randhie", "digits pixel 36"):
                compare(name, *real_set(name), candidate)
            continue
        for seed in range(seeds):
            if which == "qa31":
                compare(f"qa31 2000x20000@0.005 sparse w, seed {seed}", *qa31_set(seed), candidate)
                continue
            if which == "text":
                for corpus, n, target, noise in TEXT_SETS:
                    compare(
                        f"{corpus} {n} rows, {target} target, noise {noise}, seed {seed}",
                        *text_set(corpus, n, target, noise, SEED_BASE[which] + seed),
                        candidate,
                    )
                continue
            for n, d, density, noise, target in SETS[which]:
                compare(
                    f"{n}x{d}@{density} noise {noise} {target} w, seed {seed}",
                    *generated(n, d, density, noise, target, SEED_BASE[which] + seed),
                    candidate,
                )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--sets",
        default="tune",
        help="tune or held; with --validated or --dual a comma-separated list of tune, held, fresh, text, qa31, real",
    )
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--c", default="1", help="comma-separated multiples of v̄ to fit at")
    parser.add_argument("--cv", action="store_true", help="5-fold CV on the training rows between 1e-4 and v̄")
    parser.add_argument("--blocks", default="", help="comma-separated block sizes to fit at lam=1e-4 instead")
    parser.add_argument("--validated", action="store_true", help="the default beside candidate V2 (module docstring)")
    parser.add_argument("--dual", action="store_true", help="the default beside candidate D (module docstring)")
    parser.add_argument("--check-dual", action="store_true", help="D against RidgeCV and Ridge on two small sets")
    parser.add_argument(
        "--large",
        action="store_true",
        help="wide sets above DUAL_N_MAX rows (--sets: large, largetext, largeheld, largetextheld, largefresh, largetextfresh, choicefresh, choicetextfresh)",
    )
    parser.add_argument("--look", action="store_true", help="--large: the quick look's prototypes of S instead")
    parser.add_argument("--after", action="store_true", help="--large: prototype H and S instead (after the run)")
    parser.add_argument(
        "--candidate", action="store_true", help="--large: RidgeCV5, the stages and the solver's default H instead"
    )
    parser.add_argument(
        "--grid",
        default=",".join(f"{c:g}" for c in V2_GRID),
        help="--validated: comma-separated multiples of v̄ beside 1e-4 (default: V2's)",
    )
    args = parser.parse_args()
    warnings.simplefilter("ignore")
    if args.check_dual:
        check_dual()
        return
    if args.large:
        main_large(args.sets.split(","), args.look, args.after, args.candidate)
        return
    if args.validated or args.dual:
        grid = tuple(float(c) for c in args.grid.split(","))
        main_validated(args.sets.split(","), args.seeds, dual if args.dual else (lambda X, y: validated(X, y, grid)))
        return
    if args.sets not in ("tune", "held"):
        raise SystemExit(f"--sets {args.sets!r}: tune or held")
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
            r2 = {1e-4: r2_score(yv, StagewiseLSRegressor(**STAGES, lam=1e-4).fit(Xt, yt).predict(Xv))}
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
