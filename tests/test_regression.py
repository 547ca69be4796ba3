"""Regression through the whole pipeline: numeric targets at ingest (bad ones named by file and
line), their stores on both backends, the CLI ingest -> train -> evaluate -> predict, and
StagewiseLSRegressor against scikit-learn."""

from __future__ import annotations

import csv
import json
import re

import numpy as np
import pytest
from click.testing import CliRunner
from sklearn.linear_model import Ridge
from sklearn.metrics import mean_absolute_error, r2_score

from streamfit import StagewiseLSRegressor
from streamfit.cli import main
from streamfit.errors import InputError, StreamfitError
from streamfit.ingest.hashing import HashingConfig
from streamfit.ingest.pipeline import IngestOptions, ingest
from streamfit.store import open_store


def write_libsvm(path, X, Y):
    """One line per row: the targets (comma-separated when several) and 1-based idx:val pairs."""
    with open(path, "w") as f:
        for x, y in zip(X, Y):
            target = ",".join(repr(float(v)) for v in np.atleast_1d(y))
            f.write(target + " " + " ".join(f"{j + 1}:{v!r}" for j, v in enumerate(x.tolist()) if v) + "\n")


def planted(n=240, d=6, k=1, seed=0):
    rng = np.random.default_rng(seed)
    X = np.round(rng.normal(size=(n, d)), 3)
    Y = X @ rng.normal(size=(d, k)) + 2.0 + 0.1 * rng.normal(size=(n, k))
    return X, Y


@pytest.mark.parametrize("backend", ["zarr", "parquet"])
@pytest.mark.parametrize("k", [1, 2])
def test_numeric_targets_are_stored_exactly(tmp_path, backend, k):
    X, Y = planted(n=50, k=k)
    write_libsvm(tmp_path / "r.svm", X, Y)
    o = IngestOptions(
        [str(tmp_path / "r.svm")],
        str(tmp_path / "s"),
        hashing=None,
        target="numeric",
        backend=backend,
        chunk_rows=16,
        progress=False,
    )
    ingest(o)
    store = open_store(str(tmp_path / "s"))
    assert store.regression and store.manifest.task == "regression"
    assert store.manifest.target == {"kind": "numeric", "dtype": "float64", "shape": [50, k]}
    assert store.classes == (["target"] if k == 1 else ["target_0", "target_1"])
    assert store.verify() == []
    Xs, T = store.to_scipy()
    np.testing.assert_array_equal(T, Y)  # float64, bit for bit
    np.testing.assert_array_equal(Xs.toarray(), X.astype(np.float32))


def test_split_of_numeric_targets_is_random_and_like_keeps_the_outputs(tmp_path):
    X, Y = planted(n=200)
    write_libsvm(tmp_path / "r.svm", X, Y)
    train, test = str(tmp_path / "tr"), str(tmp_path / "te")
    ingest(
        IngestOptions(
            [str(tmp_path / "r.svm")],
            train,
            hashing=None,
            target="numeric",
            test_size=0.25,
            test_out=test,
            progress=False,
        )
    )
    T_train, T_test = open_store(train).to_scipy()[1], open_store(test).to_scipy()[1]
    assert (len(T_train), len(T_test)) == (150, 50)
    assert sorted(np.concatenate([T_train, T_test])[:, 0].tolist()) == sorted(Y[:, 0].tolist())
    ingest(IngestOptions([str(tmp_path / "r.svm")], str(tmp_path / "again"), like=train, progress=False))
    again = open_store(str(tmp_path / "again"))
    assert again.regression and again.classes == ["target"]


@pytest.mark.parametrize(
    "bad_target, problem",
    [
        ("nan", "NaN or infinite"),
        ("inf", "NaN or infinite"),
        ("-Infinity", "NaN or infinite"),
        ("cheap", "not a number"),
    ],
)
def test_bad_targets_are_bad_records_at_their_file_and_line(tmp_path, bad_target, problem):
    path = tmp_path / "prices.csv"
    with open(path, "w", newline="") as f:
        csv.writer(f).writerows(
            [("text", "label"), ("a red bike", "120.5"), ("old shoes", bad_target), ("a car", "9e3")]
        )
    options = dict(
        source_options={"text_field": "text"}, hashing=HashingConfig(n_features=2**10), target="numeric", progress=False
    )
    with pytest.raises(InputError, match=rf"prices.csv:3.*{problem}"):
        ingest(IngestOptions([str(path)], str(tmp_path / "s"), **options))
    report = ingest(IngestOptions([str(path)], str(tmp_path / "s"), on_bad_record="skip", **options))
    assert (report.read, report.written, report.skipped) == (3, 2, 1)
    np.testing.assert_array_equal(open_store(str(tmp_path / "s")).to_scipy()[1], [[120.5], [9e3]])


