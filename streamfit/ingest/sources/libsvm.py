"""LIBSVM / SVMlight files: `label idx:val idx:val ...` (multilabel: `l1,l2 idx:val ...`).

The file is read in blocks of BLOCK_BYTES cut at the last newline (.gz/.bz2/.xz are
decompressed on the fly); a numba kernel parses up to batch_size records of a block at a time.
Batches therefore hold at most batch_size records, and fewer at the end of a block.

Decisions:
- Indices are 1-based unless zero_based=True: index k becomes column k-1, and index 0 is a bad
  record. X.shape[1] is one more than the largest column seen so far in the file, so widths grow
  from batch to batch and the last batch has the width of the whole file.
- Indices on a line may come in any order and are sorted. A repeated index on a line is a bad
  record (scikit-learn refuses such files too, and summing would hide a broken writer).
- Explicit zero values are kept, as scikit-learn keeps them.
- Values are decimal numbers (sign, digits, point, exponent), converted exactly as Python's
  float() converts them. NaN, infinite and overflowing values are bad records, as are negative
  indices and indices above 2**62. (Large indices are for hashing; kept as columns with --no-hash,
  ingest refuses those beyond a store's int32 columns, 2**31 - 2, at their line.)
- A line longer than limits.record_bytes is a bad record; it is never held whole (memory stays
  within a block plus the bound, however long the line).
- `qid:N` tokens are ignored (one logged warning per pass over the file, naming the first line
  with one and how many lines have one); `#` starts a comment;
  blank and comment-only lines are not records, but they count for line numbers.
- A UTF-8 byte-order mark at the start of the file is dropped (as text tools do); it would
  otherwise become part of the first label.
- Labels: integer-valued numbers are written canonically ('+1' and '1.0' -> '1'), other labels
  are kept as written; labels with control characters (a NUL from UTF-16, say) or that are not
  UTF-8 are bad records. With multilabel=None the first batch decides: if any of its labels has
  a comma, the file is multilabel and every label is a list (in file order; a line without a
  label, one that starts with idx:val, gives []). Otherwise a line without a label is a bad
  record wherever it is, as are later label lists.
"""

from __future__ import annotations

import codecs
import logging
import os
import re
from functools import lru_cache

import numpy as np

from streamfit._jit import kernel
from streamfit.ingest import stdin
from streamfit.ingest.limits import DEFAULT_BATCH_SIZE, DEFAULT_LIMITS, ReadLimits
from streamfit.ingest.sources._util import (
    MAX_INDEX,
    canonical_label,
    check_batch_size,
    csr_int64,
    fits_float32,
    open_binary,
    require_path,
    show,
    too_long,
)
from streamfit.ingest.sources.batches import SparseBatch
from streamfit.ingest.sources.policy import BadRecordPolicy
from streamfit.sorting import stable_argsort

log = logging.getLogger(__name__)

BLOCK_BYTES = 16 << 20

# Error codes of the kernel, one per record (0: good).
NO_COLON, BAD_INDEX, NEGATIVE_INDEX, ZERO_INDEX, HUGE_INDEX, BAD_VALUE, NONFINITE, DUPLICATE = range(1, 9)
# _parse_value results besides these codes: a float, or "needs Python's float()".
_FAST, _SLOW = 0, -1

_INDEX_HINT = "feature indices must be integers from 1 (or from 0 with --zero-based)"
_PROBLEMS = {
    NO_COLON: ("feature {} is not index:value", "features are written index:value"),
    BAD_INDEX: ("bad feature index in {}", _INDEX_HINT),
    NEGATIVE_INDEX: ("negative feature index in {}", _INDEX_HINT),
    ZERO_INDEX: ("feature index 0 in {} but indices are 1-based", "pass --zero-based"),
    HUGE_INDEX: ("feature index in {} is above 2**62", _INDEX_HINT),
    BAD_VALUE: ("value in {} is not a number", "values are decimal numbers such as 0.5 or 1e-3"),
    NONFINITE: (
        "value in {} is not finite in float32",
        (
            "NaN, infinite values and values beyond float32's ±3.4e38 (the stores' precision) are not "
            "allowed; scale the features"
        ),
    ),
    DUPLICATE: ("feature index in {} repeats on the line", "each index may appear once per line"),
}

_POW10 = np.array([10.0**k for k in range(23)])
_NAN = np.frombuffer(b"nan", dtype=np.uint8)
_INF = np.frombuffer(b"inf", dtype=np.uint8)
_INFINITY = np.frombuffer(b"infinity", dtype=np.uint8)
_TOKEN = re.compile(rb"[^ \t\n\r\x0b\x0c#]+")


