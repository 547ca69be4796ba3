"""Ingest benchmarks against the project's goals, with scikit-learn as the peer.

    python tools/bench_ingest.py [--corpus-gb 4] [--workdir /tmp] [--keep] [--repeat 3] [--quick]

1. Hashing, 20 Newsgroups (../shared/data relative to the repo; else generated text), one core:
   FeatureHasher.transform_text vs HashingVectorizer on the same documents, n_features 2**18
   (tools/bench_hashing.compare). Goal: >= 2x. Then the whole `streamfit ingest` path (read the
   tar.gz, hash, write a Zarr store) on the train subset, as a fresh process and in process
   (warm), in records/s vs HashingVectorizer alone on the same documents.
2. Peak RSS: a seeded JSONL text corpus of --corpus-gb GiB (Zipf-Mandelbrot word frequencies
   over a word-like vocabulary, label-dependent content words, log-normal document lengths,
   20 labels) is streamed to disk, then `streamfit ingest` runs on it as a subprocess with
   the default chunk size. Peak RSS from wait4's ru_maxrss (and psutil polling of the process
   tree as a cross-check). Goal: < 1 GiB, store rows == generated documents. Then once more
   with `--idf --test-size 0.2` (two passes over an intermediate store).
3. LIBSVM round trip: sector.scale.bz2 ingested with --no-hash and read back must equal
   load_svmlight_file of the same file (values compared as float32, the store's type).

Everything but the corpus generation runs pinned to one CPU with NUMBA_NUM_THREADS=1 (the
machine may be shared: times are best of --repeat). Generated data goes to a temporary directory under --workdir, deleted
afterwards unless --keep.
"""

from __future__ import annotations

import os

os.environ["NUMBA_NUM_THREADS"] = "1"  # before numba is imported

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numba
import numpy as np
import psutil
from bench_hashing import DEFAULT_CORPUS, best_time, compare, generate_corpus, make_hashers, read_corpus
from sklearn.datasets import load_svmlight_file

from streamfit.ingest.hashing import HashingConfig
from streamfit.ingest.pipeline import IngestOptions, ingest
from streamfit.store import open_store

SECTOR = DEFAULT_CORPUS.parents[1] / "libsvm" / "sector" / "sector.scale.bz2"
N_FEATURES = 2**18
GIB = 2**30
GNU_TIME = "/usr/bin/time"  # GNU time (Debian/Ubuntu package "time")


# ------------------------------------------------------------------------------ generated corpus
ZIPF_S, ZIPF_Q = 1.07, 2.7  # word rank density ∝ (x + q)^-s
FUNCTION_WORDS = 200  # ranks below this are shared by all labels
MAX_DOC_TOKENS = 5000
MAX_WORD = 16


@numba.njit(cache=True, inline="always")
def _copy(src, start, length, out, n):
    for i in range(length):
        out[n + i] = src[start + i]
    return n + length


@numba.njit(cache=True, nogil=True)
def _fill(out, seed, vocab, vstart, vlen, pieces, pstart, plen, n_seps, sep_of_percent, label_cdf):
    """Write whole JSONL documents {"label": ..., "text": "w s w s ..."} into out while one more
    surely fits, from numba's generator (thread-local) seeded with seed; returns (bytes,
    documents). pieces = separators, then one line head per label, then the line tail.
    Per document: label k with P(k) from label_cdf, length round(exp(N(log 180, 0.8))) in
    [5, MAX_DOC_TOKENS]; per token: rank r = floor(x), x with density ∝ (x + q)^-s on [0, V) by
    inverse CDF, content ranks (>= FUNCTION_WORDS) rotated by 7919·k within [FUNCTION_WORDS, V); separator
    sep_of_percent[floor(100 u)]."""
    np.random.seed(seed)
    n_words = vstart.shape[0]
    a, b, inv = ZIPF_Q ** (1 - ZIPF_S), (n_words + ZIPF_Q) ** (1 - ZIPF_S), 1 / (1 - ZIPF_S)
    tail = plen.shape[0] - 1
    max_doc = 64 + MAX_DOC_TOKENS * (MAX_WORD + 2)
    n = docs = 0
    while n + max_doc <= out.shape[0]:
        label = np.searchsorted(label_cdf, np.random.random())
        length = min(max(round(np.exp(np.random.normal(np.log(180.0), 0.8))), 5), MAX_DOC_TOKENS)
        h = n_seps + label
        shift = 7919 * label % (n_words - FUNCTION_WORDS)
        n = _copy(pieces, pstart[h], plen[h], out, n)
        for _ in range(length):
            r = min(int((a + np.random.random() * (b - a)) ** inv - ZIPF_Q), n_words - 1)
            if r >= FUNCTION_WORDS:
                r += shift
                if r >= n_words:
                    r -= n_words - FUNCTION_WORDS
            n = _copy(vocab, vstart[r], vlen[r], out, n)
            s = sep_of_percent[int(np.random.random() * 100)]
            n = _copy(pieces, pstart[s], plen[s], out, n)
        n = _copy(pieces, pstart[tail], plen[tail], out, n)
        docs += 1
    return n, docs


