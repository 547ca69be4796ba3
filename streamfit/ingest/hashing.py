"""Feature hashing of raw text and raw integer feature ids into a fixed-width sparse space.

A feature name f (a token, a word n-gram, or the 8 bytes of an integer id) is hashed as

    h(f)   = MurmurHash3_x86_32(bytes(f), seed)    read as a signed int32
    col(f) = |h(f)| mod n_features                 (n_features = 2**k, so this is |h| & (2**k - 1))
    sgn(f) = -1 if alternate_sign and h(f) < 0 else +1

and a row is x[col] = sum over the row's features f with col(f) = col of sgn(f) * value(f).
For text this is exactly scikit-learn's HashingVectorizer (norm=None, token_pattern
r"(?u)\\b\\w\\w+\\b") on ASCII text; see FeatureHasher.transform_text for the one difference.

Corner case h = -2**31: |h| = 2**31 and 2**31 mod 2**k = 0, so col = 0 and sgn = -1. This is
what scikit-learn's _hashing_fast computes ((2**31 - 1 - (n - 1)) mod n = 0 for n = 2**k).

Outputs are canonical CSR: float32 data, sorted indices, no duplicates, no explicit zeros
(scikit-learn keeps the explicit zeros left where +1 and -1 cancel; we drop them). indices and
indptr share one dtype as scipy requires: int32, or int64 when nnz exceeds 2**31 - 1.
"""

from __future__ import annotations

import string
from dataclasses import asdict, dataclass
from dataclasses import fields as dataclass_fields
from typing import Literal

import numpy as np
import scipy.sparse as sp

from streamfit.options import option

_MASK32 = 0xFFFFFFFF
_VALUE_MODES = {"count": 0, "binary": 1, "log1p": 2}
_MAX_N_FEATURES = 2**30  # largest power of two whose column ids fit in int32 keys (col*2 + sign)


@dataclass(frozen=True)
class HashingConfig:
    """Settings of the hashing transform; stored with every hashed data set (to_dict)."""

    # n_features and ngram_range take other shapes on the command line (--n-features, --ngram-max)
    n_features: int = option(2**18, "number of hashed features (a power of two)", flag="")
    seed: int = option(0, "MurmurHash3 seed", flag="--hash-seed", ge=0)
    alternate_sign: bool = option(
        True, "the hash's sign flips the value's sign", off_help="Do not let the hash's sign flip feature values."
    )
    lowercase: bool = option(True, "lowercase text tokens", off_help="Keep the case of text tokens.")
    ngram_range: tuple[int, int] = option((1, 1), "word n-grams from min_n to max_n, e.g. [1, 2]", flag="")
    value: Literal["count", "binary", "log1p"] = option(
        "log1p", "Term value of text: raw count, binary, or log(1 + count)"
    )
    min_token_length: int = option(
        2,
        "Hash text words of at least this many characters; shorter ones are dropped (a row with none has no features)",
        ge=1,
    )

    def __post_init__(self):
        n = self.n_features
        if not _is_int(n) or n < 1 or n > _MAX_N_FEATURES or n & (n - 1):
            hint = f"e.g. {_next_power_of_two(n)}" if _is_int(n) and 1 <= n <= _MAX_N_FEATURES else "e.g. 2**18"
            raise ValueError(f"HashingConfig: n_features={n!r} is not a power of two in [1, 2**30]; use {hint}")
        if not _is_int(self.seed) or not 0 <= self.seed <= _MASK32:
            raise ValueError(f"HashingConfig: seed={self.seed!r} is out of range; use an int in [0, 2**32 - 1]")
        for name in ("alternate_sign", "lowercase"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"HashingConfig: {name}={getattr(self, name)!r} is not a bool; use true or false")
        ngram = tuple(self.ngram_range) if isinstance(self.ngram_range, (tuple, list)) else None
        if ngram is None or len(ngram) != 2 or not all(_is_int(v) for v in ngram) or not 1 <= ngram[0] <= ngram[1]:
            raise ValueError(
                f"HashingConfig: ngram_range={self.ngram_range!r} is invalid; "
                "use (min_n, max_n) with 1 <= min_n <= max_n"
            )
        object.__setattr__(self, "ngram_range", ngram)
        if self.value not in _VALUE_MODES:
            raise ValueError(f"HashingConfig: value={self.value!r} is unknown; use one of {sorted(_VALUE_MODES)}")
        if not _is_int(self.min_token_length) or self.min_token_length < 1:
            raise ValueError(f"HashingConfig: min_token_length={self.min_token_length!r} is invalid; use an int >= 1")

    def to_dict(self) -> dict:
        """JSON-able dict (ngram_range as a list); from_dict(to_dict()) == self."""
        d = asdict(self)
        d["ngram_range"] = list(self.ngram_range)
        return d

    @classmethod
    def from_dict(cls, d: dict) -> HashingConfig:
        """Inverse of to_dict; missing keys take their defaults, unknown keys are an error."""
        known = {f.name for f in dataclass_fields(cls)}
        for key in d:
            if key not in known:
                raise ValueError(f"HashingConfig: unknown key {key!r}; known keys are {sorted(known)}")
        return cls(**d)


