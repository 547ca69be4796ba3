"""streamfit.jobs: a pipeline file's sections run in order; command-line overrides reach train."""

import os

import numpy as np
import pytest
from sklearn.datasets import dump_svmlight_file

from streamfit.config import load_pipeline
from streamfit.errors import StreamfitError, TimeLimitReached
from streamfit.ingest.hashing import HashingConfig
from streamfit.jobs import ingest_options, run_pipeline
from streamfit.metrics import evaluate
from streamfit.model import load_model
from streamfit.store import open_store


@pytest.fixture
def digits_svm(tmp_path, digits):
    """scikit-learn's digits as tmp_path/digits.svm (LIBSVM, 1-based)."""
    X, y, _ = digits
    dump_svmlight_file(X, y, str(tmp_path / "digits.svm"), zero_based=False)
    return tmp_path / "digits.svm"


@pytest.fixture
def pipeline(tmp_path, digits_svm):
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


def test_a_retried_overwrite_run_while_the_first_trains_removes_nothing(pipeline, tmp_path):
    """qa27: `streamfit run job.yaml --overwrite` started again while the first still trains (a
    scheduler's retry): the second deleted the stores before it met the run directory's lock, and
    the first then failed mid-train ("store.zarr/idf.npy is missing"). Every lock is now taken
    before anything is removed: the second stops with one line and the first's files stay."""
    from streamfit.store.store import read_lock
    from streamfit.train import _lock_run_dir

    run_pipeline(load_pipeline(str(pipeline)), progress=False, say=lambda _: None)
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    train_store = str(tmp_path / "train.zarr")
    for held_by_the_first in (lambda: _lock_run_dir(str(tmp_path / "run")), lambda: read_lock(train_store)):
        fd = held_by_the_first()  # what the first run's train holds
        try:
            with pytest.raises(StreamfitError, match="right now"):
                run_pipeline(load_pipeline(str(pipeline)), overwrite=True, progress=False, say=lambda _: None)
        finally:
            os.close(fd)
        assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == before
    assert open_store(train_store).n_rows > 0


def test_a_retried_overwrite_run_on_s3_while_the_first_holds_a_lease_removes_nothing(s3, tmp_path, digits):
    """The same behind s3:// URLs, where a lease (streamfit.lease) stands for the lock: the run
    directory's lease or a store's, held by the first run, stops the second `run --overwrite`
    with one line before it removes anything; once released, the --overwrite runs through (its
    deletion of the stores takes their leases, deleted with the stores) and leaves no lease."""
    from streamfit import lease, storage

    X, y, _ = digits
    dump_svmlight_file(X, y, str(tmp_path / "digits.svm"), zero_based=False)
    base = "s3://streamfit-test/jobs"
    path = tmp_path / "p.yaml"
    path.write_text(
        f"ingest: {{inputs: [digits.svm], out: {base}/train.zarr, no_hash: true, test_size: 0.25, "
        f"test_out: {base}/test.zarr, chunk_rows: 500}}\n"
        f"train: {{solver: bcd, out: {base}/run, params: {{max_iter: 3}}, n_workers: 0}}\n"
    )
    run_pipeline(load_pipeline(str(path)), progress=False, say=lambda _: None)
    s3.invalidate_cache()
    before = sorted(s3.find("streamfit-test/jobs"))
    for name, what in (("run", "run directory"), ("train.zarr", "store")):
        held = lease.take(storage.resolve(f"{base}/{name}"), what)  # what the first run holds
        try:
            with pytest.raises(StreamfitError, match=f"{base}/{name}: another streamfit process .* right now"):
                run_pipeline(load_pipeline(str(path)), overwrite=True, progress=False, say=lambda _: None)
            s3.invalidate_cache()
            assert sorted(s3.find("streamfit-test/jobs")) == sorted([*before, f"streamfit-test/jobs/{name}/LEASE"])
        finally:
            held.release()
    run_pipeline(load_pipeline(str(path)), overwrite=True, progress=False, say=lambda _: None)
    s3.invalidate_cache()
    assert not [key for key in s3.find("streamfit-test/jobs") if key.endswith("LEASE")]
    assert open_store(f"{base}/train.zarr").verify() == [] and load_model(f"{base}/run").info["outer_iterations"] == 3