def _token_at(data: bytes, start: int) -> bytes:
    """The token that begins at `start`, where the kernel found one (so _TOKEN matches there)."""
    match = _TOKEN.match(data, start)
    assert match is not None, f"no token at byte {start}"
    return match.group()


@kernel(nogil=True)
def _is_space(c):
    return c == 32 or c == 9 or c == 13 or c == 11 or c == 12


@kernel(nogil=True)
def _is_digit(c):
    return 48 <= c <= 57


@kernel(nogil=True)
def _word_is(buf, s, e, word):
    """buf[s:e], lowercased, equals the ASCII bytes of word."""
    if e - s != len(word):
        return False
    for k in range(e - s):
        if (buf[s + k] | 32) != word[k]:
            return False
    return True


@kernel(nogil=True)
def _parse_index(buf, s, e):
    """(code, index) of the digits buf[s:e]; code 0 when good."""
    if s < e and buf[s] == 45:  # '-'
        for k in range(s + 1, e):
            if not _is_digit(buf[k]):
                return BAD_INDEX, 0
        return (NEGATIVE_INDEX if e - s > 1 else BAD_INDEX), 0
    if s == e:
        return BAD_INDEX, 0
    index = 0
    huge = False
    for k in range(s, e):
        c = buf[k]
        if not _is_digit(c):
            return BAD_INDEX, 0
        d = c - 48
        if index > (MAX_INDEX - d) // 10:
            huge = True
        else:
            index = index * 10 + d
    return (HUGE_INDEX if huge else 0), index


@kernel(nogil=True)
def _parse_value(buf, s, e):
    """(code, value) of the number buf[s:e]. Exact (Clinger's fast path) when the significant
    digits form an integer of at most 2**53 and the decimal exponent is within +-22; otherwise
    (_SLOW, nan) and Python's rules finish the job. At most 18 digits are accumulated (no int64
    overflow); dropping a nonzero digit makes the value inexact, hence slow."""
    i = s
    negative = False
    if i < e and (buf[i] == 43 or buf[i] == 45):
        negative = buf[i] == 45
        i += 1
    significand = 0
    n_digits = 0
    exponent = 0
    seen_digit = False
    inexact = False
    while i < e and _is_digit(buf[i]):
        seen_digit = True
        d = buf[i] - 48
        if significand == 0 and d == 0:
            pass
        elif n_digits < 18:
            significand = significand * 10 + d
            n_digits += 1
        else:
            exponent += 1
            inexact |= d != 0
        i += 1
    if i < e and buf[i] == 46:  # '.'
        i += 1
        while i < e and _is_digit(buf[i]):
            seen_digit = True
            d = buf[i] - 48
            if significand == 0 and d == 0:
                exponent -= 1
            elif n_digits < 18:
                significand = significand * 10 + d
                n_digits += 1
                exponent -= 1
            else:
                inexact |= d != 0
            i += 1
    if not seen_digit:
        start = s + 1 if s < e and (buf[s] == 43 or buf[s] == 45) else s
        if _word_is(buf, start, e, _NAN) or _word_is(buf, start, e, _INF) or _word_is(buf, start, e, _INFINITY):
            return NONFINITE, 0.0
        return BAD_VALUE, 0.0
    if i < e and (buf[i] == 101 or buf[i] == 69):  # 'e' / 'E'
        i += 1
        exponent_negative = False
        if i < e and (buf[i] == 43 or buf[i] == 45):
            exponent_negative = buf[i] == 45
            i += 1
        if i == e:
            return BAD_VALUE, 0.0
        written = 0
        while i < e and _is_digit(buf[i]):
            if written < 100000:
                written = written * 10 + (buf[i] - 48)
            i += 1
        exponent += -written if exponent_negative else written
    if i != e:
        return BAD_VALUE, 0.0
    if significand == 0:
        return _FAST, -0.0 if negative else 0.0
    if inexact or significand > 2**53 or exponent < -22 or exponent > 22:
        return _SLOW, np.nan
    value = float(significand)
    value = value / _POW10[-exponent] if exponent < 0 else value * _POW10[exponent]
    return _FAST, -value if negative else value


@kernel(nogil=True)
def _sort_row(indices, values, tokens, a, b):
    """Sort entries a:b by index; (DUPLICATE, token position) if an index repeats, else (0, 0)."""
    order = stable_argsort(indices[a:b])
    sorted_indices, sorted_values, sorted_tokens = indices[a:b][order], values[a:b][order], tokens[a:b][order]
    for t in range(b - a):  # elementwise: an array-to-slice assignment compiles numba's shape-error message
        indices[a + t] = sorted_indices[t]
        values[a + t] = sorted_values[t]
        tokens[a + t] = sorted_tokens[t]
    for k in range(a + 1, b):
        if indices[k] == indices[k - 1]:
            return DUPLICATE, tokens[k]
    return 0, 0


