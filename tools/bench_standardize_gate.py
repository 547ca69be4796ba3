"""Which data should `standardize="auto"` standardize? (issue 20, session 25, a study; no
behaviour change.) For stagewise, bcd and ppdsparse, on tools/bench_defaults_small.py's sets,
the test accuracy with `standardize=True` and `standardize=False` beside LinearSVC() and
StandardScaler-then-LinearSVC(), and candidate gate statistics of the training columns, each
computable out of core from the per-column n, Σ_i x_ij, Σ_i x_ij² and nnz_j (the column scan the
solvers already do), over the active columns (nnz_j > 0):

- `sd`: today's max s_j / min s_j, s_j = √(Σx_j²/n − (Σx_j/n)²) (`column_scales`, a constant
  column counting as 1; `scale_spread`);
- `rms`: max r_j / min r_j, r_j = √(Σx_j²/nnz_j), the root mean square over a column's non-zero
  values (a column's units show in it, its share of zeros does not);
- `sd1`: `sd` over the columns with nnz_j ≥ 1 % of the rows only;
- `sdq`: the 90 % / 10 % quantile ratio of s_j (a few extreme columns do not decide);
- `rmsq`: the 90 % / 10 % quantile ratio of r_j.

Only data that qualify (at most LOW_DIM_MAX_COLUMNS active columns, on average at least
LOW_DIM_MIN_DENSITY of them non-zero per row) are ever standardized; elsewhere True and False are
the same fit. Families: `sklearn`, `unscaled`, `units` (seen: today's gate was chosen on them),
`units-heldout`, `libsvm`, `gen` (tools/bench_defaults_small.py), `mnist` (MNIST-500 and
MNIST-2000, seeds 0, 1, 2), `digits` (digits-s0..2, also in sklearn) and `mild-units` (`family`).
Held out: every family but the seen three; MNIST-500 (also in `unscaled`) counts as held out, the
other sets in a seen family and a held-out one (pendigits-300: unscaled and libsvm) as seen. Sets run seed by seed (every
family's seed 0 first), so an interrupted run still covers every family.

    OPENBLAS_NUM_THREADS=1 python tools/bench_standardize_gate.py run [--sets FAMILY,...]
        [--solvers stagewise,bcd,ppdsparse] [--data /work/shared/data] --jsonl FILE
    python tools/bench_standardize_gate.py summary FILE [--seen units,unscaled,sklearn]
    OPENBLAS_NUM_THREADS=1 python tools/bench_standardize_gate.py regression

`run` appends one JSON line per set (its statistics, LinearSVC's and svc_std's accuracy, and per
solver the accuracy with True and False and whether True standardized). `summary` prints, per
candidate statistic and threshold t (standardize where the data qualify and the statistic > t),
on the seen and the held-out families separately: the set × solver cases (a set's seeds averaged)
where True and False differ by more than the seed noise (|mean Δ| > the standard deviation of Δ
over the seeds and > 0.1 point), how many of those the gate picks right and wrong, the mean loss
(points) where it picks wrong, and the mean accuracy of its picks over all cases against always
picking the better one (regret, points).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import warnings
from collections import defaultdict
from pathlib import Path

import numpy as np
import scipy.sparse as sp

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))

import bench_defaults_small as bds  # noqa: E402

from streamfit.solvers.base import LOW_DIM_MAX_COLUMNS, LOW_DIM_MIN_DENSITY, column_scales  # noqa: E402

NEW = ("logn-units", "few-units", "mild2-units", "real-mild")  # session 26's second draw, all held out
FAMILIES = ("units", "unscaled", "sklearn", "units-heldout", "libsvm", "gen", "mnist", "mild-units", *NEW)
SEEN = ("units", "unscaled", "sklearn")
STATS = ("sd", "rms", "sd1", "sdq", "rmsq")
THRESHOLDS = (3.0, 6.0, 10.0, 30.0, 100.0, 300.0, 1000.0)


MILD = (
    "iris",
    "wine",
    "breast_cancer",
    "pendigits-300",
    "satimage-1000",
    "dna-1000",
    "letter-1000",
    "gen-inform",
    "gen-noisy",
    "gen-many",
)


NEW_SEEDS = (3, 4, 5)  # the second draw's splits, subsamples and generated sets: not the first draw's 0, 1, 2
REAL_SEEDS = (3, 4, 5, 6, 7, 8)
UNIT_DRAWS = {  # the second draw's unit factors by tag (session 26), each seeded by [seed, salt]
    "mild2": "column j times 10^u_j, u_j ~ U[−0.75, 0.75] (salt 29)",
    "logn": "column j times 10^(0.5 z_j), z_j ~ N(0, 1) (salt 27)",
    "few": "k = min(3, max(1, d // 8)) random columns times or divided by f ~ U[10, 50] (salt 28)",
}


def family(name: str) -> list[str]:
    """bench_defaults_small's families, `mnist`, `digits` and `mild-units` (held out: sets of
    MILD with column j times 10^u_j, u_j uniform in [−1, 1], a spread of at most 100×, the range
    where the candidate gates disagree; the sklearn sets standardized first: `wine-std-mild-s1`).
    Session 26's second draw (NEW, fixed before any of it was run; seeds 3, 4, 5): `mild2-units`,
    `logn-units` and `few-units`, MILD's sets with UNIT_DRAWS' factors (`letter-1000-logn-s4`),
    and `real-mild`, dense real data whose own units spread 10×–100× (seeds 3–8): `diabetes-cls`
    (scikit-learn's diabetes in its raw units, sd spread 69×, the target cut at its tertiles into
    3 classes) and `wine-sub` (wine's raw columns but proline and magnesium, 27×)."""
    if name == "mild-units":
        return [f"{s}{'-std' if s in bds.SKLEARN else ''}-mild-s{seed}" for s in MILD for seed in bds.SEEDS]
    if name in ("mild2-units", "logn-units", "few-units"):
        tag = name.split("-")[0]
        return [f"{s}{'-std' if s in bds.SKLEARN else ''}-{tag}-s{seed}" for s in MILD for seed in NEW_SEEDS]
    if name == "real-mild":
        return [f"{s}-s{seed}" for s in ("diabetes-cls", "wine-sub") for seed in REAL_SEEDS]
    if name == "mnist":
        return [f"mnist-{n}-s{seed}" for n in (500, 2000) for seed in bds.SEEDS]
    if name == "digits":
        return [f"digits-s{seed}" for seed in bds.SEEDS]
    return bds.family(name)


def _real(name: str):
    """`diabetes-cls-sN` and `wine-sub-sN` (`family("real-mild")`): stratified 70/30 splits."""
    from sklearn import datasets
    from sklearn.model_selection import train_test_split

    seed = int(name.rsplit("-s", 1)[1])
    if name.startswith("diabetes-cls"):
        X, target = datasets.load_diabetes(return_X_y=True, scaled=False)
        y = np.searchsorted(np.quantile(target, [1 / 3, 2 / 3]), target, side="right")
    else:
        wine = datasets.load_wine()
        keep = [j for j, f in enumerate(wine.feature_names) if f not in ("proline", "magnesium")]
        X, y = wine.data[:, keep], wine.target
    Xtr, Xte, ytr, yte = train_test_split(X, y, test_size=0.3, random_state=seed, stratify=y)
    return Xtr, ytr, Xte, yte


def load(data: Path, name: str):
    """bench_defaults_small.load, `-mild-` sets (column j times 10^u_j, u_j ~ U[−1, 1]), the
    second draw's `-mild2-`, `-logn-` and `-few-` sets (UNIT_DRAWS) and `real-mild`'s sets."""
    if name.startswith(("diabetes-cls", "wine-sub")):
        return _real(name)
    tag = next((t for t in ("mild", *UNIT_DRAWS) if f"-{t}-" in name), None)
    if tag is None:
        return bds.load(data, name)
    Xtr, ytr, Xte, yte = bds.load(data, name.replace(f"-{tag}-", "-"))
    seed = int(name.split("-")[-1][1:])
    d = Xtr.shape[1]
    if tag == "mild":
        units = 10.0 ** np.random.default_rng([seed, 25]).uniform(-1, 1, size=d)
    elif tag == "mild2":
        units = 10.0 ** np.random.default_rng([seed, 29]).uniform(-0.75, 0.75, size=d)
    elif tag == "logn":
        units = 10.0 ** (0.5 * np.random.default_rng([seed, 27]).standard_normal(d))
    else:  # few
        rng = np.random.default_rng([seed, 28])
        units = np.ones(d)
        columns = rng.choice(d, size=min(3, max(1, d // 8)), replace=False)
        units[columns] = rng.uniform(10, 50, size=len(columns)) ** rng.choice([-1.0, 1.0], size=len(columns))
    if sp.issparse(Xtr):
        return sp.csr_matrix(Xtr @ sp.diags(units)), ytr, sp.csr_matrix(Xte @ sp.diags(units)), yte
    return Xtr * units, ytr, Xte * units, yte


def column_statistics(X) -> dict:
    """The gate candidates (module docstring) from the training rows' per-column n, Σx, Σx², nnz."""
    n = X.shape[0]
    if sp.issparse(X):
        X = sp.csc_matrix(X)
        sums = np.asarray(X.sum(axis=0)).ravel()
        squares = np.asarray(X.multiply(X).sum(axis=0)).ravel()
        nnz = np.diff(X.indptr)
    else:
        X = np.asarray(X, dtype=np.float64)
        sums, squares, nnz = X.sum(axis=0), (X * X).sum(axis=0), (X != 0).sum(axis=0)
    active = np.flatnonzero(nnz)
    s = column_scales(n, sums[active], squares[active])
    r = np.sqrt(squares[active] / nnz[active])
    frequent = nnz[active] >= 0.01 * n
    qualifies = 0 < len(active) <= LOW_DIM_MAX_COLUMNS and nnz[active].sum() >= LOW_DIM_MIN_DENSITY * n * len(active)

    def spread(v):
        return float(v.max() / v.min()) if v.size else 1.0

    def quantile_ratio(v):
        return float(np.quantile(v, 0.9) / np.quantile(v, 0.1)) if v.size else 1.0

    return dict(
        qualifies=bool(qualifies),
        active=int(len(active)),
        sd=spread(s),
        rms=spread(r),
        sd1=spread(s[frequent]),
        sdq=quantile_ratio(s),
        rmsq=quantile_ratio(r),
    )


def run(args) -> None:
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler
    from sklearn.svm import LinearSVC

    warnings.simplefilter("ignore")
    solvers = args.solvers.split(",")
    names = [s for f in args.sets.split(",") for s in family(f)]
    by_seed = sorted(dict.fromkeys(names), key=lambda s: (s.rsplit("-s", 1)[-1], names.index(s)))
    done = set()
    if args.jsonl.exists():
        done = {json.loads(line)["set"] for line in args.jsonl.read_text().splitlines() if line.strip()}
    Xw, yw, _, _ = bds.load(args.data, "iris-s0")
    for s in solvers:  # compile the kernels first
        for flag in (True, False):
            bds.estimator(s, {s: {"standardize": flag}}).fit(Xw, yw)
    for name in by_seed:
        if name in done:
            continue
        Xtr, ytr, Xte, yte = load(args.data, name)
        row: dict = dict(set=name, n=Xtr.shape[0], d=Xtr.shape[1], **column_statistics(Xtr))
        row["svc"] = float(LinearSVC().fit(Xtr, ytr).score(Xte, yte))
        scaled = make_pipeline(StandardScaler(with_mean=not sp.issparse(Xtr)), LinearSVC())
        row["svc_std"] = float(scaled.fit(Xtr, ytr).score(Xte, yte))
        for s in solvers:
            for flag in (True, False):
                t = time.process_time()
                est = bds.estimator(s, {s: {"standardize": flag}}).fit(Xtr, ytr)
                key = f"{s}_{'T' if flag else 'F'}"
                row[key] = float(np.mean(est.predict(Xte) == yte))
                row[key + "_s"] = round(time.process_time() - t, 2)
                if flag:
                    row[s + "_std"] = bool(est.model_.info.get("standardized", False))
                    if "generator" in est.model_.info:  # stagewise: random features keep D either way
                        row[s + "_gen"] = est.model_.info["generator"]
        print(
            f"{name:24s} q={int(row['qualifies'])} sd={row['sd']:9.3g} rms={row['rms']:9.3g} sd1={row['sd1']:9.3g} "
            + " ".join(f"{s}:{row[s + '_T']:.4f}/{row[s + '_F']:.4f}" for s in solvers)
            + f" svc={row['svc']:.4f} svc_std={row['svc_std']:.4f}",
            flush=True,
        )
        with open(args.jsonl, "a") as f:
            f.write(json.dumps(row) + "\n")


def base_name(name: str) -> str:
    head, _, seed = name.rpartition("-s")
    return head if seed.isdigit() else name


def set_family(name: str) -> str:
    """The family a set counts in: MNIST held out, then a seen family before a held-out one
    (pendigits-300 is in `unscaled` and `libsvm`: seen)."""
    for f in ("mnist", *SEEN, *[f for f in FAMILIES if f not in SEEN and f != "mnist"]):
        if name in family(f):
            return f
    return "other"


def cases(rows: list[dict], solvers: list[str], seen: tuple[str, ...]) -> list[dict]:
    """One case per (set without its seed, solver): the seeds' mean Δ = acc(True) − acc(False) in
    points, its standard deviation over the seeds, the set's statistics (the seeds' median) and
    whether it is seen or held out (a set in a seen family and a held-out one counts as seen)."""
    groups: dict = defaultdict(list)
    for r in rows:
        groups[base_name(r["set"])].append(r)
    out = []
    for base, rs in groups.items():
        fam = set_family(rs[0]["set"])
        for s in solvers:
            if f"{s}_T" not in rs[0]:
                continue
            delta = np.array([100 * (r[f"{s}_T"] - r[f"{s}_F"]) for r in rs])
            out.append(
                dict(
                    set=base,
                    solver=s,
                    seen=fam in seen,
                    family=fam,
                    seeds=len(rs),
                    qualifies=all(r["qualifies"] for r in rs),
                    delta=float(delta.mean()),
                    noise=float(delta.std(ddof=1)) if len(rs) > 1 else 0.0,
                    **{k: float(np.median([r[k] for r in rs])) for k in STATS},
                )
            )
    return out


def decisive(c: dict) -> bool:
    return abs(c["delta"]) > max(c["noise"], 0.1)


def score(cs: list[dict], pick) -> tuple[int, int, float, float]:
    """(right, wrong, mean loss where wrong, regret) of a gate `pick(case) -> bool` (True:
    standardize) over the cases; a case that does not qualify is never standardized."""
    right = wrong = 0
    losses, regret = [], []
    for c in cs:
        choose = c["qualifies"] and pick(c)
        gain = c["delta"] if choose else -c["delta"]  # the pick's accuracy minus the other's
        regret.append(max(0.0, -gain))
        if decisive(c):
            if gain > 0:
                right += 1
            else:
                wrong += 1
                losses.append(-gain)
    return right, wrong, float(np.mean(losses)) if losses else 0.0, float(np.mean(regret)) if regret else 0.0


def summary(args) -> None:
    rows = [json.loads(line) for line in Path(args.file).read_text().splitlines() if line.strip()]
    solvers = [s for s in ("stagewise", "bcd", "ppdsparse") if f"{s}_T" in rows[0]]
    cs = cases(rows, solvers, tuple(args.seen.split(",")))
    if args.cases:  # the cases where some candidate lies between 3 and 3000 (the gates' range)
        print(
            f"{'set':24s} {'solver':9s} {'seen':4s} q seeds {'Δ pts':>7s}  {'noise':>5s} "
            + " ".join(f"{k:>7s}" for k in STATS)
        )
        for c in sorted(cs, key=lambda c: (not c["seen"], c["family"], c["set"], c["solver"])):
            if min(c[k] for k in STATS) < 3000 and max(c[k] for k in STATS) > 3:
                print(
                    f"{c['set']:24s} {c['solver']:9s} {'yes' if c['seen'] else 'no':4s} {int(c['qualifies'])} {c['seeds']:5d} "
                    f"{c['delta']:+7.2f}{'*' if decisive(c) else ' '} {c['noise']:5.2f} "
                    + " ".join(f"{c[k]:7.3g}" for k in STATS)
                )
        print()
    if args.table:  # per set in the gates' range: the seeds' mean accuracies (%) and median statistics
        groups_: dict = defaultdict(list)
        for r in rows:
            groups_[base_name(r["set"])].append(r)
        print(
            f"{'set':24s} {'fam':13s} seeds "
            + " ".join(f"{k:>6s}" for k in STATS)
            + "   svc svcstd "
            + " ".join(f"{s[:5] + ' T/F':>13s}" for s in solvers)
        )
        for base, rs in groups_.items():
            st = {k: float(np.median([r[k] for r in rs])) for k in STATS}
            if not (min(st.values()) < 3000 and max(st.values()) > 3):
                continue
            acc = {
                k: 100 * float(np.mean([r[k] for r in rs]))
                for k in rs[0]
                if k in ("svc", "svc_std") or k[-2:] in ("_T", "_F")
            }
            print(
                f"{base:24s} {set_family(rs[0]['set']):13s} {len(rs):5d} "
                + " ".join(f"{st[k]:6.3g}" for k in STATS)
                + f" {acc['svc']:5.1f} {acc['svc_std']:6.1f} "
                + " ".join(f"{acc[s + '_T']:6.2f}/{acc[s + '_F']:6.2f}" for s in solvers)
            )
        print()
    gates = [(f"{k} > {t:g}", lambda c, k=k, t=t: c[k] > t) for k in STATS for t in THRESHOLDS]
    groups = (
        ("seen", [c for c in cs if c["seen"]]),
        ("held-out", [c for c in cs if not c["seen"] and c["family"] not in ("mild-units", *NEW)]),
        ("mild-units (held out, session 25)", [c for c in cs if c["family"] == "mild-units"]),
        ("second draw (held out, session 26)", [c for c in cs if c["family"] in NEW]),
        *((f"  {f} (second draw)", [c for c in cs if c["family"] == f]) for f in NEW),
        ("all held out", [c for c in cs if not c["seen"]]),
    )
    for label, group in groups:
        if not group:
            continue
        n_dec = sum(decisive(c) for c in group)
        better_t = sum(decisive(c) and c["delta"] > 0 for c in group)
        print(
            f"{label}: {len(group)} set×solver cases, {sum(c['qualifies'] for c in group)} qualify, "
            f"{n_dec} decisive ({better_t} True better, {n_dec - better_t} False better); "
            "each cell: right/wrong of the decisive cases, mean loss where wrong (points), mean regret (points)"
        )
        for g, pick in (("never", lambda c: False), ("always", lambda c: True)):
            r, w, loss, regret = score(group, pick)
            print(f"  {g:6s} {r}/{w} {loss:.2f} {regret:.3f}")
        print(f"  {'stat':6s} " + " ".join(f"{'> ' + format(t, 'g'):>20s}" for t in THRESHOLDS))
        for k in STATS:
            cells = [score(group, lambda c, k=k, t=t: c[k] > t) for t in THRESHOLDS]
            print(f"  {k:6s} " + " ".join(f"{f'{r}/{w} {loss:.2f} {regret:.3f}':>20s}" for r, w, loss, regret in cells))
        if args.by_solver:
            for s in solvers:
                sub = [c for c in group if c["solver"] == s]
                picks = [("never", lambda c: False), ("always", lambda c: True)]
                picks += [g for g in gates if g[0] in args.by_solver.split(",")]
                line = "  ".join("{}: {}/{} {:.2f}".format(g, *score(sub, pick)[:3]) for g, pick in picks)
                print(f"    {s:9s} {line}")
        for g, pick in [g for g in gates if g[0] in args.wrong.split(",")]:
            wrong = [c for c in group if decisive(c) and (c["delta"] > 0) != (c["qualifies"] and pick(c))]
            print(f"    {g} wrong: " + ", ".join(f"{c['set']} {c['solver']} {c['delta']:+.2f}" for c in wrong))
        print()


def regression(args) -> None:
    """Stagewise regression on dense real data in raw units (`real-mild`'s kind, seeds 3–8, 70/30
    splits): StagewiseLSRegressor with standardize True and False (which real-valued targets
    ignore: the same fit, checked here) beside RidgeCV and StandardScaler-then-RidgeCV, test R²
    (multi-output: the targets' mean), one line per set and seed."""
    from sklearn import datasets
    from sklearn.linear_model import RidgeCV
    from sklearn.metrics import r2_score
    from sklearn.model_selection import train_test_split
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    import streamfit

    warnings.simplefilter("ignore")
    sets = {
        "diabetes-raw": datasets.load_diabetes(return_X_y=True, scaled=False),
        "linnerud": datasets.load_linnerud(return_X_y=True),
    }
    alphas = np.logspace(-3, 3, 13)
    print(f"{'set':14s} seed    n  sd-spread  stagewise T / F (R²)  RidgeCV  Scaler+RidgeCV  T == F")
    for name, (X, y) in sets.items():
        for seed in REAL_SEEDS:
            Xtr, Xte, ytr, yte = train_test_split(X, y, test_size=0.3, random_state=seed)
            scores = {}
            preds = {}
            for flag in (True, False):
                est = streamfit.StagewiseLSRegressor(standardize=flag).fit(Xtr, ytr)
                preds[flag] = est.predict(Xte)
                scores[flag] = float(r2_score(yte, preds[flag]))
            ridge = float(r2_score(yte, RidgeCV(alphas=alphas).fit(Xtr, ytr).predict(Xte)))
            scaled = make_pipeline(StandardScaler(), RidgeCV(alphas=alphas)).fit(Xtr, ytr)
            ridge_std = float(r2_score(yte, scaled.predict(Xte)))
            spread = column_statistics(Xtr)["sd"]
            print(
                f"{name:14s} {seed:4d} {len(ytr):4d} {spread:10.3g} {scores[True]:10.4f} / {scores[False]:.4f} "
                f"{ridge:8.4f} {ridge_std:15.4f}  {np.array_equal(preds[True], preds[False])}",
                flush=True,
            )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="command", required=True)
    r = sub.add_parser("run")
    r.add_argument("--sets", default=",".join(FAMILIES))
    r.add_argument("--solvers", default="stagewise,bcd,ppdsparse")
    r.add_argument("--data", type=Path, default=Path("/work/shared/data"))
    r.add_argument("--jsonl", type=Path, required=True)
    s = sub.add_parser("summary")
    s.add_argument("file")
    s.add_argument("--seen", default=",".join(SEEN))
    s.add_argument("--cases", action="store_true", help="also print every case")
    s.add_argument("--by-solver", default="", help="gates (e.g. 'sd > 100,rms > 30') to split by solver")
    s.add_argument("--table", action="store_true", help="also the accuracies of the sets in the gates' range")
    s.add_argument("--wrong", default="", help="gates (e.g. 'sd > 100') whose wrong decisive cases to list")
    sub.add_parser("regression", help="stagewise regression on raw-unit real data against RidgeCV")
    args = ap.parse_args()
    {"run": run, "summary": summary, "regression": regression}[args.command](args)


if __name__ == "__main__":
    main()
