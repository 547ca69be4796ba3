"""The Zarr backend writes its files itself: byte for byte what zarr-python writes, and readable
by zarr-python (the independent peer), without importing it."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest
import scipy.sparse as sp
import zarr

from streamfit.storage import resolve
from streamfit.store import zarr_backend


def _zarr_python_files(write) -> dict[str, bytes]:
    """The objects zarr-python writes for write(zarr store) (a MemoryStore)."""
    from zarr.storage import MemoryStore

    objects: dict = {}
    write(MemoryStore(objects))
    return {key: buffer.to_bytes() for key, buffer in objects.items()}


def _zarr_python_chunk(store, X: sp.csr_matrix, labels) -> None:
    """A row chunk's group as zarr-python writes it (the backend before it wrote its own files)."""
    from zarr.codecs import Crc32cCodec, ZstdCodec

    def put(group, name, values):
        array = group.create_array(
            name,
            shape=values.shape,
            chunks=tuple(max(n, 1) for n in values.shape),
            dtype=values.dtype,
            compressors=[ZstdCodec(level=zarr_backend.ZSTD_LEVEL), Crc32cCodec()],
        )
        if values.size:
            array[...] = values

    group = zarr.create_group(store, zarr_format=3)
    put(group, "indptr", X.indptr.astype(np.int64))
    put(group, "indices", X.indices.astype(np.int32))
    put(group, "data", X.data.astype(np.float32))
    if sp.issparse(labels):
        Y = group.create_group("Y")
        put(Y, "indptr", labels.indptr.astype(np.int64))
        put(Y, "indices", labels.indices.astype(np.int32))
    elif labels.ndim == 2:
        put(group, "targets", labels)
    else:
        put(group, "y", labels)


def _tree(root) -> dict[str, bytes]:
    return {
        os.path.relpath(os.path.join(d, f), root): open(os.path.join(d, f), "rb").read()
        for d, _, files in os.walk(root)
        for f in files
    }


rng = np.random.default_rng(0)
X = sp.random(40, 30, density=0.2, random_state=1, format="csr", dtype=np.float32)
X.data[:3] = [-0.0, 0.0, np.nan]  # signed zero and NaN keep their bits
LABELS = {
    "multiclass": rng.integers(0, 4, 40).astype(np.int32),
    "one class (all zeros: no chunk)": np.zeros(40, dtype=np.int32),
    "multilabel": sp.csr_matrix((rng.random((40, 5)) < 0.3).astype(np.float32)),
    "regression": rng.normal(size=(40, 3)),
}


@pytest.mark.parametrize("case", list(LABELS))
@pytest.mark.parametrize("rows", [slice(0, 40), slice(0, 0)])
def test_a_chunk_is_the_files_zarr_python_writes(tmp_path, case, rows):
    labels = LABELS[case][rows]
    zarr_backend.write_chunk(resolve(str(tmp_path)), 7, X[rows], labels)
    ours = _tree(tmp_path / "chunks" / "000007")
    assert ours == _zarr_python_files(lambda store: _zarr_python_chunk(store, X[rows], labels))
    group = zarr.open_group(str(tmp_path / "chunks" / "000007"), mode="r")
    got = sp.csr_matrix((group["data"][:], group["indices"][:], group["indptr"][:]), shape=X[rows].shape)
    assert np.array_equal(got.data.view(np.uint32), X[rows].data.view(np.uint32))
    assert np.array_equal(got.indices, X[rows].indices) and np.array_equal(got.indptr, X[rows].indptr)


def test_the_root_groups_are_the_files_zarr_python_writes(tmp_path):
    manifest = {"n_rows": 3, "classes": ["a", "é"], "value": float("nan"), "chunks": [{"id": 0}]}
    zarr_backend.close(resolve(str(tmp_path)), json.dumps(manifest))
    expected = _zarr_python_files(
        lambda store: zarr.create_group(store, zarr_format=3, attributes={"streamfit.manifest": manifest})
    )
    assert (tmp_path / "zarr.json").read_bytes() == expected["zarr.json"]
    assert (tmp_path / "chunks" / "zarr.json").read_bytes() == _zarr_python_files(
        lambda store: zarr.create_group(store, zarr_format=3)
    )["zarr.json"]


