"""The solver driver: one loop for every solver (checkpoints, pause, resume, time limit, schema)."""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import signal
from typing import NamedTuple

import numpy as np
import pytest
import scipy.sparse as sp

from streamfit.checkpoint import Checkpointer, _record_digest
from streamfit.engine import Engine
from streamfit.errors import CheckpointError, Terminated, TimeLimitReached
from streamfit.model import LinearModel
from streamfit.runlog import MetricsLog
from streamfit.solvers.base import Context, PerSample, Solver, SolverParams, SolverState
from streamfit.store import InMemoryStore


class HalvingParams(SolverParams):
    max_iter: int = 6
    tol: float = 0.0


class HalvingSums(NamedTuple):
    XtR: np.ndarray
    loss: float


def _halving_task(source, chunk_id, chunk_state, version):
    """Reads residual version t of the chunk (t = 0: the one-hot labels), writes R/2 as t + 1."""
    chunk = source.read_chunk(chunk_id)
    R = np.eye(source.n_classes)[chunk.labels] if version == 0 else chunk_state.read("residual", version, chunk_id)
    chunk_state.write("residual", version + 1, chunk_id, R / 2)
    return HalvingSums(np.asarray(chunk.X.T @ R), float((R * R).sum()))


@dataclasses.dataclass(kw_only=True)
class HalvingState(SolverState):
    W: np.ndarray
    steps_taken: list[np.ndarray] = dataclasses.field(default_factory=list)
    residual: PerSample | None = None
    loss: float = 0.0
    sums: tuple = (0.0, 0.0)


class HalvingSolver(Solver[HalvingState]):
    """A toy method with every kind of state field: W += XᵀR/n with a per-sample R halved each
    step; 'converges' when the loss falls below tol."""

    name = "halving"
    Params = HalvingParams
    State = HalvingState
    params: HalvingParams

    def __init__(self, params, fail_at: int | None = None):
        super().__init__(params)
        self.fail_at = fail_at

    def init(self, ctx: Context) -> HalvingState:
        return HalvingState(
            W=np.zeros((ctx.source.n_features, ctx.source.n_classes)), residual=PerSample("residual", 0, written=False)
        )

    def step(self, ctx: Context, state: HalvingState) -> dict:
        if state.step + 1 == self.fail_at:
            raise KeyboardInterrupt("killed")
        sums = ctx.engine.map_reduce(
            _halving_task, ctx.source, range(ctx.source.n_chunks), chunk_state=ctx.chunk_state, version=state.step
        )
        state.W = state.W + sums.XtR / ctx.source.n_rows
        state.steps_taken.append(np.array([state.step, sums.loss]))
        state.step += 1
        state.residual = PerSample("residual", state.step)
        state.loss = sums.loss / ctx.source.n_rows
        state.sums = (state.sums[0] + state.loss, float(state.step))
        return {"objective": state.loss}

    def finished(self, state: HalvingState) -> bool:
        return state.step >= self.params.max_iter or self.converged(state)

    def converged(self, state: HalvingState) -> bool:
        return state.step > 0 and state.loss < self.params.tol

    def to_model(self, ctx: Context, state: HalvingState) -> LinearModel:
        return LinearModel(
            state.W.T,
            None,
            classes=ctx.source.classes,
            n_features=ctx.source.n_features,
            info={"steps": state.step, "sums": list(state.sums), "n_taken": len(state.steps_taken)},
        )


@pytest.fixture
def source():
    rng = np.random.default_rng(0)
    X = sp.random(60, 7, density=0.5, random_state=1, format="csr")
    return InMemoryStore(X, rng.integers(0, 3, 60).astype(np.int32), ["a", "b", "c"], chunk_rows=25)


def fit(source, run_dir, solver=None, *, time_limit=None, **kw):
    solver = solver or HalvingSolver(HalvingParams())
    ckpt = Checkpointer(run_dir, config={"solver": "halving"}, store_fingerprint="in-memory", time_limit=time_limit)
    log = MetricsLog(os.path.join(run_dir, "metrics.jsonl") if run_dir else None)
    with Engine(mode="inprocess") as engine:
        return solver.fit(source, engine=engine, checkpointer=ckpt, log=log, **kw), log