@kernel(nogil=True)
def _parse(buf, pos, end, max_records, zero_based, line_no):
    """Parse whole lines of buf[pos:end] until max_records records (non-blank lines) are read.

    Returns (stop, line_no, qid_lines, first_qid_line, indptr, indices, values, tokens, rec)
    where stop is where parsing ended, qid_lines counts the lines with a qid:N token (ignored)
    and first_qid_line is the first of them (0: none), indices/values/tokens (start of each idx:val token) have one entry per
    feature, values hold NaN where Python must parse the token, and rec is an int64 array
    (n_records, 7) of line number, line start, line end, label start, label end, error code,
    error token position. Bad records keep no features."""
    # Pass 1: find where the batch ends and bound the number of features by counting colons.
    p = pos
    n = 0
    n_colons = 0
    while p < end and n < max_records:
        content = False
        comment = False
        q = p
        while q < end and buf[q] != 10:
            c = buf[q]
            if c == 35:
                comment = True
            elif not comment:
                if c == 58:
                    n_colons += 1
                if not _is_space(c):
                    content = True
            q += 1
        if content:
            n += 1
        p = q + 1 if q < end else end
    stop = p

    indptr = np.zeros(n + 1, dtype=np.int64)
    indices = np.empty(n_colons, dtype=np.int64)
    values = np.empty(n_colons, dtype=np.float64)
    tokens = np.empty(n_colons, dtype=np.int64)
    rec = np.zeros((n, 7), dtype=np.int64)
    qid_lines = 0
    first_qid_line = 0
    nnz = np.int64(0)  # not 0: _sort_row would also be compiled for its first type, Literal[int](0)
    r = 0
    p = pos
    # Pass 2: parse.
    while p < stop:
        line_no += 1
        eol = p
        while eol < stop and buf[eol] != 10:
            eol += 1
        content_end = p
        while content_end < eol and buf[content_end] != 35:
            content_end += 1
        i = p
        while i < content_end and _is_space(buf[i]):
            i += 1
        if i < content_end:
            rec[r, 0] = line_no
            rec[r, 1] = p
            rec[r, 2] = eol
            token_end = i
            has_colon = False
            while token_end < content_end and not _is_space(buf[token_end]):
                has_colon |= buf[token_end] == 58
                token_end += 1
            rec[r, 3] = i
            if has_colon:
                rec[r, 4] = i  # no label: the line starts with a feature
            else:
                rec[r, 4] = token_end
                i = token_end
            row_start = nnz
            code = 0
            code_at = 0
            in_order = True
            previous = -1
            value = 0.0
            has_qid = False
            while True:
                while i < content_end and _is_space(buf[i]):
                    i += 1
                if i >= content_end:
                    break
                token_end = i
                colon = -1
                while token_end < content_end and not _is_space(buf[token_end]):
                    if colon < 0 and buf[token_end] == 58:
                        colon = token_end
                    token_end += 1
                if colon < 0:
                    code, code_at = NO_COLON, i
                    break
                if colon - i == 3 and buf[i] == 113 and buf[i + 1] == 105 and buf[i + 2] == 100:  # qid
                    has_qid = True
                    i = token_end
                    continue
                code, index = _parse_index(buf, i, colon)
                if code == 0 and not zero_based:
                    if index == 0:
                        code = ZERO_INDEX
                    index -= 1
                if code == 0:
                    code, value = _parse_value(buf, colon + 1, token_end)
                    if code < 0:  # _SLOW: Python parses it, NaN marks the entry
                        code = 0
                if code != 0:
                    code_at = i
                    break
                indices[nnz] = index
                values[nnz] = value
                tokens[nnz] = i
                nnz += 1
                in_order &= index > previous
                previous = index
                i = token_end
            if has_qid:
                qid_lines += 1
                if first_qid_line == 0:
                    first_qid_line = line_no
            if code == 0 and not in_order:
                code, code_at = _sort_row(indices, values, tokens, row_start, nnz)
            if code != 0:
                nnz = row_start
                rec[r, 5] = code
                rec[r, 6] = code_at
            r += 1
            indptr[r] = nnz
        p = eol + 1 if eol < stop else stop
    return stop, line_no, qid_lines, first_qid_line, indptr, indices[:nnz], values[:nnz], tokens[:nnz], rec