def _concat(strings: list[bytes]):
    lengths = np.array([len(s) for s in strings], dtype=np.int64)
    return np.frombuffer(b"".join(strings), dtype=np.uint8), np.cumsum(lengths) - lengths, lengths


class CorpusGenerator:
    """Seeded JSONL text corpus (see _fill): a vocabulary of n_words word-like tokens
    (alternating consonants and vowels, 5 % capitalized, 3 % numbers), shorter words at more
    frequent ranks; 20 labels with P(k) ∝ (k + 1)^-1/2; separators " " (80 %), ", ", ". ",
    "\\n" (JSON-escaped newline), "; "."""

    N_LABELS = 20

    def __init__(self, seed: int = 0, n_words: int = 50_000):
        rng = np.random.default_rng(seed)
        lengths = np.sort(np.clip(rng.poisson(5.5, n_words) + 1, 2, MAX_WORD))
        total = int(lengths.sum())
        starts = np.cumsum(lengths) - lengths
        pos = np.arange(total) - np.repeat(starts, lengths)
        vowel = (pos + np.repeat(rng.integers(0, 2, n_words), lengths)) % 2 == 1
        consonants = np.frombuffer(b"tnshrdlcmwfgypbvkjxqz", dtype=np.uint8)
        c_prob = 1.0 / np.arange(1, len(consonants) + 1) ** 0.9
        vowels = np.frombuffer(b"eaoiuy", dtype=np.uint8)
        v_prob = np.array([0.3, 0.22, 0.2, 0.18, 0.07, 0.03])
        chars = np.where(
            vowel, rng.choice(vowels, total, p=v_prob), rng.choice(consonants, total, p=c_prob / c_prob.sum())
        )
        number = np.repeat(rng.random(n_words) < 0.03, lengths)
        chars = np.where(number, rng.integers(ord("0"), ord("9") + 1, total), chars).astype(np.uint8)
        capital = starts[rng.random(n_words) < 0.05]
        chars[capital] = np.where(chars[capital] >= ord("a"), chars[capital] - 32, chars[capital])
        self.vocab, self.vstart, self.vlen = chars, starts.astype(np.int32), lengths.astype(np.int32)  # cache-sized
        seps = [b" ", b", ", b". ", b"\\n", b"; "]
        self.sep_of_percent = np.repeat(np.arange(len(seps)), [80, 8, 7, 3, 2])
        heads = [b'{"label": "topic-%02d", "text": "' % k for k in range(self.N_LABELS)]
        self.pieces, self.pstart, self.plen = _concat(seps + heads + [b'"}\n'])
        self.n_seps = len(seps)
        label_p = 1.0 / np.sqrt(np.arange(1, self.N_LABELS + 1))
        self.label_cdf = np.cumsum(label_p / label_p.sum())
        self.label_cdf[-1] = 1.0
        self.seed = seed

    def fill(self, out: np.ndarray, block: int) -> tuple[int, int]:
        """Write block number `block` (whole documents, as many as fit in out) into out; returns
        (bytes, documents). Blocks are independent: any thread may make any block."""
        return _fill(
            out,
            self.seed * 1_000_003 + block,
            self.vocab,
            self.vstart,
            self.vlen,
            self.pieces,
            self.pstart,
            self.plen,
            self.n_seps,
            self.sep_of_percent,
            self.label_cdf,
        )


def generate_jsonl(
    path: Path, n_bytes: int, seed: int = 0, block_bytes: int = 32 << 20, threads: int = 1
) -> tuple[int, int]:
    """Stream the first blocks of CorpusGenerator(seed) to path until at least n_bytes are
    written, `threads` blocks in the making at a time; returns (documents, bytes)."""
    gen = CorpusGenerator(seed)
    bufs = [np.empty(block_bytes, dtype=np.uint8) for _ in range(threads + 1)]
    n_docs = written = block = 0
    with open(path, "wb") as f, ThreadPoolExecutor(threads) as pool:
        pending = deque()
        while written < n_bytes:
            while len(pending) < threads:
                buf = bufs[(block + len(pending)) % len(bufs)]
                pending.append((buf, pool.submit(gen.fill, buf, block + len(pending))))
            buf, future = pending.popleft()
            n, docs = future.result()
            buf[:n].tofile(f)
            n_docs, written, block = n_docs + docs, written + n, block + 1
    return n_docs, written


