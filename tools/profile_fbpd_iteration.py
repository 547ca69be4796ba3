"""Where an fbpd iteration's time goes, on a store: a fit with the default parameters (or
--param key=value) for --iterations iterations in process, timing per iteration the pass over
the chunks (map_reduce of the iteration's chunk task: the tasks and the sum of their results),
the driver's sweeps (l1_primal_step, primal_update; the l2 and group prox: penalty_prox), the
logged g(x̃) (class_block_penalties.penalty; ℓ1: abs_sum, or from session 28 on pairwise_sum of the
non-zeros primal_update collects), the restarts' norms (_restart) and the rest of the step.

    python tools/profile_fbpd_iteration.py STORE [--iterations 30] [--param lam=0.001 ...]

The timers wrap the names fbpd.py calls (the same before and after session 17's used-columns
change and session 28's compact state: run it from each tree with PYTHONPATH at it). A first fit, untimed, compiles the
kernels and warms the chunk cache. Times are the process's CPU seconds (time.process_time; the
in-process fit is one thread), which a shared machine's load disturbs less than wall time (they
were wall seconds until session 28). Used for docs/benchmarks.md, "fbpd's defaults on text".
"""

from __future__ import annotations

import argparse
import json
import time
from collections import defaultdict

TIMES: dict[str, float] = defaultdict(float)


def timed(label: str, fn):
    def wrapper(*args, **kwargs):
        start = time.process_time()
        try:
            return fn(*args, **kwargs)
        finally:
            TIMES[label] += time.process_time() - start

    return wrapper


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("store")
    ap.add_argument("--iterations", type=int, default=30)
    ap.add_argument("--param", action="append", default=[], help="an fbpd parameter, key=value (value as JSON)")
    args = ap.parse_args()

    import streamfit.objectives.class_block_penalties as penalties
    import streamfit.solvers.fbpd as fb
    from streamfit.checkpoint import Checkpointer
    from streamfit.engine import Engine
    from streamfit.runlog import MetricsLog
    from streamfit.store import open_store

    params = {"max_iter": args.iterations, "tol": 0.0, "gap_tol": 0.0}
    for item in args.param:
        key, value = item.split("=", 1)
        params[key] = json.loads(value)
    p = fb.FBPDParams(**params)
    source = open_store(args.store)

    def fit() -> None:
        checkpointer = Checkpointer(None, config=p.model_settings(), store_fingerprint="in-memory")
        with Engine(mode="inprocess") as engine:
            map_reduce = engine.map_reduce

            def pass_timed(fn, *a, **kw):
                if fn in (fb._regularized_task, fb._constrained_task):
                    return timed("pass over the chunks", map_reduce)(fn, *a, **kw)
                return map_reduce(fn, *a, **kw)

            engine.map_reduce = pass_timed  # type: ignore[method-assign]
            fb.FBPDSolver(p).fit(source, engine=engine, checkpointer=checkpointer, log=MetricsLog())

    fit()
    penalties.penalty = timed("logged g(x̃)", penalties.penalty)
    for name in ("abs_sum", "pairwise_sum"):  # ℓ1's logged ‖x̃‖₁ from the used rows (sessions 17, 28)
        if hasattr(fb, name):
            setattr(fb, name, timed("logged g(x̃)", getattr(fb, name)))
    for name in ("l1_primal_step", "primal_update", "penalty_prox"):
        setattr(fb, name, timed(name, getattr(fb, name)))
    fb.FBPDSolver._restart = timed("restarts' norms", fb.FBPDSolver._restart)  # type: ignore[method-assign]
    fb.FBPDSolver.step = timed("step", fb.FBPDSolver.step)  # type: ignore[method-assign]
    TIMES.clear()
    fit()
    n = args.iterations
    print(f"{source.n_rows} rows, {source.n_features} columns, {source.n_classes} classes; CPU seconds per iteration:")
    for label, seconds in TIMES.items():
        if label != "step":
            print(f"  {label:<22} {seconds / n:.4f}")
    print(f"  {'rest of the step':<22} {(2 * TIMES['step'] - sum(TIMES.values())) / n:.4f}")
    print(f"  {'step':<22} {TIMES['step'] / n:.4f}")


if __name__ == "__main__":
    main()
