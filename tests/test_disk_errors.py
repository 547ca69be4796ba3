"""Disk full and unwritable outputs: a one-line error (exit 2) naming the path and the fix, no
partial output that looks complete, and after a full disk during checkpoint N, `--resume`
continues from checkpoint N-1 to the model of an uninterrupted run.

We run as root, so permissions do not stop writes: an unwritable location is a path through a
regular file (ENOTDIR), and a full disk is the low-level write raising ENOSPC after writing
half of its bytes (streamfit's `write_bytes`, or Zarr's file writer for store data)."""

import errno
import io
import json
import os

import numpy as np
import pytest
from click.testing import CliRunner

import streamfit.storage
from streamfit.cli import main
from streamfit.model import load_model
from streamfit.store import open_store

TRAIN = [
    "--solver",
    "stagewise",
    "-p",
    "generator=sequential",
    "-p",
    "block_size=6",
    "-p",
    "n_passes=2",
    "-p",
    "link=softmax",
    "-p",
    "max_iter=3",
    "--n-workers",
    "0",
    "--checkpoint-interval",
    "0",  # every step saved, in every run: the failing run saves the reference's steps
]
WRITERS = [streamfit.storage]  # every file streamfit writes goes through storage.write_new_file


def _cli(*args):
    return CliRunner().invoke(main, ["-q", *map(str, args)], catch_exceptions=False)


def _assert_one_line_error(result, *fragments):
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])


