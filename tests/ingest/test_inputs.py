"""Inputs as a data engineer has them: globs and dataset directories (expanded in sorted path
order), and Parquet datasets with hive partitions, whose partition values are columns."""

import collections
import json
import os
import re

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from streamfit.errors import InputError
from streamfit.ingest.hashing import HashingConfig
from streamfit.ingest.inputs import expand_inputs
from streamfit.ingest.pipeline import IngestOptions, ingest
from streamfit.ingest.sources.parquet import hive_partition
from streamfit.store import open_store

BUCKET = "streamfit-test"  # made by the s3 fixture (tests/conftest.py)


def _jsonl(path, rows):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps({"text": t, "label": y}) + "\n" for t, y in rows))


def test_globs_and_dataset_directories_expand_to_sorted_files(tmp_path):
    for name in ("b.jsonl", "a.jsonl", "sub/c.jsonl.gz", "_SUCCESS", ".hidden.txt"):
        (tmp_path / "data" / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "data" / name).write_bytes(b"")
    data = tmp_path / "data"
    assert expand_inputs([str(data / "*.jsonl")]) == [str(data / "a.jsonl"), str(data / "b.jsonl")]
    assert expand_inputs([str(data / "**" / "*.gz")]) == [str(data / "sub" / "c.jsonl.gz")]
    # a directory of data files (Spark's _SUCCESS and hidden files left out), recursively, sorted
    assert expand_inputs([str(data)]) == [str(data / n) for n in ("a.jsonl", "b.jsonl", "sub/c.jsonl.gz")]
    # a folder corpus (documents without a data format's extension) stays one input, as does --format folder
    (tmp_path / "corpus" / "sports").mkdir(parents=True)
    (tmp_path / "corpus" / "sports" / "doc1").write_text("a game")
    assert expand_inputs([str(tmp_path / "corpus")]) == [str(tmp_path / "corpus")]
    assert expand_inputs([str(data)], format="folder") == [str(data)]
    with pytest.raises(InputError, match="no file matches this pattern"):
        expand_inputs([str(tmp_path / "none-*.jsonl")])


def test_a_glob_is_ingested_as_its_files_in_sorted_order(tmp_path):
    _jsonl(tmp_path / "in" / "2.jsonl", [("late words here", "b")])
    _jsonl(tmp_path / "in" / "1.jsonl", [("early words", "a"), ("more early words", "c")])
    o = IngestOptions(
        inputs=[str(tmp_path / "in" / "*.jsonl")],
        out=str(tmp_path / "s.zarr"),
        hashing=HashingConfig(n_features=64),
        progress=False,
    )
    assert ingest(o).read == 3
    store = open_store(str(tmp_path / "s.zarr"))
    assert store.classes == ["a", "c", "b"]  # first appearance over 1.jsonl then 2.jsonl
    assert store.manifest.source["paths"] == [str(tmp_path / "in" / n) for n in ("1.jsonl", "2.jsonl")]


def test_hive_partition_values_are_columns_of_a_parquet_dataset(tmp_path):
    dataset = tmp_path / "reviews"
    for year, texts in (("2024", ["good film", "bad plot", "fine"]), ("2023", ["old film"])):
        (dataset / f"year={year}").mkdir(parents=True)
        pq.write_table(pa.table({"text": texts}), str(dataset / f"year={year}" / "part-0.parquet"))
    (dataset / "_SUCCESS").write_bytes(b"")
    assert hive_partition("s3://b/reviews/year=2024/lang=en%20us/p.parquet") == {"year": "2024", "lang": "en us"}
    o = IngestOptions(
        inputs=[str(dataset)],
        out=str(tmp_path / "s.zarr"),
        hashing=HashingConfig(n_features=64),
        source_options={"label_field": "year"},
        progress=False,
    )
    assert ingest(o).written == 4
    store = open_store(str(tmp_path / "s.zarr"))
    _, y = store.to_scipy()
    assert store.classes == ["2023", "2024"] and y.tolist() == [0, 1, 1, 1]  # year=2023 sorts first


