import errno
import io
import json
import os
import shutil
import threading

import numpy as np
import pytest

from streamfit.checkpoint import Checkpointer, ChunkState
from streamfit.errors import CheckpointError, OutputError


def test_state_round_trip_and_damage(tmp_path):
    st = ChunkState(str(tmp_path))
    a = np.arange(12.0).reshape(4, 3)
    st.write("R", 1, 0, a)
    assert np.array_equal(st.read("R", 1, 0), a)
    (path,) = [os.path.join(d, f) for d, _, fs in os.walk(tmp_path) for f in fs]
    raw = bytearray(open(path, "rb").read())
    raw[-3] ^= 1
    open(path, "wb").write(bytes(raw))
    with pytest.raises(CheckpointError, match="checksum"):  # another reader (a worker, a resume) reads the file
        ChunkState(str(tmp_path)).read("R", 1, 0)
    st.begin_run()  # so does the writer in its next run
    with pytest.raises(CheckpointError, match="checksum"):
        st.read("R", 1, 0)
    with pytest.raises(CheckpointError, match="missing"):
        st.read("R", 1, 5)


@pytest.mark.parametrize(
    "array",
    [
        np.arange(12.0).reshape(4, 3),
        np.asfortranarray(np.arange(12.0).reshape(4, 3) / 7),  # written C-ordered
        np.arange(30, dtype=np.int32)[::3],  # a strided view
        np.arange(24, dtype=np.uint8).reshape(2, 3, 4),
        np.zeros((0, 5), np.float32),
        np.array(3.5),
    ],
)
def test_a_read_of_what_the_process_wrote_is_the_files_array_without_reading_it(tmp_path, array):
    """The writer's read comes from its cache (the file is gone and it still reads) and is the
    array a file read gives (another ChunkState: a worker, a resume), byte for byte: dtype,
    shape, C order, writable; a caller changing the array it wrote, or the copy it read, changes
    neither what it reads next nor the file."""
    st = ChunkState(str(tmp_path))
    mine = array.copy(order="K")
    st.write("R", 3, 0, mine)
    from_file = ChunkState(str(tmp_path)).read("R", 3, 0)
    if mine.size:
        mine.flat[0] += 1
    got = st.read("R", 3, 0)
    if got.size:
        got.flat[0] += 1
    (path,) = [os.path.join(d, f) for d, _, fs in os.walk(tmp_path) for f in fs]
    os.remove(path)
    cached = st.read("R", 3, 0)
    written = np.ascontiguousarray(array)  # what the file holds (a 0-d array as 1-d)
    for a in (from_file, cached):
        assert a.dtype == written.dtype and a.shape == written.shape
        assert a.flags.c_contiguous and a.flags.writeable
        assert a.tobytes() == written.tobytes()
    assert cached is not st.read("R", 3, 0)  # a copy each time


def test_a_private_read_is_the_caller_s_to_change_and_the_last_one_takes_the_kept_array(tmp_path):
    """read_private: a copy from a file; with last=True the kept array itself, writable, no longer
    kept (the next read is the file's); in memory a copy of the stored array, which a write
    stored as a copy of the caller's. The file's bytes are np.save's."""
    array = np.arange(12.0).reshape(4, 3) / 7
    st = ChunkState(str(tmp_path))
    st.write("S", 1, 0, array)
    (path,) = [os.path.join(d, f) for d, _, fs in os.walk(tmp_path) for f in fs]
    saved = io.BytesIO()
    np.save(saved, array, allow_pickle=False)
    with open(path, "rb") as f:
        assert f.read() == saved.getvalue()
    copy = st.read_private("S", 1, 0)
    copy += 1
    taken = st.read_private("S", 1, 0, last=True)
    assert taken.flags.writeable and np.array_equal(taken, array)
    taken += 1  # the caller's now: neither a later read nor the file changes
    os.rename(path, path + ".moved")
    with pytest.raises(CheckpointError):
        st.read("S", 1, 0)  # no longer kept: read from the file, which is gone
    os.rename(path + ".moved", path)
    assert np.array_equal(st.read("S", 1, 0), array)
    memory = ChunkState(None)
    mine = array.copy()
    memory.write("S", 1, 0, mine)
    mine += 1
    private = memory.read_private("S", 1, 0, last=True)
    private += 1
    assert np.array_equal(memory.read("S", 1, 0), array)


