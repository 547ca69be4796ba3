"""JSON Lines: one JSON object per line, e.g. {"text": "...", "label": "sports"}.

text_field may name several fields ("title,body"); each becomes an entry of TextBatch.texts.
A label is a string, an integer (written as str) or a list of them (multilabel); with
numeric_targets (--target numeric) also a real number (a list: several outputs). With
multilabel=None the first record with a usable label decides: a list makes the file multilabel
(single labels after it become one-element lists); otherwise a later list is a bad record.
Lines are UTF-8; a byte-order mark at the start of the file is dropped (as text tools do).
Invalid UTF-8 and lone surrogate escapes ("\ud800", which no UTF-8 text can hold) in a text
field or a label are bad records. Blank lines are skipped; .gz/.bz2/.xz files are decompressed
on the fly. A line longer than
limits.record_bytes is a bad record (never held whole). label_field=None
reads no labels (every label is None): unlabeled records, as `streamfit predict` reads them.
id_field names a field (a string or an integer) each record carries as its id (TextBatch.ids),
what `streamfit predict` writes beside each prediction.
A field name may be a dotted path into nested objects: "meta.topic" reads {"meta": {"topic": …}}
(a key holding the dot itself, {"meta.topic": …}, is taken first).
"""

from __future__ import annotations

import codecs
import json
import os

from streamfit.ingest import stdin
from streamfit.ingest.limits import DEFAULT_BATCH_SIZE, DEFAULT_LIMITS, ReadLimits
from streamfit.ingest.sources._util import (
    TextBatcher,
    bounded_lines,
    check_batch_size,
    open_binary,
    require_path,
    set_option,
    split_fields,
    too_long,
)
from streamfit.ingest.sources.policy import BadRecordPolicy


class _Bad(Exception):
    def __init__(self, problem: str, hint: str = ""):
        super().__init__(problem)
        self.problem = problem
        self.hint = hint


def _check_text(text: str, what: str) -> str:
    """text, unless it holds a lone surrogate (JSON can escape one; UTF-8 cannot hold it)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:
        raise _Bad(
            f"{what} holds the lone surrogate {text[e.start]!r}, which is not text",
            "write a character beyond U+FFFF as a pair of escapes (\\ud83d\\ude00) or as UTF-8",
        ) from None
    return text


_MISSING = object()


def _field(obj: dict, name: str):
    """The value of field `name` of a record: its key, or a dotted path into nested objects
    ("meta.topic"); _MISSING when there is none."""
    if name in obj:
        return obj[name]
    value = obj
    for part in name.split("."):
        if not isinstance(value, dict) or part not in value:
            return _MISSING
        value = value[part]
    return value


def _paths(obj: dict, prefix: str = "", limit: int = 30) -> list[str]:
    """The fields of a record as the options name them, nested ones as dotted paths (at most
    `limit`, depth first)."""
    out: list[str] = []
    for key, value in obj.items():
        if len(out) >= limit:
            break
        if isinstance(value, dict) and value:
            out += _paths(value, f"{prefix}{key}.", limit - len(out))
        else:
            out.append(f"{prefix}{key}")
    return out


def _missing(field: str, option: str, obj: dict) -> _Bad:
    return _Bad(
        f"no field {field!r}", f"{set_option(option)}; this line has the fields: {', '.join(_paths(obj)) or 'none'}"
    )


def _json_kind(value) -> str:
    """What a parsed JSON value is, in JSON's words (Python's type names are not the file's)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    kinds = {int: "integer", float: "number", str: "string", list: "array", dict: "object"}
    return kinds.get(type(value), type(value).__name__)


def _not_a_value(field: str, value, wanted: str) -> _Bad:
    """_Bad for a field holding something else than `wanted`; an object: name its fields."""
    if isinstance(value, dict):
        inside = ", ".join(_paths(value, f"{field}.", 5)) or "none"
        return _Bad(f"field {field!r} is a JSON object, not {wanted}", f"name a field inside it: {inside}")
    return _Bad(f"field {field!r} is a JSON {_json_kind(value)}, not {wanted}")


def _label_text(value, numeric: bool) -> str:
    """A label as text: a string, an integer, or with `numeric` (--target numeric) any JSON number
    (written as Python's shortest repr, which reads back as the same float64)."""
    if isinstance(value, str):
        return _check_text(value, "the label")
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    if isinstance(value, float):
        if numeric:
            return repr(value)
        ids = f'class ids written as reals: write {value:.0f} or "{value:.0f}"; ' if value.is_integer() else ""
        raise _Bad(
            f"label {json.dumps(value)[:40]} is a real number, not a class name",
            f"{ids}for a real-valued target (regression) pass --target numeric",
        )
    raise _Bad(f"label {json.dumps(value)[:40]} is not a string or a number")