def records(log):
    return [{k: v for k, v in r.items() if k != "wall_time"} for r in log.records]


def same_model(a, b):
    np.testing.assert_array_equal(a.coef_, b.coef_)
    assert a.info == b.info


@pytest.mark.parametrize("on_disk", [False, True])
def test_pause_and_resume_end_at_the_uninterrupted_model(source, tmp_path, on_disk):
    full, full_log = fit(source, None)
    assert full.info["steps"] == 6 and full.info["n_taken"] == 6
    run = str(tmp_path / "run") if on_disk else None
    solver = HalvingSolver(HalvingParams())
    ckpt = Checkpointer(run, config={"solver": "halving"}, store_fingerprint="in-memory")
    logged = []
    with Engine(mode="inprocess") as engine:
        for resume in (False, True, True):
            log = MetricsLog(None)
            model = solver.fit(source, engine=engine, checkpointer=ckpt, log=log, resume=resume, stop_after=2)
            logged += records(log)
            assert model.info["steps"] == len(logged)
    same_model(model, full)
    assert logged == records(full_log)


def _latest(run: str) -> int:
    with open(os.path.join(run, "checkpoints", "LATEST")) as f:
        return json.load(f)["step"]


@pytest.mark.parametrize(
    "every, interval, latest",
    [
        (2, 0, 4),  # steps 1-5 ran; the checkpoints are at 0, 2 and 4
        (1, 3600.0, 0),  # no due step waited an hour: only init's checkpoint
        (1, "auto", None),  # the default: where the saves fall depends on their durations
    ],
)
def test_a_kill_between_checkpoints_resumes_from_the_last_one(source, tmp_path, every, interval, latest):
    full, full_log = fit(source, None)
    run = str(tmp_path / "run")
    policy = dict(checkpoint_every=every, checkpoint_interval=interval)
    with pytest.raises(KeyboardInterrupt):
        fit(source, run, HalvingSolver(HalvingParams(), fail_at=6), **policy)
    assert _latest(run) == latest if latest is not None else 0 <= _latest(run) <= 5
    resumed, _ = fit(source, run, resume=True, **policy)
    same_model(resumed, full)
    with open(os.path.join(run, "metrics.jsonl")) as f:  # step 5's line, logged before the kill, is not repeated
        assert [{k: v for k, v in json.loads(line).items() if k != "wall_time"} for line in f] == records(full_log)


class SigtermAt(HalvingSolver):
    """HalvingSolver that sends its process SIGTERM at the end of step `at`."""

    def __init__(self, params, at: int):
        super().__init__(params)
        self.at = at

    def step(self, ctx: Context, state: HalvingState) -> dict:
        fields = super().step(ctx, state)
        if state.step == self.at:
            os.kill(os.getpid(), signal.SIGTERM)
        return fields


@pytest.mark.parametrize("interval", [0, 3600.0])  # 3600: the step before the stop is saved by the stop
def test_sigterm_stops_after_saving_the_last_step_and_resume_ends_at_the_same_model(
    source, tmp_path, sigterm_guard, interval
):
    """A SIGTERM during step 3 (streamfit.shutdown's guard installed, as the CLI does): the driver
    takes no step 4; it saves step 3 (if the schedule had not) and raises Terminated naming the
    checkpoint. The resumed run ends at the uninterrupted model with its metrics lines."""
    full, full_log = fit(source, None)
    run = str(tmp_path / "run")
    with pytest.raises(Terminated, match="checkpoint of step 3 saved; the same command plus --resume continues"):
        fit(source, run, SigtermAt(HalvingParams(), at=3), checkpoint_interval=interval)
    assert _latest(run) == 3
    sigterm_guard.disarm()
    resumed, _ = fit(source, run, resume=True, checkpoint_interval=interval)
    same_model(resumed, full)
    with open(os.path.join(run, "metrics.jsonl")) as f:
        assert [{k: v for k, v in json.loads(line).items() if k != "wall_time"} for line in f] == records(full_log)