def test_writing_and_reading_a_store_imports_no_zarr(tmp_path):
    """zarr-python (about 0.2 CPU s to import) is needed only for the column copy (csc.py), fsspec
    (and the asyncio it imports) only behind a URL."""
    code = (
        "import sys, numpy as np, scipy.sparse as sp\n"
        "from streamfit.store import StoreWriter, open_store\n"
        f"w = StoreWriter({str(tmp_path / 's.zarr')!r}, chunk_rows=4)\n"
        "w.write_rows(sp.csr_matrix(np.eye(10, dtype=np.float32)), np.arange(10) % 2)\n"
        "w.close(n_features=10, classes=['a', 'b'])\n"
        f"X, y = open_store({str(tmp_path / 's.zarr')!r}).to_scipy()\n"
        "assert (X != sp.eye(10)).nnz == 0 and list(y) == [0, 1] * 5\n"
        "print(sorted(m for m in ('zarr', 'fsspec', 'asyncio') if m in sys.modules))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split("\n")[-2] == "[]"


# ------------------------------------------- inspect --verify and the Zarr metadata (zarr.json)
def _task_store(tmp_path, task: str, *, csc: bool = False) -> str:
    """A Zarr store of 30 rows in chunks of 12 (the last one 6 rows) of each task; csc: with a
    column copy of two blocks (streamfit transpose)."""
    from streamfit.store import StoreWriter
    from streamfit.store.csc import build_csc

    g = np.random.default_rng(3)
    X = sp.random(30, 16, density=0.3, random_state=4, format="csr", dtype=np.float32)
    labels = {
        "multiclass": g.integers(0, 3, 30).astype(np.int32),
        "multilabel": sp.csr_matrix((g.random((30, 3)) < 0.4).astype(np.float32)),
        "regression": g.normal(size=(30, 2)),
    }[task]
    path = str(tmp_path / f"{task}.zarr")
    n_outputs = 2 if task == "regression" else None
    w = StoreWriter(path, multilabel=task == "multilabel", n_outputs=n_outputs, chunk_rows=12)
    w.write_rows(X, labels)
    w.close(n_features=16, classes=["a", "b"] if task == "regression" else ["a", "b", "c"])
    if csc:
        build_csc(path, block_features=8)
    return path


def _zarr_python_reads(path: str) -> dict[str, np.ndarray]:
    """Every array of the store as zarr-python reads it, walking the hierarchy from the root
    group (each group's zarr.json); {path: values}."""
    import warnings

    out = {}
    with warnings.catch_warnings():  # manifest.json and idf.npy are no Zarr nodes: zarr-python warns
        warnings.simplefilter("ignore")
        members = zarr.open_group(path, mode="r").members(max_depth=None)
    for name, node in members:
        if isinstance(node, zarr.Array):
            out[name] = node[...]
    return out


def _damages(document: dict) -> dict[str, bytes | None]:
    """The damages of one zarr.json: cut short, gone, and (arrays) another shape or data type,
    (groups) another node type; the bytes to write, None to delete."""
    text = json.dumps(document, indent=2).encode()
    damaged: dict[str, bytes | None] = {"truncated": text[: len(text) // 2], "missing": None}
    if document["node_type"] == "array":
        other = {"int32": "int64", "int64": "int32", "float32": "float64", "float64": "float32"}
        shape = [document["shape"][0] + 1] + document["shape"][1:]
        damaged["shape"] = json.dumps(document | {"shape": shape}, indent=2).encode()
        damaged["dtype"] = json.dumps(document | {"data_type": other[document["data_type"]]}, indent=2).encode()
    else:
        damaged["node type"] = json.dumps(document | {"node_type": "array"}, indent=2).encode()
    return damaged


@pytest.mark.parametrize("task", ["multiclass", "multilabel", "regression"])
def test_an_intact_store_verifies_and_zarr_python_reads_our_arrays(tmp_path, task):
    from streamfit.store import open_store

    path = _task_store(tmp_path, task, csc=task == "multiclass")
    store = open_store(path)
    assert store.verify() == []
    arrays = _zarr_python_reads(path)
    for i in range(store.n_chunks):
        chunk, group = store.read_chunk(i), f"chunks/{i:06d}"
        assert np.array_equal(arrays[f"{group}/indptr"], chunk.X.indptr)
        assert np.array_equal(arrays[f"{group}/indices"], chunk.X.indices)
        assert np.array_equal(arrays[f"{group}/data"].view(np.uint32), chunk.X.data.view(np.uint32))
        if task == "multilabel":
            assert np.array_equal(arrays[f"{group}/Y/indptr"], chunk.labels.indptr)
            assert np.array_equal(arrays[f"{group}/Y/indices"], chunk.labels.indices)
        else:
            assert np.array_equal(arrays[f"{group}/{'targets' if task == 'regression' else 'y'}"], chunk.labels)
    for b in range(store.n_feature_blocks):
        block = store.read_feature_block(b)
        for name in ("indptr", "indices", "data"):
            assert np.array_equal(arrays[f"csc/block-{b:06d}/{name}"], getattr(block, name))
    root = zarr.open_group(path, mode="r")
    copy = dict(root.attrs)["streamfit.manifest"]  # written before transpose added `csc` (and so another digest)
    manifest = json.loads(store.manifest.to_json())
    assert {k: copy[k] for k in copy if k not in ("csc", "manifest_sha256")} == {
        k: manifest[k] for k in manifest if k not in ("csc", "manifest_sha256")
    }


@pytest.mark.parametrize("task", ["multiclass", "multilabel", "regression"])
def test_verify_names_each_damaged_zarr_metadata_file_that_zarr_python_refuses_or_misreads(tmp_path, task):
    """Every zarr.json of a store (root, chunks/, each chunk's group and arrays, the column copy's):
    cut short, deleted, another shape, another dtype (a group: another node type). zarr-python
    then fails or reads other arrays, and `verify` gives one line naming the file and the fix;
    before, only the root's was read (a chunk array's metadata damaged passed verify)."""
    import shutil

    from streamfit.store import Store

    intact = _task_store(tmp_path, task, csc=task == "multiclass")
    arrays = _zarr_python_reads(intact)
    files = sorted(
        os.path.relpath(os.path.join(d, "zarr.json"), intact) for d, _, f in os.walk(intact) if "zarr.json" in f
    )
    assert len(files) == 2 + 3 * (7 if task == "multilabel" else 5) + (1 + 2 * 4 if task == "multiclass" else 0)
    for file in files:
        document = json.loads(open(os.path.join(intact, file), "rb").read())
        for damage, data in _damages(document).items():
            path = str(tmp_path / "damaged.zarr")
            shutil.rmtree(path, ignore_errors=True)
            shutil.copytree(intact, path)
            if data is None:
                os.remove(os.path.join(path, file))
            else:
                with open(os.path.join(path, file), "wb") as f:
                    f.write(data)
            try:  # the independent reader is affected
                got = _zarr_python_reads(path)
            except Exception:
                got = None
            assert (
                got is None or set(got) != set(arrays) or any(not np.array_equal(got[k], arrays[k]) for k in arrays)
            ), (
                file,
                damage,
            )
            problems = Store(path).verify()
            fix = "transpose" if file.startswith("csc/") else "re-ingest the store"
            assert len(problems) == 1 and "\n" not in problems[0], (file, damage, problems)
            assert (file in problems[0] or file == "zarr.json") and fix in problems[0], (file, damage, problems)