def test_the_write_cache_keeps_the_newest_version_of_each_chunk_within_its_bound(tmp_path, monkeypatch):
    from streamfit import checkpoint

    monkeypatch.setattr(checkpoint, "STATE_CACHE_BYTES", 3 * 800)
    st = ChunkState(str(tmp_path))

    def cached(name, version, chunk_id):
        return checkpoint._written(st._run_id, name, version, chunk_id) is not None

    for i in range(4):  # 800 bytes each: three fit, the fourth is not kept (nothing is evicted for it)
        st.write("R", 1, i, np.full(100, float(i)))
    assert [cached("R", 1, i) for i in range(4)] == [True, True, True, False]
    st.write("R", 2, 0, np.full(100, 9.0))  # the newer version replaces the older one
    assert not cached("R", 1, 0) and cached("R", 2, 0)
    st.write("R", 1, 1, np.full(100, 1.0))  # an older version than the one kept is not kept
    assert cached("R", 1, 1)
    st.write("R", 2, 1, np.full(100, 5.0))
    st.write("R", 1, 1, np.full(100, 1.0))
    assert cached("R", 2, 1) and not cached("R", 1, 1)
    st.write("stages", 0, 0, np.zeros(10), cache=False)
    assert not cached("stages", 0, 0)
    other = ChunkState(str(tmp_path))  # another run: its first write drops this run's entries
    other.write("R", 3, 0, np.zeros(100))
    assert not cached("R", 2, 0)
    np.testing.assert_array_equal(st.read("R", 2, 0), np.full(100, 9.0))  # from the file


def test_state_writes_are_not_fsynced_and_a_save_syncs_the_new_ones_beside_its_commit(tmp_path, monkeypatch):
    """A state write calls no fsync; Checkpointer.save fsyncs the state files the step refers to
    that no earlier save synced, their version folder and the folders above a new one, each once,
    in a thread beside the step's own write and commit (here a state fsync waits until the step's
    arrays are being written: a save that synced the state first would never get there), and
    writes LATEST after both."""
    from streamfit import checkpoint, storage

    events: list[str] = []  # fsynced paths, and ("write", path) of files written with a sync
    arrays_written = threading.Event()
    state = tmp_path / "checkpoints" / "state"
    fsync_path, write_new_file, write_arrays = storage.fsync_path, storage.write_new_file, checkpoint._write_arrays

    def synced(path):
        if path.startswith(str(state)):
            assert arrays_written.wait(10), "the state's sync did not run beside the step's write"
        events.append(path)
        fsync_path(path)

    def written(path, data, *, sync=True):
        write_new_file(path, data, sync=sync)
        if sync:
            events.append(f"write {path}")

    monkeypatch.setattr(storage, "fsync_path", synced)
    monkeypatch.setattr(storage, "write_new_file", written)
    monkeypatch.setattr(checkpoint, "_write_arrays", lambda *a: (arrays_written.set(), write_arrays(*a))[1])
    fsyncs = []
    monkeypatch.setattr(os, "fsync", lambda fd, real=os.fsync: (fsyncs.append(fd), real(fd)))
    ck = Checkpointer(str(tmp_path), config={}, store_fingerprint="fp")
    for i in range(3):
        ck.state.write("R", 1, i, np.full(2, float(i)))
    ck.state.write("stages", 0, 0, np.zeros(2), cache=False)
    assert fsyncs == [] and events == []
    ck.save(1, {}, {}, {"R": 1, "stages": 0}, state_counts={"stages": 1})
    r1, stages = state / "R" / "v000001", state / "stages" / "v000000"
    new = {str(r1 / f) for f in os.listdir(r1)} | {str(stages / f) for f in os.listdir(stages)}
    folders = {str(r1), str(stages), str(state / "R"), str(state / "stages"), str(state)}
    state_syncs = [p for p in events if p.startswith(str(state))]
    assert len(state_syncs) == len(new | folders) and set(state_syncs) == new | folders
    step = str(tmp_path / "checkpoints" / "step-000001.partial")
    assert any(p.startswith(step) for p in events)  # the step's commit
    (latest,) = [i for i, p in enumerate(events) if p.startswith(f"write {tmp_path / 'checkpoints' / 'LATEST'}")]
    assert all(events.index(p) < latest for p in state_syncs + [p for p in events if p.startswith(step)])
    assert events[latest + 1 :] == [str(tmp_path / "checkpoints")]  # LATEST's rename
    events.clear()
    arrays_written.clear()
    ck.state.write("stages", 0, 1, np.ones(2), cache=False)
    ck.save(2, {}, {}, {"R": 1, "stages": 0}, state_counts={"stages": 2})
    (entry,) = [f for f in os.listdir(stages) if f.startswith("chunk-000001")]
    assert sorted(p for p in events if p.startswith(str(state))) == sorted([str(stages / entry), str(stages)])
    assert ck.latest(3).step == 2