@pytest.mark.slow
def test_an_archive_hdf5_and_numpy_files_behind_a_url_give_the_stores_of_their_local_copies(tmp_path, s3):
    """A tar.gz folder archive, an HDF5 file and NumPy files (an .npz, an .npy with labels in
    another .npy) read from the S3 server (a stream; ranged reads; whole files): the stores of
    the local files, but for the paths recorded."""
    import h5py
    import numpy as np

    archive = os.path.join(os.path.dirname(__file__), "..", "data", "walkthrough", "clinic.tar.gz")
    rng = np.random.default_rng(0)
    h5 = tmp_path / "d.h5"
    with h5py.File(h5, "w") as f:
        f["X"], f["y"] = rng.random((300, 6)), rng.integers(0, 3, 300)
    np.savez(tmp_path / "d.npz", X=rng.random((200, 5)), y=rng.integers(0, 4, 200))
    np.save(tmp_path / "x.npy", rng.random((100, 3)))
    np.save(tmp_path / "labels.npy", rng.integers(0, 2, 100))
    s3.put(str(tmp_path / "labels.npy"), "streamfit-test/url-inputs/labels.npy")
    text = {"source_options": {"subset": "training"}, "hashing": HashingConfig(n_features=2**12)}
    numeric = {"source_options": {"x_dataset": "X", "y_dataset": "y"}}
    labels = {"local": str(tmp_path / "labels.npy"), "s3": "s3://streamfit-test/url-inputs/labels.npy"}
    inputs = [(archive, text), (str(h5), numeric), (str(tmp_path / "d.npz"), numeric), (str(tmp_path / "x.npy"), {})]
    for local, options in inputs:
        name = os.path.basename(local)
        s3.put(local, f"streamfit-test/url-inputs/{name}")
        manifests = []
        for where, source in (("local", local), ("s3", f"s3://streamfit-test/url-inputs/{name}")):
            out = tmp_path / f"{len(manifests)}-{name}.zarr"
            if name == "x.npy":  # its labels in another .npy, where it is
                options = {"source_options": {"y_path": labels[where]}, "hashing": None}
            ingest(IngestOptions(inputs=[source], out=str(out), progress=False, **options))
            m = open_store(str(out)).manifest
            manifests.append((m.n_rows, m.classes, [c.sha256 for c in m.chunks], m.source["paths"]))
        assert manifests[0][:3] == manifests[1][:3] and manifests[0][0] > 0
        assert manifests[1][3] == [f"s3://streamfit-test/url-inputs/{name}"]


def test_a_url_folder_of_documents_is_a_folder_corpus_and_other_inputs_are_clear_errors():
    """A folder (prefix) behind a URL whose files are no data files is one input, a folder
    corpus, as a local one is; a file that is no archive read as a folder, and a damaged zip,
    are one-line errors."""
    import fsspec

    from streamfit.ingest.sources import BadRecordPolicy, open_source

    fs = fsspec.filesystem("memory")
    fs.pipe("memory://streamfit-tests/inputs/corpus/sports/doc1", b"a game")
    fs.pipe("memory://streamfit-tests/inputs/data/a.jsonl", b"")
    # named with a final "/", which tells the format and the reader that it is a folder without asking again
    assert expand_inputs(["memory://streamfit-tests/inputs/corpus"]) == ["memory://streamfit-tests/inputs/corpus/"]
    # a dataset directory: its files, as fsspec names them
    assert expand_inputs(["memory://streamfit-tests/inputs/data"]) == ["memory:///streamfit-tests/inputs/data/a.jsonl"]
    fs.pipe("memory://streamfit-tests/inputs/corpus.7z", b"\x00")
    fs.pipe("memory://streamfit-tests/inputs/corpus.zip", b"\x00")
    for url, problem in (
        ("memory://streamfit-tests/inputs/corpus.7z", r"not a directory or an archive \(archives end in .tar, "),
        ("memory://streamfit-tests/inputs/corpus.zip", "truncated or corrupt archive"),
    ):
        with pytest.raises(InputError, match=f"^{url}: {problem}"):
            open_source(url, "folder", policy=BadRecordPolicy())


def test_an_ingest_that_fails_before_reading_forgets_the_listing_handed_over(tmp_path):
    """The input expansion hands a URL folder's listing to the folder's reader; an ingest refused
    before it reads (here: --out exists) keeps none of it for a later reader of that folder."""
    import fsspec

    from streamfit.errors import StreamfitError
    from streamfit.ingest.sources import folder

    fsspec.filesystem("memory").pipe("memory://streamfit-tests/forget/corpus/sports/doc1", b"a game")
    url = "memory://streamfit-tests/forget/corpus"
    expand_inputs([url])
    assert url in folder._LISTED  # what the ingest below hands over too
    (tmp_path / "out.zarr").mkdir()
    with pytest.raises(StreamfitError, match="already exists"):
        ingest(IngestOptions(inputs=[url], out=str(tmp_path / "out.zarr"), progress=False))
    assert folder._LISTED == {}


