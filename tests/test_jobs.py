"""streamfit.jobs: a pipeline file's sections run in order; command-line overrides reach train."""

import numpy as np
import pytest
from sklearn.datasets import dump_svmlight_file

from streamfit.config import load_pipeline
from streamfit.errors import TimeLimitReached
from streamfit.ingest.hashing import HashingConfig
from streamfit.jobs import ingest_options, run_pipeline
from streamfit.metrics import evaluate
from streamfit.model import load_model
from streamfit.store import open_store


@pytest.fixture
def pipeline(tmp_path, digits):
    X, y, _ = digits
    dump_svmlight_file(X, y, str(tmp_path / "digits.svm"), zero_based=False)
    path = tmp_path / "p.yaml"
    path.write_text(
        "ingest: {inputs: [digits.svm], out: train.zarr, no_hash: true, test_size: 0.25, "
        "test_out: test.zarr, chunk_rows: 500}\n"
        "train: {solver: bcd, out: run, params: {max_iter: 3}, n_workers: 0}\n"
        "evaluate: {}\n"
    )
    return path


def test_the_sections_run_in_order_and_evaluate_scores_the_saved_model(pipeline, tmp_path, digits):
    lines = []
    result = run_pipeline(load_pipeline(str(pipeline)), progress=False, say=lines.append)
    assert [line.split(":")[0] for line in lines] == ["ingest", "train", "evaluate"]
    n_test = sum(round(0.25 * n) for n in np.bincount(digits[1]))  # the split is stratified per class
    assert result.ingest.stores == {str(tmp_path / "train.zarr"): 1797 - n_test, str(tmp_path / "test.zarr"): n_test}
    test = open_store(str(tmp_path / "test.zarr"))
    assert result.evaluation == evaluate(load_model(str(tmp_path / "run")), test, progress=False)
    assert result.model.info["outer_iterations"] == 3
    # --resume keeps the stores and continues the finished run: the same model
    again = run_pipeline(load_pipeline(str(pipeline)), resume=True, progress=False, say=lines.append)
    assert again.ingest is None and lines[3] == f"ingest: {tmp_path / 'train.zarr'} exists, kept (--resume)"
    X, _ = test.to_scipy()
    assert np.array_equal(again.model.decision_function(X), result.model.decision_function(X))


def test_command_line_overrides_beat_the_train_section(pipeline, tmp_path):
    config = load_pipeline(str(pipeline))
    with pytest.raises(TimeLimitReached):  # the section sets no time limit; the override stops after one step
        run_pipeline(config, {"time_limit": 1e-9, "n_workers": None}, progress=False, say=lambda _: None)
    assert not (tmp_path / "run" / "model").exists()


def test_ingest_options_from_a_section(tmp_path):
    path = tmp_path / "p.yaml"
    path.write_text(
        "ingest: {inputs: [a.jsonl], out: s.zarr, hashing: {n_features: 1024, ngram_range: [1, 2]}, "
        "idf: true, overwrite: true}\n"
    )
    options = ingest_options(load_pipeline(str(path)).ingest, overwrite=False, progress=False)
    assert options.hashing == HashingConfig(n_features=1024, ngram_range=(1, 2))
    assert (options.inputs, options.idf, options.overwrite) == ([str(tmp_path / "a.jsonl")], True, True)
    path.write_text("ingest: {inputs: [a.svm], out: s.zarr, no_hash: true, n_features: 64}\n")
    options = ingest_options(load_pipeline(str(path)).ingest, overwrite=True, progress=False)
    assert (options.hashing, options.n_features, options.overwrite) == (None, 64, True)


def test_resume_finishes_an_ingest_killed_between_its_two_publishes(pipeline, tmp_path):
    """The test store is published first; with it alone on disk, `run --resume` writes the pair
    again (the re-run recognises the same split) and goes on to train and evaluate."""
    import shutil

    first = run_pipeline(load_pipeline(str(pipeline)), progress=False, say=lambda _: None)
    shutil.rmtree(tmp_path / "train.zarr")  # what a kill between the publishes leaves
    shutil.rmtree(tmp_path / "run")
    again = run_pipeline(load_pipeline(str(pipeline)), resume=True, progress=False, say=lambda _: None)
    assert again.ingest.stores == first.ingest.stores and again.evaluation == first.evaluation


def test_predict_section_evaluation_file_and_environment_variables(tmp_path, digits, monkeypatch):
    """A predict section scores raw data with the trained model, evaluate's result is written to
    RUN_DIR/evaluation.json, $VARS in paths are expanded and an unset one is named (issue 20, item 11)."""
    import json

    from click.testing import CliRunner

    from streamfit.cli import main
    from streamfit.errors import ConfigError
    from streamfit.predict import predict_to_file

    X, y, _ = digits
    (tmp_path / "data").mkdir()
    dump_svmlight_file(X, y, str(tmp_path / "data" / "digits.svm"), zero_based=False)
    path = tmp_path / "p.yaml"
    path.write_text(
        "ingest: {inputs: [$DATA/digits.svm], out: train.zarr, no_hash: true, test_size: 0.25, test_out: test.zarr}\n"
        "train: {solver: bcd, out: '${RUNS}/run', params: {max_iter: 2}}\n"
        "evaluate: {}\n"
        "predict: {source: $DATA/digits.svm, top_k: 2}\n"
    )
    monkeypatch.delenv("RUNS", raising=False)
    monkeypatch.setenv("DATA", str(tmp_path / "data"))
    with pytest.raises(ConfigError, match=r"p.yaml: key 'train.out': the environment variable RUNS is not set"):
        load_pipeline(str(path))
    monkeypatch.setenv("RUNS", str(tmp_path / "runs"))
    result = CliRunner().invoke(main, ["run", str(path), "--n-workers", "0", "-q"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    run_dir = tmp_path / "runs" / "run"
    saved = json.loads((run_dir / "evaluation.json").read_text())
    model = load_model(str(run_dir))
    assert saved == {
        "store": str(tmp_path / "test.zarr"),
        "metrics": evaluate(model, open_store(str(tmp_path / "test.zarr")), progress=False),
    }
    assert "predict: 1797 rows written to" in result.output
    predict_to_file(model, str(tmp_path / "data" / "digits.svm"), str(tmp_path / "direct.csv"), top_k=2)
    assert (run_dir / "predictions.csv").read_text() == (tmp_path / "direct.csv").read_text()
