"""ppdsparse's primal switch (primal_ratio) on sets with fewer than 2048 features in use: a
pre-registered check of a smaller default (issue 20 item 3b, session 29; docs/benchmarks.md,
"ppdsparse's CPU on small sets, by phase").

Why. tools/profile_ppdsparse.py found 95 % of the default's CPU on a 3 000-row delicious draw in
the dual coordinate descent (about 100 epochs a label over active sets of 2 000-2 900 of the
3 000 rows), where the Newton finish cannot start: it needs an active set of primal_ratio·(d + 1)
= 8 × 501 = 4 008 samples, more than the rows. Solving delicious-1's labels one by one at
primal_ratio 4 / 3 / 2 / 1 took 12.1 / 7.6 / 6.6 / 5.8 CPU s against 14.4 s at 8 (one run each,
load 4-5). The Newton finish stops on the same test as the dual path (every projected dual
gradient ≤ tol), so the models differ within tol: a model change, decided here by a rule fixed
before the held-out sets were run. delicious-1 was the only set looked at.

Pre-registered (this docstring, CANDIDATES, the sets and `decision` were committed before any
held-out set was run):

- candidates: default (primal_ratio 8), p2 (primal_ratio 2), p1 (primal_ratio 1); every other
  option ppdsparse's default.
- measured: a warm `streamfit.train` in process (n_workers 0, threads 1, progress off: the
  user's path, with init's scan, build_data, the standardized columns and data_scale where they
  apply, checkpoints and the multilabel threshold), its CPU seconds; two rounds, the candidates
  in turn (default, p2, p1, then p1, p2, default), the median; against one-vs-rest
  LinearSVC(C = 1) on the same matrices in the same process (tools/bench_refit.py's Reference):
  size ratio = LinearSVC's non-zero weights ÷ the model's, Δ = points of test accuracy
  (multilabel: micro-F1, the model at its own fitted threshold, LinearSVC at 0), whether every
  class converged, and a SHA-256 of the model's arrays.
- seen: delicious-1 (tools/bench_ppd_rule.py's 3 000-row draw, seed 1).
- held-out, fewer than 2048 features in use (where the switch can act): delicious-2 (seed 2),
  delicious (all 12 920 training rows), bibtex, dna, letter, satimage, pendigits
  (tools/bench_defaults.py's stores).
- held-out text (≥ 2048 features: the switch cannot act, so the models must be bitwise the
  default's; one round, checked by the hash): news20-5, news20-8, sector-10, sector-23.
- DECISION: a candidate replaces the default only if, on every held-out set of fewer than 2048
  features, (1) its Δ is at most 0.25 point below the default's; (2) its non-zero weights are at
  most 1.1× the default's, and where the default is ≥ 10× smaller than LinearSVC it is too;
  (3) its median CPU is at most 1.05× the default's, and below the default's on delicious-2 and
  delicious; (4) every class converged wherever the default's did; and on every held-out text
  set its model is bitwise the default's. If both pass, the one with the lower geometric mean of
  CPU ÷ the default's over the held-out sets of fewer than 2048 features is adopted; if neither
  passes, the default stays.

    OPENBLAS_NUM_THREADS=1 python tools/bench_ppd_primal.py [--sets seen|held-out|text|NAME,...]
        [--candidates default,p2,p1] [--rounds 2] [--work DIR] [--data DIR]
"""

from __future__ import annotations

import argparse
import hashlib
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_ppd_rule import NEW, new_stores  # noqa: E402
from bench_refit import Reference, stores  # noqa: E402

CANDIDATES = {"default": 8.0, "p2": 2.0, "p1": 1.0}  # name: primal_ratio
SEEN = ("delicious-1",)
HELD_OUT = ("delicious-2", "delicious", "bibtex", "dna", "letter", "satimage", "pendigits")
TEXT = ("news20-5", "news20-8", "sector-10", "sector-23")
MAX_DELTA_LOSS, MAX_NNZ_GROWTH, MAX_CPU_GROWTH, GOAL_RATIO = 0.25, 1.1, 1.05, 10.0


@dataclass
class Result:
    """One candidate on one set."""

    set: str
    candidate: str
    cpu: float  # median train CPU s
    ratio: float  # LinearSVC's non-zero weights ÷ the model's
    nnz: int
    delta: float  # points against LinearSVC
    converged: bool
    sha: str


def set_paths(name: str, data: Path, work: Path) -> tuple[str, str]:
    base, _, seed = name.rpartition("-")
    if base in NEW:
        return new_stores(base, int(seed), data, work)
    return stores(name, data, work)


def fit(train_path: str, primal_ratio: float, out: str):
    """A ppdsparse train in process at primal_ratio: (model, CPU seconds)."""
    from streamfit.train import train

    started = time.process_time()
    model = train(
        train_path, "ppdsparse", out, {"primal_ratio": primal_ratio, "threads": 1}, n_workers=0, progress=False
    )
    return model, time.process_time() - started