def _is_int(v) -> bool:
    return isinstance(v, (int, np.integer)) and not isinstance(v, bool)


def _next_power_of_two(n: int) -> int:
    return 1 << (int(n) - 1).bit_length()


# ---------------------------------------------------------------------------------------------
# the tokenizer's word bytes (the numba kernels are in hashing_kernels.py)

# Word bytes: ASCII [0-9A-Za-z_] and every byte >= 0x80 (so multi-byte UTF-8 characters stay whole).
_WORD_BYTE = np.zeros(256, dtype=np.bool_)
_WORD_BYTE[np.frombuffer((string.digits + string.ascii_letters + "_").encode(), dtype=np.uint8)] = True
_WORD_BYTE[0x80:] = True


# ---------------------------------------------------------------------------------------------
# Python API


def murmurhash3_32(data: bytes, seed: int = 0) -> int:
    """MurmurHash3_x86_32(data, seed) as a signed int32; equals mmh3.hash(data, seed)."""
    if not _is_int(seed) or not 0 <= seed <= _MASK32:
        raise ValueError(f"murmurhash3_32: seed={seed!r} is out of range; use an int in [0, 2**32 - 1]")
    from streamfit.ingest.hashing_kernels import murmur3_32  # numba: imported on first use

    buf = np.frombuffer(data, dtype=np.uint8)
    return int(murmur3_32(buf, 0, buf.size, seed))