@pytest.mark.slow
def test_a_folder_corpus_and_a_zip_behind_a_url_give_the_stores_of_their_local_copies_without_a_head_per_file(
    tmp_path, s3
):
    """A folder of class folders on the S3 server (with a subset beside it, hidden and empty
    files) and a zip of it (members in the folder's order): the stores of the local folder
    (classes, every chunk digest). The
    folder costs one GET per non-empty document of the subset and one listing, never a
    request per file besides: no HEAD, no GET of the other subset's documents; the zip a few
    requests whatever its number of members. Exact counts, in process (they were 8 LISTs and a
    HEAD for the folder, 3 LISTs and 4 HEADs for the zip, when each step asked again; then 3
    LISTs, and 1 LIST and 3 HEADs, before the expansion listed once and the zip's opens took its
    look-up; then 2 LISTs for the folder before its reader took the expansion's listing; the zip's
    HEAD and 3 GETs more once the expansion looked for a zip of one data file, 10 GETs and 2 HEADs
    in all, until the expansion took the listing's look-up and each open read the archive's last
    MiB in one GET, where zipfile's reads of its end had been three)."""
    import logging
    import zipfile

    files = {f"train/c{i % 3}/{i:02d}": f"document {i} " + "word " * i for i in range(30)}
    files |= {"train/c1/empty": "", "train/.hidden/x": "hidden", "test/c0/99": "not read"}
    for name, text in files.items():
        (tmp_path / "news" / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "news" / name).write_text(text)
        s3.pipe(f"{BUCKET}/corpus/news/{name}", text.encode())
    with zipfile.ZipFile(tmp_path / "news.zip", "w", zipfile.ZIP_DEFLATED) as zf:
        for name in sorted(files):
            zf.write(tmp_path / "news" / name, name)
    s3.put(str(tmp_path / "news.zip"), f"{BUCKET}/corpus/news.zip")
    requests = []

    class Requests(logging.Handler):
        def emit(self, record):
            line = record.getMessage().split('"')[1]  # "GET /bucket/key HTTP/1.1", maybe in colour
            requests.append("LIST" if "list-type=2" in line else re.search(r"[A-Z]+(?= /)", line).group())

    stores = {}
    werkzeug, level = logging.getLogger("werkzeug"), logging.getLogger("werkzeug").level
    werkzeug.setLevel(logging.INFO)  # the server's access log: a line per request
    werkzeug.addHandler(handler := Requests())
    try:
        for name, source in (
            ("local", str(tmp_path / "news")),
            ("s3", f"s3://{BUCKET}/corpus/news/"),
            ("zip", str(tmp_path / "news.zip")),
            ("s3 zip", f"s3://{BUCKET}/corpus/news.zip"),
        ):
            requests.clear()
            out = tmp_path / f"{name}.zarr"
            options = {"subset": "train"}
            hashing = HashingConfig(n_features=2**10)
            ingest(
                IngestOptions(
                    inputs=[source], out=str(out), source_options=options, hashing=hashing, chunk_rows=8, progress=False
                )
            )
            m = open_store(str(out)).manifest
            stores[name] = (m.n_rows, m.classes, [c.sha256 for c in m.chunks], dict(collections.Counter(requests)))
    finally:
        werkzeug.removeHandler(handler)
        werkzeug.setLevel(level)
    assert stores["local"][:3] == stores["s3"][:3] and stores["local"][0] == 31 and len(stores["local"][2]) == 4
    assert stores["zip"][:3] == stores["s3 zip"][:3] == stores["local"][:3]  # members in the folder's order
    # the folder: its expansion (one LIST of the keys that start with its name: is it a folder, and its
    # files), whose listing the reader takes; the format and the reader know it is a folder from its
    # name, "s3://…/news/", and ask nothing
    assert stores["s3"][3] == {"GET": 30, "LIST": 1}
    # the zip: its expansion (a LIST, whose entry of the zip its open takes, and one GET of its last
    # MiB, which holds the central directory: is it one data file, sources/archive.py), the reader's
    # look-up (a HEAD), whose answer (size, ETag) its two opens (its layout, its read) take, so they
    # ask nothing: one GET of the last MiB each (this small zip's members lie in it too)
    assert stores["s3 zip"][3] == {"GET": 3, "HEAD": 1, "LIST": 1}