@kernel(nogil=True)
def _value_texts(buf, starts, width):
    """The value text of each idx:val token at starts, NUL-padded to width bytes (an array of
    shape (len(starts), width)), and whether it fits ("0" stands in for texts that do not)."""
    out = np.zeros((len(starts), width), dtype=np.uint8)
    fits = np.ones(len(starts), dtype=np.bool_)
    for j in range(len(starts)):
        p = starts[j]
        while buf[p] != 58:
            p += 1
        p += 1
        k = 0
        while p < len(buf) and not (_is_space(buf[p]) or buf[p] == 10 or buf[p] == 35):
            if k == width:
                fits[j] = False
                out[j, :] = 0
                out[j, 0] = 48  # "0", a placeholder that numpy can convert
                break
            out[j, k] = buf[p]
            k += 1
            p += 1
    return out, fits


NO_LABEL = "the line has no label"


class _BadLabel(Exception):
    def __init__(self, problem: str, hint: str = ""):
        super().__init__(problem)
        self.problem = problem
        self.hint = hint


@lru_cache(maxsize=4096)
def _label(token: bytes, multilabel: bool):
    """A label token -> canonical str, or a tuple of them if multilabel; _BadLabel if unusable."""
    try:
        text = token.decode("utf-8")
    except UnicodeDecodeError:
        raise _BadLabel(f"label {show(token)} is not valid UTF-8") from None
    if any(ord(c) < 32 or ord(c) == 127 for c in text):
        raise _BadLabel(f"label {show(token)} holds control characters", "is the file UTF-16? convert it to UTF-8")
    if not multilabel:
        if not text:
            raise _BadLabel(NO_LABEL, "pass --option multilabel=true if lines without labels are allowed")
        if "," in text:
            raise _BadLabel(
                f"label list {show(token)} in a single-label file",
                "single labels in the first lines, or --option multilabel=false; pass --option multilabel=true",
            )
        return canonical_label(text)
    if not text:
        return ()
    parts = text.split(",")
    if not all(parts):
        raise _BadLabel(f"empty label in the label list {show(token)}", "write labels as l1,l2,l3")
    return tuple(canonical_label(p) for p in parts)