def test_overwrite_stopped_in_train_leaves_no_evaluation_of_the_old_model(pipeline, tmp_path):
    """--overwrite replaces the run directory: a new run stopped before its evaluate section must
    not leave the old model's evaluation.json beside its own checkpoints, looking like its result."""
    run_pipeline(load_pipeline(str(pipeline)), progress=False, say=lambda _: None)
    assert (tmp_path / "run" / "evaluation.json").exists()
    with pytest.raises(TimeLimitReached):
        run_pipeline(
            load_pipeline(str(pipeline)),
            {"time_limit": 1e-9, "n_workers": None},
            overwrite=True,
            progress=False,
            say=lambda _: None,
        )
    assert (tmp_path / "run" / "checkpoints" / "LATEST").exists()
    assert not (tmp_path / "run" / "model").exists()
    assert not (tmp_path / "run" / "evaluation.json").exists()


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


def test_a_sections_error_that_names_a_format_flag_says_where_the_pipeline_writes_it(tmp_path):
    """A predict section scoring JSONL with a model trained on a headerless TSV (text in column
    1): the error's fix names `--text-field`, a flag a pipeline has not; it now adds the section's
    key (predict's `options`, ingest's `source_options`). Before session 25 the line said only
    "set --text-field"."""
    import gzip
    import json

    rows = [("pos", "good fine great nice"), ("neg", "bad awful poor sad")] * 20
    with gzip.open(tmp_path / "train.tsv.gz", "wt") as f:
        f.writelines(f"{label}\t{text}\n" for label, text in rows)
    (tmp_path / "new.jsonl").write_text(
        "".join(json.dumps({"id": i, "body": t}) + "\n" for i, (_, t) in enumerate(rows))
    )
    path = tmp_path / "p.yaml"
    path.write_text(
        "ingest: {inputs: [train.tsv.gz], out: train.zarr, source_options: {header: false, label_field: '0', "
        "text_field: '1'}}\n"
        "train: {solver: bcd, out: run, params: {max_iter: 2}, n_workers: 0}\n"
        "predict: {source: new.jsonl}\n"
    )
    with pytest.raises(StreamfitError) as e:
        run_pipeline(load_pipeline(str(path)))
    assert "no field '1' (set --text-field" in str(e.value)
    assert str(e.value).endswith("(in a pipeline: --text-field is the predict section's options: {text_field: …})")
    path.write_text(
        path.read_text().replace(
            "predict: {source: new.jsonl}", "predict: {source: new.jsonl, options: {text_field: body, id_field: id}}"
        )
    )
    assert run_pipeline(load_pipeline(str(path)), resume=True).predictions == len(rows)
    # an ingest section's: its source_options
    path.write_text("ingest: {inputs: [train.tsv.gz], out: t2.zarr, source_options: {header: false, text_field: x}}\n")
    with pytest.raises(StreamfitError, match=r"\(in a pipeline: --text-field.* the ingest section's source_options: "):
        run_pipeline(load_pipeline(str(path)))


def _cluster_pipeline(tmp_path, digits, engine: str):
    """A pipeline of the digits whose ingest, evaluate and predict sections name their engine
    (`engine`: YAML keys, e.g. "n_workers: 0"), the predictions written as parts."""
    X, y, _ = digits
    dump_svmlight_file(X, y, str(tmp_path / "digits.svm"), zero_based=False)
    path = tmp_path / "p.yaml"
    path.write_text(
        "ingest: {inputs: [digits.svm], out: train.zarr, no_hash: true, test_size: 0.25, test_out: test.zarr, "
        f"chunk_rows: 500, {engine}}}\n"
        "train: {solver: bcd, out: run, params: {max_iter: 2}, n_workers: 0}\n"
        f"evaluate: {{{engine}}}\n"
        f"predict: {{source: digits.svm, out: preds.csv, top_k: 2, parts: true, {engine}}}\n"
    )
    return load_pipeline(str(path))


def _parts_text(folder) -> str:
    """A --parts CSV output as one file: the header once, then each part's rows in order."""
    import json

    names = [p["name"] for p in json.loads((folder / "manifest.json").read_text())["parts"]]
    texts = [(folder / name).read_text() for name in names]
    header = texts[0].splitlines(keepends=True)[0]
    return header + "".join(t.removeprefix(header) for t in texts)