def test_sigterm_then_resume_of_fbpd_on_digits_ends_at_the_uninterrupted_model(
    digits, tmp_path, sigterm_guard, monkeypatch
):
    """The same with a real solver: fbpd on the digits, SIGTERM while step 4 is logged; the
    resumed run's model equals the uninterrupted run's, bitwise."""
    from fitting import fit_solver

    source = InMemoryStore(*digits, chunk_rows=600)
    params = {"max_iter": 8, "tol": 0.0, "gap_tol": 0.0}
    full, _ = fit_solver("fbpd", source, **params)
    log = MetricsLog.log

    def signalled(self, step, *args, **kw):
        if step == 4:
            os.kill(os.getpid(), signal.SIGTERM)
        return log(self, step, *args, **kw)

    monkeypatch.setattr(MetricsLog, "log", signalled)
    run = str(tmp_path / "run")
    with pytest.raises(Terminated, match="checkpoint of step 4 saved"):
        fit_solver("fbpd", source, run, **params)
    monkeypatch.undo()
    sigterm_guard.disarm()
    resumed, _ = fit_solver("fbpd", source, run, resume=True, **params)
    ref, got = full._arrays(), resumed._arrays()
    assert ref.keys() == got.keys()
    for key in ref:
        np.testing.assert_array_equal(got[key], ref[key], err_msg=key)


@pytest.mark.parametrize("where", ["between steps", "in a save, before its commit"])
def test_a_kill_then_a_power_loss_of_the_unsynced_state_resumes_to_the_same_model(source, tmp_path, monkeypatch, where):
    """State files are written without fsync and synced by the save that counts them. A run
    killed in step 6 (checkpoints at 0, 2 and 4; step 5's residual written), or inside the save
    of step 4 after its state was synced but before its commit, then a power loss that empties
    every state file no fsync reached: the resume (through the same checkpointer, as a paused
    run's) gives the uninterrupted model."""
    from streamfit import storage

    full, _ = fit(source, None)
    run = str(tmp_path / "run")
    synced = set()
    fsync_path = storage.fsync_path
    monkeypatch.setattr(storage, "fsync_path", lambda p: (synced.add(p), fsync_path(p)))
    if where == "in a save, before its commit":
        commit = storage.Attempt.commit

        def killed_at_step_4(attempt):
            if attempt.target.name == "step-000004":
                raise KeyboardInterrupt("killed")
            commit(attempt)

        monkeypatch.setattr(storage.Attempt, "commit", killed_at_step_4)
    ckpt = Checkpointer(run, config={"solver": "halving"}, store_fingerprint="in-memory")
    policy = dict(checkpoint_every=2, checkpoint_interval=0)
    with Engine(mode="inprocess") as engine:
        with pytest.raises(KeyboardInterrupt):
            HalvingSolver(HalvingParams(), fail_at=6).fit(
                source, engine=engine, checkpointer=ckpt, log=MetricsLog(None), **policy
            )
        assert _latest(run) == (4 if where == "between steps" else 2)
        state = os.path.join(run, "checkpoints", "state")
        files = [os.path.join(d, f) for d, _, fs in os.walk(state) for f in fs]
        lost = [f for f in files if f not in synced]
        assert lost and len(lost) < len(files)
        for f in lost:
            open(f, "wb").close()
        monkeypatch.undo()
        resumed = HalvingSolver(HalvingParams()).fit(
            source, engine=engine, checkpointer=ckpt, log=MetricsLog(None), resume=True, **policy
        )
    same_model(resumed, full)


