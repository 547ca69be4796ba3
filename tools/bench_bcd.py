"""Benchmark of the bcd solver (Blondel, Seki and Uehara 2013) against the reference
implementation of the same method, sklearn-contrib-lightning's CDClassifier(loss='squared_hinge',
penalty='l1/l2', multiclass=True, C=1/n, alpha=λ), on sector (LIBSVM) and 20 Newsgroups (raw
text hashed to 2^18 features at ingest), at λ = 1e-3 and 1e-5.

For every solver: objective F(W) of eq. (2) (computed by an independent numpy routine for
lightning), test accuracy and % non-zero rows of W after every outer iteration, against wall
time and process CPU time (evaluation excluded), F by one eq. (2) routine for every solver. F* is the best
objective reached by any run, starting with a BCD(LS) run of --max-iter outer iterations (also
the first timed BCD(LS) run); the other timed runs stop once (F − F*)/F* ≤ 5e-4 or after
--time-cap seconds. The table reports the time to reach (F − F*)/F* ≤ 1e-3 (the same objective
value for every solver, not each solver's own stopping rule), its ratio to lightning's ("< r"
when lightning did not get there within its run: r bounds the ratio), test accuracy at equal
objective (the first iterate within 1e-2 and 1e-3 of F*) and where each run stopped, and the
row sparsity. Timings: the solvers run in the same process, interleaved, `--repeats` rounds;
the best time is kept. `--parity`: lightning warm-started at our optimum (does it move?).

    python tools/bench_bcd.py --work /tmp/bench_bcd [--datasets sector news20] [--lams 1e-3 1e-5]
        [--solvers BCD(CST) FISTA(LS)] [--parity] [--ooc]
    python tools/bench_bcd.py --work /tmp/bench_bcd --datasets sector --lams 1e-5 --long --time-cap 1500
    python tools/bench_bcd.py --report /tmp/bench_bcd/bench_bcd_long_sector_1e-05.json
    python tools/bench_bcd.py --report /tmp/bench_bcd/bench_bcd_long_sector_1e-05.json \
        /tmp/bench_bcd/bench_bcd_sector_1e-05.json --merge   # the long run beside capped CST/FISTA runs
    python tools/bench_bcd.py --work /tmp/bench_bcd --groups 1024 2048 4096 16384 65536

Writes bench_bcd_<dataset>_<lam>.png (objective, accuracy, % non-zero rows vs time) and prints
the tables. `--ooc` adds the out-of-core measurement (`--datasets` with no names: only that):
the 20 Newsgroups store replicated `--ooc-copies` times, trained in chunks mode (in-process
engine) in a subprocess whose address space is capped (`--ooc-cap-mb`) below what the memory
mode needs; the memory mode under the same cap (fails) and uncapped (time per outer iteration).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

import numpy as np
import scipy.sparse as sp

DATA = "/work/shared/data"
TARGET = 1e-3


def load_sector():
    from sklearn.datasets import load_svmlight_file

    Xtr, ytr = load_svmlight_file(f"{DATA}/libsvm/sector/sector.scale.bz2")
    Xte, yte = load_svmlight_file(f"{DATA}/libsvm/sector/sector.t.scale.bz2", n_features=Xtr.shape[1])
    classes = np.unique(ytr)
    return (
        Xtr.tocsr(),
        np.searchsorted(classes, ytr).astype(np.int32),
        Xte.tocsr(),
        np.searchsorted(classes, yte).astype(np.int32),
        len(classes),
    )


def load_news(work):
    from streamfit.store import open_store

    tar = f"{DATA}/20newsgroups/20news-bydate.tar.gz"
    train, test = os.path.join(work, "news.zarr"), os.path.join(work, "news_test.zarr")
    common = ["--encoding", "latin-1", "--value", "log1p"]
    if not os.path.exists(train):
        subprocess.run(
            [
                "streamfit",
                "ingest",
                tar,
                "--subset",
                "20news-bydate-train",
                *common,
                "--idf",
                "--l2-normalize",
                "--out",
                train,
            ],
            check=True,
        )
    if not os.path.exists(test):
        subprocess.run(
            ["streamfit", "ingest", tar, "--subset", "20news-bydate-test", *common, "--like", train, "--out", test],
            check=True,
        )
    Xtr, ytr = open_store(train).to_scipy()
    Xte, yte = open_store(test).to_scipy()
    return Xtr, ytr, Xte, yte, open_store(train).n_classes


def objective(W, X, y, lam):
    """F(W) of eq. (2), computed directly (independent of both solvers)."""
    n = X.shape[0]
    S = np.asarray(X @ W)
    A = 1.0 - S[np.arange(n), y][:, None] + S
    A[np.arange(n), y] = 0.0
    P = np.maximum(A, 0.0)
    return float((P * P).sum() / n + lam * np.linalg.norm(W, axis=1).sum())


class _Done(Exception):
    pass


def run_ours(X, y, Xte, yte, m, lam, max_iter, target=None, time_cap=np.inf, **params):
    """One run of our solver until max_iter, F ≤ target or time_cap seconds; returns
    [(time, F, test accuracy, % non-zero rows, violation ratio (10))] after every outer
    iteration, F by `objective` (the routine used for lightning too; it must agree with the
    solver's own value to 1e-9)."""
    from streamfit.checkpoint import Checkpointer
    from streamfit.engine import Engine
    from streamfit.runlog import MetricsLog
    from streamfit.solvers.bcd import BCDParams, BCDSolver
    from streamfit.store import InMemoryStore

    trace, cpu = [], {"t0": time.process_time(), "eval": 0.0}

    log = MetricsLog(None)

    class Traced(BCDSolver):
        def step(self, ctx, state):
            fields = super().step(ctx, state)
            if "objective" not in fields:  # chunks mode: a group inside an outer iteration
                return fields
            t0, c0 = time.perf_counter(), time.process_time()
            W = state.W
            acc = float(np.mean(np.argmax(np.asarray(Xte @ W), axis=1) == yte))
            nz = 100.0 * np.mean(np.any(W != 0, axis=1))
            f = objective(W, X, y, lam)
            if abs(f - fields["objective"]) > 1e-9 * f:
                raise AssertionError(f"solver objective {fields['objective']!r} != eq. (2) {f!r}")
            log._t0 += time.perf_counter() - t0  # evaluation is not training time
            cpu["eval"] += time.process_time() - c0
            trace.append(
                (
                    log.elapsed,
                    f,
                    acc,
                    nz,
                    fields.get("violation_ratio", float("nan")),
                    time.process_time() - cpu["t0"] - cpu["eval"],
                )
            )
            if (target is not None and f <= target) or trace[-1][0] > time_cap:
                raise _Done
            return fields

    source = InMemoryStore(X, y, list(range(m)), chunk_rows=1 << 20)
    # eq. (2) with the l1/l2 penalty and no intercept, as lightning
    p = BCDParams(penalty="l1/l2", lam=lam, max_iter=max_iter, tol=1e-12, fit_intercept=False, **params)
    try:
        Traced(p).fit(
            source,
            engine=Engine(mode="inprocess"),
            log=log,
            checkpointer=Checkpointer(None, config={}, store_fingerprint="x"),
        )
    except _Done:
        pass
    return trace


def run_lightning(X, y, Xte, yte, lam, max_iter, target=None, time_cap=np.inf):
    """lightning's CDClassifier, one fit; its callback (every n_features inner steps, i.e. once
    per outer iteration) records the trace, its own time excluded, and stops the fit (by
    returning a value) at F ≤ target or after time_cap seconds."""
    from lightning.classification import CDClassifier

    n = X.shape[0]
    trace, state = [], {"t0": 0.0, "eval": 0.0, "c0": 0.0, "ceval": 0.0}

    def callback(clf):
        t0, c0 = time.perf_counter(), time.process_time()
        W = clf.coef_.T
        acc = float(np.mean(np.argmax(np.asarray(Xte @ W), axis=1) == yte))
        trace.append(
            (
                t0 - state["t0"] - state["eval"],
                objective(W, X, y, lam),
                acc,
                100.0 * np.mean(np.any(W != 0, axis=1)),
                float("nan"),
                c0 - state["c0"] - state["ceval"],
            )
        )
        state["eval"] += time.perf_counter() - t0
        state["ceval"] += time.process_time() - c0
        if (target is not None and trace[-1][1] <= target) or trace[-1][0] > time_cap:
            return True
        return None

    clf = CDClassifier(
        loss="squared_hinge",
        penalty="l1/l2",
        multiclass=True,
        C=1.0 / n,
        alpha=lam,
        max_iter=max_iter,
        tol=1e-12,
        callback=callback,
        n_calls=X.shape[1],
        random_state=0,
    )
    state["t0"], state["c0"] = time.perf_counter(), time.process_time()
    clf.fit(X, y)
    return trace


def first_at(trace, fstar, target=TARGET):
    """The first trace row with (F − F*)/F* ≤ target, or None."""
    return next((r for r in trace if (r[1] - fstar) / fstar <= target), None)


def time_to(trace, fstar, target=TARGET):
    r = first_at(trace, fstar, target)
    return r[0] if r else float("nan")


def acc_at(trace, fstar, target):
    r = first_at(trace, fstar, target)
    return f"{r[2]:.4f}" if r else "-"


def plot(traces, fstar, title, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(16, 4.5))
    for name, tr in traces.items():
        t = np.array([r[0] for r in tr])
        axes[0].loglog(t, np.maximum([(r[1] - fstar) / fstar for r in tr], 1e-9), label=name)
        axes[1].semilogx(t, [r[2] for r in tr], label=name)
        axes[2].semilogx(t, [r[3] for r in tr], label=name)
    for ax, lab in zip(axes, ["(F − F*)/F*", "test accuracy", "% non-zero rows"]):
        ax.set_xlabel("time (s)")
        ax.set_ylabel(lab)
        ax.grid(True, which="both", alpha=0.3)
    axes[0].legend()
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


SOLVERS = {  # besides BCD(LS) and lightning
    "BCD(CST)": {"variant": "cst"},
    "FISTA(LS)": {"method": "fista", "variant": "ls"},
}


def bench(name, data, lams, max_iter, repeats, time_cap, work, solvers):
    X, y, Xte, yte, m = data
    X = sp.csr_matrix(X, dtype=np.float64)
    Xte = sp.csr_matrix(Xte, dtype=np.float64)
    print(
        f"\n## {name}: {X.shape[0]} train / {Xte.shape[0]} test rows, {X.shape[1]} features, {m} classes, nnz {X.nnz}"
    )
    for lam in lams:
        # F* estimate: BCD(LS) run to max_iter, also the first timed BCD(LS) run; the other runs
        # stop at (1 + 1e-3/2)·F*_est or after time_cap seconds
        ref_run = run_ours(X, y, Xte, yte, m, lam, max_iter, variant="ls")
        print(
            f"(F* run: {len(ref_run)} outer its, violation ratio (10) at the end {ref_run[-1][4]:.1e}; "
            f"load average {os.getloadavg()[0]:.1f})"
        )
        f_est = ref_run[-1][1]
        target = f_est * (1 + TARGET / 2)
        best: dict[str, list] = {}
        for rep in range(repeats):  # interleaved: every solver once per round
            runs = {
                "BCD(LS)": ref_run
                if rep == 0
                else run_ours(X, y, Xte, yte, m, lam, max_iter, target, time_cap, variant="ls"),
                "lightning CD": run_lightning(X, y, Xte, yte, lam, 100_000, target, time_cap),
            }
            for k in solvers:
                runs[k] = run_ours(X, y, Xte, yte, m, lam, 100_000, target, time_cap, **SOLVERS[k])
            for k, tr in runs.items():
                best.setdefault(k, []).append(tr)
        fstar = min([f_est] + [r[1] for trs in best.values() for tr in trs for r in tr])
        ref_times = [time_to(tr, fstar) for tr in best["lightning CD"]]
        ref = min(ref_times) if any(np.isfinite(ref_times)) else float("nan")
        ref_bound = max(tr[-1][0] for tr in best["lightning CD"])  # lightning ran that long without reaching
        print(
            f"\n### λ = {lam:g}   F* = {fstar:.8g} (BCD(LS), {len(ref_run)} outer its; runs stop at "
            f"rel. obj. {TARGET / 2:g} or {time_cap:g} s; load average {os.getloadavg()[0]:.1f})"
        )
        f_light, t_light = best["lightning CD"][0][-1][1], best["lightning CD"][0][-1][0]
        print(f"lightning's last objective: rel. {(f_light - fstar) / fstar:.1e} after {t_light:.1f} s")
        print(
            f"| solver | time to rel. obj. ≤ 1e-3 (s, best of {repeats}) | ratio to lightning | last rel. obj. | "
            "time to lightning's last objective / lightning's time | "
            "test acc. at rel. obj. ≤ 1e-2 | at ≤ 1e-3 | where it stopped | % non-zero rows there | outer its | "
            "s / outer it |"
        )
        print("|---|---|---|---|---|---|---|---|---|---|---|")
        shown = {}
        for k, trs in best.items():
            times = [time_to(tr, fstar) for tr in trs]
            tt = min(times) if any(np.isfinite(times)) else float("nan")
            if np.isfinite(ref):
                ratio = f"{tt / ref:.2f}"
            else:
                ratio = f"< {tt / ref_bound:.2f}" if np.isfinite(tt) and k != "lightning CD" else "-"
            tr = trs[0]
            shown[k] = tr
            last = tr[-1]
            t_same = next((r[0] for r in tr if r[1] <= f_light), float("nan")) / t_light
            print(
                f"| {k} | {tt:.2f} | {ratio} | {(last[1] - fstar) / fstar:.1e} | {t_same:.3f} | {acc_at(tr, fstar, 1e-2)} | "
                f"{acc_at(tr, fstar, 1e-3)} | {last[2]:.4f} | {last[3]:.2f} | {len(tr)} | {last[0] / len(tr):.3f} |"
            )
        with open(os.path.join(work, f"bench_bcd_{name}_{lam:g}.json"), "w") as f:
            json.dump({"fstar": fstar, "traces": best, "reference": ref_run}, f)
        path = os.path.join(work, f"bench_bcd_{name}_{lam:g}.png")
        plot(shown, fstar, f"{name}, λ = {lam:g}", path)
        print(f"plots: {path}")


def long_run(name, data, lam, max_iter, ours_cap, light_cap, work):
    """`--long`: BCD(LS) for up to max_iter outer iterations or ours_cap seconds (the F* run),
    then lightning for up to light_cap seconds or until F ≤ (1 + 5e-5)·F_est, in this process,
    one after the other; both traces (time, F, test accuracy, % non-zero rows, ratio (10)) and
    the load average before each are saved to bench_bcd_long_<name>_<lam>.json (`--report`
    prints the tables from it)."""
    X, y, Xte, yte, m = data
    X = sp.csr_matrix(X, dtype=np.float64)
    Xte = sp.csr_matrix(Xte, dtype=np.float64)
    out = {"dataset": name, "lam": lam, "load": {}, "traces": {}}
    path = os.path.join(work, f"bench_bcd_long_{name}_{lam:g}.json")
    out["load"]["BCD(LS)"] = os.getloadavg()[0]
    out["traces"]["BCD(LS)"] = run_ours(X, y, Xte, yte, m, lam, max_iter, None, ours_cap, variant="ls")
    out["load_after"] = {"BCD(LS)": os.getloadavg()[0]}
    with open(path, "w") as f:
        json.dump(out, f)
    f_est = out["traces"]["BCD(LS)"][-1][1]
    out["load"]["lightning CD"] = os.getloadavg()[0]
    out["traces"]["lightning CD"] = run_lightning(X, y, Xte, yte, lam, 1_000_000, f_est * (1 + 5e-5), light_cap)
    out["load_after"]["lightning CD"] = os.getloadavg()[0]
    with open(path, "w") as f:
        json.dump(out, f)
    print(f"saved {path}")


def tail_estimate(trace):
    """(relative decrease of F over the last 100 outer iterations, geometric extrapolation of the
    remaining decrease from the last two such windows, relative to the last F): how far the
    F* run still was from its limit."""
    f = [r[1] for r in trace]
    if len(f) < 201:
        return float("nan"), float("nan")
    d1, d2 = f[-101] - f[-1], f[-201] - f[-101]
    q = d1 / d2 if d2 > 0 else 0.0
    return d1 / f[-1], (d1 * q / (1 - q) if 0 <= q < 1 else float("inf")) / f[-1]


def replay_stopping(trace, fstar):
    """Where BCD(LS) would have stopped on this trace: eq. (10) alone (stopping="violation") and
    confirmed by the tail estimate (stopping="auto"), at tol 1e-2, 1e-3, 1e-4."""
    from streamfit.solvers.bcd import TAIL_WINDOW, _tail_estimate

    for tol in (1e-2, 1e-3, 1e-4):
        cells = []
        for rule in ("violation", "auto"):
            k = next(
                (
                    k
                    for k, r in enumerate(trace)
                    if r[4] < tol
                    and (
                        rule == "violation"
                        or _tail_estimate([x[1] for x in trace[max(0, k - 2 * TAIL_WINDOW) : k + 1]]) < tol
                    )
                ),
                None,
            )
            cells.append(
                f"{rule}: "
                + (
                    f"outer it {k + 1}, {(trace[k][1] - fstar) / fstar:.1e} above F*"
                    if k is not None
                    else "not in this run"
                )
            )
        print(f"stopping at tol {tol:g}: " + "; ".join(cells))


def load_traces(path):
    """The saved traces of one bench file: {solver: trace} (the first repeat of each)."""
    d = json.load(open(path))
    return d, {k: (v[0] if v and isinstance(v[0][0], list) else v) for k, v in d["traces"].items()}


def merged(paths):
    """`--report --merge`: the traces of several files of one dataset and λ as one run, the first
    file's solver taking precedence (e.g. a `--long` file's BCD(LS) and lightning beside the
    BCD(CST) and FISTA runs of a capped bench); saved to the first file's name + _merged.json."""
    out = {"traces": {}, "load": {}, "load_after": {}}
    for path in paths:
        d, traces = load_traces(path)
        for k, tr in traces.items():
            if k not in out["traces"]:
                out["traces"][k] = tr
                out["load"][k] = d.get("load", {}).get(k, "?") if isinstance(d.get("load"), dict) else "?"
                out["load_after"][k] = d.get("load_after", {}).get(k, "?")
    path = paths[0][: -len(".json")] + "_merged.json"
    with open(path, "w") as f:
        json.dump(out, f)
    return path


def report(paths):
    """`--report FILE...`: accuracy and time at relative objective gaps 1e-2, 1e-3, 1e-4 and where
    each run stopped, the best test accuracy on the way, from saved traces (F* = the best
    objective of any run in the file); the plots of the full runs to FILE_report.png."""
    for path in paths:
        d, traces = load_traces(path)
        fstar = min(r[1] for tr in traces.values() for r in tr)
        dec, rest = tail_estimate(traces["BCD(LS)"])
        print(
            f"\n### {os.path.basename(path)}: F* = {fstar:.8g} (best of all runs; BCD(LS) F* run: "
            f"{len(traces['BCD(LS)'])} outer its, last 100 lowered F by {dec:.1e} rel., geometric tail "
            f"estimate of what is left {rest:.1e}; load average at start {d.get('load', '?')}, "
            f"at end {d.get('load_after', '?')})"
        )
        gaps = (1e-2, 1e-3, 1e-4)
        ref = {g: time_to(traces["lightning CD"], fstar, g) for g in gaps} if "lightning CD" in traces else {}
        print(
            "| solver | "
            + " | ".join(f"time to {g:g} (s) [ratio to lightning]" for g in gaps)
            + " | "
            + " | ".join(f"acc. at {g:g}" for g in gaps)
            + " | where it stopped: s, rel. obj., acc., % nz rows | "
            "best acc. on the way (s, rel. obj. there) |"
        )
        print("|---|" + "---|" * 8)
        for k, tr in traces.items():
            cells = []
            for g in gaps:
                t = time_to(tr, fstar, g)
                r = ref.get(g, float("nan"))
                rat = (
                    f" [{t / r:.2f}]"
                    if np.isfinite(t) and np.isfinite(r)
                    else (
                        f" [< {t / tr_end:.2f}]"
                        if np.isfinite(t)
                        and k != "lightning CD"
                        and (tr_end := traces["lightning CD"][-1][0])
                        and not np.isfinite(r)
                        else ""
                    )
                )
                cells.append(f"{t:.1f}{rat}" if np.isfinite(t) else "not reached")
            if len(tr[0]) > 5:  # process CPU time (evaluation excluded), robust to the load
                for i, g in enumerate(gaps):
                    r, rl = first_at(tr, fstar, g), first_at(traces.get("lightning CD", []), fstar, g)
                    if r is not None:
                        cells[i] += f"; CPU {r[5]:.1f}" + (
                            f" [{r[5] / rl[5]:.2f}]" if rl is not None and len(rl) > 5 else ""
                        )
            accs = [acc_at(tr, fstar, g) for g in gaps]
            last = tr[-1]
            best = max(tr, key=lambda r: r[2])
            print(
                f"| {k} | "
                + " | ".join(cells)
                + " | "
                + " | ".join(accs)
                + f" | {last[0]:.0f}, {(last[1] - fstar) / fstar:.1e}, {last[2]:.4f}, {last[3]:.2f} | "
                f"{best[2]:.4f} ({best[0]:.0f} s, {(best[1] - fstar) / fstar:.1e}) |"
            )
        replay_stopping(traces["BCD(LS)"], fstar)
        png = path[: -len(".json")] + "_report.png"
        plot(traces, fstar, os.path.basename(path), png)
        print(f"plots: {png}")


def groups(work, sizes, iters, lam=1e-3):
    """`--groups`: chunks mode vs memory mode progress per outer iteration on the 20 Newsgroups
    store (in-process engine): objective after each of `iters` outer iterations and the wall
    time, per feature-group size."""
    from streamfit.checkpoint import Checkpointer
    from streamfit.engine import Engine
    from streamfit.runlog import MetricsLog
    from streamfit.solvers.bcd import BCDParams, BCDSolver
    from streamfit.store import open_store

    load_news(work)
    store = open_store(os.path.join(work, "news.zarr"))
    print(f"\n### chunks vs memory mode, 20 Newsgroups, λ = {lam:g}: objective after outer its 1..{iters}")
    print("| mode | group size | objective per outer it | wall s | load |\n|---|---|---|---|---|")
    for mode, g in [("memory", 0)] + [("chunks", g) for g in sizes]:
        p = BCDParams(
            penalty="l1/l2",
            lam=lam,
            tol=1e-12,
            max_iter=iters,
            mode=mode,
            group_size=max(g, 1),
            stopping="violation",
            fit_intercept=False,
        )
        log, t = MetricsLog(None), time.perf_counter()
        BCDSolver(p).fit(
            store,
            engine=Engine(mode="inprocess"),
            log=log,
            checkpointer=Checkpointer(None, config={}, store_fingerprint="x"),
        )
        print(
            f"| {mode} | {g or '-'} | "
            + " / ".join(f"{r['objective']:.4f}" for r in log.records)
            + f" | {time.perf_counter() - t:.1f} | {os.getloadavg()[0]:.1f} |"
        )


def parity(name, data, lam, max_iter, lightning_iters):
    """Test-accuracy parity: both solvers minimise the same F, so at the optimum they must agree.
    BCD(LS) runs to convergence; lightning is then warm-started at that W (its margin matrix A
    set to match) and runs `lightning_iters` more outer iterations: if W is optimal, lightning
    cannot lower F (by our `objective`) nor move the test accuracy."""
    from lightning.classification import CDClassifier

    X, y, Xte, yte, m = data
    X = sp.csr_matrix(X, dtype=np.float64)
    Xte = sp.csr_matrix(Xte, dtype=np.float64)
    W = _fit_w(X, y, m, lam, max_iter)
    f = objective(W, X, y, lam)
    acc = float(np.mean(np.argmax(np.asarray(Xte @ W), axis=1) == yte))
    nz = 100.0 * np.mean(np.any(W != 0, axis=1))
    n = X.shape[0]
    S = np.asarray(X @ W)
    trace = []

    def callback(clf):
        V = clf.coef_.T
        trace.append((objective(V, X, y, lam), float(np.mean(np.argmax(np.asarray(Xte @ V), axis=1) == yte))))

    clf = CDClassifier(
        loss="squared_hinge",
        penalty="l1/l2",
        multiclass=True,
        C=1.0 / n,
        alpha=lam,
        max_iter=lightning_iters,
        tol=1e-12,
        warm_start=True,
        callback=callback,
        n_calls=X.shape[1],
        random_state=0,
    )
    clf.fit(X[: 2 * m], np.arange(2 * m) % m)  # sets up the label encoding; coef_ replaced below
    trace.clear()
    clf.coef_ = np.ascontiguousarray(W.T)
    clf.errors_ = np.ascontiguousarray((1.0 - S[np.arange(n), y][:, None] + S).T)  # A(W)_ir, eq. (4)
    clf.fit(X, y)
    print(
        f"\n### parity, {name}, λ = {lam:g}: BCD(LS) after {max_iter} outer its: F = {f:.10g}, "
        f"test acc. {acc:.4f}, {nz:.2f} % non-zero rows"
    )
    for k, (fl, al) in enumerate(trace, 1):
        print(
            f"  lightning warm-started there, outer it {k}: F = {fl:.10g} (rel. change {(fl - f) / f:+.1e}), "
            f"test acc. {al:.4f}"
        )


def _fit_w(X, y, m, lam, iters):
    """W of BCD(LS) after `iters` outer iterations."""
    from streamfit.checkpoint import Checkpointer
    from streamfit.engine import Engine
    from streamfit.runlog import MetricsLog
    from streamfit.solvers.bcd import BCDParams, BCDSolver
    from streamfit.store import InMemoryStore

    model = BCDSolver(BCDParams(penalty="l1/l2", lam=lam, max_iter=iters, tol=1e-12, fit_intercept=False)).fit(
        InMemoryStore(X, y, list(range(m)), chunk_rows=1 << 20),
        engine=Engine(mode="inprocess"),
        log=MetricsLog(None),
        checkpointer=Checkpointer(None, config={}, store_fingerprint="x"),
    )
    coef = model.coef_
    return (coef.toarray() if sp.issparse(coef) else np.asarray(coef)).T


OOC_CHILD = """
import json, resource, sys, time
mode, store_path, out, cap_mb, iters, group = sys.argv[1], sys.argv[2], sys.argv[3], *map(int, sys.argv[4:7])
if cap_mb:
    resource.setrlimit(resource.RLIMIT_AS, (cap_mb << 20, cap_mb << 20))
from streamfit.checkpoint import Checkpointer
from streamfit.engine import Engine
from streamfit.runlog import MetricsLog
from streamfit.solvers.bcd import BCDParams, BCDSolver
from streamfit.store import open_store
store = open_store(store_path)
p = BCDParams(mode=mode, penalty="l1/l2", lam=1e-3, max_iter=iters, tol=1e-12, group_size=group, fit_intercept=False)
log = MetricsLog(None)
t0 = time.perf_counter()
BCDSolver(p).fit(store, engine=Engine(mode="inprocess"), log=log,
                 checkpointer=Checkpointer(out, config=p.model_dump(), store_fingerprint=store.manifest.fingerprint))
print(json.dumps({"records": log.records, "seconds": time.perf_counter() - t0,
                  "max_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                  "vm_peak_mb": int(open("/proc/self/status").read().split("VmPeak:")[1].split()[0]) / 1024}))
"""


def ooc(work, copies, cap_mb, iters, group):
    """Chunks mode in a subprocess whose address space is capped below what the in-memory mode
    needs for the same data (20 Newsgroups train replicated `copies` times); memory mode under
    the same cap (expected to fail) and uncapped, for the time per outer iteration."""
    import shutil

    from streamfit.store import StoreWriter, open_store

    src = open_store(os.path.join(work, "news.zarr"))
    big = os.path.join(work, f"news_x{copies}.zarr")
    if not os.path.exists(big):
        w = StoreWriter(big, chunk_rows=4096)
        for _ in range(copies):
            for c in src.iter_chunks():
                w.write_rows(c.X, c.labels)
        w.close(n_features=src.n_features, classes=src.classes)
    store = open_store(big)
    decoded_mb = (store.manifest.nnz * 8 + store.n_rows * 12) / 2**20
    need_mb = (store.manifest.nnz * (12 + 8) + store.n_rows * store.n_classes * 8) / 2**20
    print(
        f"\n## out of core: {store.n_rows} rows, nnz {store.manifest.nnz}, {store.n_chunks} chunks, "
        f"decoded store (float32 CSR) {decoded_mb:.0f} MiB, scores S {store.n_rows * store.n_classes * 8 / 2**20:.0f} "
        f"MiB; memory mode holds X (float32 CSR while loading + float64 CSC) and S: ≈ {need_mb:.0f} MiB; "
        f"address-space cap {cap_mb} MiB; chunks mode group_size {group}; load average {os.getloadavg()[0]:.1f}"
    )
    # the store's per-process cache of decoded chunks (default 1 GiB) is kept small here
    env = {**os.environ, "MALLOC_ARENA_MAX": "2", "OMP_NUM_THREADS": "1", "STREAMFIT_CHUNK_CACHE_MB": "64"}
    per_it = {}
    for mode, cap in (("chunks", cap_mb), ("memory", cap_mb), ("memory", 0)):
        out = os.path.join(work, f"ooc_{mode}_{cap}")
        shutil.rmtree(out, ignore_errors=True)
        proc = subprocess.run(
            [sys.executable, "-c", OOC_CHILD, mode, big, out, str(cap), str(iters), str(group)],
            check=False,
            capture_output=True,
            text=True,
            env=env,
        )
        if proc.returncode != 0:
            print(f"{mode}: FAILED under cap {cap} MiB: {proc.stderr.strip().splitlines()[-1:]}")
            continue
        r = json.loads(proc.stdout.strip().splitlines()[-1])
        recs = r["records"]
        its = np.diff([0.0] + [x["wall_time"] for x in recs])
        per_it[mode] = float(np.median(its[1:] if len(its) > 1 else its))
        objectives = ", ".join(f"{x['objective']:.6g}" for x in recs)
        print(
            f"| {mode} | cap {cap or 'none'} MiB | peak RSS {r['max_rss_mb']:.0f} MiB | "
            f"peak address space {r['vm_peak_mb']:.0f} MiB | {len(recs)} outer its | "
            f"median {per_it[mode]:.2f} s / outer it (the first, with setup, excluded) | objective per outer it "
            f"{objectives} |"
        )
    if len(per_it) == 2:
        print(f"time per outer iteration, chunks / memory: {per_it['chunks'] / per_it['memory']:.1f}x")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--work", default="/tmp/bench_bcd")
    ap.add_argument("--datasets", nargs="*", default=["sector", "news20"])
    ap.add_argument("--lams", nargs="+", type=float, default=[1e-3, 1e-5])
    ap.add_argument("--max-iter", type=int, default=200, help="outer iterations of the F* run")
    ap.add_argument("--time-cap", type=float, default=120.0, help="seconds per timed run")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument(
        "--solvers",
        nargs="*",
        default=list(SOLVERS),
        choices=list(SOLVERS),
        help="comparators besides BCD(LS) and lightning",
    )
    ap.add_argument("--ooc", action="store_true")
    ap.add_argument(
        "--parity", action="store_true", help="instead of the tables: lightning warm-started at our optimum (λ = 1e-3)"
    )
    ap.add_argument(
        "--long",
        action="store_true",
        help="BCD(LS) then lightning, each for up to --time-cap s, traces to bench_bcd_long_*.json",
    )
    ap.add_argument("--groups", nargs="+", type=int, help="only the chunks-mode group-size sweep (20 Newsgroups)")
    ap.add_argument("--groups-iters", type=int, default=3)
    ap.add_argument("--report", nargs="+", metavar="JSON", help="only print the tables of saved traces")
    ap.add_argument(
        "--merge",
        action="store_true",
        help="with --report: the files are one dataset and λ, reported and plotted as one run (F* = the best of all)",
    )
    ap.add_argument("--ooc-copies", type=int, default=48)
    ap.add_argument("--ooc-cap-mb", type=int, default=1024)
    ap.add_argument("--ooc-iters", type=int, default=3)
    ap.add_argument("--ooc-group-size", type=int, default=16384)
    a = ap.parse_args()
    if a.report:
        report([merged(a.report)] if a.merge else a.report)
        return
    if a.groups:
        groups(a.work, a.groups, a.groups_iters)
        return
    os.makedirs(a.work, exist_ok=True)
    loaders = {"sector": load_sector, "news20": lambda: load_news(a.work)}
    for name in a.datasets:
        if a.long:
            for lam in a.lams:
                long_run(name, loaders[name](), lam, a.max_iter, a.time_cap, a.time_cap, a.work)
        elif a.parity:
            parity(name, loaders[name](), 1e-3, a.max_iter, 3)
        else:
            bench(name, loaders[name](), a.lams, a.max_iter, a.repeats, a.time_cap, a.work, a.solvers)
    if a.ooc:
        ooc(a.work, a.ooc_copies, a.ooc_cap_mb, a.ooc_iters, a.ooc_group_size)


if __name__ == "__main__":
    main()
