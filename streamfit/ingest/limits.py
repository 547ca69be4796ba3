"""How much a source may read: the bounds that `ingest --max-record-bytes/--max-input-bytes` set, and
the records it reads at a time (`ingest --batch-size`)."""

from __future__ import annotations

from dataclasses import dataclass

# The defaults of ReadLimits (and of `ingest --max-record-bytes/--max-input-bytes`): no real
# document or line comes near 64 MiB (a dense LIBSVM row of a million features is ~15 MiB), and
# no real corpus near 1 TiB per input file or folder after decompression.
DEFAULT_RECORD_BYTES = 64 << 20
DEFAULT_INPUT_BYTES = 1 << 40

# Records a source reads and yields at a time, unless told (the default of `ingest --batch-size`).
DEFAULT_BATCH_SIZE = 8192


@dataclass(frozen=True)
class ReadLimits:
    """Bounds on what a source reads, so that a hostile or damaged input (a decompression bomb, a
    link to /dev/zero, a file without newlines) ends in a clear error instead of exhausting memory
    or time. record_bytes: the longest record, a line of a LIBSVM/JSONL/CSV file or a document of
    a folder or archive (a longer one is a bad record; in CSV it stops the read); input_bytes: the
    most bytes read from one input (a file, folder or archive), counted after decompression (more
    stops the read with an InputError)."""

    record_bytes: int = DEFAULT_RECORD_BYTES
    input_bytes: int = DEFAULT_INPUT_BYTES


DEFAULT_LIMITS = ReadLimits()