def test_metrics_lines_are_synced_by_the_save_that_counts_their_steps(source, tmp_path, monkeypatch):
    """metrics.jsonl's lines are appended without an fsync each; every checkpoint save first
    makes the lines so far durable (so a resume after a power loss finds the lines of the steps
    its checkpoint holds), and the end of the run syncs the rest. A run of 6 steps saved at
    0, 2, 4 and 6 (checkpoint_every=2, interval 0): each step's line is on disk (read back by
    a fsync_path of the file, recorded) once its step, or a later one, is saved."""
    from streamfit import storage

    run = str(tmp_path / "run")
    path = str(tmp_path / "metrics.jsonl")
    lines_at_sync: list[int] = []  # the file's lines at each fsync of it
    fsync_path = storage.fsync_path

    def recorded(p):
        if p == path:
            with open(path) as f:
                lines_at_sync.append(len(f.readlines()))
        fsync_path(p)

    monkeypatch.setattr(storage, "fsync_path", recorded)
    saved_after: list[int] = []  # the metrics syncs counted when each checkpoint commits
    commit = storage.Attempt.commit

    def counted(attempt):
        saved_after.append(len(lines_at_sync))
        commit(attempt)

    monkeypatch.setattr(storage.Attempt, "commit", counted)
    ckpt = Checkpointer(run, config={"solver": "halving"}, store_fingerprint="in-memory")
    with Engine(mode="inprocess") as engine:
        HalvingSolver(HalvingParams(max_iter=6)).fit(
            source, engine=engine, checkpointer=ckpt, log=MetricsLog(path), checkpoint_every=2, checkpoint_interval=0
        )
    assert lines_at_sync == [2, 4, 6]  # at the saves of steps 2, 4 and 6 (none at step 0: no line yet)
    assert saved_after == [0, 1, 2, 3]  # each commit after the sync of its step's line
    with open(path) as f:
        assert [json.loads(line)["step"] for line in f] == [1, 2, 3, 4, 5, 6]


@pytest.mark.parametrize("every, stopped_at", [(1, 3), (2, 3), (4, 3)])
def test_past_the_time_limit_the_step_is_saved_whatever_the_interval_and_due_steps(source, tmp_path, every, stopped_at):
    """With saves held back by the interval (and by checkpoint_every), the time limit still stops
    the run right after a checkpoint of the step in which it passed (here step 3), due or not: it is
    overshot by one step, not by the steps up to the next due one (session 26, qa27)."""
    full, _ = fit(source, None)
    run = str(tmp_path / "run")
    ckpt = Checkpointer(run, config={"solver": "halving"}, store_fingerprint="in-memory", time_limit=3600)
    log = MetricsLog(os.path.join(run, "metrics.jsonl"))
    ckpt.past_deadline = lambda: len(log.records) >= 3  # type: ignore[method-assign]  # the limit passes in step 3
    with Engine(mode="inprocess") as engine, pytest.raises(TimeLimitReached) as stopped:
        HalvingSolver(HalvingParams()).fit(
            source, engine=engine, checkpointer=ckpt, log=log, checkpoint_every=every, checkpoint_interval=3600.0
        )
    assert stopped.value.step == stopped_at == _latest(run)
    assert sorted(os.listdir(os.path.join(run, "checkpoints"))) == [
        "LATEST",
        "state",
        "step-000000",
        f"step-{stopped_at:06d}",
    ]
    resumed, _ = fit(source, run, resume=True)
    same_model(resumed, full)


def test_time_limit_stops_after_a_checkpoint_and_resume_continues(source, tmp_path):
    full, _ = fit(source, None)
    run = str(tmp_path / "run")
    with pytest.raises(TimeLimitReached) as stopped:
        fit(source, run, time_limit=0.0)
    assert stopped.value.step == 0  # the first save after the limit is init's
    resumed, _ = fit(source, run, resume=True)
    same_model(resumed, full)


def test_not_converged_at_the_budget_is_a_warning(source, caplog):
    with caplog.at_level(logging.WARNING):
        fit(source, None, HalvingSolver(HalvingParams(tol=1e-9)))
    assert "halving: not converged after 6 steps" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        model, _ = fit(source, None, HalvingSolver(HalvingParams(tol=10.0)))
    assert model.info["steps"] == 1 and "not converged" not in caplog.text


def test_checkpoint_of_another_state_layout_is_refused(source, tmp_path):
    run = str(tmp_path / "run")
    fit(source, run, stop_after=2)

    @dataclasses.dataclass(kw_only=True)
    class WiderState(HalvingState):
        momentum: np.ndarray | None = None

    class WiderSolver(HalvingSolver):
        State = WiderState

    with pytest.raises(CheckpointError, match="momentum: absent then, array now"):
        fit(source, run, WiderSolver(HalvingParams()), resume=True)