def test_cluster_options_and_parts_reach_the_ingest_evaluate_and_predict_sections(tmp_path, digits, monkeypatch):
    """n_workers/scheduler in the ingest, ingest_test, evaluate and predict sections and parts in
    predict are loaded as their declarations (IngestOptions, ClusterOptions, PredictOptions); run
    in process (n_workers: 0), the predictions are parts that join to predict_to_file's single file."""
    from streamfit import predict
    from streamfit.config import ClusterOptions, PredictOptions
    from streamfit.predict import predict_to_file

    monkeypatch.setattr(predict, "RAW_BATCH_ROWS", 500)  # 1797 rows: 4 parts
    config = _cluster_pipeline(tmp_path, digits, "n_workers: 0")
    assert (config.ingest.n_workers, config.evaluate.cluster, config.predict.predict_options) == (
        0,
        ClusterOptions(None, 0),
        PredictOptions(None, 0, True),
    )
    lines: list[str] = []
    result = run_pipeline(config, progress=False, say=lines.append)
    assert [line.split(":")[0] for line in lines] == ["ingest", "train", "evaluate", "predict"]
    model = load_model(str(tmp_path / "run"))
    assert result.evaluation == evaluate(model, open_store(str(tmp_path / "test.zarr")), progress=False)
    assert result.predictions == 1797 and len(list((tmp_path / "preds.csv").glob("part-*.csv"))) == 4
    predict_to_file(model, str(tmp_path / "digits.svm"), str(tmp_path / "one.csv"), top_k=2)
    assert _parts_text(tmp_path / "preds.csv") == (tmp_path / "one.csv").read_text()

    path = tmp_path / "q.yaml"
    address = "tcp://10.0.0.1:8786"
    path.write_text(
        f"ingest: {{inputs: [a.jsonl], out: s.zarr, scheduler: '{address}'}}\n"
        "ingest_test: {inputs: [b.jsonl], out: t.zarr, n_workers: 3}\n"
        "train: {out: run}\n"
        f"evaluate: {{scheduler: '{address}'}}\n"
        "predict: {source: c.jsonl, n_workers: 2}\n"
    )
    config = load_pipeline(str(path))
    assert (config.ingest.scheduler, config.ingest.n_workers, config.ingest_test.n_workers) == (address, None, 3)
    assert config.evaluate.cluster == ClusterOptions(address, None)
    assert config.predict.predict_options == PredictOptions(None, 2, False)


@pytest.mark.slow
def test_a_pipeline_on_a_loopback_cluster_writes_what_it_writes_in_process(tmp_path, digits):
    """ingest, evaluate and predict with `scheduler:` a two-worker cluster on loopback (their tasks
    run there; train runs in process): the same stores (manifests with every chunk's digest), the
    same metrics and the same prediction parts (manifest with every part's SHA-256) as with
    n_workers: 0."""
    import json
    import shutil

    from distributed import LocalCluster

    def manifests() -> list[dict]:
        stores = [
            open_store(str(tmp_path / name)).data.join("manifest.json").read_bytes()
            for name in ("train.zarr", "test.zarr")
        ]
        return [json.loads(m) for m in stores + [(tmp_path / "preds.csv" / "manifest.json").read_bytes()]]

    here = run_pipeline(_cluster_pipeline(tmp_path, digits, "n_workers: 0"), progress=False)
    in_process = manifests()
    for name in ("train.zarr", "test.zarr", "preds.csv", "run"):
        shutil.rmtree(tmp_path / name)
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0") as cluster:
        config = _cluster_pipeline(tmp_path, digits, f"scheduler: '{cluster.scheduler_address}'")
        there = run_pipeline(config, progress=False)
        ran = set(cluster.scheduler.task_prefixes)
    ingest_tasks = {"featurize_piece", "summary", "write_chunks", "finish_chunk"}  # both passes, chunks written there
    assert ran == ingest_tasks | {"chunk_sums", "score_piece"}  # ingest, evaluate and predict ran there
    assert config.ingest.scheduler == config.evaluate.cluster.scheduler == cluster.scheduler_address
    assert manifests() == in_process
    assert there.evaluation == here.evaluation and there.predictions == here.predictions == 1797