def test_a_save_whose_state_fails_to_sync_leaves_latest_on_the_step_before(tmp_path, monkeypatch):
    """The state's sync runs beside the step's commit: when it fails (disk full), the committed
    step is deleted again, LATEST keeps naming the previous step, and the error names the state."""
    from streamfit import storage

    ck = Checkpointer(str(tmp_path), config={}, store_fingerprint="fp")
    _save_steps(ck, 1)
    for i in range(3):
        ck.state.write("R", 2, i, np.zeros((2, 2)))
    fsync_path = storage.fsync_path

    def disk_full(path):
        if "v000002" in path:
            raise OSError(errno.ENOSPC, "No space left on device")
        fsync_path(path)

    monkeypatch.setattr(storage, "fsync_path", disk_full)
    with pytest.raises(OutputError, match=r"checkpoints/state: cannot write \(No space left on device\)"):
        ck.save(2, {"step": 2}, {"W": np.zeros(3)}, {"R": 2})
    monkeypatch.undo()
    assert sorted(os.listdir(tmp_path / "checkpoints")) == ["LATEST", "state", "step-000001"]
    resumed = Checkpointer(str(tmp_path), config={}, store_fingerprint="fp").latest(3)
    assert resumed.step == 1 and resumed.arrays["W"].tolist() == [1.0] * 3


def _save_steps(ck, n_steps, n_chunks=3):
    for step in range(1, n_steps + 1):
        for i in range(n_chunks):
            ck.state.write("R", step, i, np.full((2, 2), float(step * 10 + i)))
        ck.save(step, {"step": step, "rng": {"s": step}}, {"W": np.full(3, float(step))}, {"R": step})


def test_save_resume_and_garbage_collection(tmp_path):
    ck = Checkpointer(str(tmp_path), config={"a": 1}, store_fingerprint="fp")
    _save_steps(ck, 4)
    # a step being written when the process died: state v5 partly written, no commit
    ck.state.write("R", 5, 0, np.zeros((2, 2)))
    os.makedirs(tmp_path / "checkpoints" / "step-000005.partial")
    ck2 = Checkpointer(str(tmp_path), config={"a": 1}, store_fingerprint="fp")
    got = ck2.latest(n_chunks=3)
    assert got.step == 4 and got.meta["rng"] == {"s": 4} and np.array_equal(got.arrays["W"], np.full(3, 4.0))
    assert np.array_equal(ck2.state.read("R", 4, 2), np.full((2, 2), 42.0))
    versions = sorted(os.listdir(tmp_path / "checkpoints" / "state" / "R"))
    assert versions == ["v000003", "v000004"]  # two kept, the uncommitted v5 and old ones gone
    assert sorted(os.listdir(tmp_path / "checkpoints")) == ["LATEST", "state", "step-000003", "step-000004"]


