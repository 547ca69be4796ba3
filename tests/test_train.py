"""streamfit.train: the run directory's lock, leftovers of failed starts, resume checks, params."""

import json
import logging
import os

import numpy as np
import pytest

from streamfit.checkpoint import CheckpointError
from streamfit.config import load_pipeline, load_train_config
from streamfit.errors import ConfigError, OutputError, StoreError, StreamfitError, TimeLimitReached
from streamfit.model import load_model
from streamfit.store import open_store
from streamfit.train import _lock_run_dir, train

PARAMS = {"generator": "sequential", "block_size": 32, "n_passes": 1}


def _train(store, out, **kw):
    return train(store, "stagewise", str(out), kw.pop("params", PARAMS), n_workers=0, progress=False, **kw)


@pytest.fixture
def digits_store(digits, write_store):
    X, y, classes = digits
    return write_store(X, y, classes)


def test_a_second_train_on_a_locked_run_directory_is_refused(digits_store, tmp_path):
    out = tmp_path / "run"
    out.mkdir()
    held = _lock_run_dir(str(out))  # what a running `streamfit train --out run` holds
    try:
        with pytest.raises(StreamfitError, match="another streamfit train is using this run directory"):
            _train(digits_store, out, resume=True)
        assert not (out / "checkpoints").exists()  # the refused run wrote nothing
    finally:
        os.close(held)
    _train(digits_store, out)  # released: the directory is usable again
    assert (out / "model").is_dir()


def test_state_left_by_a_start_that_failed_before_its_first_checkpoint_is_no_earlier_run(digits_store, tmp_path):
    out = tmp_path / "run"
    leftover = out / "checkpoints" / "state" / "scores" / "v000001"
    leftover.mkdir(parents=True)
    (leftover / "chunk-0.npy").write_bytes(b"partial")
    model = _train(digits_store, out)
    assert not (leftover / "chunk-0.npy").exists()
    assert (out / "checkpoints" / "LATEST").exists() and model.n_features == 64
    with pytest.raises(StreamfitError, match="holds checkpoints of an earlier run"):  # a real checkpoint is kept
        _train(digits_store, out)


def test_resume_with_overwrite_is_refused_as_the_cli_refuses_it_before_the_run_directory_is_made(
    digits_store, tmp_path
):
    out = tmp_path / "run"
    with pytest.raises(ConfigError, match=r"^--resume and --overwrite contradict each other: drop --overwrite"):
        _train(digits_store, out, resume=True, overwrite=True)
    assert not out.exists()


def test_resume_with_other_settings_names_what_differs(digits_store, tmp_path):
    out = tmp_path / "run"
    _train(digits_store, out)
    with pytest.raises(CheckpointError, match=r"n_passes 1 then, 2 now; .*repeat its --solver, -p options"):
        _train(digits_store, out, params={**PARAMS, "n_passes": 2}, resume=True)
    _train(digits_store, out, resume=True)  # the run's own settings resume


def test_a_misspelt_solver_parameter_is_named_with_the_file_before_any_step_runs(tmp_path):
    pipeline = tmp_path / "p.yaml"
    pipeline.write_text(
        "ingest: {inputs: [missing.svm], out: s.zarr}\ntrain: {solver: stagewise, out: run, params: {n_pases: 2}}\n"
    )
    with pytest.raises(ConfigError, match=r"p\.yaml: key 'train.params': .*n_pases.*did you mean n_passes\?"):
        load_pipeline(str(pipeline))
    config = tmp_path / "t.yaml"
    config.write_text("solver: bcd\nparams: {lam: abc}\n")
    with pytest.raises(ConfigError, match=r"t\.yaml: key 'params': solver 'bcd' parameters: lam"):
        load_train_config(str(config))


def test_a_store_of_one_class_is_refused_with_the_fix(digits, write_store, tmp_path):
    X, y, _ = digits
    store = write_store(X[y == 3], y[y == 3] * 0, ["3"])
    with pytest.raises(StreamfitError, match=r"holds one class \(3\); a classifier needs two or more"):
        _train(store, tmp_path / "run")
    assert not (tmp_path / "run").exists()