# ------------------------------------------------------------------------------------ measuring
def run_measured(cmd: list[str], log: Path) -> tuple[int, float, int, int]:
    """Run cmd under GNU time (output to log); returns (exit code, wall seconds, peak RSS bytes
    (time's %M: the child's ru_maxrss), peak RSS bytes of the process tree polled every 20 ms).
    Not wait4 on our own child: it is spawned by vfork, and Linux then charges this process's
    peak RSS to the child's ru_maxrss."""
    polled = [0]
    rss_file = log.with_suffix(".maxrss")
    with open(log, "wb") as out:
        t0 = time.perf_counter()
        proc = subprocess.Popen([GNU_TIME, "-f", "%M", "-o", str(rss_file), *cmd], stdout=out, stderr=subprocess.STDOUT)
        done = threading.Event()

        def poll():
            root = psutil.Process(proc.pid)
            while not done.is_set():
                try:
                    tree = [root] + root.children(recursive=True)
                    polled[0] = max(polled[0], sum(p.memory_info().rss for p in tree))
                except psutil.NoSuchProcess:
                    pass
                time.sleep(0.02)

        poller = threading.Thread(target=poll, daemon=True)
        poller.start()
        code = proc.wait()
        wall = time.perf_counter() - t0
        done.set()
        poller.join()
    return code, wall, int(rss_file.read_text().split()[-1]) * 1024, polled[0]


def ingest_cmd(*args) -> list[str]:
    return [sys.executable, "-m", "streamfit.cli", "-q", "ingest", *map(str, args)]


class Table:
    """Rows of the final markdown table."""

    def __init__(self):
        self.rows = []

    def add(self, what, ours, peer, ratio="", goal="", met=""):
        self.rows.append((what, ours, peer, ratio, goal, met))
        print(f"  {what}: ours {ours} | peer {peer} | {ratio} {goal} {met}".rstrip(), flush=True)

    def markdown(self) -> str:
        head = ("benchmark", "streamfit", "peer", "ratio", "goal", "met")
        lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in self.rows]
        return "\n".join(lines)


def yes(ok: bool) -> str:
    return "yes" if ok else "**no**"


