"""Each solver on a store with a class that no row holds (an ARFF header's label never on, or a
`--classes` value never seen): whether it trains, whether its scores are finite, how the empty
class scores, and (multiclass) how many rows predict gives it, beside how many rows its bare
score tops (the decision ranks a class without rows last since session 28: Model.ranking_scores).
Issue 20, item 6 (docs/benchmarks.md, "ARFF classes from the header").

    OPENBLAS_NUM_THREADS=1 python tools/check_empty_class.py

Data: 300 random sparse rows × 20 features (about 30 % non-zero), classes a, b, c from the
argmax of the first three columns (multiclass) or from those columns > 0.5 (multilabel), and
a fourth class "spare" with no row; seeds 0-2; each solver with its defaults, in process.
"""

from __future__ import annotations

import os
import sys

import numpy as np
import scipy.sparse as sp

sys.path.insert(0, os.path.join(os.path.dirname(__file__), os.pardir, "tests", "solvers"))
from fitting import fit_solver  # noqa: E402

from streamfit.store.store import InMemoryStore  # noqa: E402

CLASSES = ["a", "b", "c", "spare"]


def main() -> None:
    for seed in range(3):
        rng = np.random.default_rng(seed)
        X = sp.csr_matrix(rng.random((300, 20)) * (rng.random((300, 20)) < 0.3))
        first = X[:, :3].toarray()
        z = first.argmax(1).astype(np.int32)
        Y = sp.csr_matrix(np.hstack([(first > 0.5).astype(np.float32), np.zeros((300, 1), np.float32)]))
        for kind, labels in (("multiclass", z), ("multilabel", Y)):
            for solver in ("stagewise", "bcd", "ppdsparse", "multiboost", "fbpd"):
                try:
                    model, _ = fit_solver(solver, InMemoryStore(X, labels, CLASSES))
                except Exception as e:  # a refusal: its one line
                    print(f"seed {seed} {kind:10} {solver:10} refused: {str(e)[:110]}")
                    continue
                S = model.decision_function(X)
                spare = S[:, 3]
                line = f"seed {seed} {kind:10} {solver:10} finite {np.isfinite(S).all()}  spare scores "
                line += f"{spare.min():+.3f} .. {spare.max():+.3f}"
                if kind == "multiclass":
                    line += f"  rows predicted spare {int((model.predict(X) == 'spare').sum())}"
                    line += f" (top bare score {int((S.argmax(axis=1) == 3).sum())})"
                else:
                    line += f"  threshold {model.decision_threshold:+.3f}"
                print(line)


if __name__ == "__main__":
    main()
