"""stagewise's choice between the stages and the ridge model on wide regression data above
DUAL_N_MAX rows, on the held-out fifth of the rows that the ridge fit's walk holds out
(docs/benchmarks.md, "Wide regression above 4000 rows: the stages or the ridge model, chosen on
the held fifth", session 35).

Where `stagewise_cg` applies, the solver fits both candidates on the same fit rows (the rows
whose global index i has i mod HOLDOUT_EVERY ≠ HOLDOUT_EVERY − 1):
- the stages (Agarwal et al. 2014, Algorithm 3 at λ = LAM_FLOOR, the "gradient" generator: the
  default above DUAL_N_MAX rows before session 34), run on `FitRows`, the fit rows of each chunk
  seen as a store of their own, so that the held rows take no part in the fit;
- the ridge model's walk down the grid of c (`stagewise_cg`).
Each is scored by its squared error on the held rows, summed over the targets: the stages' summed
linear model (b, V) in the walk's start pass, the walk's c of least error in the walk. The stages
are kept where their error is below (1 − STAGES_MARGIN) times the ridge model's (`choose`), and
the chosen one is refitted on every row: the ridge model at its alpha (`stagewise_cg`'s refit), or
the stages' ordinary fit from F = 0.
"""

from __future__ import annotations

import numpy as np

from streamfit.solvers import stagewise_cg
from streamfit.store import ChunkSource
from streamfit.store.store import Chunk

STAGES_MARGIN = 0.02  # the stages are kept where their held-out error is below (1 − this) × the ridge model's
HELD_SCORES = "held_scores"  # the per-sample array of the stages fitted on the fit rows (`FitRows`' chunks)
STAGES, RIDGE = "stages", "ridge"  # the two choices (`choose`)


class FitRows(ChunkSource):
    """The fit rows of `source`, chunk for chunk: chunk i holds the rows of source's chunk i whose
    global index is not held out (stagewise_cg.held_rows), so that any chunking and any worker
    leave out the same rows. Row j of the view is the j-th fit row of the source."""

    def __init__(self, source: ChunkSource):
        self.source = source
        self.n_rows = stagewise_cg.fit_rows(source.n_rows)
        self.n_features = source.n_features
        self.classes = source.classes
        self.multilabel = source.multilabel
        self.regression = source.regression
        self.chunk_rows = source.chunk_rows
        self.n_chunks = source.n_chunks

    @property
    def value_dtype(self) -> np.dtype:
        return self.source.value_dtype

    def chunk_bounds(self, i: int) -> tuple[int, int]:
        lo, hi = self.source.chunk_bounds(i)
        return stagewise_cg.fit_rows(lo), stagewise_cg.fit_rows(hi)

    def read_chunk(self, i: int) -> Chunk:
        chunk = self.source.read_chunk(i)
        lo, hi = self.source.chunk_bounds(i)
        keep = np.flatnonzero(~stagewise_cg.held_rows(lo, hi))
        return Chunk(i, self.chunk_bounds(i)[0], chunk.X[keep], chunk.labels[keep])


def held_error(squares: np.ndarray, sums: np.ndarray, b: np.ndarray, n_held: int) -> float:
    """Σ over the held rows and the targets of (y − b − Vᵀx)², from Σ E² and Σ E per target
    (E = y − Vᵀx): Σ E² − 2 bᵀΣ E + n_held ‖b‖²."""
    return float(squares.sum() - 2.0 * (b * sums).sum() + n_held * (b * b).sum())


def choose(stages_error: float, ridge_error: float) -> str:
    """STAGES where the stages' held-out error is below (1 − STAGES_MARGIN) × the ridge model's
    (the ridge model, which has no schedule to run again, keeps near ties), else RIDGE."""
    return STAGES if stages_error < (1.0 - STAGES_MARGIN) * ridge_error else RIDGE