# ---------------------------------------------------------------------------------- benchmarks
def bench_hashing(table: Table, work: Path, repeat: int, quick: bool) -> None:
    """Goal 1: hashing throughput, and the whole ingest path, vs HashingVectorizer alone."""
    if DEFAULT_CORPUS.exists():
        docs, name = read_corpus(DEFAULT_CORPUS), "20news"
        subset = read_corpus(DEFAULT_CORPUS, "20news-bydate-train/")
        source = [DEFAULT_CORPUS, "--subset", "20news-bydate-train", "--encoding", "latin-1"]
    else:
        docs, name = generate_corpus(20_000), "generated text"
        subset = docs
        path = work / "docs.jsonl"
        path.write_text("".join(json.dumps({"text": d, "label": f"g{i % 20}"}) + "\n" for i, d in enumerate(docs)))
        source = [path]
    if quick:
        docs = docs[:3000]
    n_mb = sum(len(d.encode()) for d in docs) / 1e6
    print(f"[1] hashing: {name}, {len(docs)} docs, {n_mb:.1f} MB, n_features 2**18, best of {repeat}", flush=True)
    t_ours, t_theirs, identical = compare(docs, N_FEATURES, 1, repeat)
    ratio = t_theirs / t_ours
    table.add(
        f"hashing throughput, {name} ({len(docs)} docs, {n_mb:.0f} MB), 1 core",
        f"{len(docs) / t_ours:,.0f} docs/s ({n_mb / t_ours:.0f} MB/s)",
        f"HashingVectorizer {len(docs) / t_theirs:,.0f} docs/s ({n_mb / t_theirs:.0f} MB/s)",
        f"{ratio:.2f}x",
        ">= 2x",
        yes(ratio >= 2),
    )
    table.add("rows identical to HashingVectorizer", f"{identical:.2%}", "", "", "(non-ASCII docs differ)", "")

    _, hv = make_hashers(N_FEATURES, 1)
    t_hv = best_time(hv.transform, subset, repeat)
    if DEFAULT_CORPUS.exists():
        t_tar = min(timed(read_corpus, DEFAULT_CORPUS, "20news-bydate-train/") for _ in range(repeat))
        table.add(
            f"for scale: read the {len(subset)} train docs from the tar.gz (tarfile, one pass)",
            "",
            f"{t_tar:.2f} s",
            "",
            "",
            "",
        )
    out = work / "news.zarr"
    # one pass of raw counts, as HashingVectorizer makes (text's defaults add a second, IDF pass)
    raw = ["--value", "count", "--no-idf", "--no-l2-normalize"]
    walls = [
        run_measured(ingest_cmd(*source, *raw, "--out", out, "--overwrite"), work / "news.log")[1]
        for _ in range(repeat)
    ]
    options = IngestOptions(
        [str(source[0])],
        str(out),
        hashing=HashingConfig(n_features=N_FEATURES, value="count"),
        idf=False,
        l2_normalize=False,
        source_options=dict(zip(("subset", "encoding"), source[2::2])),
        overwrite=True,
        progress=False,
    )
    ingest(options)  # warm-up
    t_warm = min(timed(ingest, options) for _ in range(repeat))
    n = open_store(str(out)).n_rows
    assert n == len(subset), (n, len(subset))
    for label, t in (("new process", min(walls)), ("in process, warm", t_warm)):
        table.add(
            f"`streamfit ingest` path (read tar.gz + hash + write Zarr), {n} docs, {label}",
            f"{n / t:,.0f} rec/s ({t:.2f} s)",
            f"HashingVectorizer alone {n / t_hv:,.0f} rec/s ({t_hv:.2f} s)",
            f"{t_hv / t:.2f}x",
            "(reported)",
            "",
        )


def timed(fn, *args) -> float:
    t0 = time.perf_counter()
    fn(*args)
    return time.perf_counter() - t0


def bench_rss(table: Table, work: Path, corpus_gb: float, cpus: set[int]) -> None:
    """Goal 2: peak RSS of `streamfit ingest` on a generated corpus of corpus_gb GiB (generated
    with a thread per CPU in cpus; the ingest runs on this process's CPUs)."""
    n_bytes = int(corpus_gb * GIB)
    free = shutil.disk_usage(work).free
    if free < 2 * n_bytes:
        raise SystemExit(f"{work}: {free / GIB:.1f} GiB free, need ~{2 * n_bytes / GIB:.1f} GiB (corpus + store)")
    corpus, out = work / "corpus.jsonl", work / "corpus.zarr"
    print(f"[2] generating {corpus_gb} GiB of JSONL in {corpus}", flush=True)
    pinned = os.sched_getaffinity(0)
    os.sched_setaffinity(0, cpus)
    t0 = time.perf_counter()
    n_docs, size = generate_jsonl(corpus, n_bytes, threads=len(cpus))
    t_gen = time.perf_counter() - t0
    os.sched_setaffinity(0, pinned)
    table.add(
        f"generate corpus ({size / GIB:.2f} GiB, {n_docs:,} docs, {len(cpus)} threads)",
        f"{t_gen:.0f} s ({size / 1e6 / t_gen:.0f} MB/s)",
        "",
        "",
        "< ~180 s",
        yes(t_gen < 180),
    )
    print(f"[2] streamfit ingest {corpus.name} (default chunk size)", flush=True)
    code, wall, peak, polled = run_measured(ingest_cmd(corpus, "--out", out), work / "corpus.log")
    if code:
        raise SystemExit(f"ingest failed ({code}): {(work / 'corpus.log').read_text()[-2000:]}")
    store = open_store(str(out))
    store_bytes = sum(f.stat().st_size for f in out.rglob("*") if f.is_file())
    table.add(
        f"peak RSS, `streamfit ingest` of {size / GIB:.2f} GiB JSONL",
        f"{peak / 2**20:,.0f} MiB (polled tree: {polled / 2**20:,.0f} MiB)",
        "goal 1024 MiB",
        f"{peak / GIB:.2f}",
        "< 1 GiB",
        yes(peak < GIB),
    )
    table.add(
        "store rows == generated documents",
        f"{store.n_rows:,}",
        f"{n_docs:,}",
        "",
        "equal",
        yes(store.n_rows == n_docs),
    )
    table.add(
        "ingest throughput (same run)",
        f"{size / 1e6 / wall:.1f} MB/s, {n_docs / wall:,.0f} rec/s ({wall:.0f} s)",
        "",
        "",
        f"store {store_bytes / GIB:.2f} GiB, nnz {store.manifest.nnz:,}",
        "",
    )
    shutil.rmtree(out)
    print("[2] streamfit ingest --idf --test-size 0.2 (two passes)", flush=True)
    train, test = work / "train.zarr", work / "test.zarr"
    code, wall, peak, polled = run_measured(
        ingest_cmd(corpus, "--out", train, "--idf", "--test-size", "0.2", "--test-out", test), work / "corpus2.log"
    )
    if code:
        raise SystemExit(f"ingest failed ({code}): {(work / 'corpus2.log').read_text()[-2000:]}")
    rows = open_store(str(train)).n_rows + open_store(str(test)).n_rows
    table.add(
        "peak RSS, same corpus, `--idf --test-size 0.2` (two passes)",
        f"{peak / 2**20:,.0f} MiB (polled tree: {polled / 2**20:,.0f} MiB; {wall:.0f} s)",
        "goal 1024 MiB",
        f"{peak / GIB:.2f}",
        "< 1 GiB, train + test rows == docs",
        yes(peak < GIB and rows == n_docs),
    )