def test_an_empty_store_is_refused_with_the_fix(digits, write_store, tmp_path):
    """A store of 0 rows (possible through StoreWriter) failed with "map_reduce over no chunks"."""
    X, y, classes = digits
    store = write_store(X[:0], y[:0], classes)
    with pytest.raises(StreamfitError, match=r"holds no rows; ingest data"):
        _train(store, tmp_path / "run")
    assert not (tmp_path / "run").exists()


def test_an_empty_validation_store_is_refused_before_the_run(digits, digits_store, write_store, tmp_path):
    """It was refused only at the first validation, after the cluster start and the first step."""
    X, y, classes = digits
    empty = write_store(X[:0], y[:0], classes)
    with pytest.raises(StreamfitError, match=r"the --valid store holds no rows"):
        _train(digits_store, tmp_path / "run", valid=empty)
    assert not (tmp_path / "run").exists()


def test_a_store_the_solver_refuses_is_refused_before_the_cluster_starts_and_leaves_no_run(
    digits, write_store, tmp_path, monkeypatch
):
    import scipy.sparse as sp

    from streamfit.engine import Engine

    X, y, _ = digits
    labels = sp.csr_matrix((np.ones(len(y)), (np.arange(len(y)), y % 2)), shape=(len(y), 2))
    store = write_store(X, labels, ["even", "odd"])

    def no_cluster(self):
        raise AssertionError("the cluster started")

    monkeypatch.setattr(Engine, "start", no_cluster)
    with pytest.raises(ConfigError, match="fbpd solves the multiclass .* the store is multilabel"):
        train(store, "fbpd", str(tmp_path / "run"), {})  # the embedded cluster by default
    assert not (tmp_path / "run").exists()


def test_a_run_that_fails_before_its_first_checkpoint_removes_what_it_wrote(digits_store, tmp_path, monkeypatch):
    from streamfit.solvers.stagewise import StagewiseSolver

    def broken(self, ctx):
        raise RuntimeError("init failed")

    monkeypatch.setattr(StagewiseSolver, "init", broken)
    with pytest.raises(RuntimeError, match="init failed"):
        _train(digits_store, tmp_path / "new")
    assert not (tmp_path / "new").exists()
    mine = tmp_path / "mine"  # a directory the user made: kept, with what was there before
    mine.mkdir()
    (mine / "notes.txt").write_text("keep")
    with pytest.raises(RuntimeError, match="init failed"):
        _train(digits_store, mine)
    assert sorted(p.name for p in mine.iterdir()) == ["notes.txt"]


def _flip_a_byte(path):
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))


def test_an_error_met_after_the_step_0_checkpoint_leaves_no_run(digits, write_store, tmp_path):
    """qa26/qa27: a damaged chunk of the --valid store is first read by step 1, after init's
    step-0 checkpoint; the run failed with one line but left checkpoints/LATEST, so the same
    command after a re-ingest asked for --resume or --overwrite. An error removes a step-0
    checkpoint; a stop at the time limit (resumable by design) and an earlier run's are kept."""
    from pathlib import Path

    X, y, classes = digits
    store = write_store(X[:1200], y[:1200], classes)
    valid = write_store(X[1200:], y[1200:], classes, chunk_rows=200)
    _flip_a_byte(Path(valid) / "chunks" / "000002" / "indices" / "c" / "0")
    solver, params = "stagewise", PARAMS  # it validates at step 1 (valid_every=1), before any later save
    out = tmp_path / "run"
    with pytest.raises(StoreError, match=r"chunk 2 .* is damaged"):
        train(store, solver, str(out), params, n_workers=0, progress=False, valid=valid, valid_every=1)
    assert not out.exists()
    with pytest.raises(TimeLimitReached):  # stopped at init's checkpoint: kept for --resume
        train(store, solver, str(out), params, n_workers=0, progress=False, time_limit=1e-9)
    assert json.loads((out / "checkpoints" / "LATEST").read_text())["step"] == 0
    with pytest.raises(StreamfitError, match="holds checkpoints of an earlier run"):  # not this call's: kept
        train(store, solver, str(out), params, n_workers=0, progress=False, valid=valid, valid_every=1)
    with pytest.raises(StoreError):  # the resume's error after step 0: the earlier run's checkpoint stays
        train(store, solver, str(out), params, n_workers=0, progress=False, valid=valid, valid_every=1, resume=True)
    assert json.loads((out / "checkpoints" / "LATEST").read_text())["step"] == 0
    # the error of a write (disk full) names --resume: its step-0 checkpoint stays for it
    from streamfit.solvers.stagewise import StagewiseSolver

    def disk_full(self, ctx, state):
        raise OutputError("run: cannot write (No space left on device); … with --resume")

    other = tmp_path / "other"
    with pytest.MonkeyPatch.context() as m:
        m.setattr(StagewiseSolver, "step", disk_full)
        with pytest.raises(OutputError):
            train(store, solver, str(other), params, n_workers=0, progress=False)
    assert json.loads((other / "checkpoints" / "LATEST").read_text())["step"] == 0