class LibsvmSource:
    """Streaming LIBSVM/SVMlight reader (see the module docstring for the rules)."""

    kind = "sparse"

    def __init__(
        self,
        path: str,
        *,
        policy: BadRecordPolicy,
        batch_size: int = DEFAULT_BATCH_SIZE,
        zero_based: bool = False,
        multilabel: bool | None = None,
        limits: ReadLimits = DEFAULT_LIMITS,
        byte_range: tuple[int, int] | None = None,
        numeric_targets: bool = False,
    ):
        """byte_range: read only bytes [start, stop) of an uncompressed file, cut at line
        boundaries (a piece of a distributed ingest); line numbers then count from start.
        numeric_targets (ingest --target numeric): labels are targets, which only the hint of a
        line without one tells apart."""
        self.path = os.fspath(path)
        self.numeric_targets = numeric_targets
        self.url_info = require_path(self.path)  # a URL's look-up, for its open
        self.policy = policy
        self.batch_size = check_batch_size(batch_size)
        self.zero_based = bool(zero_based)
        self.multilabel = multilabel
        self.limits = limits
        self.byte_range = byte_range
        self.n_read = 0
        self.n_lines = 0  # lines read in the current pass (the last line number)

    def __iter__(self):
        self.n_read = self.n_lines = 0
        self._n_cols = 0
        qid_lines = 0
        first_qid_line = 0
        line_no = 0
        tail = b""
        # the file's first bytes are not read yet: a byte-order mark there is dropped
        at_start = self.byte_range is None or self.byte_range[0] == 0
        with open_binary(
            self.path, info=self.url_info, max_bytes=self.limits.input_bytes, byte_range=self.byte_range
        ) as f:
            # a pipe read as it comes: what it holds now, not a full block (whose read would wait for it)
            read = f.read1 if stdin.live(self.path) else f.read
            while True:
                chunk = read(BLOCK_BYTES)
                data = tail + chunk
                if at_start:
                    if chunk and len(data) < len(codecs.BOM_UTF8):
                        tail = data
                        continue
                    at_start = False
                    if data.startswith(codecs.BOM_UTF8):
                        data = data[len(codecs.BOM_UTF8) :]
                if chunk:
                    cut = data.rfind(b"\n") + 1
                    if cut == 0 and len(data) > self.limits.record_bytes:  # the line is too long: skip it
                        line_no += 1
                        self.n_read += 1
                        problem, hint = too_long(self.limits)
                        self.policy.bad(f"{self.path}:{line_no}", f"the line is {problem}", hint=hint)
                        tail = b""
                        while (rest := f.readline(1 << 20)) and not rest.endswith(b"\n"):
                            pass
                        continue
                    if cut == 0:  # a line longer than a block: read on
                        tail = data
                        continue
                    tail = data[cut:]
                else:
                    cut = len(data)
                buf = np.frombuffer(data, dtype=np.uint8)
                pos = 0
                while pos < cut:
                    pos, line_no, n_qid, first_qid, *parsed = _parse(
                        buf, pos, cut, self.batch_size, self.zero_based, line_no
                    )
                    qid_lines += n_qid
                    first_qid_line = first_qid_line or first_qid
                    batch = self._batch(data, buf, *parsed)
                    if batch is not None:
                        yield batch
                if not chunk:
                    break
        self.n_lines = line_no
        if qid_lines:
            log.warning(
                "%s:%d: qid:N tokens (query ids of ranking data) are ignored; lines with one: %d",
                self.path,
                first_qid_line,
                qid_lines,
            )

    @staticmethod
    def _slow_values(data: bytes, buf: np.ndarray, starts: np.ndarray) -> np.ndarray:
        """Values of the idx:val tokens at starts that the kernel left to Python's rules: numpy
        converts them (as exactly as float() does), float() takes any longer than 32 bytes."""
        texts, fits = _value_texts(buf, starts, 32)
        with np.errstate(over="ignore"):  # overflow gives inf, a bad record
            values = texts.view("S32").ravel().astype(np.float64)
        for j in np.flatnonzero(~fits).tolist():
            values[j] = float(_token_at(data, int(starts[j])).split(b":", 1)[1])
        return values

    def _batch(self, data: bytes, buf: np.ndarray, indptr, indices, values, tokens, rec) -> SparseBatch | None:
        """Python's part: slow values, labels, bad-record reports, the CSR matrix."""
        n = len(rec)
        self.n_read += n
        lines, line_start, line_end, label_start, label_end, codes, code_at = rec.T.tolist()
        problems = {}
        for r in np.flatnonzero(rec[:, 5]).tolist():
            problem, hint = _PROBLEMS[codes[r]]
            problems[r] = (problem.format(show(_token_at(data, code_at[r]))), hint)
        for r in np.flatnonzero(rec[:, 2] - rec[:, 1] > self.limits.record_bytes).tolist():
            problem, hint = too_long(self.limits)
            problems[r] = (f"the line is {problem}", hint)
        slow = np.flatnonzero(np.isnan(values))
        if slow.size:
            values[slow] = self._slow_values(data, buf, tokens[slow])
        for k in np.flatnonzero(~fits_float32(values)).tolist():
            r = int(np.searchsorted(indptr, k, side="right")) - 1
            token = show(_token_at(data, int(tokens[k])))
            problems.setdefault(r, (_PROBLEMS[NONFINITE][0].format(token), _PROBLEMS[NONFINITE][1]))

        label_tokens = [data[label_start[r] : label_end[r]] for r in range(n)]
        if self.multilabel is None:
            good = [t for r, t in enumerate(label_tokens) if r not in problems]
            if good:
                self.multilabel = any(b"," in t for t in good)
        labels: list = [None] * n  # None where the record is bad
        for r in range(n):
            if r in problems:
                continue
            try:
                label = _label(label_tokens[r], self.multilabel)
            except _BadLabel as e:
                hint = e.hint
                if self.numeric_targets and e.problem == NO_LABEL:
                    hint = "--target numeric: every line needs its target(s); skip such lines with --on-bad-record skip"
                problems[r] = (e.problem, hint)
                continue
            labels[r] = list(label) if self.multilabel else label

        for r in sorted(problems):
            problem, hint = problems[r]
            self.policy.bad(f"{self.path}:{lines[r]}", problem, data[line_start[r] : line_end[r]], hint)
        if problems:
            keep = np.ones(n, dtype=bool)
            keep[list(problems)] = False
            entry_keep = np.repeat(keep, np.diff(indptr))
            indices, values = indices[entry_keep], values[entry_keep]
            indptr = np.concatenate(([0], np.cumsum(np.diff(indptr)[keep])))
            kept: list[int] | range = np.flatnonzero(keep).tolist()
        else:
            kept = range(n)
        if not kept:
            return None
        if indices.size:
            self._n_cols = max(self._n_cols, int(indices.max()) + 1)
        X = csr_int64(values, indices, indptr, self._n_cols)
        locations = [f"{self.path}:{lines[r]}" for r in kept]
        return SparseBatch(X, [labels[r] for r in kept], locations, index_base=0 if self.zero_based else 1)
