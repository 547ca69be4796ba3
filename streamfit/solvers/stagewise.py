"""Stagewise least squares: Algorithms 1, 2 and 3 of Agarwal, Kakade, Karampatziakis, Song and
Valiant (2014), "Least Squares Revisited: Scalable Approaches for Multi-class Prediction".

Algorithm 3 (stagewise regression). Keep the per-sample scores F (n × k, ŷ in the paper) on
disk, chunk-aligned with the data (ChunkState "scores"), starting from F = 0. Stage t takes a
block x̃ = GEN(x, p) of p features, fits it to the current residuals and updates F. A pass
visits every block once; `n_passes` passes make S = n_passes · n_blocks stages. One stage is
one step of the solver protocol (`StagewiseSolver.step`; its state is `StagewiseState`).

Targets Y (n × k): the 0/1 class indicators, or real-valued targets (a regression store or
StagewiseLSRegressor), which Algorithm 3 fits as stated in the paper with the identity link; the
softmax link and calibration="poly" (a projection onto the simplex) are refused for them.

Design matrix of a block: A = [1, x̃] (an unpenalised bias column, `fit_intercept`), plus the
current scores F when calibration="predictions" (A = [1, x̃, F]; in the code F is kept apart
from [1, x̃], whose features and AᵀA then stay the same from pass to pass).

Inner fit of a stage (Algorithm 1, generalized least squares). With the calibrated loss
ℓ(u; y) = Φ(u) − yᵀu (eq. 13) the stage minimises

    f(W) = (1/n) Σ_i ℓ(F_i + A_i W; y_i) + (λ/2) ‖D W‖²_F,        D = diag(0, 1, …, 1)

(the bias row is not penalised; penalty="total": ‖D (V_B + W)‖²_F, see "Which weights λ
penalises" below). With Σ̂ = AᵀA/n and the gradient (1/n) Aᵀ(g(F + AW) − Y),
the update (14) with the ridge term added to the majorizer reads

    W ← W − (L Σ̂ + λD)⁻¹ [ (1/n) Aᵀ(g(F + AW) − Y) + λ D W ],        W₀ = 0.

- link="identity": g(u) = u, ℓ = ½‖y − u‖² (Φ = ½‖u‖², up to the constant ½‖y‖²), L = 1,
  and one step is exact: W solves the ridge problem (1/n)‖R − AW‖²_F + λ‖DW‖²_F (= 2f) with
  R = Y − F (one Cholesky solve).
- link="softmax": g = softmax (multiclass) or per-label sigmoid (multilabel); L = ½ resp. ¼
  (Gershgorin bound on the Hessian diag(p) − ppᵀ, footnote 3; `lipschitz` overrides it).
  `backtrack` (not in the paper): each stage starts at L/4 and doubles L, going back to the
  previous iterate and its gradient, whenever f rose (the rejected pass counts as an
  iteration); L never exceeds the bound, where the majorization guarantees a decrease, so the
  accepted iterates decrease f. L Σ̂ + λD is factored once per stage; each of up to
  `max_iter` steps is one pass over the data; steps stop early once f decreases by less than
  `tol`·|f|. f decreases monotonically (majorization, proof of Theorem 1).

Calibration (Algorithm 2). calibration="poly": after the block fit ỹ = F + AW (18), a pass
collects GᵀG and GᵀY for G(ỹ) = [1, ỹ, ỹ², ỹ³] (§3.1), the fit W̃ gives ȳ = G(ỹ)W̃, and
F ← clip(ȳ), the projection onto the probability simplex (onto [0, 1]^k for multilabel) (19).
W̃ minimises (1/n)‖Y − GW̃‖² + ε‖W̃ − I_ỹ‖², I_ỹ the map G(ỹ) ↦ ỹ and
ε = CALIBRATION_RIDGE · tr(GᵀG/n)/|G| (a pull that keeps the fit stable where G is singular to
working precision). I_ỹ is feasible, so the fit's squared error is at most that of ỹ; since
the projection is a contraction towards y, the training squared error never increases from
stage to stage (proof of Theorem 2). calibration="predictions" is the simpler variant of §3.1:
the previous predictions are just more features of the block (A = [1, x̃, F]).

GEN (the feature generator of Algorithm 3), over the *active* columns (those with a non-zero
in the training data):
- "sequential": blocks of consecutive active columns;
- "random": a fresh seeded permutation of the active columns each pass (no replacement);
- "gradient": columns ordered by ‖X_jᵀR‖₂ (R = Y − g(F)), recomputed at the start of every
  pass (A.2.2);
- "rff": random Fourier features of the dense active columns (A.2.1): optionally PCA to
  `pca_components` dimensions, Gaussian kernel bandwidth σ = `bandwidth` · median pairwise
  distance ("median trick"), `n_components` features in blocks; block b's frequencies come
  from the seed sequence (random_state, b) and are regenerated per chunk, never stored. The
  PCA and the median come from a seeded sample of rows.
- "auto": for real-valued targets always "gradient" over the stored columns: the linear least
  squares a regression user expects (with every column in one block, Ridge's problem), and
  with few columns the stages run on the normal equations of one pass (`_normal_mode`);
  random Fourier features are an explicit choice there. For class targets "gradient" (text,
  §3.3) unless the data is low-dimensional and dense-ish (≤ 1000 active columns, ≥ 10 % of
  them non-zero per row: the paper's §3.1 setting); there "rff" unless one ridge fit
  (Algorithm 1, identity link, the run's λ and penalty) on the stored columns validates better
  on the seeded row sample (5-fold cross-validation) than one on the first random Fourier block
  (`_auto_check`: a lower held-out squared error; with calibration "auto" on multiclass targets, the stored columns
  calibrated or not, and the most held-out rows whose top class is right, the squared error
  breaking ties).

calibration="auto" (the default): on the stored columns of such low-dimensional dense data with
multiclass targets and the identity link, when every active column fits in one block (the
check's candidate is then the run's first stage), "poly" when the calibrated columns validate
better on the row sample than the plain ones (`_auto_check`, as above; for an explicit stored-column
generator too); "none" otherwise (text, random Fourier features, multilabel and real-valued
targets). Least squares on 0/1 class indicators masks a
class whose indicator is not a linear function of x (§3.1: iris' middle class; 0.78 accuracy
against 0.93 calibrated and LogisticRegression's 0.93); with few stored columns the training
predictions that Algorithm 2 is fitted on are not overconfident, where with thousands of
random features (or many classes) they are (docs/benchmarks.md, "stagewise on small data").

λ scaling: `lam` is λ for the sample-averaged loss, as in SolverParams: the identity-link stage
solves min (1/n)‖R − AW‖² + λ‖DW‖² (equivalently ½ of both), the softmax link minimises
(1/n) Σ ℓ + (λ/2)‖DW‖², which is scikit-learn's LogisticRegression with C = 1/(nλ) (with a
single block holding all features this is plain ridge / logistic). lam=None (the default) takes
λ from the n training rows (`StagewiseParams.lam_for`): for class targets with the identity
link on low-dimensional dense data (≤ 1000 active columns, ≥ 10 % of them non-zero per row: the
setting where "auto" considers random Fourier features) λ = max(LAM_FLOOR, LAM_ROWS/n) = max(1e-4, 10/n), i.e.
Ridge(alpha = nλ) with alpha at least 10 whatever n. The fixed 1e-4 of sessions 1–22 is
alpha = n·1e-4: 0.03 on 300 rows, where the ridge fit of a block of about as many columns as
rows (180 one-hot columns, or a random Fourier block of 512) nearly interpolates. Sparse and wide
data (text: tf-idf rows of unit norm, whose columns are far smaller than one) and real-valued
targets keep λ = 1e-4, and so does the softmax link (neither 1e-4 nor 10/n holds on every small
dense set there: docs/benchmarks.md, "stagewise's softmax link"): 10/n over-shrinks
tf-idf (sector, 1000 rows: −5.8 points) and regression is Ridge's problem at 1e-4 as measured
against Ridge (docs/benchmarks.md, "stagewise's λ from the
training rows", session 23). On wide regression data (d ≥ n, gradient blocks) two passes at 1e-4
stop far from that ridge model: the first blocks interpolate the targets and the penalty's pull is too weak to spread the
weights in n_passes passes; no λ rule held on every target (docs/benchmarks.md, "Defaults on
wide data", session 25). So there (real-valued targets, lam None and the default generator,
calibration, penalty and intercept, at least n/2 active columns, n ≤ 4000) the run is one step
that fits the ridge model those stages converge to, exactly, at the λ = c · v̄ of least
leave-one-out error (`_dual_mode`, streamfit.solvers.stagewise_dual; docs/benchmarks.md, "Exact
ridge in dual form for wide regression", session 32); above 4000 rows the same ridge model by
conjugate gradients, one pass a step, its alpha chosen on a held-out fifth of the rows (`_cg_mode`,
streamfit.solvers.stagewise_cg; docs/benchmarks.md, "Wide regression above 4000 rows: alpha by a
held-out fifth", session 34). The generator "auto" check (`_auto_check`) compares its candidates
at the run's λ, by 5-fold cross-validation on its row sample (session 24; sessions 19–23 held
out 20 % of it once, at LAM_FLOOR for lam None: on 21–42 held-out rows the run's λ picked other
generators on iris and generated sets, while at LAM_FLOOR the columns nearly interpolated dna's
300 rows and lost to random features there; docs/benchmarks.md, "stagewise on unscaled columns").

Standardized columns (`standardize`, session 24). Ridge is not invariant to a column's units:
λ‖DW‖² shrinks a column given in small units (wine's 0.1-scale columns beside proline's 1680,
prices beside counts) far more than one in large units, and a larger λ (the rule above) makes
that show. Where the stages fit stored columns of class targets with the identity link on
low-dimensional dense data (the data of λ's rule from n), the penalty can be on the weights of
the standardized columns z_j = (x_j − μ_j)/s_j, s_j the column's standard deviation over the n
training rows: in Algorithm 1's ridge problem and its update (14), D = diag(0, 1, …, 1) becomes
D_S = diag(0, s_1², …, s_p²) for the block's columns,

    (1/n)‖R − AW‖²_F + λ ‖S (V_B + W)‖²_F,        S = diag(s_j) over the block's columns,

(the rows of F, calibration="predictions", keep weight 1). As the bias is not penalised, the
centring is absorbed by it and this is exactly the ridge fit on z with weights S V, i.e.
scikit-learn's Ridge(alpha = nλ) on StandardScaler's columns for one block of every column: the
same fit in any units, while the model keeps W on the stored columns (predict, coef_ and the
saved model stay plain linear; nothing is centred, so the designs and their sparsity are the
same). "gradient" ranks the columns by ‖X_jᵀR‖/s_j (the standardized columns' gradients), and
the "auto" check fits its column candidates with the same penalty. s comes from the column
scan's Σx_j and Σx_j² (one pass; `column_scales`, 1 for a constant column, shared with fbpd) and is
state (`StagewiseState.column_scale`: a resumed run and any worker count use the same s; other
chunkings sum it in another order). standardize="auto" (the default) applies it where the active
columns' s_j span more than SCALE_SPREAD = 10 (columns in different units: wine 2.7e3,
breast_cancer 2.5e5, diabetes' raw columns 69, digits' and MNIST's near-empty pixels 231 and
427; 100 until session 26), and keeps the columns as given where they are comparable (at most
6.2 on the LIBSVM and generated sets measured):
standardizing there discards a scale that carries information (make_classification's informative
columns have twice the variance of its noise columns: −8 points on 500 columns × 140 rows, as
for StandardScaler then LinearSVC) and weakens the penalty of one-hot columns (s ≈ 0.4 on dna:
−7 points against main on its 100-row samples, −3 on 300, at the same λ); docs/benchmarks.md,
"stagewise on unscaled columns". True applies it wherever the setting holds, False never.
Random Fourier blocks (cosines of unit scale), sparse or wide data (text: centring would destroy
sparsity, tf-idf is scaled already), real-valued targets and the softmax link keep D.

Which weights λ penalises (`penalty`). The paper regularises (λ = 30 on NEWS20, A.2.2) without
saying which weights λ applies to once a feature comes back in a later stage. Read literally,
Algorithm 3 fits each stage to the residuals, so the stage penalises its own increment W_t:
penalty="stage". Its fixed point is the unpenalised least squares, which
interpolates when n < d (text), so revisiting columns (the second pass of "gradient") undoes the
shrinkage (docs/benchmarks.md, "stagewise on tf-idf text"). §2.4 also describes Algorithm 3 as
block coordinate descent, the algorithm of a block-diagonal approximation of Σ (across classes
and groups of features); as block coordinate descent on the regularised objective of the
features' summed weights V (V_j = Σ_t of feature j's rows of W_t, F = [1, X]V for stored
columns),

    (1/n) Σ_i ℓ(F_i; y_i) + (λ/2) ‖D V‖²_F,

the stage on block B minimises f(W) = (1/n) Σ_i ℓ(F_i + A_i W; y_i) + (λ/2) ‖D (V_B + W)‖²_F,
V_B the block's weights from earlier stages: penalty="total" (the default: on every text set measured
it is within about 1 point of LinearSVC, where "stage" was up to 3.4 points below; dense sets and
regression unchanged; docs/benchmarks.md, "stagewise: λ on the summed weights"). Its update adds λ D V_B to the
gradient: the identity link's one exact step is W = (Σ̂_B + λD)⁻¹ (A_Bᵀ R/n − λ D V_B), the
block's exact minimiser, so the ridge objective never increases and, cycling through blocks
of a strictly convex quadratic (λ > 0), converges to the ridge solution (scikit-learn's
Ridge(alpha = nλ) with an unpenalised intercept); the softmax link's (14) becomes
W ← W − (L Σ̂ + λD)⁻¹ [(1/n) Aᵀ(g(F + AW) − Y) + λ D (V_B + W)], which converges to
LogisticRegression's optimum. Random Fourier blocks are the same features each time a block
id comes back, so V_B is that block's earlier weights; the rows of F
(calibration="predictions") are new features in every stage (V_B = 0 there); with
calibration="poly" the scores are not [1, X]V, and "total" only shrinks the summed weights.
Where a stage's features are new (V_B = 0: the first pass over columns, an rff block's first
visit) both penalties give the same stage, bit for bit.
The logged objective is (1/n) Σ_i ℓ(ŷ_i; y_i) + (λ/2) Σ_t ‖D W_t‖²_F for penalty="stage",
(1/n) Σ_i ℓ(ŷ_i; y_i) + (λ/2) ‖V‖²_F (plus the F rows' Σ_t ‖·‖²) for "total" (`StagewiseSolver`).

Multilabel decisions (identity link): the scores estimate P(label | x) (least squares on 0/1
targets), and the model's threshold (streamfit.model.decide) is the one of the best micro-F1 on
the training rows' held-out scores F̃ = Y − (Y − F)/κ, over the grid 0.005, 0.01, …, 0.995
(`THRESHOLD_GRID`; one pass of counts after the last stage, `_threshold_counts_task`): κ_i is
row i's product of 1 − h_i over the last pass's stages, h_i its leverage in the stage's ridge
system, so that F̃ are the leave-one-out scores where a pass is one block and their
approximation otherwise (`StagewiseSolver._heldout`). The training scores themselves overfit
where the model nearly interpolates its rows (n < d: 0.315 on the first 1001 rows of bibtex,
7.17 labels a test row against 2.37 true ones; held out: 0.61, 1.04 a row, the test rows' best
threshold 0.57). With probabilities, micro-F1 calls
for thresholds well below 0.5 when labels are rare (the optimal threshold is half the optimal
F1 for calibrated scores: Lipton, Elkan and Narayanaswamy 2014), and least-squares scores are
shrunk towards the label frequencies: 0.5 predicted 0.8 labels a row on bibtex (truth 2.4) and
3.1 on delicious (19); docs/benchmarks.md, "stagewise's multilabel threshold".

Out of core: per stage, AᵀA and Aᵀ(Y − g(F)) are summed over row chunks with
Engine.map_reduce (a fixed tree: results do not depend on the number of workers) and solved
in the driver; the update pass of stage t also sums stage t+1's statistics (one pass per
identity-link stage). Everything random derives from random_state, so a resumed run
reproduces an uninterrupted one bitwise. Real-valued targets only (class models keep their bits):
with few stored columns the scan also sums the normal equations of Z = [1, X] and every stage
runs on them without a data pass (`StagewiseSolver._normal_step`); otherwise dense active
columns make dense column designs (`FeatureSpace.dense`) whose sums are BLAS products.
Caches, panels and memory: docs/architecture.md.
Products whose rows are samples (ZΩ, AW, the PCA projection, the calibrations, the
predictions' columns) go through `rowwise_matmul`, a compiled loop that sums each element in
one fixed order, never BLAS (whose rounding depends on the CPU's kernel, the threads and the
other rows of the call): a row gets the same bits in any chunk, scoring batch or process,
cluster-trained or not, float64 or float32 designs alike.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import os
from typing import Any, Literal, NamedTuple

import numpy as np
import scipy.linalg
import scipy.sparse as sp
from pydantic import Field, model_validator
from scipy.linalg.lapack import dpotrf, dpotrs

from streamfit.checkpoint import ChunkState
from streamfit.engine import Engine, Work, add_results
from streamfit.errors import CheckpointError, ConfigError, InputError
from streamfit.metrics import ThresholdCounts, best_threshold, threshold_counts
from streamfit.model import Model, register_model
from streamfit.objectives import ChunkSums, StageRidge, objective_for
from streamfit.objectives.links import link_loss_sum, link_mean, link_residual
from streamfit.solvers import stagewise_cg, stagewise_dual
from streamfit.solvers.base import (
    Context,
    PerSample,
    Solver,
    SolverParams,
    SolverState,
    column_variances,
    columns_used_estimate,
    dense_low_dimensional,
    register_solver,
    standardized_scale,
)
from streamfit.solvers.stagewise_features import (
    FeatureSpace,
    cache_design,
    cached_design,
    chunk_base,
    chunk_design,
    design_cacheable,
    new_design,
    panels,
)
from streamfit.solvers.stagewise_kernels import (
    poly_basis,
    project_predictions,
    rowwise_matmul,
    single_threaded_blas,
    sparse_gram_upper,
    symmetric_from_upper,
    upper_triangle,
)
from streamfit.store import ChunkSource
from streamfit.store.dense_kernels import column_counts
from streamfit.store.format import FLOAT32_MAX
from streamfit.store.store import target_matrix

log = logging.getLogger(__name__)

SCORES = "scores"  # ChunkState name of the per-sample scores F
HELDOUT = "heldout"  # ChunkState name of κ, the rows' kept share of their residual in the last pass
KAPPA_FLOOR = 1e-12  # κ's floor in the held-out scores Y − (Y − F)/κ (λ = 0: a leverage of 1)
GEN_SAMPLE_ROWS = 10_000  # rows sampled for the PCA of the RFF generator
MEDIAN_SAMPLE_ROWS = 1_000  # of which used for the median pairwise distance (500 000 pairs)
AUTO_CHECK_ROWS = 5_000  # of which used by generator "auto" to compare rff with stored columns
GRAM_CACHE_BYTES = 256 << 20  # keep every block's AᵀA across passes when they fit in this
BACKTRACK_START = 0.25  # backtrack=True: each stage's first L, as a share of the bound
PCA_FLOAT32_MAX = 1e15  # rff PCA: a sample whose centered values stay below this gets a float32 covariance
THRESHOLD_GRID = np.arange(1, 200) / 200  # multilabel identity link: the thresholds tried on the training scores
CALIBRATION_RIDGE = 1e-4  # calibration="poly": ε of the fit's pull towards the identity, relative to GᵀG/n
NORMAL_MODE_MAX_FEATURES = 1024  # regression: stages on the normal equations up to this many stored columns
LAM_FLOOR = 1e-4  # lam None: λ of real-valued targets, and the least λ of class targets
AUTO_CHECK_FOLDS = 5  # the auto check's cross-validation folds (at least 2; sessions 15-23 held out 20 % once)
LAM_ROWS = 10.0  # lam None, class targets: λ = max(LAM_FLOOR, LAM_ROWS / n), Ridge's alpha = nλ ≥ LAM_ROWS
DENSE_MIN_DENSITY = 0.25  # share of non-zeros from which columns are dense: BLAS sums, dense column designs
# The auto engine's estimate of a pass in this process (StagewiseSolver.work): seconds per pass, and
# per row and class of the scores it reads and writes; fitted to the in-process passes of five
# stores in docs/benchmarks.md, "The auto engine: a cluster only where it is faster (session 34)"
# (0.030 s a pass at 10 000 rows x 20 classes, 0.27-0.38 s at 262 144 x 20, 0.57-0.73 s at 60 000 x 200).
STAGE_S = 0.02
STAGE_ROW_CLASS_S = 4.5e-8
SLICE_BYTES = 8 << 20  # a sparse design's stage is applied to the scores in row slices of rows × k at most this


class StagewiseParams(SolverParams):
    """Options of the stagewise solver (see the module docstring for the math). The inherited
    max_iter and tol control the softmax link's inner iterations (the paper uses 50)."""

    link: Literal["identity", "softmax"] = Field(
        "identity", description="identity: ridge least squares per block; softmax: Algorithm 1 on the logistic loss"
    )
    calibration: Literal["auto", "none", "poly", "predictions"] = Field(
        "auto",
        description="poly: Algorithm 2 with G = [y, y², y³] and simplex projection; "
        "predictions: previous predictions as extra features (identity link only); auto: poly for "
        "multiclass targets (identity link) on the stored columns of dense inputs with <= 1000 columns, all "
        "in one block, where it validates better on a row sample, else none",
    )
    generator: Literal["auto", "sequential", "random", "gradient", "rff"] = Field(
        "auto",
        description="GEN: feature blocks; auto = gradient for regression targets; for classes rff on dense "
        "inputs with <= 1000 columns unless one ridge stage on the columns (multiclass: or the calibrated "
        "columns) validates better on a row sample, else gradient",
    )
    block_size: int = Field(512, ge=1, description="features per stage (p)")
    n_passes: int = Field(2, ge=1, description="passes over all blocks")
    n_components: int = Field(2048, ge=1, description="rff: number of random Fourier features")
    pca_components: int | None = Field(None, ge=1, description="rff: PCA to this many dimensions first (None: off)")
    bandwidth: float = Field(0.5, gt=0, description="rff: Gaussian kernel width / median pairwise distance")
    rff_sampling: Literal["iid", "orthogonal"] = Field(
        "iid",
        description="rff: frequencies drawn independently (Rahimi & Recht), or in blocks of orthogonal "
        "directions with chi-distributed lengths (Yu et al. 2016; same kernel, lower variance)",
    )
    rff_phases: Literal["random", "paired"] = Field(
        "random",
        description="rff: features sqrt2 cos(w'x + b) with random phases b, or sqrt2 cos(w'x) and "
        "sqrt2 sin(w'x) of half as many frequencies (same kernel, lower variance)",
    )
    lipschitz: float | None = Field(None, gt=0, description="softmax: step 1/L; default 1/2 (multilabel 1/4)")
    backtrack: bool = Field(
        False,
        description="softmax: start each stage at L/4 and double L (back to the previous iterate) whenever an "
        "inner iteration raises the objective; accepted iterates decrease it",
    )
    fit_intercept: bool = Field(True, description="an unpenalised bias column in every block")
    lam: float | None = Field(  # type: ignore[assignment]  # None: from n (`lam_for`)
        None,
        ge=0,
        description="λ of (1/n)·loss + λ-penalty on the weights (see penalty); null: from the n training rows, "
        "max(1e-4, 10/n) for class targets (identity link) on dense data of at most 1000 columns; for real-valued "
        "targets on wide data (active columns >= n/2; default generator, calibration, penalty) the ridge model, "
        "λ = c·(the columns' mean variance) with c of 1e-6..100: for n <= 4000 exact in one step, c by "
        "leave-one-out; above, by conjugate gradients, c by the error on every 5th row held out; else 1e-4",
    )
    standardize: bool | Literal["auto"] = Field(
        "auto",
        description="class targets, identity link, dense data of at most 1000 columns: the ridge penalty on "
        "the columns scaled by their standard deviations (the fit is the same in any units; the model stays "
        "in the stored units); auto: where the columns' standard deviations span more than 10x (columns "
        "in different units), true: always there, false: the columns as given",
    )
    penalty: Literal["stage", "total"] = Field(
        "total",
        description="stage: λ on each stage's own weights (Algorithm 3 fits the residuals); total: λ on each "
        "feature's weight summed over the stages (block coordinate descent on ridge: converges to the ridge "
        "model where blocks repeat); the same where a stage's features are new",
    )
    random_state: int = Field(
        0,
        ge=0,
        description="seed of the random blocks, the row sample and the random "
        "Fourier features (a non-negative integer)",
    )
    tol: float = Field(1e-4, ge=0, description="softmax: stop inner iterations when f improves by < tol·|f|")
    max_iter: int = Field(50, ge=1, description="softmax: inner iterations (passes) per stage")
    gram_dtype: Literal["float64", "float32"] = Field(
        "float64",
        description="float32: random Fourier designs in single precision, and AᵀA, AᵀR, AW from "
        "single-precision products (about 2x faster; the model then matches float64 to "
        "~1e-5, across chunkings too)",
    )

    def lam_for(self, n_rows: int, regression: bool, low_dense: bool) -> float:
        """λ of a fit on n_rows rows: `lam`, or for lam None (the default) max(LAM_FLOOR,
        LAM_ROWS/n_rows) for class targets with the identity link on low-dimensional dense data
        (`low_dense`: at most LOW_DIM_MAX_COLUMNS active columns, LOW_DIM_MIN_DENSITY of them
        non-zero per row), LAM_FLOOR otherwise (module docstring, "λ scaling")."""
        if self.lam is not None:
            return self.lam
        if regression or not low_dense or self.link != "identity":
            return LAM_FLOOR
        return max(LAM_FLOOR, LAM_ROWS / n_rows)

    @model_validator(mode="after")
    def _calibration_needs_identity(self):
        if self.calibration not in ("none", "auto") and self.link != "identity":
            raise ValueError("calibration (Algorithm 2) refits squared error: use it with link='identity'")
        return self