def test_a_store_being_trained_on_cannot_be_overwritten_meanwhile(digits_store, tmp_path, monkeypatch):
    """qa27: `ingest --overwrite` of the store a train reads (a retried job) replaced it under
    the train, which failed at its next read. The train holds the store's read lock (a shared
    flock) from its start to its end: the overwrite is refused with one line, the train finishes."""
    from streamfit.solvers.stagewise import StagewiseSolver
    from streamfit.store import StoreWriter

    step = StagewiseSolver.step
    refused = []

    def step_then_overwrite(self, ctx, state):
        if not refused:
            with pytest.raises(StoreError, match="in use by another streamfit process right now") as e:
                StoreWriter(digits_store, overwrite=True)
            refused.append(e.value)
        return step(self, ctx, state)

    monkeypatch.setattr(StagewiseSolver, "step", step_then_overwrite)
    model = _train(digits_store, tmp_path / "run")
    assert refused and model.n_features == 64
    StoreWriter(digits_store, overwrite=True).abort()  # released at the end of the train


def test_the_dashboard_url_is_logged_at_the_start(digits_store, tmp_path, monkeypatch, caplog):
    from streamfit.engine import Engine

    monkeypatch.setattr(Engine, "dashboard_link", "http://127.0.0.1:8787/status")
    with caplog.at_level("INFO", logger="streamfit.train"):
        _train(digits_store, tmp_path / "run")
    assert "Dask dashboard: http://127.0.0.1:8787/status" in caplog.messages


def test_the_end_of_a_run_logs_its_last_metrics(digits_store, tmp_path, caplog):
    with caplog.at_level("INFO", logger="streamfit.train"):
        _train(digits_store, tmp_path / "run")
    line = next(r.getMessage() for r in caplog.records if r.getMessage().startswith("finished at step"))
    accuracy = float(line.split("train_accuracy ")[1].split(",")[0])
    assert 0.5 < accuracy <= 1.0 and "objective" in line


def test_a_run_resumed_after_a_time_limit_ends_with_the_same_model_bytes_and_one_clock(digits_store, tmp_path, caplog):
    params = {"generator": "rff", "n_components": 256, "block_size": 32, "n_passes": 2}
    whole = _train(digits_store, tmp_path / "whole", params=params)
    with pytest.raises(TimeLimitReached):
        _train(digits_store, tmp_path / "cut", params=params, time_limit=1e-9)  # stops at init's checkpoint (step 0)
    with pytest.raises(TimeLimitReached):  # a second session: one step, then it stops at that step's checkpoint
        _train(digits_store, tmp_path / "cut", params=params, resume=True, time_limit=1e-9)
    with caplog.at_level("INFO", logger="streamfit.train"):
        resumed = _train(digits_store, tmp_path / "cut", params=params, resume=True)
    assert any(r.getMessage().startswith("resuming from the checkpoint of step 1") for r in caplog.records)
    assert np.array_equal(whole.weights, resumed.weights)
    model_bytes = [(tmp_path / run / "model" / "arrays.npz").read_bytes() for run in ("whole", "cut")]
    assert model_bytes[0] == model_bytes[1]
    with open(tmp_path / "cut" / "metrics.jsonl") as f:
        clock = [json.loads(line)["wall_time"] for line in f]
    assert len(clock) == 16 and clock == sorted(clock)  # the resumed session goes on from step 1's time
    with open(tmp_path / "cut" / "run.json") as f:
        run = json.load(f)
    # seconds: the run's clock across sessions; session_seconds: this session's wall time, which
    # covers its steps after the resumed step 1 (and its start-up, which the run's clock does not)
    assert run["seconds"] >= clock[-1] and run["session_seconds"] >= clock[-1] - clock[1] - 1e-3


