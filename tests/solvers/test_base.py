"""What a checkpoint records as the model's settings: parameters that change the model, not how
the work is spread."""

from streamfit.solvers.ppdsparse import PPDSparseParams


def test_threads_do_not_enter_the_model_settings():
    one, two = PPDSparseParams(threads=1), PPDSparseParams(threads=2)
    assert "threads" not in one.model_settings()
    assert one.model_settings() == two.model_settings()  # resume with another thread count is allowed
    assert PPDSparseParams(lam=0.5).model_settings() != one.model_settings()  # another λ is refused


def test_unknown_parameter_error_names_it_and_the_valid_ones():
    import pytest

    from streamfit.errors import ConfigError
    from streamfit.train import make_params

    with pytest.raises(ConfigError, match=r"nosuch: .*its parameters: lam, tol, .*block_size"):
        make_params("stagewise", {"nosuch": 1})


def test_every_solver_refuses_non_finite_floats_and_negative_seeds():
    """-p lam=inf used to train an all-zero bcd model silently; random_state=-1 failed deep in numpy."""
    import pytest

    from streamfit.errors import ConfigError
    from streamfit.solvers import all_solvers
    from streamfit.train import make_params

    for name in all_solvers():
        for bad, message in [
            ({"lam": float("inf")}, "finite number"),
            ({"tol": float("nan")}, "finite number"),
            ({"random_state": -1}, "greater than or equal to 0"),
        ]:
            with pytest.raises(ConfigError, match=message):
                make_params(name, bad)


def test_every_solver_parameter_has_a_one_line_description():
    """The descriptions are the help of -p, --list-solvers and the estimators' docstrings."""
    from streamfit.solvers import all_solvers

    for name, solver in all_solvers().items():
        for key, field in solver.Params.model_fields.items():
            assert field.description and "\n" not in field.description, f"{name}.{key}"


def test_a_parameter_line_shows_its_default_and_allowed_values():
    from streamfit.solvers.base import parameter_lines
    from streamfit.solvers.bcd import BCDParams
    from streamfit.solvers.stagewise import StagewiseParams

    lines = dict(zip(StagewiseParams.model_fields, parameter_lines(StagewiseParams)))
    assert lines["link"].startswith("link (default identity) [one of identity, softmax]: identity: ridge")
    assert lines["pca_components"].startswith("pca_components (default None) [int >= 1, or None]: rff: PCA")
    assert lines["bandwidth"].startswith("bandwidth (default 0.5) [float > 0]: ")
    assert lines["backtrack"].startswith("backtrack (default False) [true or false]: ")
    sigma = parameter_lines(BCDParams)[list(BCDParams.model_fields).index("sigma")]
    assert sigma.startswith("sigma (default 0.01) [float > 0, < 1]: ")


def test_the_solver_and_model_kind_maps_name_the_modules_that_register_them():
    """get_solver and load_model import one module by these maps instead of every solver."""
    from streamfit.model import MODEL_KINDS
    from streamfit.solvers import MODEL_KIND_MODULES, SOLVER_NAMES, all_solvers

    solvers = all_solvers()
    for name in SOLVER_NAMES:
        assert solvers[name].__module__ == f"streamfit.solvers.{name}"
    registered = {k: c.__module__ for k, c in MODEL_KINDS.items() if c.__module__.startswith("streamfit.solvers.")}
    assert registered == {k: f"streamfit.solvers.{m}" for k, m in MODEL_KIND_MODULES.items()}