def bench_libsvm(table: Table, work: Path, repeat: int) -> None:
    """Goal 3: a LIBSVM file ingested with --no-hash reads back equal to load_svmlight_file."""
    from sklearn.datasets import dump_svmlight_file

    path = SECTOR
    if not path.exists():
        import scipy.sparse as sp

        X = sp.random(6000, 50_000, density=0.002, format="csr", random_state=0)
        path = work / "generated.svm"
        dump_svmlight_file(X, np.random.default_rng(0).integers(0, 100, 6000), str(path), zero_based=False)
    print(f"[3] LIBSVM round trip: {path.name}", flush=True)
    out = work / "libsvm.zarr"
    options = IngestOptions([str(path)], str(out), format="libsvm", hashing=None, overwrite=True, progress=False)
    t_ours = min(timed(ingest, options) for _ in range(repeat))
    t_sk = min(timed(load_svmlight_file, str(path)) for _ in range(repeat))
    store = open_store(str(out))
    X, ids = store.to_scipy()
    X_ref, y_ref = load_svmlight_file(str(path))
    equal = (
        X.shape == X_ref.shape
        and X.dtype == np.float32
        and (X != X_ref.astype(np.float32)).nnz == 0
        and np.array_equal(np.asarray(store.classes, dtype=float)[ids], y_ref)
    )
    table.add(
        f"LIBSVM --no-hash round trip, {path.name} ({X_ref.shape[0]} x {X_ref.shape[1]}, nnz {X_ref.nnz:,})",
        "equal" if equal else "NOT equal",
        "load_svmlight_file",
        "",
        "equal (values as float32)",
        yes(equal),
    )
    table.add(
        "LIBSVM load time (ours: parse + write store)",
        f"{t_ours:.2f} s",
        f"load_svmlight_file {t_sk:.2f} s",
        f"{t_sk / t_ours:.2f}x",
        "(reported)",
        "",
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--corpus-gb", type=float, default=4.0, help="size of the generated corpus, GiB")
    parser.add_argument("--workdir", type=Path, default=Path(tempfile.gettempdir()))
    parser.add_argument("--keep", action="store_true", help="keep the generated data and stores")
    parser.add_argument("--repeat", type=int, default=3, help="timings are the best of this many runs")
    parser.add_argument("--quick", action="store_true", help="smoke run: small sizes, one repeat")
    args = parser.parse_args()
    if args.quick:
        args.corpus_gb, args.repeat = min(args.corpus_gb, 0.05), 1
    cpus = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {min(cpus)})  # one core, inherited by the subprocesses
    work = Path(tempfile.mkdtemp(prefix="bench_ingest-", dir=args.workdir))
    print(
        f"work dir {work}; python {sys.version.split()[0]}, numpy {np.__version__}, 1 core "
        f"(load average {os.getloadavg()[0]:.1f} on {psutil.cpu_count()} CPUs)",
        flush=True,
    )
    table = Table()
    try:
        bench_hashing(table, work, args.repeat, args.quick)
        bench_libsvm(table, work, args.repeat)
        bench_rss(table, work, args.corpus_gb, cpus)
    finally:
        if args.keep:
            print(f"kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    print()
    print(table.markdown())


if __name__ == "__main__":
    main()