@pytest.mark.parametrize(
    ("solver", "available", "refused"),
    [
        ("bcd", 64 * 10 * 8, False),  # dense float64 weights: 64 features × 10 classes × 8 bytes fit exactly
        ("bcd", 64 * 10 * 8 - 1, True),
        ("fbpd", 64 * 10 * 8 - 1, True),
        ("stagewise", 64 * 8, False),  # no dense weights: 8 bytes per feature
        ("stagewise", 64 * 8 - 1, True),
        ("ppdsparse", 64 * 8 - 1, True),
    ],
)
def test_per_feature_arrays_beyond_the_memory_available_are_refused_at_the_start(
    digits_store, tmp_path, monkeypatch, solver, available, refused
):
    import psutil

    import streamfit.train as train_module

    monkeypatch.setattr(psutil, "virtual_memory", lambda: type("Memory", (), {"available": available})())
    if not refused:
        train_module._check_feature_memory(open_store(digits_store), solver)
        return
    what = "10 classes of dense float64 weights" if solver in ("bcd", "fbpd") else "its per-feature arrays"
    with pytest.raises(StreamfitError, match=rf"{solver} needs at least .* GiB for {what} over 64 features.*--no-hash"):
        train(digits_store, solver, str(tmp_path / "run"), {}, n_workers=0, progress=False)
    assert not (tmp_path / "run" / "checkpoints" / "LATEST").exists()


def test_a_hashed_store_s_refusal_names_a_smaller_width_and_sparse_weights(tmp_path, monkeypatch):
    """qa33 (20 000 classes of text, hashed to 2^18 features: 39 GiB of dense weights): the advice
    was to drop --no-hash, which that store was not ingested with; now a smaller --n-features and
    ppdsparse, whose weights are sparse (it trained that store in 0.3 GiB)."""
    import psutil

    from streamfit.ingest.hashing import HashingConfig
    from streamfit.ingest.pipeline import IngestOptions, ingest

    data = tmp_path / "d.csv"
    data.write_text("label,text\n" + "".join(f"c{i % 3},word{i} other{i % 5}\n" for i in range(30)))
    ingest(
        IngestOptions([str(data)], str(tmp_path / "s.zarr"), hashing=HashingConfig(n_features=2**10), progress=False)
    )
    # bcd's dense weights, 2^10 features × 3 classes × 8 bytes (24 KiB), beyond 16 KiB
    monkeypatch.setattr(psutil, "virtual_memory", lambda: type("Memory", (), {"available": 2**14})())
    with pytest.raises(StreamfitError) as raised:
        train(str(tmp_path / "s.zarr"), "bcd", str(tmp_path / "run"), {}, n_workers=0, progress=False)
    assert str(raised.value).endswith(
        "for 3 classes of dense float64 weights over 1024 features, more than the 1.53e-05 GiB available: "
        "re-ingest with a smaller --n-features, or train with --solver ppdsparse, whose weights are sparse"
    )


def _row_state_bytes(store_path, count: int, *, every_row: bool = False) -> int:
    """What the per-row state check refuses above, from the store's manifest: `count` float64
    arrays of a chunk's rows × classes (`every_row`: of all the rows, bcd's memory mode) plus the
    other chunks' arrays that the process keeps for its next read (these small ones all fit)."""
    store = open_store(store_path)
    chunk = 8 * min(store.n_rows, store.manifest.chunk_rows) * store.n_classes
    if every_row:  # no state in the run directory, so none kept of it either
        return 8 * store.n_rows * store.n_classes * count
    return chunk * count + (store.n_chunks - 1) * chunk


def _check(store_path, solver: str, params: dict | None = None) -> None:
    import streamfit.train as train_module
    from streamfit.solvers import get_solver

    fitter = get_solver(solver)
    train_module._check_row_state_memory(open_store(store_path), fitter(fitter.Params(**(params or {}))))