@pytest.mark.parametrize("bad_target", [float("nan"), float("inf"), float("-inf")])
@pytest.mark.parametrize("fmt", ["parquet", "jsonl", "libsvm"])
def test_nonfinite_targets_of_each_format_are_one_line_at_their_row(tmp_path, fmt, bad_target):
    """A NaN or infinite real-valued target in the second record of a Parquet table (a float
    column), a JSONL file (NaN/Infinity literals) or a LIBSVM file ('nan', 'inf') is one error
    line naming the file and the record, and with --on-bad-record skip a skipped record."""
    targets = [1.5, bad_target, 2.0]
    if fmt == "parquet":
        import pyarrow as pa
        import pyarrow.parquet as pq

        path, where = tmp_path / "t.parquet", "t.parquet:row group 0, row 1"
        pq.write_table(pa.table({"text": ["a b", "c d", "e f"], "label": targets}), path)
    elif fmt == "jsonl":
        path, where = tmp_path / "t.jsonl", "t.jsonl:2"
        path.write_text(
            "".join(json.dumps({"text": t, "label": y}) + "\n" for t, y in zip(["a b", "c d", "e f"], targets))
        )
    else:
        path, where = tmp_path / "t.svm", "t.svm:2"
        path.write_text("".join(f"{y!r} {j + 1}:1\n" for j, y in enumerate(targets)))
    options = dict(hashing=HashingConfig(n_features=2**8), target="numeric", progress=False)
    with pytest.raises(InputError, match=rf"{re.escape(where)}: target .* is NaN or infinite") as raised:
        ingest(IngestOptions([str(path)], str(tmp_path / "s"), **options))
    assert "\n" not in str(raised.value)
    report = ingest(IngestOptions([str(path)], str(tmp_path / "s"), on_bad_record="skip", **options))
    assert (report.read, report.written, report.skipped) == (3, 2, 1)
    np.testing.assert_array_equal(open_store(str(tmp_path / "s")).to_scipy()[1], [[1.5], [2.0]])


@pytest.mark.parametrize("fmt", ["npz", "hdf5"])
def test_multi_output_targets_from_arrays(tmp_path, fmt):
    """A 2-D y of an .npz or HDF5 input is k outputs with --target numeric (bit for bit), a row
    with a NaN output a bad record at its row; without --target numeric it is still a multilabel
    indicator (non-0/1 values are bad records)."""
    X, Y = planted(n=40, k=3)
    Y[7, 1] = np.nan
    path = str(tmp_path / f"r.{'npz' if fmt == 'npz' else 'h5'}")
    if fmt == "npz":
        np.savez(path, X=X, y=Y)
    else:
        import h5py

        with h5py.File(path, "w") as f:
            f["X"], f["y"] = X, Y
    options = dict(hashing=None, chunk_rows=16, progress=False)
    with pytest.raises(InputError, match=rf"{fmt_name(path)}:row 7.*NaN or infinite"):
        ingest(IngestOptions([path], str(tmp_path / "s"), target="numeric", **options))
    report = ingest(IngestOptions([path], str(tmp_path / "s"), target="numeric", on_bad_record="skip", **options))
    assert (report.written, report.skipped) == (39, 1)
    store = open_store(str(tmp_path / "s"))
    assert store.manifest.target == {"kind": "numeric", "dtype": "float64", "shape": [39, 3]}
    kept = np.arange(40) != 7
    np.testing.assert_array_equal(store.to_scipy()[1], Y[kept])
    with pytest.raises(InputError, match="values other than 0 and 1"):
        ingest(IngestOptions([path], str(tmp_path / "c"), **options))