def apply_stage(
    space: FeatureSpace,
    base,
    F: np.ndarray,
    block,
    W: np.ndarray,
    C: np.ndarray | None,
    multilabel: bool,
    design=None,
    out: np.ndarray | None = None,
) -> np.ndarray:
    """One stage of the model: ỹ = F + A W (Algorithm 3's update / eq. 18), then, with a
    calibration C, ŷ = clip(G(ỹ) C) (eq. 19). Used by training tasks and by scoring alike
    (`design`: A when the caller already has it). Into `out` when given, which may be F itself
    (the update task's own copy of the scores). Row by row (a row's result depends on its row
    alone: `rowwise_matmul`, a sparse product's row sums), so it goes in row slices: a sparse
    design's in `row_slices` (the temporaries, A W and the calibration's basis, are a slice's
    rows × k, not the chunk's), a dense design's in panels (`panels`: built, used and dropped
    while in cache)."""
    U = np.empty_like(F) if out is None else out
    if not space.dense_design:
        A = space.design(base, block) if design is None else design
        for lo, hi in row_slices(F.shape[0], F.shape[1]):
            U[lo:hi] = _apply_rows(A[lo:hi], F[lo:hi], W, C, multilabel)
        return U
    for lo, hi in panels(F.shape[0]):
        A = space.panel_design(base, block, lo, hi) if design is None else design[lo:hi]
        U[lo:hi] = _apply_rows(A, F[lo:hi], W, C, multilabel)
    return U