def model_hash(model) -> str:
    h = hashlib.sha256()
    for a in (model.coef_.indptr, model.coef_.indices, model.coef_.data, np.asarray(model.intercept_)):
        h.update(np.ascontiguousarray(a).tobytes())
    return h.hexdigest()[:16]


def run_set(name: str, candidates: list[str], rounds: int, data: Path, work: Path) -> list[Result]:
    train_path, test_path = set_paths(name, data, work)
    ref = Reference(train_path, test_path)
    print(ref.header(name), flush=True)
    order = [c for r in range(rounds) for c in (candidates if r % 2 == 0 else candidates[::-1])]
    cpus: dict[str, list[float]] = {c: [] for c in candidates}
    models = {}
    with tempfile.TemporaryDirectory() as tmp:
        fit(train_path, CANDIDATES[candidates[0]], f"{tmp}/warm")  # compiled and cached before anything is timed
        for i, c in enumerate(order):
            models[c], cpu = fit(train_path, CANDIDATES[c], f"{tmp}/{i}")
            cpus[c].append(cpu)
    results = []
    for c in candidates:
        m = models[c]
        threshold = m.decision_threshold if (ref.multilabel and m.decision_threshold is not None) else 0.0
        metric, _ = ref.score(np.asarray(ref.Xt @ m.coef_.T.toarray()) + m.intercept_, threshold)
        nnz = int(m.coef_.nnz)
        r = Result(
            name,
            c,
            float(np.median(cpus[c])),
            ref.nnz / max(nnz, 1),
            nnz,
            100 * (metric - ref.metric),
            bool(m.info["converged"]),
            model_hash(m),
        )
        results.append(r)
        print(
            f"  {c:<8} primal_ratio {CANDIDATES[c]:g}: {nnz:>8} weights {r.ratio:6.1f}x fewer  Δ {r.delta:+6.2f}  "
            f"CPU {r.cpu:.3f} s ({r.cpu / ref.cpu:.2f}x LinearSVC; runs {', '.join(f'{s:.3f}' for s in cpus[c])})  "
            f"converged {r.converged}  {r.sha}",
            flush=True,
        )
    return results


def decision(results: list[Result]) -> None:
    """The pre-registered rule (module docstring) over the held-out sets present in `results`."""
    by = {(r.set, r.candidate): r for r in results}
    narrow = [s for s in HELD_OUT if (s, "default") in by]
    text = [s for s in TEXT if (s, "default") in by]
    passing = {}
    for c in [c for c in CANDIDATES if c != "default"]:
        failures = []
        ratios = []
        for s in narrow:
            if (s, c) not in by:
                failures.append(f"{s}: not run")
                continue
            d, r = by[(s, "default")], by[(s, c)]
            ratios.append(r.cpu / d.cpu)
            if r.delta < d.delta - MAX_DELTA_LOSS:
                failures.append(f"{s}: Δ {r.delta:+.2f} against the default's {d.delta:+.2f}")
            if r.nnz > MAX_NNZ_GROWTH * d.nnz or (d.ratio >= GOAL_RATIO > r.ratio):
                failures.append(f"{s}: {r.nnz} weights ({r.ratio:.1f}x) against {d.nnz} ({d.ratio:.1f}x)")
            if r.cpu > MAX_CPU_GROWTH * d.cpu or (s.startswith("delicious") and r.cpu >= d.cpu):
                failures.append(f"{s}: CPU {r.cpu / d.cpu:.2f}x the default's")
            if d.converged and not r.converged:
                failures.append(f"{s}: not converged")
        for s in text:
            if (s, c) in by and by[(s, c)].sha != by[(s, "default")].sha:
                failures.append(f"{s}: model differs from the default's")
        mean = float(np.exp(np.mean(np.log(ratios)))) if ratios else float("nan")
        print(
            f"{c}: CPU ÷ default's geometric mean {mean:.3f}; "
            + ("passes" if not failures else "fails: " + "; ".join(failures))
        )
        if not failures and narrow:
            passing[c] = mean
    if passing:
        print(f"DECISION: {min(passing, key=lambda c: passing[c])} replaces the default")
    else:
        print("DECISION: the default stays")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sets", default="held-out", help="seen, held-out, text, or comma-separated names")
    ap.add_argument("--candidates", default=",".join(CANDIDATES))
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--data", type=Path, default=Path("/work/shared/data"))
    ap.add_argument("--work", type=Path, default=Path("/tmp/bench_ppd_rule"))
    args = ap.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    groups = {"seen": list(SEEN), "held-out": list(HELD_OUT), "text": list(TEXT)}
    names = groups.get(args.sets, args.sets.split(","))
    candidates = args.candidates.split(",")
    unknown = sorted(set(candidates) - set(CANDIDATES))
    if unknown:
        raise SystemExit(f"--candidates: unknown {', '.join(unknown)}; each one of {', '.join(CANDIDATES)}")
    results = []
    for name in names:
        rounds = 1 if name in TEXT else args.rounds
        results += run_set(name, candidates, rounds, args.data, args.work)
    decision(results)


if __name__ == "__main__":
    main()