@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
@pytest.mark.parametrize("k", [1, 2])
def test_real_numbers_of_jsonl_and_parquet_are_numeric_targets(tmp_path, fmt, k):
    """JSON numbers and float (or list of float) Parquet columns are targets with --target numeric,
    bit for bit, as text cells of CSV are; as class labels they are refused with that fix."""
    rng = np.random.default_rng(3)
    Y = rng.normal(size=(30, k)) * 10.0 ** rng.integers(-5, 5, size=(30, k))
    Y[0, 0] = 7.0  # an integral value of a float column stays a target
    texts = [f"w{i % 4} w{i % 7}" for i in range(30)]
    values = [row[0] if k == 1 else row for row in Y.tolist()]
    path = str(tmp_path / f"r.{fmt}")
    if fmt == "jsonl":
        with open(path, "w") as f:
            f.writelines(json.dumps({"text": t, "y": v}) + "\n" for t, v in zip(texts, values))
    else:
        import pyarrow as pa
        import pyarrow.parquet as pq

        pq.write_table(pa.table({"text": texts, "y": values}), path)
    options = dict(
        source_options={"label_field": "y"}, hashing=HashingConfig(n_features=2**10), chunk_rows=8, progress=False
    )
    ingest(IngestOptions([path], str(tmp_path / "s"), target="numeric", **options))
    store = open_store(str(tmp_path / "s"))
    assert store.manifest.target == {"kind": "numeric", "dtype": "float64", "shape": [30, k]}
    np.testing.assert_array_equal(store.to_scipy()[1], Y)
    with pytest.raises(InputError, match="real number.*not (a )?class names?.*pass --target numeric"):
        ingest(IngestOptions([path], str(tmp_path / "c"), **options))


def fmt_name(path):
    return path.rsplit("/", 1)[-1].replace(".", r"\.")


def test_a_row_with_another_number_of_outputs_is_a_bad_record(tmp_path):
    path = tmp_path / "r.svm"
    path.write_text("1.5,2 1:1\n0.5 1:2\n")
    with pytest.raises(InputError, match=r"r.svm:2.*has 1 values, the store 2"):
        ingest(IngestOptions([str(path)], str(tmp_path / "s"), hashing=None, target="numeric", progress=False))


def test_other_solvers_refuse_a_regression_store(tmp_path):
    from streamfit.train import train

    X, Y = planted(n=40)
    write_libsvm(tmp_path / "r.svm", X, Y)
    ingest(
        IngestOptions([str(tmp_path / "r.svm")], str(tmp_path / "s"), hashing=None, target="numeric", progress=False)
    )
    with pytest.raises(StreamfitError, match="only --solver stagewise"):
        train(str(tmp_path / "s"), "bcd", str(tmp_path / "run"), n_workers=0, progress=False)