def test_one_solver_or_model_kind_imports_no_other_solver():
    """A small job's train or evaluate does not pay for importing the other four solvers."""
    import subprocess
    import sys

    others = [f"streamfit.solvers.{name}" for name in ("bcd", "fbpd", "multiboost", "stagewise")]
    code = (
        "import sys\n"
        "from streamfit.solvers import get_solver, import_model_kind\n"
        "get_solver('ppdsparse'); import_model_kind('ppdsparse'); import_model_kind('linear')\n"
        f"print([m for m in {others!r} if m in sys.modules])"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


def test_column_scales_are_the_standard_deviations_and_one_for_constant_or_overflowed_columns():
    """column_scales (fbpd's standardized steps, stagewise's standardized penalty) from the sums
    Σx and Σx²: numpy's population standard deviation of each column; 1 for a constant column
    (its variance rounding noise: 1e8 + 0.5 in every row) and for one whose squares overflowed."""
    import numpy as np

    from streamfit.solvers.base import column_scales

    rng = np.random.default_rng(0)
    X = rng.normal(size=(200, 4)) * [1e-3, 1.0, 1e3, 1.0] + [0.0, 5.0, -2.0, 1e8 + 0.5]
    X[:, 3] = 1e8 + 0.5
    s = column_scales(len(X), X.sum(axis=0), (X * X).sum(axis=0))
    np.testing.assert_allclose(s[:3], X[:, :3].std(axis=0), rtol=1e-9)
    assert s[3] == 1.0
    with np.errstate(over="ignore"):
        huge = column_scales(2, np.array([2e200]), np.array([1e200]) ** 2 * 2)
    assert huge.tolist() == [1.0]


def test_standardize_auto_standardizes_spreads_above_ten_and_keeps_comparable_columns():
    """standardized_scale: "auto" returns the columns' s where max s_j / min s_j exceeds
    SCALE_SPREAD = 10 (columns at 1 and 20: spread 20, as one column in other units; 100 until
    session 26, which kept it) and None at a spread of 5 (comparable units); True returns s at
    any spread, False never."""
    import numpy as np
    import pytest

    from streamfit.solvers import base

    rng = np.random.default_rng(5)
    Z = rng.normal(size=(400, 3))
    Z /= Z.std(axis=0)
    for factor, standardized in ((20.0, True), (5.0, False)):
        X = Z * [1.0, factor, 1.0]
        sums, squares = X.sum(axis=0), (X * X).sum(axis=0)
        s = base.column_scales(len(X), sums, squares)
        assert base.scale_spread(s) == pytest.approx(factor)
        auto = base.standardized_scale("auto", len(X), sums, squares)
        assert (auto is not None) is standardized
        if standardized:
            np.testing.assert_array_equal(auto, s)
        np.testing.assert_array_equal(base.standardized_scale(True, len(X), sums, squares), s)
        assert base.standardized_scale(False, len(X), sums, squares) is None
    assert base.SCALE_SPREAD == 10.0


def test_offset_notice_names_the_column_whose_mean_is_farthest_from_zero_in_its_spreads():
    """qa28: columns far from zero relative to their spread (a year, a price) left bcd and
    ppdsparse near chance without a word; the ratio is |mean|/std as numpy computes it."""
    import numpy as np

    from streamfit.solvers.base import OFFSET_RATIO, offset_notice

    rng = np.random.default_rng(0)
    X = rng.normal(size=(500, 5))
    X[:, 1] = 2000.0 + 3.0 * X[:, 1]  # mean/std about 667
    X[:, 3] = 50.0 + 0.2 * X[:, 3]  # about 250
    X[:, 4] = 7.0  # constant: no spread to compare with, left out
    ids = np.array([10, 11, 12, 13, 14])
    sums, squares = X.sum(axis=0), (X**2).sum(axis=0)
    notice = offset_notice("bcd", 500, ids, sums, squares)
    ratio = abs(X[:, 1].mean()) / X[:, 1].std()
    assert notice is not None and notice.startswith(
        "bcd: 2 of the 5 training columns sit far from zero: column 11's mean"
    )
    assert f"{ratio:.3g}× its standard deviation" in notice and "subtract each such column's mean" in notice
    # centred, scaled or one-hot columns are not offsets
    Z = X[:, :4] - X[:, :4].mean(axis=0)
    assert offset_notice("bcd", 500, ids[:4], Z.sum(axis=0), (Z**2).sum(axis=0)) is None
    onehot = (rng.random((500, 3)) < 0.9).astype(float)  # mean/std = √(p/(1−p)) = 3
    assert offset_notice("ppdsparse", 500, ids[:3], onehot.sum(axis=0), onehot.sum(axis=0)) is None
    # the threshold is strict: a column just above it is named, one just below it is not
    col = np.r_[np.zeros(250), np.ones(250)] * 2.0  # std 1, mean set below
    for mean, named in [(OFFSET_RATIO * 1.01, True), (OFFSET_RATIO * 0.99, False)]:
        c = col - 1.0 + mean
        assert (offset_notice("bcd", 500, ids[:1], np.array([c.sum()]), np.array([(c**2).sum()])) is not None) == named


def test_class_rows_reads_a_stores_counts_from_its_manifest_and_no_chunk(digits, write_store, tmp_path):
    """A version-4 store: the driver's class counts (solvers.base.class_rows) are its manifest's,
    so they come even with every chunk gone after the open. A version-3 store (tests/data/store-v3,
    no class_rows): one pass over its chunks, which then must be there."""
    import os
    import shutil

    import numpy as np
    import pytest

    from streamfit.engine import Engine
    from streamfit.errors import StoreError
    from streamfit.solvers.base import class_rows
    from streamfit.store import open_store

    X, y, classes = digits
    store = open_store(write_store(X, y, classes + ["spare"], chunk_rows=400))
    shutil.rmtree(os.path.join(store.path, "chunks"))
    with Engine(mode="inprocess") as engine:
        rows = class_rows(store, engine)
        assert rows.dtype == np.int64 and rows.tolist() == np.bincount(y, minlength=11).tolist()
        with pytest.raises(StoreError, match="chunk 0"):
            store.read_chunk(0)  # the chunks are gone indeed
        old = tmp_path / "v3.zarr"
        shutil.copytree(os.path.join(os.path.dirname(__file__), "..", "data", "store-v3", "dna400.zarr"), old)
        assert class_rows(open_store(str(old)), engine).tolist() == [88, 99, 213, 0]
        v3 = open_store(str(old))
        shutil.rmtree(old / "chunks")
        with pytest.raises(StoreError, match="chunk 0"):
            class_rows(v3, engine)


def test_columns_used_estimate_is_exact_with_idf_weights_and_an_upper_bound_without(tmp_path):
    """With the IDF weights of text ingest, the columns of df >= 1 are the columns a pass over the
    chunks finds used (Store.columns_used, an independent count); without them, min(n_features,
    nnz), which no store exceeds."""
    from streamfit.ingest.hashing import HashingConfig
    from streamfit.ingest.pipeline import IngestOptions, ingest
    from streamfit.solvers.base import columns_used_estimate
    from streamfit.store import open_store

    data = tmp_path / "d.csv"
    data.write_text("label,text\n" + "".join(f"c{i % 3},word{i} other{i % 5} shared\n" for i in range(40)))
    for idf in (True, False):
        out = str(tmp_path / f"s-{idf}.zarr")
        ingest(IngestOptions([str(data)], out, hashing=HashingConfig(n_features=2**12), idf=idf, progress=False))
        store = open_store(out)
        used = store.columns_used()
        assert 40 < used < store.n_features  # word0..word39, other0..4, shared (a collision or two at most)
        if idf:
            assert columns_used_estimate(store) == used
        else:
            assert columns_used_estimate(store) == min(store.n_features, store.manifest.nnz) >= used