def _step_record(run: str) -> tuple[str, dict]:
    with open(os.path.join(run, "checkpoints", "LATEST")) as f:
        path = os.path.join(run, "checkpoints", f"step-{json.load(f)['step']:06d}", "meta.json")
    with open(path) as f:
        return path, json.load(f)


def test_edited_checkpoint_metadata_is_refused(source, tmp_path):
    run = str(tmp_path / "run")
    fit(source, run, stop_after=2)
    path, record = _step_record(run)
    record["meta"]["values"]["loss"] *= 2
    with open(path, "w") as f:
        json.dump(record, f)
    with pytest.raises(CheckpointError, match="meta.json: fails its checksum"):
        fit(source, run, resume=True)


def test_a_value_of_the_wrong_type_names_the_field(source, tmp_path):
    run = str(tmp_path / "run")
    fit(source, run, stop_after=2)
    path, record = _step_record(run)
    record["meta"]["values"]["loss"] = "half"
    record["record_sha256"] = _record_digest(record)  # a consistent forgery: the field check still bites
    with open(path, "w") as f:
        json.dump(record, f)
    with pytest.raises(CheckpointError, match=r"values\.loss is 'half', not a float"):
        fit(source, run, resume=True)


def test_missing_append_only_entry_is_detected(source, tmp_path):
    run = str(tmp_path / "run")
    fit(source, run, stop_after=3)
    state_dir = os.path.join(run, "checkpoints", "state", "steps_taken", "v000000")
    victim = sorted(os.listdir(state_dir))[1]
    os.remove(os.path.join(state_dir, victim))
    with pytest.raises(CheckpointError, match="state chunk 1 of 'steps_taken' is missing"):
        fit(source, run, resume=True)


def test_a_solver_without_mid_run_models_is_validated_on_its_last_step_only(source):
    class LastStepOnly(HalvingSolver):
        mid_run_models = False

    for solver, validated in [
        (HalvingSolver(HalvingParams()), [1, 2, 3, 4, 5, 6]),
        (LastStepOnly(HalvingParams()), [6]),
    ]:
        ckpt = Checkpointer(None, config={"solver": "halving"}, store_fingerprint="in-memory")
        log = MetricsLog(None, valid=source, valid_every=1)
        with Engine(mode="inprocess") as engine:
            solver.fit(source, engine=engine, checkpointer=ckpt, log=log)
        assert [r["step"] for r in log.records if "valid_accuracy" in r] == validated


@pytest.mark.parametrize(
    "every, interval, kept",
    [(4, 0, ["v000004", "v000006"]), (1, 3600.0, ["v000006"])],  # saves held back: only init's (v0, unwritten)
)
def test_between_checkpoints_only_referenced_per_sample_versions_stay(source, tmp_path, every, interval, kept):
    """With checkpoints every 4 steps, a kill in step 7 leaves the residual of checkpoint 4 and of
    step 6 (the state's), not every version since the checkpoint; the same when due steps go
    unsaved for the interval: disk use does not grow with the steps between saves."""
    run = str(tmp_path / "run")
    with pytest.raises(KeyboardInterrupt):
        fit(
            source,
            run,
            HalvingSolver(HalvingParams(max_iter=9), fail_at=7),
            checkpoint_every=every,
            checkpoint_interval=interval,
        )
    versions = sorted(os.listdir(os.path.join(run, "checkpoints", "state", "residual")))
    assert versions == kept


class InPlaceHalvingSolver(HalvingSolver):
    """Updates W in place, as bcd does."""

    def step(self, ctx, state):
        W = state.W
        fields = super().step(ctx, state)
        W += state.W - W
        state.W = W
        return fields