@pytest.mark.parametrize(
    ("solver", "count", "every_row"),
    [("stagewise", 2, False), ("bcd", 2, True), ("fbpd", 3, False), ("multiboost", 2, False)],
)
def test_per_row_state_beyond_the_memory_available_is_refused_at_the_start(
    digits_store, tmp_path, monkeypatch, caplog, solver, count, every_row
):
    import streamfit.train as train_module

    need = _row_state_bytes(digits_store, count, every_row=every_row)
    monkeypatch.setattr(train_module, "available_memory", lambda: need - 1)
    for n_workers in (0, 1):  # in process and on the embedded cluster: refused before either starts
        refused = rf"{solver} needs at least .* GiB of per-row state.*--solver ppdsparse"
        with pytest.raises(StreamfitError, match=refused):
            train(digits_store, solver, str(tmp_path / f"run{n_workers}"), {}, n_workers=n_workers, progress=False)
        assert not (tmp_path / f"run{n_workers}" / "checkpoints" / "LATEST").exists()
    caplog.set_level(logging.WARNING, logger="streamfit.train")
    store = open_store(digits_store)  # the warning's estimate adds the weights (two arrays of stagewise's, bcd's
    gradients = store.n_chunks.bit_length() + 1  # stagewise's column gradients summed along the tree
    weights = {"stagewise": 2 + gradients, "bcd": 1, "fbpd": 14, "multiboost": 0}[solver]  # and fbpd's 14 driver ones)
    estimate = need + 8 * min(store.n_features, store.manifest.nnz) * store.n_classes * weights
    monkeypatch.setattr(train_module, "available_memory", lambda: need)  # fits exactly: only the warning
    _check(digits_store, solver)
    share = "more than the" if estimate > need else "more than half of the"  # the estimate beyond all of it
    assert f"{share} {need / 2**30:.3g} GiB available" in caplog.text
    caplog.clear()
    monkeypatch.setattr(train_module, "available_memory", lambda: 2 * estimate - 1)
    _check(digits_store, solver)
    assert f"needs about {estimate / 2**30:.3g} GiB of per-row state" in caplog.text
    assert "more than half of the" in caplog.text
    caplog.clear()
    monkeypatch.setattr(train_module, "available_memory", lambda: 2 * estimate)  # half of it: no warning either
    _check(digits_store, solver)
    assert "per-row state" not in caplog.text


def test_bcd_s_chunks_mode_counts_a_chunk_s_rows_and_stagewise_warns_with_its_weights(
    digits_store, monkeypatch, caplog
):
    """bcd's chunks mode holds a chunk's scores, not every row's; stagewise's estimate adds its
    arrays of the columns × classes (summed weights, a pass of stages, the column gradients summed
    along the tree), which warn but do not refuse: min(n_features, nnz) columns may be more than
    it uses."""
    import streamfit.train as train_module

    chunk_need = _row_state_bytes(digits_store, 2)
    monkeypatch.setattr(train_module, "available_memory", lambda: chunk_need)
    _check(digits_store, "bcd", {"mode": "chunks"})  # memory mode would need every row's: refused
    with pytest.raises(StreamfitError, match="bcd needs at least"):
        _check(digits_store, "bcd", {"mode": "memory"})
    store = open_store(digits_store)
    arrays = 2 + store.n_chunks.bit_length() + 1  # V, a pass of stages, the column gradients summed along the tree
    estimate = (
        _row_state_bytes(digits_store, 2) + 8 * arrays * min(store.n_features, store.manifest.nnz) * store.n_classes
    )
    caplog.set_level(logging.WARNING, logger="streamfit.train")
    monkeypatch.setattr(train_module, "available_memory", lambda: 2 * estimate - 1)
    _check(digits_store, "stagewise")
    assert "with its weights over 64 columns × 10 classes" in caplog.text
    caplog.clear()
    monkeypatch.setattr(train_module, "available_memory", lambda: 2 * estimate)
    _check(digits_store, "stagewise")
    assert "per-row state" not in caplog.text


def test_ppdsparse_and_a_scheduler_s_run_are_not_refused_for_per_row_state(digits_store, tmp_path, monkeypatch):
    import streamfit.engine as engine_module
    import streamfit.train as train_module

    monkeypatch.setattr(train_module, "available_memory", lambda: _row_state_bytes(digits_store, 1) - 1)
    _check(digits_store, "ppdsparse")  # per class only: not counted

    def started(self):
        raise _ClusterStarted(self.mode)

    monkeypatch.setattr(engine_module.Engine, "start", started)
    # the workers of --scheduler are on other machines: the run goes on to its cluster
    with pytest.raises(_ClusterStarted):
        train(digits_store, "stagewise", str(tmp_path / "run"), PARAMS, scheduler="tcp://127.0.0.1:1", progress=False)