def run(*args) -> str:
    """`streamfit -q ARGS` in process; its output."""
    result = CliRunner().invoke(main, ["-q", *map(str, args)], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.output


def test_cli_ingest_train_evaluate_predict(tmp_path):
    X, Y = planted(n=400, d=5, k=1, seed=3)
    write_libsvm(tmp_path / "train.svm", X[:300], Y[:300])
    write_libsvm(tmp_path / "new.svm", X[300:], Y[300:])
    run(
        "ingest",
        tmp_path / "train.svm",
        "--no-hash",
        "--target",
        "numeric",
        "--out",
        tmp_path / "s",
        "--test-size",
        "0.2",
        "--test-out",
        tmp_path / "t",
    )
    info = json.loads(run("inspect", tmp_path / "s", "--json"))
    assert info["task"] == "regression" and info["target"]["shape"] == [240, 1]
    assert abs(info["target_stats"]["target"]["mean"] - 2.0) < 0.5
    said = run(
        "train",
        tmp_path / "s",
        "--solver",
        "stagewise",
        "-p",
        "generator=sequential",
        "-p",
        "block_size=5",
        "-p",
        "n_passes=1",
        "-p",
        "lam=1e-6",
        "--n-workers",
        "0",
        "--out",
        tmp_path / "run",
    )
    assert said.strip().endswith(
        "model written to " + str(tmp_path / "run" / "model") + " (1 output)"
    )  # not "1 outputs"
    metrics = json.loads(run("evaluate", tmp_path / "run", tmp_path / "t", "--json"))
    _, T = open_store(str(tmp_path / "t")).to_scipy()
    Xt = open_store(str(tmp_path / "t")).to_scipy()[0]
    Xs, Ts = open_store(str(tmp_path / "s")).to_scipy()
    ridge = Ridge(alpha=240 * 1e-6).fit(Xs.toarray().astype(np.float64), Ts[:, 0])
    pred = ridge.predict(Xt.toarray().astype(np.float64))
    assert metrics["n_samples"] == 60
    assert metrics["r2"] == pytest.approx(r2_score(T[:, 0], pred), abs=1e-9)
    assert metrics["mae"] == pytest.approx(mean_absolute_error(T[:, 0], pred), abs=1e-9)
    assert metrics["rmse"] == pytest.approx(np.sqrt(np.mean((T[:, 0] - pred) ** 2)), abs=1e-9)
    run("predict", tmp_path / "run", tmp_path / "new.svm", "--out", tmp_path / "p.csv")
    with open(tmp_path / "p.csv") as f:
        rows = list(csv.reader(f))
    assert rows[0] == ["location", "target"] and len(rows) == 101
    values = np.array([float(r[1]) for r in rows[1:]])
    np.testing.assert_allclose(values, ridge.predict(X[300:].astype(np.float32).astype(np.float64)), rtol=0, atol=1e-6)


def test_regressor_matches_ridge_and_scores_r2():
    X, Y = planted(n=300, d=8, k=2, seed=4)
    lam = 1e-3
    reg = StagewiseLSRegressor(generator="sequential", block_size=8, n_passes=1, lam=lam).fit(X, Y)
    ridge = Ridge(alpha=300 * lam).fit(X, Y)
    np.testing.assert_allclose(reg.predict(X), ridge.predict(X), rtol=0, atol=1e-8)
    assert reg.score(X, Y) == pytest.approx(ridge.score(X, Y), abs=1e-10)
    one = StagewiseLSRegressor(generator="sequential", block_size=8, n_passes=1, lam=lam).fit(X, Y[:, 0])
    assert one.predict(X).shape == (300,) and one.coef_.shape == (8,)
    np.testing.assert_allclose(one.coef_, Ridge(alpha=300 * lam).fit(X, Y[:, 0]).coef_, rtol=0, atol=1e-8)
    with pytest.raises(ValueError, match="NaN"):
        StagewiseLSRegressor().fit(X, np.where(np.arange(300) == 7, np.nan, Y[:, 0]))


def test_scoring_options_a_model_would_ignore_are_refused(tmp_path):
    """evaluate --per-label / --threshold and predict --top-k / --threshold on a regression model,
    and --threshold on a multiclass one, were accepted and ignored (train refused --threshold on
    such stores): each is now one line naming the option, exit 2, nothing written."""
    X, Y = planted(n=120, d=4, k=2, seed=5)
    write_libsvm(tmp_path / "r.svm", X, Y)
    run("ingest", tmp_path / "r.svm", "--no-hash", "--target", "numeric", "--out", tmp_path / "s")
    run("train", tmp_path / "s", "--n-workers", "0", "--out", tmp_path / "run")
    write_libsvm(tmp_path / "c.svm", X, (X[:, :1] > 0).astype(int))
    run("ingest", tmp_path / "c.svm", "--no-hash", "--out", tmp_path / "cs")
    run("train", tmp_path / "cs", "--n-workers", "0", "--out", tmp_path / "crun")
    refused = [
        (["evaluate", "run", "s", "--per-label"], "--per-label: precision, recall and F1 are for class labels"),
        (["evaluate", "run", "s", "--threshold", "0.3"], "--threshold 0.3: applies to multilabel models, and this is a regression model"),
        (["predict", "run", "r.svm", "-o", "p.csv", "--top-k", "2"], "--top-k 2: a regression model writes one value"),
        (["predict", "run", "r.svm", "-o", "p.csv", "--threshold", "0.3"], "and this is a regression model; drop it"),
        (["evaluate", "crun", "cs", "--threshold", "0.3"], "--threshold 0.3: applies to multilabel models, and this is a multiclass model"),
        (["predict", "crun", "c.svm", "-o", "p.csv", "--threshold", "0.3"], "and this is a multiclass model; drop it"),
        (["train", "s", "--out", "run2", "--threshold", "0.3"], "s is a regression store; drop it"),
    ]  # fmt: skip
    for args, message in refused:
        args = [str(tmp_path / a) if (tmp_path / a).exists() or a in ("p.csv", "run2") else a for a in args]
        result = CliRunner().invoke(main, ["-q", *args])
        assert result.exit_code == 2 and message in result.output and result.output.count("\n") == 1, (
            args,
            result.output,
        )
    assert not (tmp_path / "p.csv").exists() and not (tmp_path / "run2").exists()


def test_a_constant_target_trains_with_one_warning_line(tmp_path, caplog):
    """ingest --target numeric of rows whose target is 7 in every row, then train: the command
    succeeds (the constant is the least-squares fit) and warns in one line that the target never
    varies, naming the store and the target."""
    X, _ = planted(n=60, d=4, seed=5)
    write_libsvm(tmp_path / "c.svm", X, np.full(60, 7.0))
    run("ingest", tmp_path / "c.svm", "--no-hash", "--target", "numeric", "--out", tmp_path / "s")
    with caplog.at_level("WARNING"):
        run("train", tmp_path / "s", "--solver", "stagewise", "--out", tmp_path / "run")
    (line,) = [r.getMessage() for r in caplog.records if "every training row" in r.getMessage()]
    assert "\n" not in line and f"store {tmp_path / 's'}: the target 'target' is 7.0 in every training row" in line