def test_an_in_memory_checkpoint_survives_a_resumed_run_that_fails(source):
    full, _ = fit(source, None)
    ckpt = Checkpointer(None, config={"solver": "halving"}, store_fingerprint="in-memory")
    with Engine(mode="inprocess") as engine:
        run = dict(engine=engine, checkpointer=ckpt, log=MetricsLog(None))
        InPlaceHalvingSolver(HalvingParams()).fit(source, stop_after=2, **run)
        with pytest.raises(KeyboardInterrupt):  # step 3 changes W in place, step 4 dies: no save since 2
            InPlaceHalvingSolver(HalvingParams(), fail_at=4).fit(source, resume=True, checkpoint_every=10, **run)
        model = InPlaceHalvingSolver(HalvingParams()).fit(source, resume=True, **run)
    same_model(model, full)


class FortranHalvingSolver(HalvingSolver):
    """Appends Fortran-ordered entries and logs whether the earlier ones are C-ordered: a sum over
    entries runs in memory order, so a layout that differs after a resume changes its last bits."""

    def step(self, ctx, state):
        c_ordered = all(e.flags.c_contiguous for e in state.steps_taken)
        fields = super().step(ctx, state)
        state.steps_taken[-1] = np.asfortranarray(np.outer(state.steps_taken[-1], [1.0, 2.0, 3.0]))
        return {**fields, "earlier_c_ordered": c_ordered}


@pytest.mark.parametrize("interval", [0, 3600.0])  # 3600: the steps between init and the pause go unsaved
def test_append_only_entries_have_the_layout_a_resume_gives_them(source, tmp_path, interval):
    full, full_log = fit(
        source, str(tmp_path / "full"), FortranHalvingSolver(HalvingParams()), checkpoint_interval=interval
    )
    run = str(tmp_path / "run")
    fit(source, run, FortranHalvingSolver(HalvingParams()), stop_after=3, checkpoint_interval=interval)
    resumed, _ = fit(source, run, FortranHalvingSolver(HalvingParams()), resume=True, checkpoint_interval=interval)
    with open(os.path.join(run, "metrics.jsonl")) as f:
        logged = [{k: v for k, v in json.loads(line).items() if k != "wall_time"} for line in f]
    assert logged == records(full_log)
    assert all(r["earlier_c_ordered"] for r in logged)
    same_model(resumed, full)


def test_a_state_of_another_step_is_refused(source, tmp_path):
    run = str(tmp_path / "run")
    fit(source, run, stop_after=2)
    path, record = _step_record(run)
    record["meta"]["values"]["step"] = 1
    record["record_sha256"] = _record_digest(record)  # consistent digests: the step check still bites
    with open(path, "w") as f:
        json.dump(record, f)
    with pytest.raises(CheckpointError, match="holds the state of step 1, not 2"):
        fit(source, run, resume=True)


class VersionsHalvingSolver(HalvingSolver):
    """Logs the per-sample versions held in memory after each step's predecessor was dropped."""

    def step(self, ctx, state):
        fields = super().step(ctx, state)
        return {**fields, "versions": sorted({(name, v) for name, v, _ in ctx.chunk_state._memory})}


def test_without_a_checkpointer_the_model_is_the_checkpointed_one_and_old_versions_go(source):
    """checkpointer=None (the estimators): no checkpoints, the same model and log as a run
    checkpointed in memory, entries laid out as a checkpoint lays them out, and only the
    per-sample version the state refers to is kept (besides the one a step is writing)."""
    full, full_log = fit(source, None, FortranHalvingSolver(HalvingParams()))
    log = MetricsLog(None)
    with Engine(mode="inprocess") as engine:
        model = FortranHalvingSolver(HalvingParams()).fit(source, engine=engine, checkpointer=None, log=log)
        with pytest.raises(ValueError, match="resume needs a checkpointer"):
            HalvingSolver(HalvingParams()).fit(source, engine=engine, checkpointer=None, log=log, resume=True)
        versions = MetricsLog(None)
        VersionsHalvingSolver(HalvingParams()).fit(source, engine=engine, checkpointer=None, log=versions)
    same_model(model, full)
    assert records(log) == records(full_log)
    # during step t + 1 the state refers to version t, and the step writes t + 1
    assert [r["versions"] for r in versions.records] == [
        [("residual", t), ("residual", t + 1)] if t else [("residual", 1)] for t in range(6)
    ]