def test_a_pipeline_job_logs_its_sections_and_steps_as_json_lines(pipeline, tmp_path):
    """`streamfit --log-file F --log-format json run P`: each section's line and each training
    step are one JSON object in F, as a batch job's log needs them (issue 20, item 15)."""
    import json

    from click.testing import CliRunner

    from streamfit.cli import main

    log = tmp_path / "job.log"
    argv = ["--log-file", str(log), "--log-format", "json", "run", str(pipeline)]
    result = CliRunner().invoke(main, argv, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    entries = [json.loads(line) for line in log.read_text().splitlines()]
    sections = [e["message"].split(":")[0] for e in entries if e["logger"] == "streamfit.jobs"]
    assert sections == ["ingest", "train", "evaluate"]
    assert all(e["message"] in result.output for e in entries if e["logger"] == "streamfit.jobs")
    progress = [e for e in entries if e["logger"] == "streamfit.runlog"]
    steps = [e["step"] for e in progress if e["message"].startswith("bcd: step ")]
    assert steps[0] == 1 and steps[-1] == 3  # bcd's max_iter 3: the first and the last step are always logged
    read = [e for e in progress if e["message"].startswith("ingest: record ")]  # the ingest's progress too
    assert read[-1]["step"] == 1797 and read[-1]["elapsed_s"] > 0


def test_sigterm_stops_the_evaluate_section_between_chunks_and_writes_no_evaluation(tmp_path, digits, sigterm_guard):
    """A SIGTERM while the evaluate section reads the test store's second chunk (the guard
    installed, as the CLI does): Terminated before the third, naming what --resume does, and no
    evaluation.json; the same job with --resume then evaluates."""
    import os
    import signal

    from streamfit.errors import Terminated
    from streamfit.store.store import Store

    X, y, _ = digits
    dump_svmlight_file(X, y, str(tmp_path / "digits.svm"), zero_based=False)
    path = tmp_path / "p.yaml"
    path.write_text(
        "ingest: {inputs: [digits.svm], out: train.zarr, no_hash: true, test_size: 0.25, "
        "test_out: test.zarr, chunk_rows: 100}\n"
        "train: {solver: bcd, out: run, params: {max_iter: 2}, n_workers: 0}\n"
        "evaluate: {}\n"
    )
    test_store = str(tmp_path / "test.zarr")
    read, test_reads = Store._read_from_disk, []

    def signalled(self, i, verify):
        if self.path == test_store:
            test_reads.append(i)
            if i == 1:
                os.kill(os.getpid(), signal.SIGTERM)
        return read(self, i, verify)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(Store, "_read_from_disk", signalled)
        with pytest.raises(
            Terminated, match="test.zarr: not evaluated .no evaluation.json written.; the same command plus --resume"
        ):
            run_pipeline(load_pipeline(str(path)), progress=False, say=lambda _: None)
    assert test_reads == [0, 1] and open_store(test_store).n_chunks == 5
    assert not (tmp_path / "run" / "evaluation.json").exists() and (tmp_path / "run" / "model").exists()
    sigterm_guard.disarm()
    again = run_pipeline(load_pipeline(str(path)), resume=True, progress=False, say=lambda _: None)
    assert (tmp_path / "run" / "evaluation.json").exists() and again.evaluation["n_samples"] == 450


def test_a_later_sections_output_already_there_is_refused_before_the_first_section(pipeline, tmp_path):
    """A run directory with a checkpoint (or a store of the ingest sections) already there:
    refused before the ingest section writes anything (it was found after the ingest had run),
    with the message `streamfit train` gives; --resume or --overwrite say what to do with it
    (both named: the ingest command's own refusal named only --overwrite, which a user of a
    pipeline killed in its train section would follow and ingest again)."""
    from streamfit.errors import StreamfitError

    (tmp_path / "run" / "checkpoints").mkdir(parents=True)  # what an earlier run left: its last checkpoint's record
    (tmp_path / "run" / "checkpoints" / "LATEST").write_text('{"step": 3}')
    (tmp_path / "kept-test.zarr").mkdir()
    with pytest.raises(
        StreamfitError, match=f"^{tmp_path / 'run'}: holds checkpoints of an earlier run; pass --resume"
    ):
        run_pipeline(load_pipeline(str(pipeline)), progress=False, say=lambda _: None)
    assert not (tmp_path / "train.zarr").exists() and not (tmp_path / "test.zarr").exists()
    # an ingest_test section whose store is there: the same
    path = tmp_path / "q.yaml"
    path.write_text(
        "ingest: {inputs: [digits.svm], out: a.zarr, no_hash: true}\n"
        "ingest_test: {inputs: [digits.svm], out: kept-test.zarr}\n"
    )
    fixes = "already exists \\(from an earlier run of this pipeline\\?\\); pass --resume .* or --overwrite"
    with pytest.raises(StreamfitError, match=f"^{tmp_path / 'kept-test.zarr'}: {fixes}"):
        run_pipeline(load_pipeline(str(path)), progress=False, say=lambda _: None)
    assert not (tmp_path / "a.zarr").exists()
    # the ingest section's own store (a run killed after its ingest): --resume named too, which keeps it
    (tmp_path / "kept-test.zarr").rmdir()
    (tmp_path / "a.zarr").mkdir()
    with pytest.raises(StreamfitError, match=f"^{tmp_path / 'a.zarr'}: {fixes}"):
        run_pipeline(load_pipeline(str(path)), progress=False, say=lambda _: None)
    assert not (tmp_path / "kept-test.zarr").exists()


def test_overwrite_killed_in_its_first_section_leaves_nothing_of_the_earlier_run(tmp_path, digits, monkeypatch):
    """`run --overwrite` removes the earlier run's outputs before its first section: killed in
    ingest (here: an exception from it), it leaves no complete store, checkpoint, model,
    evaluation.json or predictions file of the earlier run, and `--resume` then runs every section
    on the new input. Before, the earlier stores and checkpoints were kept by --resume as this
    run's, and the earlier predictions file stood beside them."""
    import streamfit.jobs as jobs

    X, y, _ = digits
    dump_svmlight_file(X, y, str(tmp_path / "all.svm"), zero_based=False)
    dump_svmlight_file(X[:1000], y[:1000], str(tmp_path / "part.svm"), zero_based=False)
    path = tmp_path / "p.yaml"
    job = (
        "ingest: {inputs: [INPUT], out: train.zarr, no_hash: true, test_size: 0.25, test_out: test.zarr}\n"
        "train: {solver: stagewise, out: run, n_workers: 0}\n"
        "evaluate: {}\n"
        "predict: {source: INPUT, out: predictions.csv}\n"
    )
    path.write_text(job.replace("INPUT", "all.svm"))
    run_pipeline(load_pipeline(str(path)), progress=False, say=lambda _: None)
    outputs = ["train.zarr", "test.zarr", "run/checkpoints", "run/model", "run/evaluation.json", "predictions.csv"]
    assert all((tmp_path / name).exists() for name in outputs)

    path.write_text(job.replace("INPUT", "nothing.svm"))  # an input that is not there: named, nothing removed
    with pytest.raises(StreamfitError, match="nothing.svm: no such file"):
        run_pipeline(load_pipeline(str(path)), overwrite=True, progress=False, say=lambda _: None)
    assert all((tmp_path / name).exists() for name in outputs)

    path.write_text(job.replace("INPUT", "part.svm"))  # a new input, the same outputs

    def killed(*args, **kwargs):
        raise KeyboardInterrupt

    with monkeypatch.context() as m:
        m.setattr(jobs, "ingest", killed)
        with pytest.raises(KeyboardInterrupt):
            run_pipeline(load_pipeline(str(path)), overwrite=True, progress=False, say=lambda _: None)
    assert [name for name in outputs if (tmp_path / name).exists()] == []
    again = run_pipeline(load_pipeline(str(path)), resume=True, progress=False, say=lambda _: None)
    assert again.ingest is not None and sum(again.ingest.stores.values()) == 1000
    assert again.predictions == 1000 and len((tmp_path / "predictions.csv").read_text().splitlines()) == 1001


def test_resume_refuses_a_store_ingested_from_inputs_the_pipeline_no_longer_names(tmp_path, digits):
    """A pipeline whose ingest (or ingest_test) section now names other inputs, run with
    --resume, must not keep the stores made from the earlier inputs (it would train, evaluate
    and predict on rows the pipeline no longer names): one error naming both, and the fix."""
    X, y, _ = digits
    dump_svmlight_file(X, y, str(tmp_path / "all.svm"), zero_based=False)
    dump_svmlight_file(X[:1000], y[:1000], str(tmp_path / "part.svm"), zero_based=False)
    dump_svmlight_file(X[1000:], y[1000:], str(tmp_path / "rest.svm"), zero_based=False)
    path = tmp_path / "p.yaml"
    job = (
        "ingest: {inputs: [INPUT], out: train.zarr, no_hash: true}\n"
        "ingest_test: {inputs: [TEST], out: test.zarr}\n"
        "train: {solver: stagewise, out: run, n_workers: 0}\n"
        "evaluate: {}\n"
    )
    path.write_text(job.replace("INPUT", "part.svm").replace("TEST", "rest.svm"))
    run_pipeline(load_pipeline(str(path)), progress=False, say=lambda _: None)
    again = run_pipeline(load_pipeline(str(path)), resume=True, progress=False, say=lambda _: None)
    assert again.ingest is None and again.ingest_test is None  # the same inputs: kept

    for inputs, section in (("all.svm", "rest.svm"), ("part.svm", "all.svm")):
        path.write_text(job.replace("INPUT", inputs).replace("TEST", section))
        changed = "ingest" if inputs != "part.svm" else "ingest_test"
        store = tmp_path / ("train.zarr" if changed == "ingest" else "test.zarr")
        old = tmp_path / ("part.svm" if changed == "ingest" else "rest.svm")
        new = tmp_path / (inputs if changed == "ingest" else section)
        with pytest.raises(StreamfitError) as e:
            run_pipeline(load_pipeline(str(path)), resume=True, progress=False, say=lambda _: None)
        assert str(e.value) == (
            f"{store}: --resume would keep this store, ingested from {old}, but the pipeline's {changed} "
            f"section names {new}; run with --overwrite to ingest it again"
        )
    assert open_store(str(tmp_path / "train.zarr")).n_rows == 1000  # nothing replaced


def test_resume_keeps_the_stores_of_a_glob_and_refuses_them_for_changed_settings(tmp_path):
    """`run --resume` keeps a store only while the section gives the settings it was ingested
    with: an edited hashing, label field, split or IDF (ingest), or format option (ingest_test),
    is refused with one line naming the store, the setting, old → new and --overwrite, and the
    stores stay as they were; a glob's store is kept (it was refused: the manifest records the
    files, the section the pattern), as is a change of the workers, which makes the same store."""
    import gzip
    import json

    from streamfit.errors import ConfigError

    rng = np.random.default_rng(0)
    words = {"a": ["apple", "banana", "cherry"], "b": ["engine", "wheel", "brake"]}
    (tmp_path / "data").mkdir()
    for part in range(2):
        with gzip.open(tmp_path / "data" / f"part-{part}.jsonl.gz", "wt") as f:
            for label in rng.choice(["a", "b"], 40):
                f.write(json.dumps({"text": " ".join(rng.choice(words[label], 6)), "topic": label}) + "\n")
    (tmp_path / "new.jsonl").write_text(
        "".join(json.dumps({"body": " ".join(words[c]), "topic": c}) + "\n" for c in "abab")
    )
    job = (
        "ingest: {inputs: ['data/*.jsonl.gz'], out: train.zarr, test_size: 0.25, test_out: test.zarr, "
        "source_options: {label_field: topic}INGEST}\n"
        "ingest_test: {inputs: [new.jsonl], out: new.zarr, source_options: {text_field: TEXT}}\n"
        "train: {solver: stagewise, out: run, n_workers: 0}\n"
    )
    path = tmp_path / "p.yaml"

    def run(ingest="", text="body", **options):
        path.write_text(job.replace("INGEST", ingest).replace("TEXT", text))
        return run_pipeline(load_pipeline(str(path)), progress=False, say=lambda _: None, **options)

    first = run()
    stores = ("train.zarr", "test.zarr", "new.zarr")
    manifests = [(tmp_path / s / "manifest.json").read_bytes() for s in stores]
    again = run(", n_workers: 2", resume=True)  # the same store for any number of workers
    assert again.ingest is None and again.ingest_test is None
    X, _ = open_store(str(tmp_path / "test.zarr")).to_scipy()
    assert np.array_equal(again.model.decision_function(X), first.model.decision_function(X))

    for ingest, text, store, name, change in (
        (", hashing: {n_features: 1024}", "body", "train.zarr", "ingest", "hashing.n_features 262144 → 1024"),
        (", hashing: {ngram_range: [1, 2]}", "body", "train.zarr", "ingest", "hashing.ngram_range [1, 1] → [1, 2]"),
        (", hashing: {value: count}", "body", "train.zarr", "ingest", 'hashing.value "log1p" → "count"'),
        (", idf: false", "body", "train.zarr", "ingest", "idf default → false"),
        (", l2_normalize: false", "body", "train.zarr", "ingest", "l2_normalize default → false"),
        (", test_size: 0.3", "body", "train.zarr", "ingest", "test_size 0.25 → 0.3"),
        (", seed: 1", "body", "train.zarr", "ingest", "seed 0 → 1"),
        (", chunk_rows: 10", "body", "train.zarr", "ingest", "chunk_rows default → 10"),
        (", no_hash: true", "body", "train.zarr", "ingest", "hashing {"),
        ("", "text", "new.zarr", "ingest_test", 'source_options.text_field "body" → "text"'),
    ):
        with pytest.raises(ConfigError) as e:
            run(ingest, text, resume=True)
        message = str(e.value)
        assert message.startswith(
            f"{tmp_path / store}: --resume would keep this store, but the pipeline's {name} section changed "
            f"since it was ingested: {change}"
        ), message
        assert message.endswith("; run with --overwrite to ingest it again") and "\n" not in message
    path.write_text(job.replace("INGEST", "").replace("topic", "label").replace("TEXT", "body"))
    with pytest.raises(ConfigError, match=r'source_options.label_field "topic" → "label"'):
        run_pipeline(load_pipeline(str(path)), resume=True, progress=False, say=lambda _: None)
    assert [(tmp_path / s / "manifest.json").read_bytes() for s in stores] == manifests  # nothing replaced
    changed = run(", hashing: {n_features: 1024}", overwrite=True)  # the fix the error names
    assert open_store(str(tmp_path / "train.zarr")).n_features == 1024 and changed.ingest is not None


def test_resume_refuses_a_store_that_records_no_settings(pipeline, tmp_path):
    """A store ingested by a streamfit that recorded no settings cannot be checked: refused with the fix."""
    import json

    from streamfit.errors import ConfigError
    from streamfit.store.format import DIGEST_KEY, json_digest

    run_pipeline(load_pipeline(str(pipeline)), progress=False, say=lambda _: None)
    manifest = tmp_path / "train.zarr" / "manifest.json"
    record = json.loads(manifest.read_text())
    del record["source"]["settings"]
    record[DIGEST_KEY] = json_digest(record, DIGEST_KEY)
    manifest.write_text(json.dumps(record))
    with pytest.raises(
        ConfigError, match=r"train.zarr: --resume cannot tell .* run with --overwrite to ingest it again"
    ):
        run_pipeline(load_pipeline(str(pipeline)), resume=True, progress=False, say=lambda _: None)


def test_resume_refuses_a_checkpoint_of_another_solver_or_parameters(pipeline, tmp_path):
    """A train section edited between a run and its --resume: the checkpoint of the earlier
    solver or parameters is not continued under the new ones; the error names the change and the fix."""
    from streamfit.errors import CheckpointError

    run_pipeline(load_pipeline(str(pipeline)), progress=False, say=lambda _: None)
    text = pipeline.read_text()
    for edit, change in (("max_iter: 3", "max_iter 3 then, 4 now"), ("solver: bcd", "solver 'bcd' then, 'fbpd' now")):
        new = "max_iter: 4" if edit == "max_iter: 3" else "solver: fbpd"
        pipeline.write_text(text.replace(edit, new))
        with pytest.raises(CheckpointError, match=rf"different solver configuration: {change}; .* --overwrite"):
            run_pipeline(load_pipeline(str(pipeline)), resume=True, progress=False, say=lambda _: None)


@pytest.mark.parametrize(
    "section, written, message",
    [
        ("ingest_test: {inputs: [nothere.svm], out: test2.zarr}", "nothere.svm: no such file", None),
        ("predict: {source: 'new-*.svm', out: p.csv}", "new-\\*.svm: no file matches this pattern", None),
        ("predict: {source: digits.svm, out: p.txt}", "p.txt: the predict section's output must end in .csv", None),
        ("evaluate: {store: other.zarr}", "other.zarr: no such store directory \\(the evaluate section's store", None),
        (
            "train: {solver: bcd, out: run, valid: v.zarr}",
            "v.zarr: no such store directory \\(the train section's",
            None,
        ),
        ("predict: {source: digits.svm, out: p.csv, options: {text_fieldd: x}}", None, "predict.options': unknown"),
        ("predict: {source: digits.svm, out: p.csv, format: xlsx}", None, "predict.format': Input should be 'libsvm'"),
    ],
)
def test_a_later_sections_missing_input_or_bad_output_is_found_before_the_first_section(
    tmp_path, digits_svm, section, written, message
):
    """qa30: a local input of ingest_test or predict that is not there, a store that evaluate or
    train reads and no section writes, a predict output of another kind, a misspelled predict
    format option and an unknown predict format were found only when their section began: after the ingest (and the training
    run) had done their work. Now each stops the job before the first section, in one line, and
    nothing is written; a store an ingest section writes is not looked for."""
    from streamfit.errors import ConfigError

    path = tmp_path / "p.yaml"
    sections = {
        "ingest": "ingest: {inputs: [digits.svm], out: train.zarr, no_hash: true, test_size: 0.25, test_out: test.zarr}"
    }
    sections["train"] = "train: {solver: bcd, out: run, params: {max_iter: 3}}"
    sections[section.split(":")[0]] = section
    path.write_text("\n".join(sections.values()) + "\n")
    if message:  # found when the file is read
        with pytest.raises(ConfigError, match=f"^{path}: key '{message}"):
            load_pipeline(str(path))
        return
    with pytest.raises(StreamfitError, match=f"^{tmp_path}/{written}"):
        run_pipeline(load_pipeline(str(path)), progress=False, say=lambda _: None)
    assert sorted(os.listdir(tmp_path)) == ["digits.svm", "p.yaml"]


def test_a_store_an_ingest_section_writes_may_be_what_predict_and_evaluate_read(tmp_path, digits_svm):
    """The checks before the first section do not look for what the ingest sections will write:
    predict scoring the test store, evaluate naming it."""
    path = tmp_path / "p.yaml"
    path.write_text(
        "ingest: {inputs: [digits.svm], out: train.zarr, no_hash: true, test_size: 0.25, test_out: test.zarr}\n"
        "train: {solver: bcd, out: run, params: {max_iter: 3}, n_workers: 0, valid: test.zarr}\n"
        "evaluate: {store: test.zarr}\n"
        "predict: {source: test.zarr, out: p.csv}\n"
    )
    result = run_pipeline(load_pipeline(str(path)), progress=False, say=lambda _: None)
    assert result.predictions == result.evaluation["n_samples"] == open_store(str(tmp_path / "test.zarr")).n_rows


def test_resume_keeps_finished_stores_whose_inputs_are_gone(pipeline, tmp_path):
    """The check of the inputs before the first section leaves out an ingest section whose stores
    --resume keeps (they are compared by name, as before): a rerun after the raw file was
    removed continues; without --resume the missing input stops the job first, with the stores
    left as they are."""
    with pytest.raises(TimeLimitReached):
        run_pipeline(
            load_pipeline(str(pipeline)), {"time_limit": 1e-9, "n_workers": None}, progress=False, say=lambda _: None
        )
    (tmp_path / "digits.svm").unlink()
    result = run_pipeline(load_pipeline(str(pipeline)), resume=True, progress=False, say=lambda _: None)
    assert result.ingest is None and result.model.info["outer_iterations"] == 3
    with pytest.raises(StreamfitError, match=f"^{tmp_path / 'digits.svm'}: no such file"):
        run_pipeline(load_pipeline(str(pipeline)), overwrite=True, progress=False, say=lambda _: None)
    assert (tmp_path / "train.zarr").exists()