def _full_disk(monkeypatch, fails):
    """Make streamfit's writes of paths for which fails(path) is true hit a full disk (half
    the bytes land, then ENOSPC). Returns the list of the paths that failed."""
    real = streamfit.storage.write_new_file
    failed = []

    def write_bytes(path, data, **sync):
        if fails(path):
            failed.append(path)
            if callable(data):  # a writer of the bytes (a checkpoint's arrays.npz)
                buffer = io.BytesIO()
                data(buffer)
                data = buffer.getvalue()
            with open(path, "wb") as f:
                f.write(data[: len(data) // 2])
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        real(path, data, **sync)

    for module in WRITERS:
        monkeypatch.setattr(module, "write_new_file", write_bytes)
    return failed


def _latest_step(run):
    with open(run / "checkpoints" / "LATEST") as f:
        return json.load(f)["step"]


def _same_model(a, b):
    ref, got = load_model(str(a))._arrays(), load_model(str(b))._arrays()
    return ref.keys() == got.keys() and all(np.array_equal(ref[k], got[k]) for k in ref)


@pytest.fixture(scope="module")
def reference(digits_cli_store, tmp_path_factory):
    """An uninterrupted run, and the checkpoint steps it wrote (in order)."""
    run = tmp_path_factory.mktemp("disk") / "ref"
    steps = []
    real = streamfit.storage.write_new_file

    def record(path, data, **sync):
        if path.endswith("arrays.npz") and "step-" in path:
            steps.append(int(os.path.basename(os.path.dirname(path)).split("-")[1].split(".")[0]))
        real(path, data, **sync)

    with pytest.MonkeyPatch.context() as mp:
        for module in WRITERS:
            mp.setattr(module, "write_new_file", record)
        assert _cli("train", digits_cli_store, *TRAIN, "--out", run).exit_code == 0
    assert len(steps) >= 3, steps
    return run, steps


@pytest.mark.parametrize("target", ["step arrays", "step meta", "LATEST", "state chunk"])
def test_disk_full_during_a_checkpoint_then_resume_gives_the_same_model(
    digits_cli_store, reference, tmp_path, monkeypatch, target
):
    ref_run, steps = reference
    n = steps[1]  # the second checkpoint: the first one must survive
    step_dir = f"step-{n:06d}.partial"
    fails = {
        "step arrays": lambda p: step_dir in p and p.endswith("arrays.npz"),
        "step meta": lambda p: step_dir in p and p.endswith("meta.json"),
        "LATEST": lambda p: "LATEST" in p and (tmp_path / "run" / "checkpoints" / f"step-{n:06d}").is_dir(),
        "state chunk": lambda p: "chunk-" in p and (tmp_path / "run" / "checkpoints" / f"step-{steps[0]:06d}").is_dir(),
    }[target]
    failed = _full_disk(monkeypatch, fails)
    result = _cli("train", digits_cli_store, *TRAIN, "--out", tmp_path / "run")
    assert len(failed) == 1
    named = os.path.dirname(failed[0]) if target.startswith("step") else failed[0].split(".tmp-")[0]
    _assert_one_line_error(result, named, "No space left on device", "free space", "--resume")
    ckpt = tmp_path / "run" / "checkpoints"
    assert _latest_step(tmp_path / "run") == steps[0]
    assert not (tmp_path / "run" / "model").exists()
    assert not any(name.endswith(".partial") for name in os.listdir(ckpt))  # cleaned on the way out
    assert not [f for _, _, fs in os.walk(ckpt) for f in fs if ".tmp-" in f]  # no temporary files left
    monkeypatch.undo()  # space is back
    resumed = _cli("train", digits_cli_store, *TRAIN, "--out", tmp_path / "run", "--resume")
    assert resumed.exit_code == 0, resumed.output
    assert _same_model(ref_run, tmp_path / "run")


def test_disk_full_while_saving_the_model_keeps_the_checkpoints(digits_cli_store, reference, tmp_path, monkeypatch):
    failed = _full_disk(monkeypatch, lambda p: "model.partial" in p)
    result = _cli("train", digits_cli_store, *TRAIN, "--out", tmp_path / "run")
    _assert_one_line_error(result, str(tmp_path / "run" / "model.partial"), "No space left on device")
    assert len(failed) == 1
    assert not (tmp_path / "run" / "model").exists() and not (tmp_path / "run" / "model.partial").exists()
    monkeypatch.undo()
    assert _cli("train", digits_cli_store, *TRAIN, "--out", tmp_path / "run", "--resume").exit_code == 0
    assert _same_model(reference[0], tmp_path / "run")


@pytest.fixture(scope="module")
def digits_svm(digits_cli_store):
    return digits_cli_store.parent / "digits.svm"


@pytest.mark.parametrize("where", ["zarr data", "manifest"])
def test_disk_full_during_ingest_leaves_no_store(digits_svm, tmp_path, monkeypatch, where):
    out = tmp_path / "s.zarr"
    if where == "manifest":
        failed = _full_disk(monkeypatch, lambda p: p.endswith("manifest.json"))
    else:
        failed = _full_disk(monkeypatch, lambda p: "chunks/000002/data/c" in p)
    result = _cli("ingest", digits_svm, "--no-hash", "--chunk-rows", "200", "--out", out)
    assert failed
    _assert_one_line_error(result, f"{out}.partial", "No space left on device", "free space")
    assert not out.exists() and not (tmp_path / "s.zarr.partial").exists()
    monkeypatch.undo()
    assert _cli("ingest", digits_svm, "--no-hash", "--chunk-rows", "200", "--out", out).exit_code == 0
    assert open_store(str(out)).verify() == []


def test_output_under_a_regular_file_is_a_clean_error(digits_svm, digits_cli_store, tmp_path):
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("a regular file")
    result = _cli("ingest", digits_svm, "--no-hash", "--out", blocker / "s.zarr")
    _assert_one_line_error(result, f"{blocker / 's.zarr'}: cannot write", "Not a directory", "choose another path")
    result = _cli("train", digits_cli_store, *TRAIN, "--out", blocker / "run")
    _assert_one_line_error(result, str(blocker / "run"), "Not a directory", "choose another path")


@pytest.mark.parametrize("option", ["--test-out", "--quarantine"])
def test_an_output_written_after_the_input_is_read_is_refused_before_it(digits_svm, tmp_path, monkeypatch, option):
    """--test-out (written in pass 2) and --quarantine (at the first bad record) under a regular
    file: the same one error line before any record is read (it came after the whole input had
    been read), and nothing left, no trial folder either."""
    from streamfit.ingest import pipeline

    blocker = tmp_path / "not-a-dir"
    blocker.write_text("a regular file")
    read = []
    monkeypatch.setattr(pipeline._Pass1, "read_input", lambda self, *a, **k: read.append(a))
    extra = ["--test-size", "0.25"] if option == "--test-out" else ["--on-bad-record", "quarantine"]
    target = blocker / ("t.zarr" if option == "--test-out" else "q.jsonl")
    result = _cli("ingest", digits_svm, "--no-hash", "--out", tmp_path / "s.zarr", *extra, option, target)
    _assert_one_line_error(result, str(target), "Not a directory", "choose another path")
    assert read == [] and sorted(os.listdir(tmp_path)) == ["not-a-dir"]


def test_a_file_size_limit_is_named_with_its_fix(digits_svm, tmp_path, cli):
    """A process whose file-size limit (`ulimit -f`, RLIMIT_FSIZE; a batch system's) is below a
    chunk's size: Python ignores SIGXFSZ, so the write fails with EFBIG. One line naming the
    store, the limit and the fix (it said "check that the location … has free space"), and no
    store left; the same command without the limit writes it."""
    import resource
    import subprocess

    command = cli("ingest", digits_svm, "--no-hash", "--chunk-rows", "200", "--out", tmp_path / "s.zarr")
    assert subprocess.run(command, capture_output=True).returncode == 0  # and the numba cache is warm
    limit = 2048  # bytes: the store's metadata fits, its chunks do not

    def limited():
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    out = tmp_path / "limited.zarr"
    command = cli("ingest", digits_svm, "--no-hash", "--chunk-rows", "200", "--out", out)
    result = subprocess.run(command, capture_output=True, text=True, preexec_fn=limited)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {out}.partial: cannot write (File too large)"), lines
    assert "ulimit -f" in lines[0] and "free space" not in lines[0], lines[0]
    assert sorted(os.listdir(tmp_path)) == ["s.zarr"]
