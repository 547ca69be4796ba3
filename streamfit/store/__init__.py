"""Chunked on-disk stores of sparse rows and labels (format described in format.py)."""

from streamfit.store.format import DEFAULT_CHUNK_ROWS, Manifest
from streamfit.store.store import Chunk, ChunkSource, InMemoryStore, Store, StoreWriter, open_store

__all__ = [
    "DEFAULT_CHUNK_ROWS",
    "Chunk",
    "ChunkSource",
    "InMemoryStore",
    "Manifest",
    "Store",
    "StoreWriter",
    "open_store",
]