def test_train_without_n_workers_runs_a_small_store_in_process_with_one_blas_thread(digits_store, tmp_path):
    from threadpoolctl import threadpool_info

    from streamfit.train import _single_threaded_blas

    model = train(digits_store, "stagewise", str(tmp_path / "auto"), PARAMS, progress=False)
    with open(tmp_path / "auto" / "run.json") as f:
        assert json.load(f)["engine"] == "inprocess"
    ref = _train(digits_store, tmp_path / "zero")
    assert np.array_equal(model.coef_, ref.coef_)
    with _single_threaded_blas(True):  # as in a Dask worker: the same bits as a cluster's model
        assert {lib["num_threads"] for lib in threadpool_info() if lib["user_api"] == "blas"} == {1}


class _ClusterStarted(Exception):
    pass


def _no_cluster(monkeypatch, cores=2):
    """Above the small-store threshold on a machine of `cores` cores, with Engine.start raising
    _ClusterStarted: a run under `auto` that would start a cluster stops there."""
    import streamfit.engine as engine_module

    def started(self):
        if self.mode != "inprocess":
            raise _ClusterStarted(self.mode)

    monkeypatch.setattr(engine_module, "AUTO_INPROCESS_WORK", 0)
    monkeypatch.setattr(engine_module.os, "cpu_count", lambda: cores)
    monkeypatch.setattr(engine_module.Engine, "start", started)


BCD_MEMORY = {"mode": "memory", "max_iter": 3}


def test_bcd_memory_mode_above_the_threshold_runs_in_process_and_chunks_mode_starts_the_cluster(
    digits_store, tmp_path, monkeypatch
):
    _no_cluster(monkeypatch, cores=3)  # on 2 cores chunks mode runs in process too (engine.auto_choice)
    train(digits_store, "bcd", str(tmp_path / "memory"), BCD_MEMORY, progress=False)
    with open(tmp_path / "memory" / "run.json") as f:
        assert json.load(f)["engine"] == "inprocess"
    with pytest.raises(_ClusterStarted, match="local"):
        train(digits_store, "bcd", str(tmp_path / "chunks"), {"mode": "chunks", "max_iter": 1}, progress=False)
    with pytest.raises(_ClusterStarted, match="local"):  # auto: chunks when X and S exceed the budget
        train(digits_store, "bcd", str(tmp_path / "budget"), {"memory_budget_mb": 1e-3, "max_iter": 1}, progress=False)
    _no_cluster(monkeypatch, cores=2)
    train(digits_store, "bcd", str(tmp_path / "two"), {"mode": "chunks", "max_iter": 1}, progress=False)
    with open(tmp_path / "two" / "run.json") as f:
        assert json.load(f)["engine"] == "inprocess"


@pytest.mark.slow
def test_bcd_memory_mode_in_process_gives_the_model_of_a_cluster_run_bitwise(digits_store, tmp_path, monkeypatch):
    import streamfit.engine as engine_module

    monkeypatch.setattr(engine_module, "AUTO_INPROCESS_WORK", 0)
    auto = train(digits_store, "bcd", str(tmp_path / "auto"), BCD_MEMORY, progress=False)
    cluster = train(digits_store, "bcd", str(tmp_path / "cluster"), BCD_MEMORY, n_workers=1, progress=False)
    with open(tmp_path / "cluster" / "run.json") as f:
        assert json.load(f)["engine"] == "local"
    assert np.array_equal(auto.coef_, cluster.coef_) and np.array_equal(auto.intercept_, cluster.intercept_)
    assert np.abs(auto.coef_).max() > 0


def test_a_model_without_a_non_zero_weight_is_warned_of(digits_store, tmp_path, caplog):
    """A penalty so strong that every weight is 0 (here ppdsparse's ℓ1 weight 10 000× its default):
    the model predicts from its intercepts alone, one class for every row; the run says so."""
    with caplog.at_level("WARNING", logger="streamfit.train"):
        empty = train(
            digits_store, "ppdsparse", str(tmp_path / "empty"), {"lam_scale": 10.0}, n_workers=0, progress=False
        )
    assert empty.nonzero_weights() == 0
    assert any("every weight of the model is 0" in m for m in caplog.messages)
    caplog.clear()
    with caplog.at_level("WARNING", logger="streamfit.train"):
        fitted = train(digits_store, "ppdsparse", str(tmp_path / "fitted"), {}, n_workers=0, progress=False)
    assert fitted.nonzero_weights() > 0 and not any("every weight" in m for m in caplog.messages)