class FeatureHasher:
    """Hashes text and raw feature ids into CSR rows of width config.n_features (see module doc)."""

    def __init__(self, config: HashingConfig):
        self.config = config

    def transform_text(self, texts, fields=None) -> sp.csr_matrix:
        """Hash a batch of documents, one CSR row per document.

        texts: a sequence of str (one document per row), or a dict {field name: sequence of str}
        of equally long columns. A named field's tokens are hashed with the per-field seed
        seed_f = murmurhash3_32(name.encode(), config.seed) mod 2**32 (a VW-style namespace), and a
        row sums the features of all its fields (n-grams do not cross fields). fields (dict input
        only) selects the keys used; by default all of them.

        Per field: str.lower() if config.lowercase, UTF-8 encode, tokens = maximal runs of word
        bytes (ASCII [0-9A-Za-z_] or any byte >= 0x80) of >= min_token_length characters, then
        word n-grams for n in ngram_range (tokens joined by one space, over all tokens of the
        field, as scikit-learn). With v = the row's signed sum for a column (see module doc),
        value "count" stores v, "binary" sign(v), "log1p" sign(v) * log(1 + |v|); v = 0 is dropped.

        Difference with scikit-learn's \\w: non-ASCII bytes are all word bytes, so non-ASCII
        punctuation and spaces (e.g. U+2019 ', U+00A0 no-break space, U+2014 em dash) join the
        tokens around them, and min_token_length counts them as characters.
        """
        columns = _text_columns(texts, fields, self.config.seed)
        n_docs = len(columns[0][1])
        chunks: list[bytes] = []
        for _, docs, _ in columns:
            chunks.extend(map(str.encode, map(str.lower, docs) if self.config.lowercase else docs))
        bounds = np.zeros(len(chunks) + 1, dtype=np.int64)
        np.cumsum(np.fromiter(map(len, chunks), dtype=np.int64, count=len(chunks)), out=bounds[1:])
        # offsets[f, i] = start of document i of field f in buf (chunks are field-major)
        offsets = bounds[np.arange(len(columns))[:, None] * n_docs + np.arange(n_docs + 1)]
        buf = np.frombuffer(b"".join(chunks), dtype=np.uint8)
        cfg = self.config
        from streamfit.ingest.hashing_kernels import hash_text  # numba (and its start-up): imported on first use

        indptr, indices, data = hash_text(
            buf,
            offsets,
            np.array([seed for _, _, seed in columns], dtype=np.int64),
            cfg.n_features - 1,
            (2 * cfg.n_features - 1).bit_length(),  # bits of the largest key, 2 * col + 1
            cfg.alternate_sign,
            cfg.min_token_length,
            cfg.ngram_range[0],
            cfg.ngram_range[1],
            _VALUE_MODES[cfg.value],
            _WORD_BYTE,
        )
        return _csr(indptr, indices, data, n_docs, cfg.n_features)

    def transform_indices(self, X) -> sp.csr_matrix:
        """Hash a sparse matrix of raw non-negative integer column ids.

        Column id j is hashed as the 8 bytes of int64 j, little-endian (so ids >= 2**32 are fine):
        entry (i, j, v) adds sgn(j) * v to column col(j) of row i. Colliding entries are summed.
        config.value, lowercase, ngram_range and min_token_length do not apply: numeric features
        keep their values."""
        if not sp.issparse(X):
            raise TypeError(
                f"transform_indices: expected a scipy.sparse matrix, got {type(X).__name__}; "
                "use transform_dense for arrays"
            )
        X = X.tocsr()
        ids = np.ascontiguousarray(X.indices, dtype="<i8").view(np.uint8)
        values = np.ascontiguousarray(X.data, dtype=np.float64)
        starts = 8 * np.arange(values.size, dtype=np.int64)
        cfg = self.config
        from streamfit.ingest.hashing_kernels import hash_entries  # numba: imported on first use

        indptr, indices, data = hash_entries(
            X.indptr.astype(np.int64),
            ids,
            starts,
            starts + 8,
            values,
            cfg.seed,
            cfg.n_features - 1,
            cfg.alternate_sign,
        )
        return _csr(indptr, indices, data, X.shape[0], cfg.n_features)

    def transform_tokens(self, token_lists) -> sp.csr_matrix:
        """Hash pre-tokenized documents (a sequence of lists of str), one CSR row per document.

        Each token is hashed as given (str.lower() if config.lowercase; no tokenizer, no
        min_token_length, no n-grams), exactly like a token of transform_text, so a token list
        produced by our tokenizer hashes to the same row. config.value applies as there."""
        cfg = self.config
        tokens = [t.lower() if cfg.lowercase else t for doc in token_lists for t in doc]
        encoded = [t.encode() for t in tokens]
        lengths = np.fromiter(map(len, encoded), dtype=np.int64, count=len(encoded))
        ends = np.cumsum(lengths)
        indptr = np.zeros(len(token_lists) + 1, dtype=np.int64)
        np.cumsum(np.fromiter(map(len, token_lists), dtype=np.int64, count=len(token_lists)), out=indptr[1:])
        buf = np.frombuffer(b"".join(encoded), dtype=np.uint8)
        from streamfit.ingest.hashing_kernels import hash_entries  # numba: imported on first use

        out_indptr, indices, data = hash_entries(
            indptr, buf, ends - lengths, ends, np.ones(len(encoded)), cfg.seed, cfg.n_features - 1, cfg.alternate_sign
        )
        if cfg.value == "binary":
            data = np.sign(data).astype(np.float32)
        elif cfg.value == "log1p":
            data = (np.sign(data) * np.log1p(np.abs(data))).astype(np.float32)
        return _csr(out_indptr, indices, data, len(token_lists), cfg.n_features)

    def transform_dense(self, X: np.ndarray) -> sp.csr_matrix:
        """transform_indices of the non-zeros of a 2-D array (column j of X is raw id j)."""
        X = np.asarray(X)
        if X.ndim != 2:
            raise ValueError(
                f"transform_dense: expected a 2-D array, got shape {X.shape}; reshape to (n_rows, n_columns)"
            )
        return self.transform_indices(sp.csr_matrix(X))