class JsonlSource:
    """Streaming JSON Lines reader of text records."""

    kind = "text"

    def __init__(
        self,
        path: str,
        *,
        policy: BadRecordPolicy,
        batch_size: int = DEFAULT_BATCH_SIZE,
        text_field: str = "text",
        label_field: str | None = "label",
        multilabel: bool | None = None,
        id_field: str | None = None,
        limits: ReadLimits = DEFAULT_LIMITS,
        byte_range: tuple[int, int] | None = None,
        numeric_targets: bool = False,
    ):
        """byte_range: read only bytes [start, stop) of an uncompressed file, cut at line
        boundaries (a piece of a distributed ingest); line numbers then count from start.
        numeric_targets (ingest --target numeric): labels may be JSON numbers (a list: several
        outputs)."""
        self.path = os.fspath(path)
        self.url_info = require_path(self.path)  # a URL's look-up, for its open
        self.policy = policy
        self.batch_size = check_batch_size(batch_size)
        self.fields = split_fields("text_field", text_field)
        self.label_field = label_field
        self.multilabel = multilabel
        self.id_field = id_field
        self.limits = limits
        self.byte_range = byte_range
        self.numeric_targets = numeric_targets
        self.n_read = 0
        self.n_lines = 0  # lines read in the current pass (the last line number)

    def __iter__(self):
        self.n_read = self.n_lines = 0
        batcher = TextBatcher(self.fields, with_ids=self.id_field is not None)
        at_start = self.byte_range is None or self.byte_range[0] == 0
        with (
            open_binary(
                self.path, info=self.url_info, max_bytes=self.limits.input_bytes, byte_range=self.byte_range
            ) as f,
            stdin.holding(self.path, batcher),  # a quiet pipe takes the batch short
        ):
            for line_no, line in enumerate(bounded_lines(f, self.limits.record_bytes), 1):
                self.n_lines = line_no
                location = f"{self.path}:{line_no}"
                if line is None:
                    self.n_read += 1
                    problem, hint = too_long(self.limits)
                    self.policy.bad(location, f"the line is {problem}", hint=hint)
                    continue
                if line_no == 1 and at_start and line.startswith(codecs.BOM_UTF8):
                    line = line[len(codecs.BOM_UTF8) :]
                if not line.strip():
                    continue
                self.n_read += 1
                try:
                    texts, label, record_id = self._record(line)
                except _Bad as e:
                    self.policy.bad(location, e.problem, line.rstrip(b"\r\n"), e.hint)
                    continue
                batcher.add(texts, label, location, record_id)
                if len(batcher) == self.batch_size:
                    yield batcher.take()
        if len(batcher):
            yield batcher.take()

    def _record(self, line: bytes) -> tuple[list[str], str | list[str] | None, str | None]:
        """(texts, label, id) of a line; _Bad naming what is wrong."""
        try:
            text = line.decode("utf-8")  # strict: json.loads(bytes) would let encoded surrogates pass
        except UnicodeDecodeError:
            raise _Bad(
                "the line is not valid UTF-8",
                "JSON text is UTF-8: convert the file from its encoding, e.g. iconv -f latin-1 -t utf-8",
            ) from None
        try:
            obj = json.loads(text)
        except (ValueError, RecursionError) as e:
            raise _Bad(f"invalid JSON ({e})") from None
        if not isinstance(obj, dict):
            raise _Bad(f"the line is a JSON {_json_kind(obj)}, not an object")
        texts = []
        for field in self.fields:
            value = _field(obj, field)
            if value is _MISSING:
                raise _missing(field, "--text-field", obj)
            if not isinstance(value, str):
                raise _not_a_value(field, value, "a string")
            texts.append(_check_text(value, f"field {field!r}"))
        record_id = None
        if self.id_field is not None:
            value = _field(obj, self.id_field)
            if value is _MISSING:
                raise _missing(self.id_field, "--id-field", obj)
            if isinstance(value, dict):
                raise _not_a_value(self.id_field, value, "a string or an integer")
            if not isinstance(value, (str, int)) or isinstance(value, bool):
                raise _Bad(f"id field {self.id_field!r} is {json.dumps(value)[:40]}, not a string or an integer")
            record_id = str(value)
            if not record_id.strip():
                raise _Bad(f"id field {self.id_field!r} is empty", "give every record an id")
        if self.label_field is None:
            return texts, None, record_id
        value = _field(obj, self.label_field)
        if value is _MISSING:
            raise _missing(self.label_field, "--label-field", obj)
        if isinstance(value, dict):
            raise _not_a_value(self.label_field, value, "a label")
        label: str | list[str]
        if isinstance(value, list):
            label = [_label_text(v, self.numeric_targets) for v in value]
        else:
            label = _label_text(value, self.numeric_targets)
            if not label:
                raise _Bad("the label is empty")
        if self.multilabel is None:
            self.multilabel = isinstance(label, list)
        if not self.multilabel and isinstance(label, list):
            raise _Bad(
                "label list in a single-label file",
                "a single label in the first record, or --option multilabel=false; pass --option multilabel=true",
            )
        if self.multilabel and isinstance(label, str):
            label = [label]
        return texts, label, record_id