def row_slices(n: int, k: int) -> list[tuple[int, int]]:
    """Slices of n rows whose rows × k float64 arrays take at most SLICE_BYTES (one row at least)."""
    rows = max(1, SLICE_BYTES // (8 * max(k, 1)))
    return [(lo, min(n, lo + rows)) for lo in range(0, n, rows)]


def _apply_rows(A, F: np.ndarray, W: np.ndarray, C: np.ndarray | None, multilabel: bool) -> np.ndarray:
    """ỹ = F + [A, F] W: the rows of W beyond A's columns (calibration="predictions") weight F."""
    U = F + _product(A, W[: A.shape[1]])
    if W.shape[0] > A.shape[1]:
        U += rowwise_matmul(F, W[A.shape[1] :])
    if C is not None:
        U = project_predictions(rowwise_matmul(poly_basis(U), C), multilabel)
    return U


def _n_correct(F: np.ndarray, labels) -> int:
    """Rows whose top-scored class is right (multiclass), or a true label (multilabel: P@1);
    0 for regression targets (real values, no classes)."""
    if not sp.issparse(labels) and np.ndim(labels) == 2:
        return 0
    top = np.argmax(F, axis=1)
    if sp.issparse(labels):
        return int(np.count_nonzero(np.asarray(labels[np.arange(F.shape[0]), top])))
    return int((top == labels).sum())


# -- chunk tasks ---------------------------------------------------------------------------


def _load(
    source: ChunkSource, chunk_id: int, state, version: int, private: bool = False, last: bool = False, space=None
):
    """The chunk, its targets Y and its scores F of `version`; `private`: an F the task may
    change in place, `last`: the update task's, the last read of the version (ChunkState.read_private).
    Y is None where the task makes the residual without it (`_without_targets`, given `space`)."""
    chunk = source.read_chunk(chunk_id)
    if version == 0:
        F = np.zeros((chunk.n_rows, source.n_classes))
    elif private:
        F = state.read_private(SCORES, version, chunk_id, last=last)
    else:
        F = state.read(SCORES, version, chunk_id)
    # Y after F: a read from the file is its bytes and the array at once, without Y beside them
    Y = None if space is not None and _without_targets(chunk, space) else chunk.targets(source.n_classes)
    return chunk, Y, F


def _without_targets(chunk, space: FeatureSpace) -> bool:
    """Whether a task of the identity link makes its residual Y − F in the place of its own F
    without the one-hot Y (`_residual`): class ids, a sparse design, and F not needed after (no
    calibration="predictions"). Y would be a whole array resident: numpy's large arrays take
    huge pages, all of which a one a row touches."""
    labels = chunk.labels
    return not space.dense_design and not space.with_predictions and isinstance(labels, np.ndarray) and labels.ndim == 1


def _residual(F: np.ndarray, Y: np.ndarray | None, link: str, in_place: bool, labels=None) -> tuple[np.ndarray, float]:
    """link_residual (Y − g(F), Σ_i ℓ): with `in_place` and the identity link into F itself (a
    task's own scores, no longer needed), the same bits without a second rows × k array. Y None
    (`_without_targets`): Y − F of the class ids `labels` into F as −F + 0.0 (0 − f, a zero's
    sign included: −0.0 + 0.0 is 0.0) and then + 1 at each row's class (1 − f), the bits of
    link_residual's Y − F without the one-hot Y."""
    if Y is None:
        np.negative(F, out=F)
        F += 0.0
        F[np.arange(F.shape[0]), labels] += 1.0
        return F, float(np.einsum("ij,ij->", F, F))
    if in_place and link == "identity":
        return link_residual(F, Y, link, out=F)
    return link_residual(F, Y, link)


def _product(A, V: np.ndarray, rowwise: bool = True) -> np.ndarray:
    """A V in the precision of a dense design A (a float32 design: single-precision products,
    so no float64 copy of A), as float64; sparse designs are float64. `rowwise`: A's rows are
    samples, whose results must not depend on the rows beside them (`rowwise_matmul`); the
    sums AᵀR pass False."""
    V = V.astype(A.dtype, copy=False)
    return np.asarray(rowwise_matmul(A, V) if rowwise and not sp.issparse(A) else A @ V, dtype=np.float64)


class BlockStats(NamedTuple):
    """The sums Algorithm 1 needs at W = 0 for the design [A, F] of a block (F only with
    calibration="predictions"), R = Y − g(F): `gram` the upper triangle of AᵀA (p' × p', p' =
    A's width), row by row (`upper_triangle`: p'(p' + 1)/2 values, half the bytes to sum and send;
    `_stage_stats` mirrors it; None when the driver already holds AᵀA), `rhs` [A, F]ᵀR
    ((p' [+ k]) × k), `loss` Σ_i ℓ(F_i; y_i) (13), and `cross` [A, F]ᵀF ((p' + k) × k, the F
    columns of the Gram; None without F)."""

    gram: np.ndarray | None
    rhs: np.ndarray
    loss: float
    cross: np.ndarray | None


class InnerSums(NamedTuple):
    """An inner iteration's sums at U = F + AW: `rhs` Aᵀ(Y − g(U)), `loss` Σ_i ℓ(U_i; y_i)."""

    rhs: np.ndarray
    loss: float


class CalibrationSums(NamedTuple):
    """Algorithm 2's sums for G = G(ỹ): `gram` GᵀG (|G| × |G|), `rhs` GᵀY (|G| × k)."""

    gram: np.ndarray
    rhs: np.ndarray


class UpdateSums(NamedTuple):
    """An update pass's sums at the new scores F: `loss` Σ_i ℓ(F_i; y_i), `correct` the rows
    whose top class is right (multilabel: a true label), and either the next block's
    `next_stats` or the next ranking's column `gradient` X_activeᵀ(Y − g(F)) (or neither)."""

    loss: float
    correct: int
    next_stats: BlockStats | None
    gradient: np.ndarray | None


class NormalSums(NamedTuple):
    """The normal equations of the stored columns with a bias column, Z = [1, X] (n × (1 + d),
    d = n_features): `gram` ZᵀZ, `rhs` ZᵀY ((1 + d) × k), `ysq` Σ_i ‖y_i‖²."""

    gram: np.ndarray
    rhs: np.ndarray
    ysq: float


def _threshold_counts_task(
    source: ChunkSource, chunk_id: int, *, state, version: int, heldout: bool
) -> ThresholdCounts:
    """metrics.ThresholdCounts over THRESHOLD_GRID of the chunk's scores F at `version`, or with
    `heldout` of its held-out scores F̃ = Y − (Y − F)/κ (`StagewiseSolver._heldout`)."""
    _, Y, F = _load(source, chunk_id, state, version)
    if heldout:
        kappa = np.maximum(state.read(HELDOUT, version, chunk_id), KAPPA_FLOOR)
        F = Y - (Y - F) / kappa
    return threshold_counts(F, Y > 0, THRESHOLD_GRID)


def _leverages(A, Hn: np.ndarray) -> np.ndarray:
    """h_i = a_iᵀ Hn a_i for the rows a_i of a design A (Hn symmetric), as an n × 1 array; each
    row's sums in one fixed order (a row's bits do not depend on the rows beside it)."""
    if sp.issparse(A):
        return np.asarray(sp.csr_matrix(A.multiply(A @ Hn)).sum(axis=1), dtype=np.float64).reshape(-1, 1)
    h = np.empty((A.shape[0], 1))
    ones = np.ones((A.shape[1], 1))
    for lo, hi in panels(A.shape[0]):
        h[lo:hi] = rowwise_matmul(_product(A[lo:hi], Hn) * A[lo:hi], ones)
    return h


def _keep_share(state, chunk_id: int, version: int, h: np.ndarray, first: bool) -> None:
    """κ ← κ (1 − h), read at `version` of HELDOUT (κ = 1 at the last pass's `first` stage) and
    written as version + 1, beside the scores of the same version."""
    kappa = np.ones_like(h) if first else state.read(HELDOUT, version, chunk_id)
    state.write(HELDOUT, version + 1, chunk_id, kappa * (1.0 - h))


@dataclasses.dataclass(frozen=True)
class TargetRange:
    """The least and greatest value of each real-valued target (k,) over some rows; `+` is the
    range of the rows of both (so Engine.map_reduce's sum of the chunks' ranges is the range of
    all rows, in any order). No rows: +inf and -inf."""

    low: np.ndarray
    high: np.ndarray

    @classmethod
    def of(cls, T: np.ndarray) -> TargetRange:
        """The range of the rows of T (n × k)."""
        if len(T) == 0:
            return cls(np.full(T.shape[1], np.inf), np.full(T.shape[1], -np.inf))
        return cls(T.min(axis=0), T.max(axis=0))

    def __add__(self, other: TargetRange) -> TargetRange:
        return TargetRange(np.minimum(self.low, other.low), np.maximum(self.high, other.high))


class ScanCounts(NamedTuple):
    """The column scan: `nnz` non-zeros per column (n_features,), `nonfinite` NaN/inf values,
    the `normal` sums when the stages run on them (`StagewiseSolver._normal_mode`), the
    columns' sums Σ_i x_ij and Σ_i x_ij² (n_features,; `column_scales`), and for real-valued
    targets their `TargetRange` (None for class targets)."""

    nnz: np.ndarray
    nonfinite: int
    normal: NormalSums | None
    sums: np.ndarray
    squares: np.ndarray
    targets: TargetRange | None


def _block_stats(
    A, F: np.ndarray, Y: np.ndarray | None, link: str, with_predictions: bool, gram: bool, residual=None
) -> BlockStats:
    """`BlockStats` of the rows of design A at scores F; AᵀA (its upper triangle) only with
    `gram`; `_bordered` assembles the Gram of [A, F]. AᵀR and AᵀF are one product Aᵀ[R, F].
    Dense designs are summed panel by panel, the panels' products in the design's precision,
    their sum in float64; each panel's PᵀP is exactly symmetric (numpy computes a matrix times
    its own transpose as one triangle, BLAS's syrk, and copies it to the other), so the upper
    triangle loses nothing. `residual`: (R, Σℓ) when the caller has them (`_residual`; F is then
    not read unless `with_predictions`)."""
    if residual is None:
        assert Y is not None, "the targets, or the residual"
        residual = link_residual(F, Y, link)
    R, loss = residual
    RF = np.hstack([R, F]) if with_predictions else R
    if sp.issparse(A):
        M = sparse_gram_upper(A) if gram else None
        B = np.asarray(A.T @ RF)
    else:
        G = np.zeros((A.shape[1], A.shape[1])) if gram else None
        B = np.zeros((A.shape[1], RF.shape[1]))
        for lo, hi in panels(A.shape[0]):
            P = A[lo:hi]
            if G is not None:
                G += P.T @ P
            B += _product(P.T, RF[lo:hi], rowwise=False)
        M = None if G is None else upper_triangle(G)
    if not with_predictions:
        return BlockStats(M, B, loss, None)
    k = R.shape[1]
    return BlockStats(M, np.vstack([B[:, :k], F.T @ R]), loss, np.vstack([B[:, k:], F.T @ F]))


def _bordered(M: np.ndarray, cross: np.ndarray | None) -> np.ndarray:
    """The Gram of [A, F] from AᵀA and [A, F]ᵀF (`_block_stats`); AᵀA itself without F."""
    if cross is None:
        return M
    p = M.shape[0]
    return np.block([[M, cross[:p]], [cross[:p].T, cross[p:]]])


def _column_gradient(X, active: np.ndarray, F: np.ndarray, Y: np.ndarray | None, link: str, R=None) -> np.ndarray:
    """X_activeᵀ (Y − g(F)): the per-column gradients the "gradient" generator ranks (A.2.2).
    For the identity link Y − F is computed into F (the caller's own scores, not needed after):
    the same bits as a new array, without a second rows × k one; or it is `R`, given (`_residual`)."""
    if R is None:
        assert Y is not None, "the targets, or the residual"
        R = np.subtract(Y, F, out=F) if link == "identity" else Y - link_mean(F, link)
    return np.asarray(X[:, active].T @ R)


def _scan_task(source: ChunkSource, chunk_id: int, *, normal: bool = False) -> ScanCounts:
    """The chunk's non-zeros per column, non-finite values and column sums of values and
    squares, and with `normal` its `NormalSums`. A source that holds X dense
    (`ChunkSource.dense_chunk`: an in-memory array) is counted on its dense rows, and when they
    are dense enough for dense products its sums are those products on the rows themselves
    (`_dense_normal_sums`, as `_normal_sums` computes them on the CSR form's toarray(), which
    holds the same values): no CSR form is made. The column sums add the non-zero values in
    row-major order either way (`_column_sums`): the same bits from the dense rows and the CSR form."""
    dense = source.dense_chunk(chunk_id)
    if dense is not None:
        D, labels = dense
        nnz, nonfinite = column_counts(D)
        stored = D != 0
        sums = _column_sums(np.nonzero(stored)[1], D[stored], D.shape[1])
        targets = TargetRange.of(labels) if source.regression else None
        if not normal:
            return ScanCounts(nnz, nonfinite, None, *sums, targets)
        if nnz.sum() >= DENSE_MIN_DENSITY * D.size:
            normal_sums = _dense_normal_sums(D, target_matrix(labels, source.n_classes))
            return ScanCounts(nnz, nonfinite, normal_sums, *sums, targets)
    chunk = source.read_chunk(chunk_id)
    X = chunk.X
    canonical = X
    if not X.has_canonical_format:  # the row-major order of the values, as from dense rows
        canonical = X.tocsr(copy=True)
        canonical.sum_duplicates()
    return ScanCounts(
        np.bincount(X.indices, minlength=source.n_features).astype(np.int64),
        int(X.data.size - np.isfinite(X.data).sum()),
        _normal_sums(X, chunk.targets(source.n_classes)) if normal else None,
        *_column_sums(canonical.indices, canonical.data, source.n_features),
        TargetRange.of(chunk.labels) if source.regression else None,
    )


def _column_sums(columns: np.ndarray, values: np.ndarray, n_features: int) -> tuple[np.ndarray, np.ndarray]:
    """(Σ_i x_ij, Σ_i x_ij²) per column j from the stored values and their columns, in float64,
    each column's values added in the order given."""
    v = values.astype(np.float64, copy=False)
    with np.errstate(over="ignore"):  # squares beyond float64: the Gram overflows too, `_check_gram`'s error
        return np.bincount(columns, v, n_features), np.bincount(columns, v * v, n_features)


def _normal_sums(X: sp.csr_matrix, Y: np.ndarray) -> NormalSums:
    """`NormalSums` of one chunk: XᵀX and XᵀY as dense float64 BLAS products when X is dense
    (at least DENSE_MIN_DENSITY of its entries non-zero: `_dense_normal_sums`), else as sparse
    products; the bias row and column of ZᵀZ are the column sums of X and the row count."""
    n, d = X.shape
    if X.nnz >= DENSE_MIN_DENSITY * n * d:
        return _dense_normal_sums(X.toarray().astype(np.float64, copy=False), Y)
    S, T = np.empty((1 + d, 1 + d)), np.empty((1 + d, Y.shape[1]))
    X = X.astype(np.float64)
    S[1:, 1:], T[1:] = (X.T @ X).toarray(), np.asarray(X.T @ Y)
    S[0, 1:] = np.asarray(X.sum(axis=0)).ravel()
    S[1:, 0], S[0, 0], T[0] = S[0, 1:], n, Y.sum(axis=0)
    return NormalSums(S, T, float((Y * Y).sum()))


def _dense_normal_sums(D: np.ndarray, Y: np.ndarray) -> NormalSums:
    """`NormalSums` of a chunk's rows as a dense C-ordered float64 array D (n × d): with
    Z = [1, D], ZᵀZ = [[n, 1ᵀD], [Dᵀ1, DᵀD]] and ZᵀY = [1ᵀY; DᵀY], DᵀD and DᵀY as BLAS products."""
    n, d = D.shape
    S, T = np.empty((1 + d, 1 + d)), np.empty((1 + d, Y.shape[1]))
    S[1:, 1:], T[1:] = D.T @ D, D.T @ Y
    S[0, 1:] = D.sum(axis=0)
    S[1:, 0], S[0, 0], T[0] = S[0, 1:], n, Y.sum(axis=0)
    return NormalSums(S, T, float((Y * Y).sum()))


def _first_nonfinite_task(source, chunk_id):
    """(row of the chunk, column) of its first NaN or infinite value, or None."""
    X = source.read_chunk(chunk_id).X
    bad = np.flatnonzero(~np.isfinite(X.data))
    if not bad.size:
        return None
    row = int(np.searchsorted(X.indptr, bad[0], side="right")) - 1
    return row, int(X.indices[bad[0]])


def _check_gram(M: np.ndarray, where: str) -> None:
    """A sum of products of features (AᵀA) that overflowed is an error about the data (`where`)."""
    if not np.isfinite(M).all():
        raise InputError(
            where,
            "sums of squared feature values overflow float64 (features of magnitude about 1e150 or more)",
            "scale the features down (e.g. standardize them) and train again",
        )


def _data_name(source: ChunkSource) -> str:
    path = getattr(source, "path", None)
    return f"store {path}" if path else "the training data"


def constant_targets_notice(source: ChunkSource, targets: TargetRange) -> str | None:
    """One line naming each real-valued target that holds one value in every training row, and
    what that means, or None when every target varies."""
    same = np.flatnonzero(targets.low == targets.high)
    if not same.size:
        return None
    named = ", ".join(f"{source.classes[j]!r} is {float(targets.low[j])!r}" for j in same)
    return (
        f"{_data_name(source)}: the target {named} in every training row: the model predicts that constant "
        "and learns nothing from the features; check that the target column is the right one"
    )


def wide_regression_notice(source: ChunkSource, n_active: int, sums: np.ndarray, squares: np.ndarray) -> str | None:
    """One line when real-valued targets are fitted in stages at the default λ (lam None:
    LAM_FLOOR) on at least as many active columns as training rows — where the wide ridge fits
    (`StagewiseSolver._dual_mode`, `_cg_mode`) do not apply: another generator, calibration,
    penalty or no intercept, or fewer than DUAL_N_MIN rows — where the first blocks interpolate the targets and
    held-out R² can fall below predicting the mean (docs/benchmarks.md, "Defaults on wide
    data"): it names the shape and the columns' mean variance v̄ (over the active columns' sums
    and squares), the λ scale at which two passes reach the ridge model; None otherwise."""
    if n_active < source.n_rows:
        return None
    v_bar = float(np.mean(column_variances(source.n_rows, sums, squares)))
    return (
        f"{_data_name(source)}: {n_active} active columns for {source.n_rows} training rows: on regression data this "
        f"wide the stages at the default lam={LAM_FLOOR:g} can predict unseen rows worse than their mean (the ridge "
        "fit with λ chosen on held-out rows that replaces them needs the default generator, calibration, penalty and "
        "intercept); check with --valid, and set lam (-p lam= on the CLI) near the columns' mean variance "
        f"({v_bar:.3g})"
    )


def _rows_task(source, chunk_id, *, rows, inputs):
    """The `inputs` columns (dense) and the targets of the sampled `rows` in this chunk."""
    lo, hi = source.chunk_bounds(chunk_id)
    local = rows[(rows >= lo) & (rows < hi)] - lo
    chunk = source.read_chunk(chunk_id)
    return chunk.X[local][:, inputs].toarray().astype(np.float64), chunk.targets(source.n_classes)[local]


def _stats_task(
    source: ChunkSource,
    chunk_id: int,
    *,
    state: ChunkState,
    version: int,
    space: FeatureSpace,
    block: int | np.ndarray,
    link: str,
    gram: bool,
) -> BlockStats:
    """A chunk's `BlockStats` for the stage's block at its scores F (version `version`):
    Algorithm 1's sums at W = 0, the design A of the block built from the chunk (dense designs
    panel by panel)."""
    chunk, Y, F = _load(source, chunk_id, state, version, private=True, space=space if link == "identity" else None)
    base = chunk_base(source, chunk_id, space, chunk)
    if space.kind == "columns" and space.dense:  # a panel at a time: no rows × block array
        assert Y is not None, "dense designs keep their targets"
        parts = [
            _block_stats(
                space.panel_design(base, block, lo, hi), F[lo:hi], Y[lo:hi], link, space.with_predictions, gram
            )
            for lo, hi in panels(F.shape[0])
        ]
        return functools.reduce(add_results, parts)
    A = chunk_design(source, chunk, space, base, block)
    residual = _residual(F, Y, link, in_place=not space.with_predictions, labels=chunk.labels)
    return _block_stats(A, F, Y, link, space.with_predictions, gram, residual)


def _gradient_task(source, chunk_id, *, state, version, active, link):
    chunk, Y, F = _load(source, chunk_id, state, version, private=True)
    return _column_gradient(chunk.csc, active, F, Y, link)


def _inner_task(
    source: ChunkSource,
    chunk_id: int,
    *,
    state: ChunkState,
    version: int,
    space: FeatureSpace,
    block: int | np.ndarray,
    W: np.ndarray,
    link: str,
) -> InnerSums:
    """A chunk's `InnerSums` at U = F + AW: Aᵀ(Y − g(U)), the gradient of (13) up to −1/n, and
    Σ_i ℓ(U_i; y_i), for Algorithm 1's next update (14) and its backtracking test."""
    chunk, Y, F = _load(source, chunk_id, state, version)
    A = chunk_design(source, chunk, space, chunk_base(source, chunk_id, space, chunk), block)
    if sp.issparse(A):
        U = F + A @ W
        R, loss = link_residual(U, Y, link)
        return InnerSums(np.asarray(A.T @ R), loss)
    B, loss = np.zeros((A.shape[1], Y.shape[1])), 0.0
    for lo, hi in panels(A.shape[0]):
        U = F[lo:hi] + _product(A[lo:hi], W, rowwise=False)  # only summed (AᵀR), never scores
        R, part = link_residual(U, Y[lo:hi], link)
        B += _product(A[lo:hi].T, R, rowwise=False)
        loss += part
    return InnerSums(B, loss)


def _calibration_task(
    source: ChunkSource,
    chunk_id: int,
    *,
    state: ChunkState,
    version: int,
    space: FeatureSpace,
    block: int | np.ndarray,
    W: np.ndarray,
) -> CalibrationSums:
    """A chunk's `CalibrationSums`: GᵀG and GᵀY for G = G(ỹ), the polynomial basis of the
    block fit ỹ = F + AW (18), the sums of Algorithm 2's least-squares calibration (19)."""
    chunk, Y, F = _load(source, chunk_id, state, version)
    base = chunk_base(source, chunk_id, space, chunk)
    G = poly_basis(
        apply_stage(
            space,
            base,
            F,
            block,
            W,
            None,
            source.multilabel,
            design=chunk_design(source, chunk, space, base, block),
        )
    )
    return CalibrationSums(G.T @ G, G.T @ Y)


def _update_task(
    source: ChunkSource,
    chunk_id: int,
    *,
    state: ChunkState,
    version: int,
    space: FeatureSpace,
    block: int | np.ndarray,
    W: np.ndarray,
    C: np.ndarray | None,
    link: str,
    next_block: int | np.ndarray | None,
    next_gram: bool,
    next_gradient: np.ndarray | None,
    leverage: np.ndarray | None = None,
    first_kept: bool = False,
) -> UpdateSums:
    """Apply the stage, write scores version+1, and return its `UpdateSums`: the fused
    statistics of the next block when `next_block` is given (its AᵀA only if `next_gram`), the
    column gradients when `next_gradient` holds the active columns. With `leverage` (Hn of
    `_leverages`: a stage of the held-out pass, `StagewiseSolver._heldout`) also κ ← κ (1 − h),
    version+1 of HELDOUT (`first_kept`: κ starts at 1). The new scores are computed into the
    task's own copy of the old ones, and once written, for the identity link, their residual
    too, without the one-hot Y where `_without_targets`: one rows × k array of scores at a time
    besides its read's or write's bytes (row_state_arrays)."""
    chunk, Y, F = _load(
        source, chunk_id, state, version, private=True, last=True, space=space if link == "identity" else None
    )
    base = chunk_base(source, chunk_id, space, chunk)
    if space.dense_design and next_block is not None:
        assert Y is not None, "dense designs keep their targets"
        F, stats, h = _update_dense(
            source, chunk_id, space, base, F, Y, block, W, C, link, next_block, next_gram, leverage
        )
        state.write(SCORES, version + 1, chunk_id, F)
        if h is not None:
            _keep_share(state, chunk_id, version, h, first_kept)
        return UpdateSums(stats.loss, _n_correct(F, chunk.labels), stats, None)  # Σℓ at the new scores, by panel
    design = None if space.dense else chunk_design(source, chunk, space, base, block)  # dense columns: by panel
    if leverage is not None:
        _keep_share(state, chunk_id, version, _leverages(design, leverage), first_kept)
    F = apply_stage(space, base, F, block, W, C, source.multilabel, design=design, out=F)
    state.write(SCORES, version + 1, chunk_id, F)
    correct = _n_correct(F, chunk.labels)
    if next_gradient is not None and link != "identity":  # Σℓ, then the gradient's own Y − g(F)
        assert Y is not None, "only the identity link goes without its targets"
        gradient = _column_gradient(chunk.csc, next_gradient, F, Y, link)
        return UpdateSums(link_loss_sum(F, Y, link), correct, None, gradient)
    residual = _residual(F, Y, link, in_place=not space.with_predictions, labels=chunk.labels)
    if next_block is not None:
        A = chunk_design(source, chunk, space, base, next_block)
        stats = _block_stats(A, F, Y, link, space.with_predictions, next_gram, residual)
        return UpdateSums(residual[1], correct, stats, None)
    if next_gradient is None:
        return UpdateSums(residual[1], correct, None, None)
    return UpdateSums(residual[1], correct, None, _column_gradient(chunk.csc, next_gradient, F, Y, link, residual[0]))


def _update_dense(
    source, chunk_id, space, base, F, Y, block, W, C, link, next_block, next_gram, leverage=None
) -> tuple[np.ndarray, BlockStats, np.ndarray | None]:
    """_update_task for a dense design, in one sweep of row panels: apply the stage to a panel
    (with `leverage`, also its rows' `_leverages` h), build the next block's features of the
    panel and add its statistics, while all of it is in cache. The same bits as apply_stage
    followed by _block_stats on the whole next design."""
    design = cached_design(source, chunk_id, space, block)
    n = F.shape[0]
    cached_next = cached_design(source, chunk_id, space, next_block)
    following = None
    if cached_next is None and design_cacheable(source, space):
        following = new_design(source, chunk_id, (n, space.design_width(next_block)), space.dtype)
    U = F  # the task's own scores: each panel's new rows replace its old ones
    h = None if leverage is None else np.empty((n, 1))
    stats = None
    for lo, hi in panels(n):
        A = space.panel_design(base, block, lo, hi) if design is None else design[lo:hi]
        U[lo:hi] = _apply_rows(A, F[lo:hi], W, C, source.multilabel)
        if h is not None:
            h[lo:hi] = _leverages(A, leverage)
        if cached_next is not None:
            A = cached_next[lo:hi]
        else:
            A = space.panel_design(base, next_block, lo, hi, out=None if following is None else following[lo:hi])
        part = _block_stats(A, U[lo:hi], Y[lo:hi], link, space.with_predictions, next_gram)
        stats = part if stats is None else add_results(stats, part)
    assert stats is not None, "a chunk has at least one panel"
    if following is not None:
        cache_design(source, chunk_id, space, next_block, following)
    return U, stats, h


# -- linear algebra ------------------------------------------------------------------------


def _poly_map(H: np.ndarray, GY: np.ndarray) -> np.ndarray:
    """Algorithm 2's calibration map W̃ = argmin (1/n) Σ ‖y − W̃ G(ỹ)‖² + ε ‖W̃ − I_ỹ‖² from
    H = GᵀG/n and GY = GᵀY/n: I_ỹ the map G(ỹ) ↦ ỹ and ε = CALIBRATION_RIDGE · tr(H)/|G| (module
    docstring)."""
    k = GY.shape[1]
    identity = np.zeros_like(GY)
    identity[1 : 1 + k] = np.eye(k)  # the rows of G's linear terms ỹ (poly_basis: [1, ỹ, ỹ², ỹ³])
    eps = CALIBRATION_RIDGE * np.trace(H) / H.shape[0]
    return _solver_for(H + eps * np.eye(H.shape[0]), definite=True)(GY + eps * identity)


def _solver_for(H: np.ndarray, definite: bool):
    """X ↦ H⁻¹X: Cholesky when H is positive definite (λ > 0), else the pseudo-inverse from an
    eigendecomposition (eigenvalues below 1e-12 · the largest are dropped: minimum-norm
    least squares). Single-threaded BLAS: the driver's solves are small (p ≈ 500), threads gain
    nothing there, and on a loaded machine OpenBLAS's spinning threads made a 501 × 501 Cholesky
    100× slower (measured). The Cholesky factor and solve are LAPACK's dpotrf and dpotrs, called
    as scipy.linalg.cho_factor and cho_solve call them (the same bits) without their checks and
    look-ups, which cost ten times a small stage's factorisation; H and X are checked here."""
    _check_finite(H)
    with single_threaded_blas():
        if definite:
            factor = _cholesky(H)
        else:
            w, V = np.linalg.eigh(H)
            inv = np.where(w > w.max() * 1e-12, 1.0 / np.where(w > 0, w, 1.0), 0.0)

    def solve(R: np.ndarray) -> np.ndarray:
        _check_finite(R)
        with single_threaded_blas():
            return _cholesky_solve(factor, R) if definite else V @ (inv[:, None] * (V.T @ R))

    return solve


def _check_finite(A: np.ndarray) -> None:
    """scipy.linalg's check of a matrix passed to a factorisation or solve, with its message."""
    if not np.isfinite(A).all():
        raise ValueError("array must not contain infs or NaNs")


def _cholesky(H: np.ndarray) -> np.ndarray:
    """The upper Cholesky factor of H (float64) as scipy.linalg.cho_factor(H) returns it (the
    lower triangle not cleaned); numpy's LinAlgError when H is not positive definite."""
    c, info = dpotrf(np.asarray(H, dtype=np.float64), lower=0, clean=0)
    if info > 0:
        raise np.linalg.LinAlgError(f"{info}-th leading minor of the array is not positive definite")
    if info < 0:
        raise ValueError(f'LAPACK reported an illegal value in {-info}-th argument on entry to "POTRF".')
    return c


def _cholesky_solve(c: np.ndarray, R: np.ndarray) -> np.ndarray:
    """H⁻¹R from H's upper factor c (`_cholesky`), as scipy.linalg.cho_solve((c, False), R)."""
    X, info = dpotrs(c, np.asarray(R, dtype=np.float64), lower=0)
    if info != 0:
        raise ValueError(f"illegal value in {-info}th argument of internal potrs")
    return X


# -- the model -----------------------------------------------------------------------------


def _stage_arrays(space: FeatureSpace, blocks: list, weights: list, calibrations: list) -> dict[str, np.ndarray]:
    out = {
        "weights": np.vstack(weights) if weights else np.zeros((0, 0)),
        "weight_rows": np.array([w.shape[0] for w in weights], dtype=np.int64),
        **space.arrays(),
    }
    if space.kind == "columns":
        out["blocks"] = np.concatenate(blocks).astype(np.int64) if blocks else np.zeros(0, np.int64)
        out["block_sizes"] = np.array([len(b) for b in blocks], dtype=np.int64)
    else:
        out["blocks"] = np.array(blocks, dtype=np.int64)
    if calibrations:
        out["calibrations"] = np.stack(calibrations)
    return out


def _stages_from_arrays(space: FeatureSpace, arrays: dict) -> tuple[list, list, list]:
    weights = np.split(arrays["weights"], np.cumsum(arrays["weight_rows"])[:-1]) if len(arrays["weight_rows"]) else []
    blocks: list[np.ndarray] | list[int]
    if space.kind == "columns":
        blocks = np.split(arrays["blocks"], np.cumsum(arrays["block_sizes"])[:-1]) if len(weights) else []
    else:
        blocks = [int(b) for b in arrays["blocks"]]
    calibrations = list(arrays["calibrations"]) if "calibrations" in arrays else []
    return blocks, weights, calibrations


@register_model
class StagewiseModel(Model):
    """The sequence of stages of Algorithm 3: scores start at 0 and each stage applies
    `apply_stage` (F ← F + A W, then the calibration clip(G(F) C) if any). The features of a
    stage are recomputed exactly as in training (same columns, or same RFF seeds and PCA), so
    scores of training rows equal the training-time scores bitwise (float64 or float32 designs),
    whatever the batch, the BLAS threads and the CPU's BLAS kernel. With the identity link, stored
    columns and no calibration the model is linear and also exposes coef_ / intercept_."""

    kind = "stagewise"

    def __init__(self, *, space: FeatureSpace, link: str, blocks: list, weights: list, calibrations: list, **common):
        self.space, self.link = space, link  # before Model.__init__: the default threshold follows the link
        super().__init__(**common)
        self.blocks, self.weights, self.calibrations = blocks, weights, calibrations

    @property
    def score_kind(self) -> str:  # type: ignore[override]  # a class attribute on Model
        """ "probability" for the identity link (scores fit 0/1 targets: threshold 0.5), else "margin"."""
        return "probability" if self.link == "identity" else "margin"

    def _scores(self, X):
        F = np.zeros((X.shape[0], len(self.classes_)))
        base = self.space.base(X)
        for t, (block, W) in enumerate(zip(self.blocks, self.weights)):
            C = self.calibrations[t] if self.calibrations else None
            F = apply_stage(self.space, base, F, block, W, C, self.multilabel, out=F)
        return F

    def probabilities(self, S: np.ndarray) -> np.ndarray:
        """softmax/sigmoid of the margins for the softmax link; for the identity link the
        scores projected onto the simplex ([0, 1]^k multilabel), as Algorithm 2's clip."""
        if self.link == "identity":
            return project_predictions(S, self.multilabel)
        return link_mean(S, self.link)

    def predict_proba(self, X) -> np.ndarray:
        """`probabilities` of the scores of X (n × k)."""
        if self.regression:
            raise AttributeError("predict_proba: a regression model predicts real values, not class probabilities")
        return self.probabilities(self.decision_function(X))

    @property
    def is_linear(self) -> bool:
        return (
            self.link == "identity"
            and not self.calibrations
            and self.space.kind == "columns"
            and not self.space.with_predictions
        )

    def _require_linear(self, name: str) -> None:
        if not self.is_linear:
            raise AttributeError(f"{name} exists only for identity-link models on stored features without calibration")

    @property
    def coef_(self) -> np.ndarray:
        """k × n_features weights of the equivalent linear model (sum of the stages)."""
        self._require_linear("coef_")
        coef = np.zeros((len(self.classes_), self.n_features))
        skip = int(self.space.fit_intercept)
        for block, W in zip(self.blocks, self.weights):
            coef[:, block] += W[skip:].T
        return coef

    @property
    def intercept_(self) -> np.ndarray:
        self._require_linear("intercept_")
        b = np.zeros(len(self.classes_))
        if self.space.fit_intercept:
            for W in self.weights:
                b += W[0]
        return b

    def _arrays(self):
        return _stage_arrays(self.space, self.blocks, self.weights, self.calibrations)

    def _extra(self):
        return {"link": self.link, "space": self.space.to_json()}

    @classmethod
    def _from_saved(cls, common, arrays, extra):
        space = FeatureSpace.from_saved(extra["space"], arrays)
        blocks, weights, calibrations = _stages_from_arrays(space, arrays)
        return cls(space=space, link=extra["link"], blocks=blocks, weights=weights, calibrations=calibrations, **common)


# -- the solver ----------------------------------------------------------------------------


@dataclasses.dataclass(kw_only=True)
class StagewiseState(SolverState):
    """Algorithm 3 after `step` stages (what a checkpoint holds).

    scores: the per-sample scores F (n × k) after `step` stages, version `step` of the
        ChunkState array SCORES (version 0, all zeros, is never written).
    blocks, weights, calibrations: one entry per stage, appended as the stage ends: its block
        (int64 column ids; for random Fourier features a one-element array holding the block
        id), W_t ((1 + p) × k, bias row first; (1 + p + k) × k with calibration="predictions")
        and, with calibration="poly", the calibration map W̃_t (|G| × k, G = [1, ỹ, ỹ², ỹ³]).
    generator, calibration: GEN and the calibration, with "auto" resolved by `init`. space, rff_inputs, rff_mean, rff_components:
        the FeatureSpace (`FeatureSpace.to_json()` and `FeatureSpace.arrays()`). active: the
        columns with a non-zero training value (int64).
    order: the "gradient" generator's ranking of the active columns for the current pass (None
        until it is computed).
    pending_gram, pending_rhs, pending_loss: the statistics of the next stage's block at the
        current scores (Gram of [A, F], [A, F]ᵀ(Y − g(F)), Σ_i ℓ(F_i; y_i)) when the previous
        update pass summed them (fusion); None when the next stage sums them itself.
    threshold: multilabel, identity link: the decision threshold fitted after the last stage on
        the rows' held-out scores (`_heldout`; metrics.best_threshold); None before, and for
        other stores and links.
    heldout: during the last pass of a run that fits its threshold on held-out scores, κ (n × 1),
        each row's product of (1 − h) over the pass's stages so far (`_heldout`), the version of
        the scores; None otherwise.
    data_passes: passes over the training data so far (init's scan and sample included).
    normal_gram, normal_rhs, normal_ysq: the `NormalSums` of the training data (ZᵀZ, ZᵀY,
        Σ‖y‖², Z = [1, X]) when the stages run on the normal equations (`_normal_mode`: then
        the scores are never written), else None.
    lam: the run's λ (`StagewiseParams.lam_for`), resolved by `init`; for the exact wide fit
        (`dual_scale`) the λ its step chose.
    dual_scale: v̄, the active columns' mean variance, when the run is the exact ridge fit of wide
        regression data (`StagewiseSolver._dual_mode`, streamfit.solvers.stagewise_dual: one
        step, λ = c · v̄ by leave-one-out) or, above DUAL_N_MAX rows, its fit by conjugate
        gradients (`StagewiseSolver._cg_mode`, streamfit.solvers.stagewise_cg), else None.
    cg_walk: for the fit by conjugate gradients, its record (2 × (grid points + 1)): each grid
        point's held-out error (NaN until scored) and each fit's iterations (the refit's last);
        else None.
    cg_position: its grid position (stagewise_cg: the c being fitted; REFIT_START, REFIT after).
    cg_vectors, cg_targets, cg_columns, cg_y_squares: the current fit's state (stagewise_cg.Fit:
        5 × p × k, 3 × k, 2 × p, ‖Y − 1ȳᵀ‖²) after step 0, else None.
    column_scale: the active columns' standard deviations s over the training rows when the
        stages on stored columns penalise S V (`StagewiseSolver._standardizes`), else None."""

    scores: PerSample
    generator: str
    calibration: str
    space: dict
    rff_inputs: np.ndarray | None = None
    rff_mean: np.ndarray | None = None
    rff_components: np.ndarray | None = None
    active: np.ndarray
    blocks: list[np.ndarray]
    weights: list[np.ndarray]
    calibrations: list[np.ndarray]
    order: np.ndarray | None = None
    pending_gram: np.ndarray | None = None
    pending_rhs: np.ndarray | None = None
    pending_loss: float | None = None
    lam: float = 0.0
    dual_scale: float | None = None
    cg_walk: np.ndarray | None = None
    cg_position: int = 0
    cg_vectors: np.ndarray | None = None
    cg_targets: np.ndarray | None = None
    cg_columns: np.ndarray | None = None
    cg_y_squares: float | None = None
    column_scale: np.ndarray | None = None
    data_passes: int = 0
    normal_gram: np.ndarray | None = None
    normal_rhs: np.ndarray | None = None
    normal_ysq: float | None = None
    threshold: float | None = None
    heldout: PerSample | None = None


@register_solver
class StagewiseSolver(Solver[StagewiseState]):
    """Algorithm 3 with Algorithm 1 (identity or softmax link) or Algorithm 2 per stage; one
    step is one stage, and `n_passes` passes over the blocks make the schedule.

    Logged at step t (after stage t − 1, ŷ the scores F then):
    - objective = (1/n) Σ_i ℓ(ŷ_i; y_i) + (λ/2) Σ_{stages so far} ‖D W_t‖²_F, D dropping the
      bias row (W_t's rows of F, calibration="predictions", are penalised; the calibration maps
      W̃_t are not); with penalty="total" the penalty is (λ/2) ‖V‖²_F over the features' weights
      summed over the stages (plus the rows of F), the ridge (logistic) objective of the
      summed model, which never increases from stage to stage (module docstring). ℓ is the
      loss of each stage's problem f: for the identity link ½‖y − u‖², which is (13) with
      Φ(u) = ½‖u‖² plus the constant ½‖y‖² (0 at a perfect fit); for softmax the multinomial
      logistic loss (13); for multilabel sigmoid the sum of the labels' binary logistic losses. With one block holding every feature and one pass
      this is the ridge resp. logistic objective that the stage minimises.
    - loss = (1/n) Σ_i ‖y_i − ŷ_i‖² for the identity link (twice its ℓ: the squared error of
      Theorem 2, which never increases from stage to stage), (1/n) Σ_i ℓ(ŷ_i; y_i) otherwise.
    - train_accuracy (top-1; multilabel: train_p_at_1), stage (t − 1), pass, block,
      n_features (distinct generated features used so far), data_passes, and for the softmax
      link inner_objective (the stage's f at every inner iterate, W₀ = 0 first)."""

    name = "stagewise"
    row_state_arrays = 2  # an update task's scores (computed in place, then their residual) and the bytes of
    # their read or write (_update_task); 3 where it needs the one-hot targets Y too (`_without_targets`: softmax,
    # multilabel, dense designs, calibration="predictions"), resident whole (huge pages)
    column_state_arrays = 2  # the driver's summed weights V (`_total_weights`) and the stages' weights of a
    # pass (each active column in one stage); `column_state` adds the column gradients
    Params = StagewiseParams
    params: StagewiseParams
    State = StagewiseState

    def __init__(self, params: StagewiseParams):
        super().__init__(params)
        # Blocks that repeat every pass ("sequential", "rff") have the same AᵀA every pass: kept
        # here by position when they all fit in GRAM_CACHE_BYTES, so later passes only sum
        # Aᵀ(Y − g(F)). Not state: a resumed run starts empty and recomputes them, bit for bit.
        self._grams: dict[int, np.ndarray] = {}
        self._objectives: dict[str, Any] = {}  # link -> the Objective of `_objective` (from the params alone)
        # penalty="total": (stages summed, V) of `_total_weights`; not state either: a resumed run
        # sums the stored stages again, in the same order, to the same bits.
        self._totals: tuple[int, np.ndarray] | None = None
        self.lam = 0.0  # λ of this fit (`StagewiseParams.lam_for`): set by `_setup`, or from the resumed state
        # standardize: the active columns and their standard deviations s (the penalty's S), set
        # by `_setup` or from the resumed state; None: the penalty on the columns as given
        self.scale: np.ndarray | None = None
        self.active: np.ndarray | None = None
        self.dual_scale: float | None = None  # v̄ of the wide ridge fits (`_dual_mode`, `_cg_mode`), set by `_setup`

    # ---- setup ----
    def column_state(self, source) -> int:
        """`column_state_arrays`, and with the "gradient" generator (auto's on sparse data) the
        column gradients that a pass's last update sums over the chunks along the fixed tree
        (engine.tree_sum: up to ⌊log₂ chunks⌋ + 1 partial sums, and a chunk's own)."""
        arrays = super().column_state(source)
        if self.params.generator in ("gradient", "auto"):
            arrays += source.n_chunks.bit_length() + 1
        return arrays

    def _link(self, source: ChunkSource) -> str:
        if self.params.link == "identity":
            return "identity"
        return "sigmoid" if source.multilabel else "softmax"

    def _check_regression(self, source: ChunkSource) -> None:
        """Real-valued targets (regression) take the identity link, g(u) = u, with the plain
        squared loss; the softmax link and Algorithm 2's simplex projection assume class
        indicators, so they are refused."""
        if source.regression and self.params.link != "identity":
            raise ConfigError("regression targets need -p link=identity (softmax models class probabilities)")
        if source.regression and self.params.calibration == "poly":
            raise ConfigError(
                "-p calibration=poly projects onto the probability simplex, which real-valued targets are not on: "
                "use calibration=none or predictions"
            )

    def init(self, ctx: Context) -> StagewiseState:
        """F = 0, no stage yet; GEN's setup: the column scan, and for random Fourier features the
        row sample (PCA, bandwidth, the "auto" check)."""
        self._check_regression(ctx.source)
        self._grams, self._totals, self._objectives = {}, None, {}
        space, active, generator, calibration, data_passes, normal = self._setup(ctx.source, ctx.engine)
        if space.kind != "columns":  # random Fourier features: unit-scale features, the penalty as it was
            self.scale = None
        return StagewiseState(
            scores=PerSample(SCORES, 0, written=False),
            generator=generator,
            calibration=calibration,
            space=space.to_json(),
            rff_inputs=space.inputs,
            rff_mean=space.mean if space.components is not None else None,
            rff_components=space.components,
            active=active,
            blocks=[],
            weights=[],
            calibrations=[],
            data_passes=data_passes,
            normal_gram=None if normal is None else normal.gram,
            normal_rhs=None if normal is None else normal.rhs,
            normal_ysq=None if normal is None else normal.ysq,
            lam=self.lam,
            dual_scale=self.dual_scale,
            cg_walk=stagewise_cg.new_walk() if generator == "ridge_cg" else None,
            column_scale=self.scale,
        )

    def check_resume(self, ctx: Context, state: StagewiseState) -> None:
        """Every parameter that changes the model is in the config hash: nothing to refuse on
        that score. A state whose feature space (a JSON value, which the driver's schema check
        does not look into) has other keys than `FeatureSpace.to_json`'s was written by another
        streamfit version: CheckpointError naming the run directory and --overwrite. The
        resumed run starts with an empty Gram cache, as a fresh one does."""
        expected = FeatureSpace("columns", True, False).to_json().keys()
        saved = state.space.keys() if isinstance(state.space, dict) else set()
        if saved != expected:
            root = ctx.chunk_state.root  # RUN_DIR/checkpoints/state
            where = os.path.dirname(os.path.dirname(root)) if root else "the in-memory checkpoint"
            differs = ", ".join(
                [f"{k} missing" for k in sorted(expected - saved)] + [f"{k} unknown" for k in sorted(saved - expected)]
            )
            raise CheckpointError(
                f"{where}: its stagewise checkpoint holds a feature space of another layout ({differs}); it was "
                "written by another streamfit version: start over with --overwrite"
            )
        self._grams, self._totals, self._objectives = {}, None, {}
        self.lam, self.dual_scale = state.lam, state.dual_scale
        self.scale, self.active = state.column_scale, state.active

    def _standardizes(self, source: ChunkSource, low_dense: bool) -> bool:
        """Whether the stages on stored columns penalise S V, S = diag of the active columns'
        standard deviations (module docstring, "Standardized columns"): `standardize`, class
        targets with the identity link on low-dimensional dense data (`low_dense`, the data of
        λ's rule from n). Sparse or wide data (text), regression and the softmax link keep the
        penalty on the columns as given."""
        p = self.params
        return p.standardize is not False and low_dense and not source.regression and p.link == "identity"

    def _normal_mode(self, source: ChunkSource) -> bool:
        """Whether the stages run on the normal equations (`_normal_step`): real-valued targets
        (the identity link), no calibration, stored columns (not "rff"), and few enough of them
        that the (1 + d)² Gram costs no more per row than the blocks' own Grams
        (d ≤ block_size · n_passes) and is small (d ≤ NORMAL_MODE_MAX_FEATURES). Class targets
        keep the data passes (their models stay as they were, bit for bit)."""
        p = self.params
        return (
            source.regression
            and p.link == "identity"
            and p.calibration in ("none", "auto")
            and p.generator != "rff"
            and source.n_features <= min(NORMAL_MODE_MAX_FEATURES, p.block_size * p.n_passes)
        )

    def _wide_ridge_params(self, source: ChunkSource) -> bool:
        """Whether the run fits real-valued targets at the default λ (lam None) and the default
        generator, calibration, penalty and intercept: where the wide ridge fits replace the
        stages (`_dual_mode`, `_cg_mode`)."""
        p = self.params
        return bool(
            source.regression
            and p.lam is None
            and p.link == "identity"
            and p.generator == "auto"
            and p.calibration in ("auto", "none")
            and p.penalty == "total"
            and p.fit_intercept
        )

    def _dual_mode(self, source: ChunkSource, n_active: int) -> bool:
        """Whether the run is the exact ridge fit of wide regression data in one step
        (streamfit.solvers.stagewise_dual): `_wide_ridge_params`, on at least
        DUAL_WIDE_SHARE · n active columns for DUAL_N_MIN ≤ n ≤ DUAL_N_MAX training rows."""
        return self._wide_ridge_params(source) and stagewise_dual.applies(source.n_rows, n_active)

    def _cg_mode(self, source: ChunkSource, n_active: int) -> bool:
        """Whether the run is the ridge fit of wide regression data by conjugate gradients, alpha
        chosen on a held-out fifth of the rows (streamfit.solvers.stagewise_cg):
        `_wide_ridge_params`, on at least DUAL_WIDE_SHARE · n active columns for n > DUAL_N_MAX
        training rows."""
        return self._wide_ridge_params(source) and stagewise_cg.applies(source.n_rows, n_active)

    def _setup(
        self, source: ChunkSource, engine: Engine
    ) -> tuple[FeatureSpace, np.ndarray, str, str, int, NormalSums | None]:
        """(feature space, active columns, generator and calibration with "auto" resolved, passes
        over the data, the scan's `NormalSums` when the stages run on them); sets the run's λ,
        `self.lam`, from the scan."""
        p = self.params
        chunks = range(source.n_chunks)
        scan = engine.map_reduce(_scan_task, source, chunks, desc="stagewise: scan", normal=self._normal_mode(source))
        if scan.nonfinite:
            self._raise_nonfinite(source, engine, scan.nonfinite)
        notice = None if scan.targets is None else constant_targets_notice(source, scan.targets)
        if notice:
            log.warning(notice)
        active = np.flatnonzero(scan.nnz)
        if len(active) == 0:
            raise ConfigError("the training data has no non-zero feature values")
        generator: str = p.generator
        density = scan.nnz.sum() / (source.n_rows * len(active))
        low_dense = dense_low_dimensional(source.n_rows, len(active), int(scan.nnz.sum()))
        self.lam = p.lam_for(source.n_rows, source.regression, low_dense)
        self.dual_scale = None
        dual, cg = self._dual_mode(source, len(active)), self._cg_mode(source, len(active))
        if dual or cg:
            self.dual_scale = float(np.mean(column_variances(source.n_rows, scan.sums[active], scan.squares[active])))
            self.active, self.scale = active, None
            columns = FeatureSpace("columns", p.fit_intercept, False, dense=False)
            return columns, active, "dual" if dual else "ridge_cg", "none", 1, None
        wide = (
            source.regression
            and p.lam is None
            and wide_regression_notice(source, len(active), scan.sums[active], scan.squares[active])
        )
        if wide:
            log.warning(wide)
        self.active, self.scale = active, None
        if self._standardizes(source, low_dense):
            self.scale = standardized_scale(p.standardize, source.n_rows, scan.sums[active], scan.squares[active])
        if generator == "auto" and (source.regression or not low_dense):
            generator = "gradient"
        # calibration "auto": Algorithm 2 where it validates, on the stored columns of multiclass
        # targets with the identity link on low-dimensional dense data (least squares on class
        # indicators masks classes there, §3.1), never on random Fourier features (their
        # training predictions are overconfident: docs/benchmarks.md, "stagewise on small data")
        may_calibrate = (  # one block of every column: the check's candidate is the run's first stage
            p.calibration == "auto"
            and low_dense
            and len(active) <= p.block_size
            and p.link == "identity"
            and not source.regression
            and not source.multilabel
            and generator != "rff"
        )
        calibration: str = "none" if p.calibration == "auto" else p.calibration
        dense = bool(source.regression and density >= DENSE_MIN_DENSITY)
        columns = FeatureSpace("columns", p.fit_intercept, p.calibration == "predictions", dense=dense)
        if generator not in ("rff", "auto") and not may_calibrate:
            return columns, active, generator, calibration, 1, scan.normal
        # a seeded sample of rows, read in chunk order and put back in random order
        rng = np.random.default_rng([p.random_state, 1])
        rows = rng.choice(source.n_rows, size=min(source.n_rows, GEN_SAMPLE_ROWS), replace=False)
        order = np.argsort(rows)
        parts = engine.map(_rows_task, source, chunks, desc="stagewise: sample", rows=rows[order], inputs=active)
        raw, targets = np.empty((len(rows), len(active))), np.empty((len(rows), source.n_classes))
        raw[order], targets[order] = np.vstack([x for x, _ in parts]), np.vstack([t for _, t in parts])
        check = slice(0, AUTO_CHECK_ROWS)
        if generator not in ("rff", "auto"):  # stored columns, calibration "auto"
            calibration = self._auto_check(None, raw[check], None, targets[check], _data_name(source), True)[1]
            return columns, active, generator, calibration, 2, scan.normal
        space = FeatureSpace(
            "rff",
            p.fit_intercept,
            columns.with_predictions,
            inputs=active,
            seed=p.random_state,
            block_size=p.block_size,
            n_components=p.n_components,
            dtype=p.gram_dtype,
            sampling=p.rff_sampling,
            phases=p.rff_phases,
        )
        sample = raw
        if p.pca_components is not None and p.pca_components < len(active):
            space.mean = sample.mean(axis=0)
            centered = sample - space.mean
            # The covariance from single-precision products (a basis exact to ~1e-6 is as good a
            # projection; the model stores it), and only its leading eigenvectors.
            # Values of 1e15 and more (valid in a float32 store) would overflow single-precision
            # squares summed over the sample: their covariance is formed in float64.
            c32 = centered.astype(np.float32) if np.abs(centered).max() < PCA_FLOAT32_MAX else centered
            d = len(active)
            cov = (c32.T @ c32).astype(np.float64) / len(rows)
            _check_gram(cov, _data_name(source))
            with single_threaded_blas():
                _, V = scipy.linalg.eigh(cov, subset_by_index=[d - p.pca_components, d - 1])
            V = V[:, ::-1]
            V *= np.sign(V[np.abs(V).argmax(axis=0), np.arange(V.shape[1])])  # fix each sign
            space.components = V
            sample = centered @ V
        from scipy.spatial.distance import pdist  # on first use: scipy.spatial takes a while to import

        dists = pdist(sample[:MEDIAN_SAMPLE_ROWS])
        dists = dists[dists > 0]  # duplicate rows say nothing about the scale
        space.sigma = p.bandwidth * (float(np.median(dists)) if dists.size else 1.0)
        if generator == "auto":
            generator, calibration = self._auto_check(
                space, raw[check], sample[check], targets[check], _data_name(source), may_calibrate
            )
            if generator == "gradient":
                return columns, active, generator, calibration, 2, scan.normal
        return space, active, generator, calibration, 2, None

    @staticmethod
    def _raise_nonfinite(source: ChunkSource, engine: Engine, count: int):
        """The stored features hold NaN or inf (a store written through StoreWriter, or by an ingest
        older than its float32 range check): an error naming the first one, instead of a failed
        solve later."""
        found = engine.map(_first_nonfinite_task, source, range(source.n_chunks), desc="stagewise: find non-finite")
        chunk_id = next(i for i, f in enumerate(found) if f is not None)
        row, column = found[chunk_id]
        raise InputError(
            f"{_data_name(source)}, row {source.chunk_bounds(chunk_id)[0] + row} (chunk {chunk_id})",
            f"feature {column} is NaN or infinite ({count} non-finite value{'s' * (count > 1)} in all)",
            "features must be finite (and within float32's ±3.4e38): scale such features down "
            "(or drop them) and ingest again",
        )

    def _auto_check(
        self,
        space: FeatureSpace | None,
        raw: np.ndarray,
        base: np.ndarray | None,
        Y: np.ndarray,
        where: str,
        calibrate: bool,
    ) -> tuple[str, str]:
        """(generator, calibration) for "auto" on dense inputs, by AUTO_CHECK_FOLDS-fold
        cross-validation on the sampled rows (random order; row i in fold i mod AUTO_CHECK_FOLDS):
        one identity-link stage (Algorithm 1: ridge with the run's λ, which is lam when given, the
        run's penalty, bias unpenalised) on each candidate, fitted on
        the other folds' rows (their Gram the sample's minus the fold's) and scored on the
        fold's, the scores summed over the folds. The candidates: the first random Fourier block
        A = [1, x̃] ("rff", none; when `space` is given), the stored columns A = [1, x]
        ("gradient", their penalty standardized as the run's: `_penalty_mask`) and, with
        `calibrate` (calibration "auto" on multiclass targets), the stored columns followed by
        Algorithm 2's calibration fitted on the same rows (`_poly_map`, then the projection
        onto the simplex). Without `calibrate` the lowest held-out squared error ‖Y − Ŷ‖² wins;
        with it, the most held-out rows whose top class is right, the squared error breaking
        ties (a block of 512 random features fitted to a few hundred rows nearly interpolates
        them: a large squared error where its top classes are right; docs/benchmarks.md,
        "stagewise on small data"). Exact ties go to the earlier candidate, in the order above.
        Why every row and the run's λ (session 24): one split held out 21–42 rows on the small
        sets, and at LAM_FLOOR the columns nearly interpolate a sample of about as many rows as
        columns where the run's λ does not (dna, 300 rows: the random Fourier block chosen,
        −17 points); docs/benchmarks.md, "stagewise on unscaled columns"."""
        lam = self.lam  # lam when given (`StagewiseParams.lam_for`)
        n = len(Y)
        folds = np.arange(n) % min(AUTO_CHECK_FOLDS, n)
        columns = np.hstack([np.ones((n, 1)), raw]) if self.params.fit_intercept else raw
        block = self.active  # the columns candidates: every active column, penalised as the run's stages
        candidates: list[tuple[str, str, np.ndarray, bool, np.ndarray | None]] = []
        if space is not None:
            candidates.append(("rff", "none", np.asarray(space.design(base, 0), dtype=np.float64), False, None))
        candidates.append(("gradient", "none", columns, False, block))
        if calibrate:
            candidates.append(("gradient", "poly", columns, True, block))
        scores = []
        for _, _, A, poly, cols in candidates:
            with np.errstate(over="ignore", invalid="ignore"):  # an overflow is _check_gram's error, not a warning
                gram, rhs = A.T @ A, A.T @ Y
            right, error = 0, 0.0
            for fold in range(int(folds.max()) + 1):
                held = folds == fold
                n_fit = n - int(held.sum())
                Ah, Af = A[held], A[~held]
                with np.errstate(over="ignore", invalid="ignore"):
                    fit_gram, fit_rhs = gram - Ah.T @ Ah, rhs - Ah.T @ Y[held]
                W = self._stage_solver(fit_gram, n_fit, 1.0, where, lam, cols)(fit_rhs / n_fit)
                predicted = Ah @ W
                if poly:
                    G = poly_basis(Af @ W)
                    C = _poly_map(G.T @ G / n_fit, G.T @ Y[~held] / n_fit)
                    predicted = project_predictions(poly_basis(predicted) @ C, False)
                error += float(((Y[held] - predicted) ** 2).sum())
                right += int((predicted.argmax(axis=1) == Y[held].argmax(axis=1)).sum())
            scores.append((-right, error) if calibrate else (error,))
        best = min(range(len(candidates)), key=scores.__getitem__)
        return candidates[best][0], candidates[best][1]

    # ---- the schedule of blocks ----
    def _n_blocks(self, state: StagewiseState) -> int:
        """Blocks per pass: GEN's features (random Fourier features, or active columns) / p."""
        n = state.space["n_components"] if state.space["kind"] == "rff" else len(state.active)
        return -(-n // self.params.block_size)

    def _block(
        self, generator: str, stage: int, n_blocks: int, active: np.ndarray, order: np.ndarray | None
    ) -> int | np.ndarray:
        """GEN(x, p) for stage `stage`: an rff block id, or the column ids of the block."""
        p = self.params
        pass_no, pos = divmod(stage, n_blocks)
        window = slice(pos * p.block_size, (pos + 1) * p.block_size)
        if generator == "rff":
            return pos
        if generator == "sequential":
            return active[window]
        if generator == "random":
            return np.random.default_rng([p.random_state, 2, pass_no]).permutation(active)[window]
        assert order is not None, "the gradient generator ranks the columns before its first block"
        return order[window]

    def _gradient_order(self, G: np.ndarray, active: np.ndarray) -> np.ndarray:
        """Active columns by decreasing ‖X_jᵀR‖₂ (G: active × k), of the standardized columns
        ‖X_jᵀR‖₂/s_j where the penalty is on them (`self.scale`: the ranking, like the fit, the
        same in any units), the norms compared in single precision and ties broken by column id,
        so that the chunking's last bits do not reorder columns whose norms are equal in exact
        arithmetic (docs/architecture.md, stagewise). Norms beyond float32's range (columns of
        values near 1e100 through the Python API: a store's values are float32) are compared
        after G is divided by a power of two that brings its largest entry below 1: exact, and
        the same order as the norms in exact arithmetic, where the cast gave them all +inf (ties,
        broken by column id alone) with numpy's overflow RuntimeWarning."""
        if self.scale is not None:
            G = G / self.scale[:, None]
        with np.errstate(over="ignore"):  # squares beyond float64's range: inf, taken below
            norms = np.sqrt((G * G).sum(axis=1))
        if norms.size and not norms.max() <= FLOAT32_MAX:
            G = np.ldexp(G, -np.frexp(np.abs(G).max())[1])
            norms = np.sqrt((G * G).sum(axis=1))
        return active[np.argsort(-norms.astype(np.float32), kind="stable")]

    def _space(self, state: StagewiseState) -> FeatureSpace:
        return FeatureSpace.from_saved(
            state.space,
            {"rff_inputs": state.rff_inputs, "rff_mean": state.rff_mean, "rff_components": state.rff_components},
        )

    def _cache_grams(self, state: StagewiseState, n_blocks: int) -> bool:
        """Whether every block's AᵀA is kept across passes (blocks that repeat, and fit)."""
        p = self.params
        width = p.block_size + int(p.fit_intercept)
        return (
            state.generator in ("rff", "sequential")
            and p.n_passes > 1
            and n_blocks * width * width * 8 <= GRAM_CACHE_BYTES
        )

    def _stage_stats(self, stats: BlockStats, pos: int, cache: bool) -> tuple[np.ndarray, np.ndarray, float]:
        """(Gram of [A, F], [A, F]ᵀR, Σℓ) from a block's summed `BlockStats` (AᵀA from its upper
        triangle, mirrored), AᵀA from the cache when the tasks did not sum it."""
        if stats.gram is None:
            M = self._grams[pos]
        else:
            M = symmetric_from_upper(stats.gram)
            if cache:
                self._grams[pos] = M
        return _bordered(M, stats.cross), stats.rhs, float(stats.loss)

    # ---- one stage ----
    def _objective(self, loss_sum: float, n: int, link: str, penalised: list[np.ndarray]) -> float:
        """streamfit.objectives' F (see the class docstring): (1/n) Σ_i ℓ(ŷ_i; y_i) + StageRidge's
        (λ/2) Σ ‖P‖²_F over the `penalised` weights P (`_penalised`, `_stage_penalised`: D W
        without the bias rows), from `link_loss_sum`'s Σ_i ℓ, which for the identity link is
        Σ_i ‖y_i − ŷ_i‖² (twice ℓ)."""
        objective = self._objectives.get(link)
        if objective is None:
            params = self.params.model_copy(update={"lam": self.lam})
            objective = self._objectives[link] = objective_for(self.name, params, multilabel=link == "sigmoid")
        sums = ChunkSums(0.5 * loss_sum if link == "identity" else loss_sum, n)
        return objective.total(sums, penalised, None)

    # ---- penalty="total": each feature's weight summed over the stages ----
    def _feature_index(self, state: StagewiseState, block) -> np.ndarray:
        """The rows of `_total_weights`' V that hold the features of a block (the design's
        columns after the bias): its columns' positions among the active columns, or for random
        Fourier features (the same features each time a block id comes back) the block's
        feature ids."""
        if state.space["kind"] == "rff":
            start = int(np.asarray(block).ravel()[0]) * self.params.block_size
            return np.arange(start, min(start + self.params.block_size, state.space["n_components"]))
        return np.searchsorted(state.active, block)

    def _total_weights(self, state: StagewiseState) -> np.ndarray:
        """V (features × k, `_feature_index`'s rows): each feature's weights summed over the
        stages so far, in stage order. The bias and the rows of F (calibration="predictions")
        are not in V. Kept in `_totals` and brought up to date with the stages added since (init
        and check_resume empty it; within a run the stages are append-only)."""
        n = state.space["n_components"] if state.space["kind"] == "rff" else len(state.active)
        count, V = self._totals if self._totals is not None else (0, np.zeros((n, state.weights[0].shape[1])))
        assert count <= len(state.weights), "stages are only appended within a run"
        skip = int(self.params.fit_intercept)
        for block, W in zip(state.blocks[count:], state.weights[count:]):
            index = self._feature_index(state, block)
            V[index] += W[skip : skip + len(index)]
        self._totals = (len(state.weights), V)
        return V

    def _accumulated(self, state: StagewiseState, block, width: int) -> np.ndarray | None:
        """penalty="total": V_B (width × k, W's shape), the weights that the earlier stages gave the
        features of this block's design, zero on the bias row and the rows of F; None for
        penalty="stage" and for features that no earlier stage weighted (V_B = 0: the stage is
        penalty="stage"'s, bit for bit)."""
        if self.params.penalty != "total" or not state.weights:
            return None
        index = self._feature_index(state, block)
        earlier = self._total_weights(state)[index]
        if not earlier.any():
            return None
        skip = int(self.params.fit_intercept)
        V = np.zeros((width, earlier.shape[1]))
        V[skip : skip + len(index)] = earlier
        return V

    def _stage_penalised(self, W: np.ndarray, V: np.ndarray | None, block=None) -> np.ndarray:
        """D (V_B + W) (`_accumulated`'s V_B; W alone for None): what a stage's f penalises, a
        standardized block's column rows times their s_j (`_block_scale`)."""
        P = (W if V is None else V + W)[int(self.params.fit_intercept) :]
        scale = self._block_scale(block)
        if scale is None:
            return P
        P = P.copy()
        P[: len(scale)] *= scale[:, None]
        return P

    def _penalised(self, state: StagewiseState) -> list[np.ndarray]:
        """The weights that the logged objective penalises: penalty="stage": every stage's D W_t;
        "total": the features' summed weights V (`_total_weights`), plus every stage's rows of F
        (calibration="predictions": each stage's F is a feature of that stage alone)."""
        if self.params.penalty == "stage":
            if self.scale is None:
                return StageRidge.stage_weights(state.weights, self.params.fit_intercept)
            return [self._stage_penalised(W, None, block) for block, W in zip(state.blocks, state.weights)]
        V = self._total_weights(state)
        penalised = [V if self.scale is None else V * self.scale[:, None]]
        if state.space["with_predictions"]:
            skip = int(self.params.fit_intercept)
            for block, W in zip(state.blocks, state.weights):
                penalised.append(W[skip + len(self._feature_index(state, block)) :])
        return penalised

    def _block_scale(self, block) -> np.ndarray | None:
        """s_B: the standard deviations of a stored-column block's columns (`self.scale`), None
        when the penalty is on the columns as given (or for random Fourier blocks)."""
        if self.scale is None or block is None:
            return None
        assert self.active is not None, "set with the scale"
        return self.scale[np.searchsorted(self.active, np.asarray(block))]

    def _penalty_mask(self, width: int, block=None) -> np.ndarray:
        """The diagonal of D (of D² with standardized columns, "Standardized columns"): 0 for the
        unpenalised bias, s_j² for a standardized block's column j (`_block_scale`), 1 for the
        other weight rows (the columns as given, random Fourier features, the rows of F)."""
        mask = np.ones(width)
        skip = int(self.params.fit_intercept)
        if skip:
            mask[0] = 0.0
        scale = self._block_scale(block)
        if scale is not None:
            mask[skip : skip + len(scale)] = scale * scale
        return mask

    def _stage_solver(
        self,
        M: np.ndarray,
        n: int,
        lipschitz: float,
        where: str = "the training data",
        lam: float | None = None,
        block=None,
    ):
        """X ↦ (L Σ̂ + λD)⁻¹ X with Σ̂ = M/n, M = AᵀA: the majorizer of update (14), λ the fit's
        (`lam` None) or `lam`, D the penalty of `block`'s design (`_penalty_mask`; None: the
        columns as given). `where` names the data in the error for an AᵀA that overflowed."""
        _check_gram(M, where)
        lam = self.lam if lam is None else lam
        return _solver_for(lipschitz * M / n + np.diag(lam * self._penalty_mask(M.shape[0], block)), lam > 0)

    def _heldout(self, state: StagewiseState, source: ChunkSource, link: str) -> bool:
        """Whether the multilabel threshold is fitted on held-out scores: multilabel targets, the
        identity link and no calibration (the scores are then sums of ridge stages).

        Approximate leave-one-out scores. A ridge fit of targets Y on a design A (λ > 0) has,
        for row i, the leave-one-out residual y_i − ŷ_i^(−i) = (y_i − ŷ_i)/(1 − h_i) with the
        leverage h_i = a_iᵀ(AᵀA + nλD)⁻¹a_i (the Sherman–Morrison identity). With
        penalty="total" each stage of the last pass is the block's exact ridge fit to the
        residual of the other blocks (module docstring), and the rows' in-sample residuals
        shrink by (1 − h_i) at each block they pass through; the held-out scores are
        F̃ = Y − (Y − F)/κ, κ_i = Π over the last pass's stages of (1 − h_i), exactly the
        leave-one-out scores where the pass is one block (1 − h = κ) and the product's
        approximation of 1 − h of the whole design otherwise (docs/benchmarks.md, "stagewise on
        small data"). κ is summed per row in the last pass's update passes (`_leverages`), so
        the threshold costs no extra data pass."""
        return source.multilabel and link == "identity" and state.calibration == "none"

    def _fit_block(
        self,
        ctx: Context,
        state: StagewiseState,
        space: FeatureSpace,
        block: int | np.ndarray,
        stats: tuple[np.ndarray, np.ndarray, float],
        link: str,
        V: np.ndarray | None,
    ) -> tuple[np.ndarray, list[float]]:
        """Algorithm 1 on the block from W₀ = 0, starting from the statistics (M, B, Σℓ) at W₀:
        (W, f at every inner iterate) for the softmax link, (W, []) for the identity link (one
        exact step). f penalises D (V + W), V the block's earlier weights (`_accumulated`;
        None: 0). Each inner iteration is a pass over the data (counted in the state)."""
        p, source, n = self.params, ctx.source, ctx.source.n_rows
        M, B, loss_sum = stats
        bound = 1.0 if link == "identity" else (p.lipschitz or (0.5 if link == "softmax" else 0.25))
        lipschitz = bound * BACKTRACK_START if p.backtrack and link != "identity" else bound
        solve = self._stage_solver(M, n, lipschitz, _data_name(source), block=block)
        mask = self._penalty_mask(M.shape[0], block)[:, None]
        W = solve(B / n if V is None else B / n - self.lam * mask * V)
        if link == "identity":
            return W, []
        objective = [
            loss_sum / n if V is None else self._objective(loss_sum, n, link, [self._stage_penalised(V, None, block)])
        ]
        accepted = (np.zeros_like(W), B)  # the last iterate whose objective is in `objective`, its AᵀR
        for _ in range(1, p.max_iter):
            sums = ctx.engine.map_reduce(
                _inner_task,
                source,
                range(source.n_chunks),
                desc="stagewise: inner",
                state=ctx.chunk_state,
                version=state.scores.version,
                space=space,
                block=block,
                W=W,
                link=link,
            )
            state.data_passes += 1
            B, loss_sum = sums.rhs, sums.loss
            f = self._objective(loss_sum, n, link, [self._stage_penalised(W, V, block)])
            if p.backtrack and f > objective[-1] and lipschitz < bound:
                lipschitz = min(bound, 2 * lipschitz)  # rejected: a shorter step from the accepted iterate
                solve = self._stage_solver(M, n, lipschitz, block=block)
                W, B = accepted
            else:
                objective.append(f)
                if objective[-2] - objective[-1] <= p.tol * abs(objective[-1]):
                    break
                accepted = (W, B)
            W = W + solve(B / n - self.lam * mask * (W if V is None else V + W))
        return W, objective

    def _calibrate(
        self, ctx: Context, state: StagewiseState, space: FeatureSpace, block: int | np.ndarray, W: np.ndarray
    ) -> np.ndarray:
        """Algorithm 2's calibration fit (19): W̃ = argmin (1/n) Σ ‖y − W̃ G(ỹ)‖² + ε ‖W̃ − I_ỹ‖²,
        I_ỹ the map G(ỹ) ↦ ỹ and ε = CALIBRATION_RIDGE · tr(GᵀG/n)/|G| (see the module docstring).
        One pass over the data."""
        source = ctx.source
        sums = ctx.engine.map_reduce(
            _calibration_task,
            source,
            range(source.n_chunks),
            desc="stagewise: calibrate",
            state=ctx.chunk_state,
            version=state.scores.version,
            space=space,
            block=block,
            W=W,
        )
        state.data_passes += 1
        return _poly_map(sums.gram / source.n_rows, sums.rhs / source.n_rows)

    # ---- Algorithm 3 ----
    def work(self, source: ChunkSource) -> Work | None:
        """The auto engine's estimate (engine.Work) for class targets: 1 + S rounds (the scan of
        `init`, then the stages, each one pass: the update pass also sums the next block), S =
        n_passes · ⌈U / block_size⌉ with U the columns used (`columns_used_estimate`; random
        Fourier features: n_components), times `max_iter` with the softmax link, twice with
        calibration "poly"; a round takes STAGE_S + STAGE_ROW_CLASS_S · n · k in this process (the
        per-row scores F, n × k, read and written by every pass dominate). None for real-valued
        targets (their normal-equation and dual modes run one or a few passes)."""
        if source.regression:
            return None
        p = self.params
        n = source.n_rows
        k = max(source.n_classes, 1)
        features = p.n_components if p.generator == "rff" else columns_used_estimate(source)
        passes_per_stage = (p.max_iter if p.link == "softmax" else 1) + int(p.calibration == "poly")
        stages = p.n_passes * -(-max(features, 1) // p.block_size)
        return Work(1 + stages * passes_per_stage, STAGE_S + STAGE_ROW_CLASS_S * n * k, "stage")

    def max_steps(self, state: StagewiseState) -> int:
        if state.cg_walk is not None:
            return stagewise_cg.max_steps()
        return 1 if state.dual_scale is not None else self.params.n_passes * self._n_blocks(state)

    def finished(self, state: StagewiseState) -> bool:
        """All S = n_passes · n_blocks stages done (a fixed schedule: converged once finished);
        the exact wide fit's one step done; the fit by conjugate gradients's refit at its stop
        (stagewise_cg.CG_RTOL) or at its last iteration."""
        if state.cg_walk is not None:
            return state.cg_position == stagewise_cg.REFIT and self._cg_done(state)
        return state.step >= self.max_steps(state)

    def step(self, ctx: Context, state: StagewiseState) -> dict[str, Any]:
        """Stage t = state.step: x̃ = GEN(x, p); W_t from Algorithm 1 on (x̃, y − ŷ) (and with
        calibration="poly" W̃_t from Algorithm 2's (19)); ŷ ← ŷ + A W_t (then clip(G(ŷ) W̃_t)),
        written as the next version of the scores. The update pass also sums the next block's
        statistics (or, at the end of a "gradient" pass, the next ranking's column gradients)."""
        if state.normal_gram is not None:
            return self._normal_step(ctx, state)
        if state.cg_walk is not None:
            return self._cg_step(ctx, state)
        if state.dual_scale is not None:
            return self._dual_step(ctx, state)
        p, source, engine = self.params, ctx.source, ctx.engine
        n, link, chunks = source.n_rows, self._link(source), range(source.n_chunks)
        space, n_blocks = self._space(state), self._n_blocks(state)
        cache = self._cache_grams(state, n_blocks)
        s, version = state.step, state.scores.version
        pass_no, pos = divmod(s, n_blocks)
        if state.generator == "gradient" and state.order is None:
            G = engine.map_reduce(
                _gradient_task,
                source,
                chunks,
                desc="stagewise: gradient",
                state=ctx.chunk_state,
                version=version,
                active=state.active,
                link=link,
            )
            state.data_passes += 1
            state.order = self._gradient_order(G, state.active)
        block = self._block(state.generator, s, n_blocks, state.active, state.order)
        if state.pending_gram is None:
            stats = self._stage_stats(
                engine.map_reduce(
                    _stats_task,
                    source,
                    chunks,
                    desc="stagewise: gram",
                    state=ctx.chunk_state,
                    version=version,
                    space=space,
                    block=block,
                    link=link,
                    gram=pos not in self._grams,
                ),
                pos,
                cache,
            )
            state.data_passes += 1
        else:
            assert state.pending_rhs is not None and state.pending_loss is not None
            stats = (state.pending_gram, state.pending_rhs, state.pending_loss)
        V = self._accumulated(state, block, stats[0].shape[0])
        W, inner = self._fit_block(ctx, state, space, block, stats, link, V)
        leverage = None
        if pass_no == p.n_passes - 1 and self._heldout(state, source, link):
            # (AᵀA + nλD)⁻¹ = (Σ̂ + λD)⁻¹/n: the stage's own system (L = 1)
            solve = self._stage_solver(stats[0], n, 1.0, _data_name(source), block=block)
            leverage = solve(np.eye(stats[0].shape[0])) / n
        C = self._calibrate(ctx, state, space, block, W) if state.calibration == "poly" else None

        last = s + 1 == p.n_passes * n_blocks
        pass_ends = (s + 1) % n_blocks == 0
        next_block = None
        if not last and not (state.generator == "gradient" and pass_ends):
            next_block = self._block(state.generator, s + 1, n_blocks, state.active, state.order)
        next_gradient = state.active if (state.generator == "gradient" and pass_ends and not last) else None
        out = engine.map_reduce(
            _update_task,
            source,
            chunks,
            desc="stagewise: update",
            state=ctx.chunk_state,
            version=version,
            space=space,
            block=block,
            W=W,
            C=C,
            link=link,
            next_block=next_block,
            next_gram=(s + 1) % n_blocks not in self._grams,
            next_gradient=next_gradient,
            leverage=leverage,
            first_kept=pos == 0,
        )
        state.data_passes += 1
        state.step += 1
        state.scores = PerSample(SCORES, version + 1)
        state.heldout = None if leverage is None else PerSample(HELDOUT, version + 1)
        state.blocks.append(np.atleast_1d(np.asarray(block, dtype=np.int64)))
        state.weights.append(W)
        if C is not None:
            state.calibrations.append(C)
        loss_sum, correct = out.loss, out.correct
        state.pending_gram = state.pending_rhs = state.pending_loss = None
        if out.next_stats is not None:
            state.pending_gram, state.pending_rhs, state.pending_loss = self._stage_stats(
                out.next_stats, (s + 1) % n_blocks, cache
            )
        if pass_ends:
            state.order = self._gradient_order(out.gradient, state.active) if out.gradient is not None else None
        if last and source.multilabel and link == "identity":
            counts = engine.map_reduce(
                _threshold_counts_task,
                source,
                chunks,
                desc="stagewise: threshold",
                state=ctx.chunk_state,
                version=state.scores.version,
                heldout=state.heldout is not None,
            )
            state.threshold = best_threshold(counts, THRESHOLD_GRID)
            state.data_passes += 1

        fields = self._stage_fields(state, source, space, link, s, loss_sum, correct)
        if inner:
            fields["inner_objective"] = inner + [
                self._objective(loss_sum, n, link, [self._stage_penalised(W, V, block)])
            ]
        return fields

    def _stage_fields(
        self,
        state: StagewiseState,
        source: ChunkSource,
        space: FeatureSpace,
        link: str,
        stage: int,
        loss_sum: float,
        correct: int,
    ) -> dict[str, Any]:
        """The logged fields of stage `stage` (the class docstring), Σℓ and the correct rows at
        the new scores given."""
        n = source.n_rows
        pass_no, pos = divmod(stage, self._n_blocks(state))
        n_generated = space.n_components if space.kind == "rff" else len(state.active)
        n_used = n_generated if pass_no > 0 else min(n_generated, (pos + 1) * self.params.block_size)
        accuracy = {} if source.regression else {"train_p_at_1" if source.multilabel else "train_accuracy": correct / n}
        return dict(
            objective=self._objective(loss_sum, n, link, self._penalised(state)),
            loss=loss_sum / n,
            **accuracy,
            stage=stage,
            **{"pass": pass_no},
            block=pos,
            n_features=n_used,
            data_passes=state.data_passes,
        )

    def _normal_rows(self, block: np.ndarray) -> np.ndarray:
        """I: the rows of Z = [1, X] that make a block's design A (the bias, if fitted, then
        the block's columns, each shifted by one)."""
        columns = np.asarray(block, dtype=np.int64) + 1
        if not self.params.fit_intercept:
            return columns
        rows = np.zeros(len(columns) + 1, dtype=np.int64)
        rows[1:] = columns
        return rows

    def _normal_step(self, ctx: Context, state: StagewiseState) -> dict[str, Any]:
        """Stage t on the normal equations (`_normal_mode`), no pass over the data. With
        Z = [1, X] and V ((1 + d) × k) the stages' weights so far summed into Z's rows, the
        scores are F = ZV, so every sum Algorithm 1 needs is one the scan collected:

            AᵀA = (ZᵀZ)[I, I],    Aᵀ(Y − F) = (ZᵀY)[I] − (ZᵀZ)[I, :] V,
            Σ_i ‖y_i − F_i‖² = Σ_i ‖y_i‖² − 2 ⟨V, ZᵀY⟩ + ⟨V, ZᵀZ V⟩,

        I = `_normal_rows` of the block; the "gradient" generator's X_jᵀR are the rows
        (ZᵀY)[j+1] − (ZᵀZ)[j+1, :] V. In exact arithmetic this is the stage a data pass computes
        (the same W); only the order of the sums differs."""
        S, T, ysq = state.normal_gram, state.normal_rhs, state.normal_ysq
        assert S is not None and T is not None and ysq is not None, "set together by init"
        n_blocks = self._n_blocks(state)
        V = np.zeros(T.shape)
        for stage_block, stage_W in zip(state.blocks, state.weights):
            V[self._normal_rows(stage_block)] += stage_W
        if state.generator == "gradient" and state.step % n_blocks == 0:
            columns = state.active + 1
            state.order = self._gradient_order(T[columns] - S[columns] @ V, state.active)
        block = self._block(state.generator, state.step, n_blocks, state.active, state.order)
        rows = self._normal_rows(np.asarray(block))
        S_rows = S[rows]
        M, B = S_rows[:, rows], T[rows] - S_rows @ V
        n, rhs = ctx.source.n_rows, B / ctx.source.n_rows
        if self.params.penalty == "total":  # `_fit_block`'s V: the block's rows of V, but the bias
            rhs = rhs - self.lam * self._penalty_mask(len(rows))[:, None] * V[rows]
        with single_threaded_blas():  # once for the stage's factor and solve (`_solver_for`)
            W = self._stage_solver(M, n, 1.0, _data_name(ctx.source))(rhs)  # `_fit_block`'s identity link
        V[rows] += W
        loss_sum = ysq - 2.0 * float((V * T).sum()) + float((V * (S @ V)).sum())
        state.blocks.append(np.asarray(block, dtype=np.int64))
        state.weights.append(W)
        state.step += 1
        return self._stage_fields(state, ctx.source, self._space(state), "identity", state.step - 1, loss_sum, 0)

    def _dual_step(self, ctx: Context, state: StagewiseState) -> dict[str, Any]:
        """The exact wide fit (streamfit.solvers.stagewise_dual) as the run's one stage: G = XXᵀ
        from chunk pairs (chunk i reads chunks 0 … i), the eigendecomposition and λ by
        leave-one-out on the driver, then one pass for W = XᵀA − x̄(1ᵀA); the stage's block is
        every active column. Logged as a stage, with `lam` (λ) and `c` (λ / v̄) besides."""
        source, engine, chunks = ctx.source, ctx.engine, range(ctx.source.n_chunks)
        assert state.dual_scale is not None, "set by init"
        parts = engine.map(stagewise_dual.gram_task, source, chunks, desc="stagewise: wide ridge Gram")
        G, Y = stagewise_dual.gram(parts)
        _check_gram(G, _data_name(source))
        fit = stagewise_dual.DualFit(G, Y, state.dual_scale)
        sums = engine.map_reduce(stagewise_dual.weights_task, source, chunks, desc="stagewise: wide ridge", A=fit.A)
        self.lam = state.lam = fit.lam
        self._objectives = {}  # the objective at the chosen λ
        log.info(
            f"{_data_name(source)}: {len(state.active)} active columns for {source.n_rows} rows: the exact ridge "
            f"model at lam={fit.lam:.4g} ({fit.c:.3g} × the columns' mean variance, by leave-one-out)"
        )
        state.blocks.append(state.active.copy())
        state.weights.append(fit.weights(sums, source.n_rows, state.active))
        n_chunks = source.n_chunks
        state.data_passes += -(-(n_chunks * (n_chunks + 1) // 2) // n_chunks) + 1  # chunk reads / chunks
        state.step += 1
        fields = self._stage_fields(state, source, self._space(state), "identity", 0, fit.loss_sum, 0)
        return fields | dict(n_features=len(state.active), lam=fit.lam, c=fit.c)

    @staticmethod
    def _cg_done(state: StagewiseState) -> bool:
        """Whether the current fit by conjugate gradients is at its stop (stagewise_cg.CG_RTOL)
        or at its last iteration (WALK_MAX_ITER for a c of the walk, REFIT_MAX_ITER for the refit)."""
        cg = stagewise_cg
        assert state.cg_walk is not None and state.cg_vectors is not None and state.cg_targets is not None
        fit = min(state.cg_position, len(cg.HOLDOUT_GRID))
        cap = cg.REFIT_MAX_ITER if state.cg_position == cg.REFIT else cg.WALK_MAX_ITER
        at_stop = cg.relative_residual(state.cg_vectors, state.cg_targets) <= cg.CG_RTOL
        return at_stop or state.cg_walk[cg.ITERATIONS, fit] >= cap

    def _cg_start(self, ctx: Context, state: StagewiseState, W: np.ndarray, walk: bool) -> None:
        """A fit's start pass from W (the walk's on the fit rows, the refit's on every row)."""
        assert state.cg_walk is not None and state.dual_scale is not None
        n = ctx.source.n_rows
        best = W if state.cg_vectors is None else state.cg_vectors[stagewise_cg.BEST]
        sums = self._cg_pass(ctx, state, W, W, walk, True)
        rows = stagewise_cg.fit_rows(n) if walk else n
        a = stagewise_cg.alpha(n, state.dual_scale, state.cg_position, state.cg_walk)
        fit = stagewise_cg.start(W, best, sums, rows, a)
        state.cg_vectors, state.cg_targets, state.cg_columns, state.cg_y_squares = fit

    @staticmethod
    def _cg_pass(ctx: Context, state: StagewiseState, P: np.ndarray, W: np.ndarray, walk: bool, start: bool):
        """One pass of `stagewise_cg.pass_task` over the chunks, summed along the fixed tree."""
        return ctx.engine.map_reduce(
            stagewise_cg.pass_task,
            ctx.source,
            range(ctx.source.n_chunks),
            desc="stagewise: wide ridge",
            active=state.active,
            P=P,
            W=W,
            walk=walk,
            start=start,
        )

    def _cg_settle(self, state: StagewiseState, n: int) -> None:
        """Past every grid point whose fit is done (stagewise_cg.CG_RTOL or WALK_MAX_ITER): the next
        c's fit from the same W, without a pass (stagewise_cg.next_alpha)."""
        grid = len(stagewise_cg.HOLDOUT_GRID)
        while state.cg_position < grid and self._cg_done(state):
            if state.cg_position + 1 < grid:
                self._cg_move(state, n, state.cg_position + 1)
            else:  # the last c: its score is pending, at its own alpha
                state.cg_position += 1

    @staticmethod
    def _cg_move(state: StagewiseState, n: int, position: int) -> None:
        """The fit moved to the grid position `position` from the same W: the residual carried to
        its alpha without a pass (stagewise_cg.next_alpha)."""
        assert state.cg_walk is not None and state.cg_vectors is not None and state.cg_targets is not None
        assert state.cg_columns is not None and state.dual_scale is not None
        old = stagewise_cg.alpha(n, state.dual_scale, state.cg_position, state.cg_walk)
        state.cg_position = position
        new = stagewise_cg.alpha(n, state.dual_scale, state.cg_position, state.cg_walk)
        state.cg_vectors, state.cg_targets = stagewise_cg.next_alpha(
            state.cg_vectors, state.cg_targets, state.cg_columns, old, new
        )

    def _cg_step(self, ctx: Context, state: StagewiseState) -> dict[str, Any]:
        """The wide ridge fit above DUAL_N_MAX rows (streamfit.solvers.stagewise_cg), one pass a
        step. Step 0: the walk's start on the fit rows at W = 0. Then each step one iteration
        of the walk's current c (scoring the last W on the held rows: a finished c's held-out
        error), until the walk ends; then the refit's start pass on every row from the best c's
        W, and its iterations. Logged with `lam` (the current fit's alpha over its rows), `c`,
        `cg_iterations` (all fits', so far), `relative_residual` and, when a c is scored,
        `heldout_error` (the held rows' mean squared error, summed over the targets)."""
        source, cg = ctx.source, stagewise_cg
        n, grid = source.n_rows, len(cg.HOLDOUT_GRID)
        walk, v_bar = state.cg_walk, state.dual_scale
        assert walk is not None and v_bar is not None and state.active is not None, "set by init"
        fields: dict[str, Any] = {}
        if state.step == 0:
            self._cg_start(ctx, state, np.zeros((len(state.active), source.n_classes)), True)
            self._cg_settle(state, n)
        elif state.cg_position == cg.REFIT_START:
            assert state.cg_vectors is not None
            state.cg_position = cg.REFIT
            self._cg_start(ctx, state, state.cg_vectors[cg.BEST].copy(), False)
        else:
            assert state.cg_vectors is not None and state.cg_targets is not None and state.cg_columns is not None
            walking = state.cg_position <= grid
            W = state.cg_vectors[cg.WEIGHTS]
            sums = self._cg_pass(ctx, state, state.cg_vectors[cg.DIRECTION], W, walking, False)
            errors = walk[cg.ERRORS, :grid]
            pending = np.flatnonzero(np.isnan(errors[: state.cg_position]))
            if walking and len(pending):  # the finished c's whose iterate is W
                error = cg.held_error(sums, W, state.cg_targets, state.cg_columns, n - cg.fit_rows(n))
                if np.all(np.isnan(errors)) or error < np.nanmin(errors):
                    state.cg_vectors[cg.BEST] = W
                errors[pending] = error
                fields["heldout_error"] = error / (n - cg.fit_rows(n))
            if walking and cg.walk_over(errors):  # the iterate at the refit's alpha, so that its logged loss is true
                self._cg_move(state, n, cg.REFIT_START)
            else:
                fit = min(state.cg_position, grid)
                a = cg.alpha(n, v_bar, state.cg_position, walk)
                state.cg_vectors, state.cg_targets = cg.advance(
                    state.cg_vectors, state.cg_targets, sums, state.cg_columns, a
                )
                walk[cg.ITERATIONS, fit] += 1
                if walking:
                    self._cg_settle(state, n)
        state.data_passes += 1
        state.step += 1
        assert state.cg_vectors is not None and state.cg_targets is not None and state.cg_y_squares is not None
        rows = n if state.cg_position == cg.REFIT else cg.fit_rows(n)
        a = cg.alpha(n, v_bar, state.cg_position, walk)
        self.lam = state.lam = a / rows
        self._objectives = {}  # the objective at the current fit's λ
        residual = cg.relative_residual(state.cg_vectors, state.cg_targets)
        if self.finished(state) and residual > cg.CG_RTOL:
            log.warning(
                f"{_data_name(source)}: the wide ridge fit stopped after {cg.REFIT_MAX_ITER} conjugate-gradient iterations "
                f"at a relative residual of {residual:.2g} (its stop is {cg.CG_RTOL:g}): the model is that iterate; the "
                "ridge model itself is Ridge(alpha = n·lam) of the model's info"
            )
        loss = cg.loss_sum(state.cg_vectors, state.cg_y_squares, a)
        W = state.cg_vectors[cg.WEIGHTS]
        return fields | dict(
            objective=self._objective(loss, rows, "identity", [W]),
            loss=loss / rows,
            stage=0,
            **{"pass": 0},
            block=0,
            n_features=len(state.active),
            data_passes=state.data_passes,
            lam=state.lam,
            c=a / (cg.fit_rows(n) * v_bar),
            cg_iterations=int(walk[cg.ITERATIONS].sum()),
            relative_residual=residual,
        )

    def to_model(self, ctx: Context, state: StagewiseState) -> StagewiseModel:
        """The stages so far as a StagewiseModel (its scores replay training's F)."""
        source, space = ctx.source, self._space(state)
        blocks = state.blocks if space.kind == "columns" else [int(b[0]) for b in state.blocks]
        weights, info = list(state.weights), {}
        if state.cg_walk is not None:  # the fit by conjugate gradients: its iterate as one stage
            info = self._cg_info(source, state)
            if state.cg_vectors is not None and state.cg_targets is not None and state.cg_columns is not None:
                blocks = [state.active]
                weights = [stagewise_cg.weights(state.cg_vectors, state.cg_targets, state.cg_columns)]
        elif state.dual_scale is not None:
            info = {"wide_ridge_c": state.lam / state.dual_scale}
        return StagewiseModel(
            space=space,
            link=self._link(source),
            blocks=list(blocks),
            weights=weights,
            calibrations=list(state.calibrations),
            classes=source.classes,
            n_features=source.n_features,
            multilabel=source.multilabel,
            regression=source.regression,
            decision_threshold=state.threshold,
            solver=self.name,
            params=self.params.model_dump(),
            info={
                "stages": state.step,
                "generator": state.generator,
                "calibration": state.calibration,
                "data_passes": state.data_passes,
                "lam": self.lam,
                "standardized": self.scale is not None,
            }
            | info,
        )

    @staticmethod
    def _cg_info(source: ChunkSource, state: StagewiseState) -> dict[str, Any]:
        """What the fit by conjugate gradients did (stagewise_cg), for the model's info: the rule,
        the chosen c and alpha (after the walk), the held-out mean squared error of each grid
        point scored (None: not reached), each fit's iterations (the refit's last) and the
        current fit's relative residual."""
        cg, walk, v_bar = stagewise_cg, state.cg_walk, state.dual_scale
        assert walk is not None and v_bar is not None
        n, grid = source.n_rows, len(stagewise_cg.HOLDOUT_GRID)
        errors = walk[cg.ERRORS, :grid]
        chosen = state.cg_position >= cg.REFIT_START
        info: dict[str, Any] = {
            "stages": 1,
            "wide_ridge_rule": f"alpha by a held-out 1/{cg.HOLDOUT_EVERY} of the rows",
            "wide_ridge_c": float(cg.HOLDOUT_GRID[cg.best_position(walk[cg.ERRORS, :-1])]) if chosen else None,
            "wide_ridge_alpha": cg.alpha(n, v_bar, cg.REFIT, walk) if chosen else None,
            "wide_ridge_grid": [float(c) for c in cg.HOLDOUT_GRID],
            "wide_ridge_heldout": [None if np.isnan(e) else float(e) / (n - cg.fit_rows(n)) for e in errors],
            "cg_iterations": [int(i) for i in walk[cg.ITERATIONS]],
        }
        if state.cg_vectors is not None and state.cg_targets is not None:
            info["cg_relative_residual"] = cg.relative_residual(state.cg_vectors, state.cg_targets)
        return info