def test_resume_refuses_other_config_store_or_damage(tmp_path):
    ck = Checkpointer(str(tmp_path), config={"a": 1}, store_fingerprint="fp")
    _save_steps(ck, 2)
    with pytest.raises(CheckpointError, match="different solver configuration"):
        Checkpointer(str(tmp_path), config={"a": 2}, store_fingerprint="fp").latest(3)
    with pytest.raises(CheckpointError, match="different training store"):
        Checkpointer(str(tmp_path), config={"a": 1}, store_fingerprint="other").latest(3)
    npz = tmp_path / "checkpoints" / "step-000002" / "arrays.npz"
    raw = bytearray(npz.read_bytes())
    raw[len(raw) // 2] ^= 1
    npz.write_bytes(bytes(raw))
    with pytest.raises(CheckpointError, match="arrays.npz: fails its checksum"):
        Checkpointer(str(tmp_path), config={"a": 1}, store_fingerprint="fp").latest(3)


def test_a_checkpoint_from_before_a_parameter_existed_names_it_and_the_way_out(tmp_path):
    old = {"solver": "bcd", "params": {"lam": 1e-3}}
    _save_steps(Checkpointer(str(tmp_path), config=old, store_fingerprint="fp"), 1)
    now = {"solver": "bcd", "params": {"lam": 1e-3, "standardize": "auto", "curvature": "auto"}}
    with pytest.raises(CheckpointError) as e:
        Checkpointer(str(tmp_path), config=now, store_fingerprint="fp").latest(3)
    assert "earlier streamfit, whose bcd had no parameter curvature, standardize" in str(e.value)
    assert "started it, or start over with --overwrite" in str(e.value)
    # a parameter changed as well as added: the earlier streamfit is still the one to name
    with pytest.raises(CheckpointError, match="no parameter standardize; finish the run"):
        Checkpointer(
            str(tmp_path), config={"solver": "bcd", "params": {"lam": 1.0, "standardize": True}}, store_fingerprint="fp"
        ).latest(3)


def test_missing_state_chunk_refused(tmp_path):
    ck = Checkpointer(str(tmp_path), config={}, store_fingerprint="fp")
    _save_steps(ck, 1)
    d = tmp_path / "checkpoints" / "state" / "R" / "v000001"
    os.remove(d / sorted(os.listdir(d))[1])
    with pytest.raises(CheckpointError, match="state chunk 1 .* missing"):
        Checkpointer(str(tmp_path), config={}, store_fingerprint="fp").latest(3)


def test_in_memory_checkpointer_drops_old_versions():
    ck = Checkpointer(None, config={}, store_fingerprint="fp")
    _save_steps(ck, 5)
    assert {k[1] for k in ck.state._memory} == {4, 5}
    latest = ck.latest(3)  # in memory: the newest save made through this object
    assert latest.step == 5 and latest.meta["rng"] == {"s": 5} and latest.state_versions == {"R": 5}
    np.testing.assert_array_equal(ck.state.read("R", 5, 2), np.full((2, 2), 52.0))
    assert Checkpointer(None, config={}, store_fingerprint="fp").latest(3) is None


def test_latest_file_is_json(tmp_path):
    ck = Checkpointer(str(tmp_path), config={}, store_fingerprint="fp")
    _save_steps(ck, 1)
    assert json.loads((tmp_path / "checkpoints" / "LATEST").read_text()) == {"step": 1}


def test_a_resume_deletes_what_a_killed_run_appended_and_its_new_entries_are_the_only_files(tmp_path):
    """A run killed after appending entries 2 and 3 to a list its checkpoint counts 2 of: the
    resume deletes those two files (and the killed run's unreferenced version), so the entries
    it writes again (other bytes) are the only files of their chunks, and read back as written."""
    ck = Checkpointer(str(tmp_path), config={}, store_fingerprint="s")
    ck.state.keep_only(set())  # a fresh run, as the driver starts one
    for t in range(2):
        ck.state.write("stages", 0, t, np.full(3, t))
    ck.save(2, {}, {}, {"stages": 0}, state_counts={"stages": 2})
    for t in (2, 3):  # the killed run's entries after the checkpoint, and its next per-sample version
        ck.state.write("stages", 0, t, np.full(3, -1.0))
    ck.state.write("R", 1, 0, np.zeros(2))
    resumed = Checkpointer(str(tmp_path), config={}, store_fingerprint="s")
    assert resumed.latest(n_chunks=2).step == 2
    stages = tmp_path / "checkpoints" / "state" / "stages" / "v000000"
    assert sorted(f.split(".")[0] for f in os.listdir(stages)) == ["chunk-000000", "chunk-000001"]
    assert not (tmp_path / "checkpoints" / "state" / "R" / "v000001").exists()
    resumed.state.write("stages", 0, 2, np.full(3, 2.0))
    resumed.save(3, {}, {}, {"stages": 0}, state_counts={"stages": 3})
    assert sorted(f.split(".")[0] for f in os.listdir(stages)) == [f"chunk-00000{t}" for t in range(3)]
    np.testing.assert_array_equal(resumed.state.read("stages", 0, 2), np.full(3, 2.0))
    again = Checkpointer(str(tmp_path), config={}, store_fingerprint="s").latest(n_chunks=2)
    assert again.step == 3 and again.state_versions == {"stages": 0}


def test_state_counts_verify_append_only_state(tmp_path):
    """A state holding one file per stage is verified by its own count, not the data's chunks."""
    ck = Checkpointer(str(tmp_path), config={}, store_fingerprint="s")
    for t in range(5):
        ck.state.write("stages", 0, t, np.full(3, t))
    ck.save(5, {}, {}, {"stages": 0}, state_counts={"stages": 5})
    assert Checkpointer(str(tmp_path), config={}, store_fingerprint="s").latest(n_chunks=2).step == 5
    (f,) = (tmp_path / "checkpoints" / "state" / "stages" / "v000000").glob("chunk-000004.*")
    f.write_bytes(f.read_bytes()[:-1] + b"\x01")
    with pytest.raises(CheckpointError, match="chunk-000004"):
        Checkpointer(str(tmp_path), config={}, store_fingerprint="s").latest(n_chunks=2)


def _resealed(data: bytes, folder: str, chunk_id: int) -> str:
    """Write `data` as state chunk `chunk_id` of `folder` under its own digest (as an editor with the format would)."""
    import hashlib

    for old in os.listdir(folder):
        os.remove(os.path.join(folder, old))
    path = os.path.join(folder, f"chunk-{chunk_id:06d}.{hashlib.sha256(data).hexdigest()[:16]}.npy")
    open(path, "wb").write(data)
    return path


def test_a_resealed_state_chunk_of_objects_or_cut_short_is_a_checkpoint_error(tmp_path):
    import io

    ChunkState(str(tmp_path)).write("R", 1, 0, np.arange(12.0))
    (folder,) = {d for d, _, fs in os.walk(tmp_path) if fs}
    good = open(os.path.join(folder, os.listdir(folder)[0]), "rb").read()
    buf = io.BytesIO()
    np.save(buf, np.array([{"a": 1}], dtype=object), allow_pickle=True)
    for data in (buf.getvalue(), good[: len(good) - 8]):
        path = _resealed(data, folder, 0)
        with pytest.raises(CheckpointError, match=f"^{path}: unreadable .*the checkpoint is damaged"):
            ChunkState(str(tmp_path)).read("R", 1, 0)  # a reader of the file (the writer reads its cache)


def test_resealed_step_arrays_of_objects_are_a_checkpoint_error(tmp_path):
    import hashlib
    import io

    from streamfit.checkpoint import _record_digest

    ck = Checkpointer(str(tmp_path), config={"a": 1}, store_fingerprint="fp")
    _save_steps(ck, 1)
    step = tmp_path / "checkpoints" / "step-000001"
    buf = io.BytesIO()
    np.savez(buf, W=np.array([{"a": 1}], dtype=object))
    (step / "arrays.npz").write_bytes(buf.getvalue())
    record = json.loads((step / "meta.json").read_text())
    record["arrays_sha256"] = hashlib.sha256(buf.getvalue()).hexdigest()
    record["record_sha256"] = _record_digest(record)
    (step / "meta.json").write_text(json.dumps(record))
    with pytest.raises(CheckpointError, match=r"step-000001/arrays.npz: unreadable .*--overwrite"):
        Checkpointer(str(tmp_path), config={"a": 1}, store_fingerprint="fp").latest(3)


STEP_ARRAYS = {
    "W": np.arange(24, dtype=np.float64).reshape(4, 6),
    "F": np.asfortranarray(np.arange(12, dtype=np.float32).reshape(3, 4)),
    "strided": np.arange(20, dtype=np.int64)[::3],
    "big_endian": np.arange(5, dtype=">f8"),
    "mask": np.array([True, False, True]),
    "scalar": np.array(2.5),
    "empty": np.zeros((0, 3)),
}


@pytest.mark.parametrize("root", ["local", "memory://ckpt-one-pass"])
def test_step_arrays_are_hashed_as_written_and_load_as_np_savez_saved_them(tmp_path, root):
    """The step's arrays.npz is written and hashed in one pass (a zip of unseekable output):
    its recorded digest is the SHA-256 of the file's bytes, np.load gives every array back
    bitwise with its dtype and shape (np.savez's reading of the same arrays), and a resume
    reads them."""
    import hashlib
    import io

    from streamfit import storage

    run_dir = str(tmp_path) if root == "local" else root
    ck = Checkpointer(run_dir, config={"a": 1}, store_fingerprint="fp")
    ck.save(1, {"step": 1}, STEP_ARRAYS, {})
    files = storage.committed(storage.resolve(run_dir).join("checkpoints").join("step-000001"))
    data = files.join("arrays.npz").read_bytes()
    record = json.loads(files.join("meta.json").read_bytes())
    assert record["arrays_sha256"] == hashlib.sha256(data).hexdigest()
    reference = io.BytesIO()
    np.savez(reference, **STEP_ARRAYS)
    reference.seek(0)
    with np.load(io.BytesIO(data), allow_pickle=False) as got, np.load(reference) as want:
        assert got.files == want.files == list(STEP_ARRAYS)
        for name in STEP_ARRAYS:
            assert got[name].dtype == want[name].dtype and got[name].shape == want[name].shape
            assert got[name].tobytes() == want[name].tobytes()
    resumed = Checkpointer(run_dir, config={"a": 1}, store_fingerprint="fp").latest(n_chunks=3)
    assert all(np.array_equal(resumed.arrays[k], STEP_ARRAYS[k]) for k in STEP_ARRAYS)


def test_a_save_that_fails_writing_its_arrays_leaves_latest_and_no_attempt(tmp_path):
    ck = Checkpointer(str(tmp_path), config={"a": 1}, store_fingerprint="fp")
    _save_steps(ck, 1)
    with pytest.raises(ValueError, match="pickle"):
        ck.save(2, {"step": 2}, {"W": np.array([{"a": 1}], dtype=object)}, {"R": 1})
    assert sorted(os.listdir(tmp_path / "checkpoints")) == ["LATEST", "state", "step-000001"]
    assert json.loads((tmp_path / "checkpoints" / "LATEST").read_text()) == {"step": 1}


def test_a_step_whose_arrays_np_savez_wrote_still_resumes(tmp_path):
    """Checkpoints written before the one-pass write (np.savez's bytes, the digest of those)
    resume to the same arrays."""
    import hashlib
    import io

    from streamfit.checkpoint import _record_digest

    ck = Checkpointer(str(tmp_path), config={"a": 1}, store_fingerprint="fp")
    _save_steps(ck, 1)
    step = tmp_path / "checkpoints" / "step-000001"
    buf = io.BytesIO()
    np.savez(buf, **STEP_ARRAYS)
    (step / "arrays.npz").write_bytes(buf.getvalue())
    record = json.loads((step / "meta.json").read_text())
    record["arrays_sha256"] = hashlib.sha256(buf.getvalue()).hexdigest()
    record["record_sha256"] = _record_digest(record)
    (step / "meta.json").write_text(json.dumps(record))
    got = Checkpointer(str(tmp_path), config={"a": 1}, store_fingerprint="fp").latest(3)
    assert all(got.arrays[k].tobytes() == STEP_ARRAYS[k].tobytes() for k in STEP_ARRAYS)


BUCKET = "streamfit-test"  # the s3 fixture's bucket (tests/conftest.py)


def test_a_run_directory_copied_file_by_file_or_cut_short_is_named_as_such(s3, tmp_path):
    """qa32: `train --resume` on a run directory copied to a URL file by file (aws s3 cp
    --recursive, fsspec's put: no COMMITTED record in its steps) said "the checkpoint LATEST names
    is missing or incomplete", and on one copied down from a URL as it lies there (COMMITTED and an
    attempt folder in each step) "unreadable checkpoint ([Errno 2] … meta.json)"; a step copied
    without its arrays.npz (a copy cut short) the same. The lines now say what was found and the
    way on; a step committed as the URL's line says resumes."""
    ck = Checkpointer(str(tmp_path / "run"), config={"a": 1}, store_fingerprint="fp")
    _save_steps(ck, 2)
    s3.put(str(tmp_path / "run"), f"{BUCKET}/copied-checkpoints", recursive=True)
    step = f"s3://{BUCKET}/copied-checkpoints/checkpoints/step-000002"
    with pytest.raises(CheckpointError) as refused:
        Checkpointer(f"s3://{BUCKET}/copied-checkpoints", config={"a": 1}, store_fingerprint="fp").latest(3)
    assert str(refused.value) == (
        f"{step}: holds a checkpoint's files but no COMMITTED record, as a copy file by file (aws s3 cp --recursive, "
        f"fsspec's put) leaves it: a checkpoint behind a URL is read only once committed. Copy the checkpoint's "
        f'files to {step}/attempt-copy/ instead and write {step}/COMMITTED holding {{"attempt": "attempt-copy"}}, '
        "or resume the run where it was written, or start over with --overwrite"
    )
    local_step = tmp_path / "run" / "checkpoints" / "step-000002"
    s3.put(str(local_step), f"{step[5:]}/attempt-copy", recursive=True)
    s3.pipe_file(f"{step[5:]}/COMMITTED", json.dumps({"attempt": "attempt-copy"}).encode())
    got = Checkpointer(f"s3://{BUCKET}/copied-checkpoints", config={"a": 1}, store_fingerprint="fp").latest(3)
    assert got.step == 2 and np.array_equal(got.arrays["W"], np.full(3, 2.0))

    _save_steps(Checkpointer(f"s3://{BUCKET}/checkpoints-to-copy", config={"a": 1}, store_fingerprint="fp"), 2)
    s3.invalidate_cache()
    s3.get(f"{BUCKET}/checkpoints-to-copy", str(tmp_path / "down"), recursive=True)
    with pytest.raises(CheckpointError) as refused:
        Checkpointer(str(tmp_path / "down"), config={"a": 1}, store_fingerprint="fp").latest(3)
    down_step = tmp_path / "down" / "checkpoints" / "step-000002"
    (attempt,) = [name for name in os.listdir(down_step) if name != "COMMITTED"]
    assert str(refused.value) == (
        f"{down_step}: has no meta.json but a COMMITTED record naming {attempt}: a checkpoint copied from an "
        f"object store as it lies there; its files are in {down_step / attempt}: resume the run where it "
        "was written, or start over with --overwrite"
    )

    for missing in ("arrays.npz", "meta.json"):
        cut = tmp_path / f"cut-{missing}"
        shutil.copytree(tmp_path / "run", cut)
        os.remove(cut / "checkpoints" / "step-000002" / missing)
        with pytest.raises(CheckpointError) as refused:
            Checkpointer(str(cut), config={"a": 1}, store_fingerprint="fp").latest(3)
        assert str(refused.value) == (
            f"{cut / 'checkpoints' / 'step-000002'}: a checkpoint without its {missing} (a copy of the run directory "
            "cut short, or damaged); copy the run directory again, or start over with --overwrite"
        )