def test_a_declared_class_without_training_rows_is_recorded_and_never_predicted(digits, write_store, tmp_path):
    """A store whose classes name one that no row holds (ingest --classes, an ARFF header):
    the driver reads each class's rows from the store's manifest (class_rows), and the model
    records the class, so predict and evaluate never give it (Model.ranking_scores)."""
    from streamfit.metrics import evaluate

    X, y, classes = digits
    store = write_store(X, y, classes + ["spare"], chunk_rows=400)
    model = _train(store, tmp_path / "run")
    assert model.classes_without_rows == ["spare"]
    loaded = load_model(str(tmp_path / "run"))
    assert loaded.classes_without_rows == ["spare"]
    assert "spare" not in loaded.predict(X)
    assert evaluate(loaded, open_store(store))["accuracy"] == (loaded.predict(X) == np.array(classes)[y]).mean()


def test_a_store_of_one_chunk_trains_in_process_under_auto(digits, write_store, tmp_path, monkeypatch, caplog):
    """Above the small-store threshold, a store of one chunk still trains in this process under
    `auto`: each pass is one task, which a cluster's workers cannot share (qa29: 20 Newsgroups,
    11 314 rows in one chunk, 3–8× slower on two workers). Four chunks: stagewise's light stages
    (1797 rows × 10 classes) stay in this process too, with both predictions in the log line; the
    cluster starts where it is predicted faster (here: a cluster that costs nothing, on 4 cores)."""
    import streamfit.engine as engine_module

    X, y, classes = digits
    one, four = write_store(X, y, classes, chunk_rows=2000), write_store(X, y, classes)
    _no_cluster(monkeypatch)
    with caplog.at_level("INFO", logger="streamfit.train"):
        train(one, "stagewise", str(tmp_path / "one"), PARAMS, progress=False)
        train(four, "stagewise", str(tmp_path / "four"), PARAMS, progress=False)
    assert "running in this process (a store of one chunk)" in caplog.text
    assert "running in this process (3 stages of ~0.021 s each, ~0 s predicted; a 2-worker cluster would take ~5 s" in (
        caplog.text
    )
    for run in ("one", "four"):
        with open(tmp_path / run / "run.json") as f:
            assert json.load(f)["engine"] == "inprocess"
    monkeypatch.setattr(engine_module, "CLUSTER_START_S", 0.0)
    monkeypatch.setattr(engine_module, "CLUSTER_ROUND_S", 0.0)
    monkeypatch.setattr(engine_module.os, "cpu_count", lambda: 4)  # on 2 cores no cluster is predicted faster
    with pytest.raises(_ClusterStarted, match="local"):
        train(four, "stagewise", str(tmp_path / "free"), PARAMS, progress=False)


@pytest.mark.parametrize("backend", ["zarr", "parquet"])
def test_a_version_3_store_trains_to_the_model_of_the_same_rows_written_today(write_store, tmp_path, backend):
    """tests/data/store-v3 (written before the manifest recorded class_rows) and a store of the
    same rows written now: the same chunks (fingerprint), and bitwise the same model, its
    declared class without rows recorded either way (counted from the chunks, or read)."""
    from sklearn.datasets import load_svmlight_file

    data = os.path.join(os.path.dirname(__file__), "data")
    X, y = load_svmlight_file(os.path.join(data, "dna400.libsvm"), dtype=np.float32)
    old = os.path.join(data, "store-v3", f"dna400.{backend}")
    new = write_store(X, (y - 1).astype(np.int32), ["1", "2", "3", "spare"], chunk_rows=128, backend=backend)
    assert open_store(old).manifest.fingerprint == open_store(new).manifest.fingerprint
    a, b = (_train(store, tmp_path / f"run{i}") for i, store in enumerate((old, new)))
    assert a.classes_without_rows == b.classes_without_rows == ["spare"]
    assert np.array_equal(a.coef_, b.coef_) and np.array_equal(a.intercept_, b.intercept_)
    assert np.abs(a.coef_).max() > 0
