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