def _text_columns(texts, fields, seed: int) -> list[tuple[str, list, int]]:
    """(name, documents, hash seed) of each field of transform_text's input, all equally long."""
    if isinstance(texts, dict):
        names = list(texts) if fields is None else list(fields)
        if not names:
            raise ValueError("transform_text: no fields to hash; give texts as {name: documents} with >= 1 name")
        for name in names:
            if name not in texts:
                raise ValueError(f"transform_text: field {name!r} is not in texts; fields present: {list(texts)}")
        columns = [(name, texts[name], murmurhash3_32(name.encode("utf-8"), seed) & _MASK32) for name in names]
    else:
        if fields is not None:
            raise ValueError("transform_text: fields applies to dict input only; pass texts as {name: documents}")
        columns = [("texts", texts, seed)]
    out = []
    for name, docs, field_seed in columns:
        if isinstance(docs, (str, bytes)):
            raise TypeError(f"transform_text: {name!r} is a single string; pass a list with one document per row")
        out.append((name, docs if isinstance(docs, list) else list(docs), field_seed))
    for name, docs, _ in out:
        if len(docs) != len(out[0][1]):
            raise ValueError(
                f"transform_text: field {name!r} has {len(docs)} documents, field {out[0][0]!r} has "
                f"{len(out[0][1])}; give every field one document per row"
            )
    return out


def _csr(indptr, indices, data, n_rows, n_features) -> sp.csr_matrix:
    """Canonical CSR; indices and indptr get one dtype (scipy's rule): int32 unless nnz needs int64."""
    if indptr[-1] <= np.iinfo(np.int32).max:
        indptr = indptr.astype(np.int32)
    else:
        indices = indices.astype(np.int64)
    X = sp.csr_matrix((data, indices, indptr), shape=(n_rows, n_features))
    X.has_canonical_format = True
    return X


def collision_report(n_features: int, columns_used: int) -> dict:
    """How crowded a hashed space is, from its column occupancy U out of D = n_features.

    Linear counting (Whang, Vander-Zanden & Taylor 1990): T distinct features hashed uniformly
    into D columns occupy D(1 - e^(-T/D)) of them on average, so T ≈ -D ln(1 - U/D). A feature
    then shares its column with another with probability 1 - e^(-T/D) = U/D, and keeping that
    share under c needs D ≥ T / -ln(1 - c).
    """
    D, U = n_features, columns_used
    report: dict[str, float | None] = {"n_features": D, "columns_used": U, "occupancy": U / D}
    if U >= D:  # saturated: the estimate diverges
        report.update(
            estimated_distinct_features=None,
            estimated_colliding_share=1.0,
            n_features_for_1pct=None,
            n_features_for_10pct=None,
        )
        return report
    T = -D * np.log1p(-U / D)
    report.update(estimated_distinct_features=int(round(T)), estimated_colliding_share=U / D)
    for name, c in (("n_features_for_1pct", 0.01), ("n_features_for_10pct", 0.10)):
        need = T / -np.log1p(-c)
        report[name] = int(2 ** max(int(np.ceil(np.log2(max(need, 1)))), 0))
    return report
