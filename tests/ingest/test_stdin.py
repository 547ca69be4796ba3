"""Standard input as ingest's input `-`: spooled once to a temporary file, the store the same
bytes in a file give (its manifest naming <stdin>), the spool removed however the ingest ends,
and the refusals (no --format, a format a pipe cannot carry, a Dask cluster, stdin closed)."""

import bz2
import errno
import gzip
import io
import json
import os
import signal
import subprocess
import sys
import time

import pytest
from click.testing import CliRunner

from streamfit.cli import main
from streamfit.ingest import stdin

DOCS = [
    ("the quick brown fox jumps over the lazy dog", "animals"),
    ("stock markets fell sharply as investors sold shares", "finance"),
    ("the central bank raised interest rates again", "finance"),
    ("a cat and a dog shared the sunny garden", "animals"),
]


def _records(n: int) -> bytes:
    return "".join(
        json.dumps({"text": DOCS[i % 4][0] + f" w{i}", "label": DOCS[i % 4][1]}) + "\n" for i in range(n)
    ).encode()


def _streamfit(*args, **kwargs):
    """`python -m streamfit ARGS` in a process of its own (real pipes), this checkout first."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([os.getcwd(), os.environ.get("PYTHONPATH", "")])}
    return [sys.executable, "-m", "streamfit", "-q", *map(str, args)], {"env": env, **kwargs}


def _run(*args, data: bytes | None, **kwargs) -> subprocess.CompletedProcess:
    command, options = _streamfit(*args, **kwargs)
    return subprocess.run(command, input=data, capture_output=True, timeout=600, **options)


def _files(store) -> dict[str, bytes]:
    return {
        os.path.relpath(os.path.join(root, n), store): open(os.path.join(root, n), "rb").read()
        for root, _, names in os.walk(store)
        for n in names
    }


def _manifest(store) -> dict:
    with open(os.path.join(store, "manifest.json")) as f:
        m = json.load(f)
    m.pop("manifest_sha256")
    return m


@pytest.mark.parametrize("compress", [None, gzip.compress, bz2.compress])
def test_a_piped_ingest_writes_the_stores_the_same_bytes_in_a_file_give(tmp_path, compress):
    """`… | ingest - --format jsonl` with a split and IDF (three reads of the input): every chunk
    and the IDF the same bytes as the file's stores (ingested with the same --format), the
    manifests the same but for the source's name (<stdin>); a gzip or bzip2 stream is recognised by its first bytes. The summary line
    reports the spool's size, and --tmp-dir holds nothing after."""
    data = _records(300)
    (tmp_path / "in.jsonl").write_bytes(data)
    spool_dir = tmp_path / "spool"
    spool_dir.mkdir()
    split = ["--format", "jsonl", "--test-size", "0.25", "--n-features", "256", "--chunk-rows", "64"]
    done = _run(
        "ingest",
        tmp_path / "in.jsonl",
        "--out",
        tmp_path / "f.zarr",
        "--test-out",
        tmp_path / "ft.zarr",
        *split,
        data=None,
    )
    assert done.returncode == 0, done.stderr
    piped = compress(data) if compress else data
    done = _run(
        "ingest", "-", "--out", tmp_path / "s.zarr", "--test-out", tmp_path / "st.zarr",
        "--tmp-dir", spool_dir, *split, data=piped,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert f"standard input: {len(piped)} bytes spooled to a temporary file, removed" in done.stdout.decode()
    assert os.listdir(spool_dir) == []
    for file_store, piped_store in (("f.zarr", "s.zarr"), ("ft.zarr", "st.zarr")):
        f, s = _files(tmp_path / file_store), _files(tmp_path / piped_store)
        assert sorted(f) == sorted(s) and any(name.startswith("chunks") for name in f)
        assert {k: v for k, v in f.items() if not k.endswith(".json")} == {
            k: v for k, v in s.items() if not k.endswith(".json")
        }
        mf, ms = _manifest(tmp_path / file_store), _manifest(tmp_path / piped_store)
        assert mf["source"]["paths"] == [str(tmp_path / "in.jsonl")] and ms["source"]["paths"] == ["<stdin>"]
        mf["source"]["paths"] = ms["source"]["paths"]
        assert mf == ms


def test_bad_records_on_stdin_are_named_stdin_line_under_each_policy(tmp_path):
    """A bad line of standard input is <stdin>:LINE: the error's place, the skip warning's, and
    the quarantine file's record; counts in = counts out."""
    data = _records(6).splitlines(keepends=True)
    data.insert(3, b'{"text": "cut short\n')
    data = b"".join(data)
    done = _run("ingest", "-", "--format", "jsonl", "--out", tmp_path / "e.zarr", data=data)
    assert done.returncode == 2 and done.stderr.decode().startswith("error: <stdin>:4: invalid JSON")
    assert not (tmp_path / "e.zarr").exists()
    done = _run(
        "ingest", "-", "--format", "jsonl", "--out", tmp_path / "q.zarr", "--on-bad-record", "quarantine", data=data
    )
    assert done.returncode == 0, done.stderr
    assert "records read 7, written 6, skipped 1" in done.stdout.decode()
    (line,) = (tmp_path / "q.zarr.quarantine.jsonl").read_text().splitlines()
    assert json.loads(line)["location"] == "<stdin>:4"


@pytest.mark.parametrize("stop", [signal.SIGINT, signal.SIGTERM])
def test_a_stop_while_stdin_is_spooled_leaves_no_temporary_file_and_no_store(tmp_path, stop):
    """Ctrl-C (130) or SIGTERM (143) while the pipe is still open: the spool is removed and no
    store is written (SIGTERM is seen while the pipe is quiet, not at the grace period's end)."""
    spool_dir = tmp_path / "spool"
    spool_dir.mkdir()
    command, options = _streamfit(
        "ingest", "-", "--format", "jsonl", "--out", tmp_path / "s.zarr", "--tmp-dir", spool_dir
    )
    proc = subprocess.Popen(command, stdin=subprocess.PIPE, stderr=subprocess.PIPE, **options)
    proc.stdin.write(_records(2000))
    proc.stdin.flush()  # the pipe stays open: the spool waits for more
    deadline = time.monotonic() + 120
    while not os.listdir(spool_dir) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert os.listdir(spool_dir), "the spool never appeared"
    time.sleep(0.5)
    proc.send_signal(stop)
    err = proc.stderr.read().decode()
    proc.stdin.close()
    assert proc.wait(timeout=60) == (130 if stop == signal.SIGINT else 143), err
    assert os.listdir(spool_dir) == [] and not os.path.exists(tmp_path / "s.zarr")
    assert err.strip().splitlines()[-1].startswith("stopped: ")


def test_a_full_disk_while_spooling_is_one_line_and_leaves_nothing(tmp_path, monkeypatch):
    """The disk of --tmp-dir fills up during the copy: one line naming the spool, how much was
    copied and the fix (--tmp-dir or TMPDIR), exit 2, no spool and no store left."""
    real_open = open

    class Full(io.RawIOBase):
        def __init__(self, fd):
            self.f = real_open(fd, "wb")
            self.written = 0

        def writable(self):
            return True

        def write(self, b):
            if self.written + len(b) > 1000:
                raise OSError(errno.ENOSPC, "No space left on device")
            self.written += len(b)
            return self.f.write(b)

        def close(self):
            self.f.close()
            super().close()

    monkeypatch.setattr(
        stdin, "open", lambda fd, mode, **kw: Full(fd) if mode == "wb" else real_open(fd, mode, **kw), raising=False
    )
    monkeypatch.setattr(stdin, "_SPOOL_PIECE", 512)
    spool_dir = tmp_path / "spool"
    spool_dir.mkdir()
    result = CliRunner().invoke(
        main,
        ["ingest", "-", "--format", "jsonl", "--out", str(tmp_path / "s.zarr"), "--tmp-dir", str(spool_dir)],
        input=_records(50),
    )
    assert result.exit_code == 2, result.output
    (line,) = result.stderr.strip().splitlines()
    assert (
        line.startswith(f"error: {spool_dir}/streamfit-stdin-")
        and (
            "cannot hold the copy of standard input after 512 bytes: No space left on device; free space there, or spool "
            "elsewhere with --tmp-dir DIR (or TMPDIR)"
        )
        in line
    ), line
    assert os.listdir(spool_dir) == [] and not os.path.exists(tmp_path / "s.zarr")


def test_stdin_input_refusals_are_one_line_each(tmp_path):
    """No --format (a pipe has no name to tell it by and cannot be sniffed without being
    consumed), a format a pipe cannot carry, `-` twice, standard input closed (<&-) or missing
    --tmp-dir."""
    out = str(tmp_path / "s.zarr")
    data = _records(4)
    cases = [
        ([], data, "error: <stdin>: standard input has no file name to tell its format by (pass --format, one of: "),
        (["--format", "parquet"], data, "error: <stdin>: parquet input cannot be read from a pipe (its index is at"),
        (["--format", "jsonl", "-"], data, "error: <stdin>: named twice (-) (standard input is read once"),
        (
            ["--format", "jsonl", "--tmp-dir", tmp_path / "none"],
            data,
            f"error: --tmp-dir {tmp_path / 'none'}: cannot hold",
        ),
    ]
    for args, given, line in cases:
        done = _run("ingest", "-", "--out", out, *args, data=given)
        err = done.stderr.decode()
        assert done.returncode == 2 and err.startswith(line) and err.count("\n") == 1, (args, err)
    command, options = _streamfit("ingest", "-", "--format", "jsonl", "--out", out)
    done = subprocess.run(
        command, capture_output=False, stderr=subprocess.PIPE, preexec_fn=lambda: os.close(0), timeout=600, **options
    )
    assert done.returncode == 2 and done.stderr.decode() == (
        "error: <stdin>: this process has no standard input (closed) (pipe the data in, or name a file)\n"
    )
    assert not os.path.exists(out)


_BATCHES = """
import sys
from streamfit.ingest import stdin
from streamfit.ingest.sources import BadRecordPolicy, open_source
source = open_source("<stdin>", sys.argv[1], policy=BadRecordPolicy(), batch_size=8192)
for batch in stdin.flushed_when_quiet(source, "stopped"):
    print(len(batch.locations), batch.locations[-1], flush=True)
"""


def _lines_of(proc, n: int, wait: float) -> list[bytes]:
    """The next n lines of proc's stdout, or those that came within `wait` seconds."""
    import select

    lines = []
    end = time.monotonic() + wait
    while len(lines) < n and select.select([proc.stdout], [], [], max(end - time.monotonic(), 0))[0]:
        lines.append(proc.stdout.readline())
    return lines


@pytest.mark.parametrize("fmt", ["jsonl", "csv", "libsvm", "jsonl.gz"])
def test_a_batch_is_cut_short_where_the_pipe_goes_quiet(fmt):
    """A producer writing a record at a time into a real pipe: each record comes out as a batch
    of its own, QUIET_S after it, while the pipe stays open (main: nothing before 8192 records or
    the end); records written together come out together; every record once, in order. gzip:
    each record flushed by the producer (Z_SYNC_FLUSH)."""
    import zlib

    kind, _, compressed = fmt.partition(".")
    head, record = {
        "jsonl": (b"", b'{"text": "a cat %d", "label": "x"}\n'),
        "csv": (b"text,label\n", b"a cat %d,x\n"),
        "libsvm": (b"", b"1 %d:1.5\n"),
    }[kind]
    first = 2 if head else 1  # the line of the first record
    packer = zlib.compressobj(6, zlib.DEFLATED, 31) if compressed else None

    def send(data: bytes) -> None:
        proc.stdin.write(packer.compress(data) + packer.flush(zlib.Z_SYNC_FLUSH) if packer else data)
        proc.stdin.flush()

    env = {**os.environ, "PYTHONPATH": os.pathsep.join([os.getcwd(), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.Popen(
        [sys.executable, "-c", _BATCHES, kind], stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env
    )
    try:
        send(head)
        for i in range(3):
            send(record % (i + 1))
            assert _lines_of(proc, 1, 120) == [b"1 <stdin>:%d\n" % (first + i)], f"record {i + 1}: no batch"
            assert proc.poll() is None  # the pipe is still open
        send(b"".join(record % (i + 1) for i in range(3, 103)))
        if packer:
            proc.stdin.write(packer.flush())
        proc.stdin.close()
        rest = proc.stdout.read().splitlines()
        assert proc.wait(timeout=120) == 0
    finally:
        proc.kill()
    assert sum(int(line.split()[0]) for line in rest) == 100  # together (one read, or a few)
    assert rest[-1].split()[1] == b"<stdin>:%d" % (first + 102)


@pytest.fixture(scope="module")
def loopback():
    """Two Dask worker processes on 127.0.0.1, sharing this machine's disk."""
    from distributed import LocalCluster

    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0") as c:
        yield c.scheduler_address


@pytest.mark.parametrize("compress", [None, gzip.compress])
def test_a_piped_ingest_on_a_cluster_writes_the_stores_of_the_file_and_in_process(tmp_path, loopback, compress):
    """`… | ingest - --scheduler ADDRESS` and `--n-workers 2`: standard input is spooled once and
    its copy read by the workers as a file's pieces are (3 MB: byte ranges; gzip: one piece);
    every chunk and the IDF the bytes of the in-process piped store and of the file's store on
    the same cluster, the manifests the same but for the source's name; counts in = counts out;
    the spool removed. (main: refused in one line.)"""
    n = 45000
    data = _records(n)
    (tmp_path / "in.jsonl").write_bytes(data)
    piped = compress(data) if compress else data
    common = ["--format", "jsonl", "--n-features", "4096", "--chunk-rows", "5000"]
    spool = tmp_path / "spool"
    spool.mkdir()
    runs = {
        "file-cluster": (tmp_path / "in.jsonl", ["--scheduler", loopback], None),
        "pipe-inprocess": ("-", [], piped),
        "pipe-cluster": ("-", ["--scheduler", loopback, "--tmp-dir", spool], piped),
        "pipe-embedded": ("-", ["--n-workers", "2", "--tmp-dir", spool], piped),
    }
    for name, (source, args, given) in runs.items():
        done = _run("ingest", source, "--out", tmp_path / f"{name}.zarr", *common, *args, data=given)
        assert done.returncode == 0, (name, done.stderr)
        assert f"records read {n}, written {n}, skipped 0" in done.stdout.decode(), (name, done.stdout)
    assert os.listdir(spool) == []
    reference = _files(tmp_path / "pipe-inprocess.zarr")
    assert sum(name.startswith("chunks") for name in reference) >= 9
    for name in runs:
        files = _files(tmp_path / f"{name}.zarr")
        assert sorted(files) == sorted(reference), name
        assert {k: v for k, v in files.items() if not k.endswith(".json")} == {
            k: v for k, v in reference.items() if not k.endswith(".json")
        }, name
        m, ref = _manifest(tmp_path / f"{name}.zarr"), _manifest(tmp_path / "pipe-inprocess.zarr")
        m["source"]["paths"] = ref["source"]["paths"]
        assert m == ref, name
