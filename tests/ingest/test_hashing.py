"""streamfit.ingest.hashing against mmh3 and scikit-learn's HashingVectorizer."""

import json
import re

import mmh3
import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.feature_extraction import FeatureHasher as SklearnFeatureHasher
from sklearn.feature_extraction.text import HashingVectorizer

from streamfit.ingest.hashing import FeatureHasher, HashingConfig, murmurhash3_32

# Newsgroup-, mail- and code-like English: punctuation, digits, underscores, one-letter tokens,
# repeated words, blank and whitespace-only documents.
DOCS = [
    "From: jsmith@cs.example.edu (John Smith)\nSubject: Re: Best GPU for rendering?",
    "In article <1993Apr5.123456@news.example.com> mjones writes:\n> Has anyone tried the new 486DX2-66?",
    "I've had mine for 3 months now and it's been rock solid. No crashes, no lockups, nothing.",
    "The the THE tHe -- repeated words should be counted, not deduplicated.",
    "",
    "   \t\n  ",
    "a b c d e f g: single letters are dropped by the token pattern, but 'ab' is kept.",
    "Call 555-0199 or write to P.O. Box 42, Springfield, IL 62704 before 12/31/1993.",
    "snake_case_names and CamelCaseNames and __dunder__ methods all stay whole tokens.",
    "Prices: $19.99, $5, 100%, 3.14159, 2^10 = 1024, 1e-9; x*y+z/w.",
    "Q: Why doesn't my code compile?\nA: Because `int main(void)` needs a return value!!!",
    "The quick brown fox jumps over the lazy dog. The dog was not amused.",
    "I think the Yankees will win the pennant this year; their pitching is simply better.",
    "NASA's budget for FY94 was cut again, according to the Washington Post (Tuesday).",
    "Please e-mail me at help-desk@example.org if the problem persists after rebooting.",
    "IMHO, Windows 3.1 is fine for most people, but OS/2 2.1 multitasks far better.",
    "To: all\nFrom: admin\n\n---------------------------------------------\nServer down at 02:00 GMT.",
    "x",
    "ok",
    "He said, \"It's 10 o'clock,\" and left -- without paying the $3.50 he owed me.",
    'Re: Re: Re: Re: FOR SALE: Sony Trinitron 17" monitor, $450 obo, must sell!',
    "The encryption chip uses an 80-bit key; escrowed halves go to two agencies.",
    "key_1=value_1&key_2=value_2 ; path=/usr/local/bin:/usr/bin ; ~/.bashrc",
    "Genesis 1:1 In the beginning God created the heaven and the earth.",
    "Hockey: Pittsburgh 5, Boston 3 (OT). Lemieux had 2 goals and 1 assist.",
    "Motorcycles: my '92 CBR600 gets 45 mpg on the highway, 38 in town.",
    "aa aa aa bb bb cc -- short tokens repeated to exercise duplicate counts in one row",
    "Lorem ipsum dolor sit amet, consectetur adipiscing elit, sed do eiusmod tempor.",
    "What is the airspeed velocity of an unladen swallow? African or European?",
    '#include <stdio.h>\nint main() { printf("hello, world\\n"); return 0; }',
    "ALL CAPS SHOUTING IS STILL TOKENIZED THE SAME AS lower case after lowercasing",
    "1 22 333 4444 55555 666666 7777777 88888888 999999999 0000000000",
]

TOKEN = re.compile(r"(?u)\b\w\w+\b")
MASK32 = 0xFFFFFFFF


def sklearn_rows(n_features, **kwargs) -> sp.csr_matrix:
    """HashingVectorizer counts, float32, canonical and without explicit zeros."""
    Y = HashingVectorizer(n_features=n_features, norm=None, token_pattern=TOKEN.pattern, **kwargs).transform(DOCS)
    Y = sp.csr_matrix(Y, dtype=np.float32)
    Y.sum_duplicates()
    Y.eliminate_zeros()
    return Y


def assert_same_csr(A, B):
    assert A.shape == B.shape
    np.testing.assert_array_equal(A.indptr, B.indptr)
    np.testing.assert_array_equal(A.indices, B.indices)
    np.testing.assert_allclose(A.data, B.data, rtol=1e-6)


def hashed(feature: bytes, seed: int, n_features: int, alternate_sign=True) -> tuple[int, int]:
    """(column, sign) of one feature computed with mmh3: the reference for everything below."""
    h = mmh3.hash(feature, seed)
    return abs(h) % n_features, (-1 if alternate_sign and h < 0 else 1)


def reference_rows(rows: list[list[tuple[bytes, int, float]]], n_features: int, alternate_sign=True) -> sp.csr_matrix:
    """CSR of rows given as (feature bytes, seed, value) lists, summed per column with mmh3."""
    dense = np.zeros((len(rows), n_features))
    for i, row in enumerate(rows):
        for feature, seed, value in row:
            col, sign = hashed(feature, seed, n_features, alternate_sign)
            dense[i, col] += sign * value
    return sp.csr_matrix(dense.astype(np.float32))


def check_canonical(X, n_rows, n_features):
    assert isinstance(X, sp.csr_matrix)
    assert X.shape == (n_rows, n_features)
    assert X.dtype == np.float32 and X.indices.dtype == X.indptr.dtype == np.int32
    assert np.all(X.data != 0)
    for i in range(n_rows):
        assert np.all(np.diff(X.indices[X.indptr[i] : X.indptr[i + 1]]) > 0)


# --------------------------------------------------------------------------------- murmurhash3_32


@pytest.mark.parametrize("seed", [0, 1, 42, 2**31, 2**32 - 1])
def test_murmurhash3_32_matches_mmh3_on_random_bytes(seed):
    rng = np.random.default_rng(seed)
    for length in range(65):  # every tail length 0..3 many times
        for _ in range(4):
            data = rng.integers(0, 256, size=length, dtype=np.uint8).tobytes()
            assert murmurhash3_32(data, seed) == mmh3.hash(data, seed), (data, seed)


@pytest.mark.parametrize("seed", [0, 2**32 - 1])
def test_murmurhash3_32_matches_mmh3_on_utf8(seed):
    for text in ["", "é", "naïve", "日本語のテキスト", "Zürich–Genève", "emoji 🚀🔥", "ß" * 33]:
        data = text.encode("utf-8")
        assert murmurhash3_32(data, seed) == mmh3.hash(data, seed)


def test_murmurhash3_32_rejects_seed_out_of_range():
    with pytest.raises(ValueError, match="seed=-1"):
        murmurhash3_32(b"abc", -1)
    with pytest.raises(ValueError, match="2\\*\\*32"):
        murmurhash3_32(b"abc", 2**32)


# ---------------------------------------------------------------------------------- transform_text


@pytest.mark.parametrize("n_features", [16, 2**10, 2**18])
@pytest.mark.parametrize("ngram_range", [(1, 1), (1, 2), (2, 3)])
@pytest.mark.parametrize("alternate_sign", [True, False])
def test_transform_text_equals_sklearn(n_features, ngram_range, alternate_sign):
    config = HashingConfig(value="count", n_features=n_features, ngram_range=ngram_range, alternate_sign=alternate_sign)
    X = FeatureHasher(config).transform_text(DOCS)
    check_canonical(X, len(DOCS), n_features)
    assert_same_csr(X, sklearn_rows(n_features, ngram_range=ngram_range, alternate_sign=alternate_sign))


def test_transform_text_without_lowercase_equals_sklearn():
    X = FeatureHasher(HashingConfig(value="count", n_features=2**12, lowercase=False)).transform_text(DOCS)
    assert_same_csr(X, sklearn_rows(2**12, lowercase=False))


def test_transform_text_drops_cancelled_columns():
    """At n_features=16 many +1/-1 pairs cancel: sklearn keeps explicit zeros, we drop them."""
    Y = HashingVectorizer(n_features=16, norm=None).transform(DOCS)
    assert np.any(Y.data == 0)
    X = FeatureHasher(HashingConfig(n_features=16)).transform_text(DOCS)
    assert np.all(X.data != 0)


@pytest.mark.parametrize("value", ["binary", "log1p"])
def test_value_transforms_apply_to_signed_counts(value):
    Y = sklearn_rows(2**8, ngram_range=(1, 2))
    Y.data = np.sign(Y.data) * (1.0 if value == "binary" else np.log1p(np.abs(Y.data)))
    X = FeatureHasher(HashingConfig(n_features=2**8, ngram_range=(1, 2), value=value)).transform_text(DOCS)
    check_canonical(X, len(DOCS), 2**8)
    assert_same_csr(X, Y)


def test_transform_text_seed_and_min_token_length():
    config = HashingConfig(value="count", n_features=2**10, seed=12345, min_token_length=3, ngram_range=(1, 2))
    X = FeatureHasher(config).transform_text(DOCS)
    rows = []
    for doc in DOCS:
        tokens = [t for t in re.findall(r"\w+", doc.lower()) if len(t) >= 3]
        grams = tokens + [f"{a} {b}" for a, b in zip(tokens, tokens[1:])]
        rows.append([(g.encode(), 12345, 1.0) for g in grams])
    assert_same_csr(X, reference_rows(rows, 2**10))


def test_empty_documents_and_batches():
    hasher = FeatureHasher(HashingConfig(value="count", n_features=2**6))
    X = hasher.transform_text(["", "a", "ab ab", " ,. "])
    check_canonical(X, 4, 2**6)
    np.testing.assert_array_equal(np.diff(X.indptr), [0, 0, 1, 0])
    assert hasher.transform_text([]).shape == (0, 2**6)
    assert hasher.transform_text({"title": [], "body": []}).shape == (0, 2**6)


def test_non_ascii_bytes_are_word_bytes():
    """Non-ASCII letters work as in sklearn; non-ASCII punctuation joins tokens (documented
    difference), and min_token_length counts characters, not bytes."""
    docs = ["Café naïve Zürich straße", "don’t stop—now", "é x éa ü"]
    X = FeatureHasher(HashingConfig(value="count", n_features=2**12, ngram_range=(1, 2))).transform_text(docs)
    Y = HashingVectorizer(n_features=2**12, norm=None, ngram_range=(1, 2)).transform(docs[:1])
    assert_same_csr(X[:1], sp.csr_matrix(Y, dtype=np.float32))
    tokens = [["café", "naïve", "zürich", "straße"], ["don’t", "stop—now"], ["éa"]]
    rows = [[(t.encode(), 0, 1.0) for t in toks + [f"{a} {b}" for a, b in zip(toks, toks[1:])]] for toks in tokens]
    assert_same_csr(X, reference_rows(rows, 2**12))


def test_fields_use_per_field_seeds_and_sum_into_one_row():
    seed = 7
    texts = {"title": ["Hello world", "", "Same words"], "body": ["hello hello there", "only body", "same words"]}
    config = HashingConfig(value="count", n_features=2**5, seed=seed, ngram_range=(1, 2))
    hasher = FeatureHasher(config)

    def expected(names):
        rows = []
        for i in range(3):
            row = []
            for name in names:
                field_seed = mmh3.hash(name.encode(), seed) & MASK32
                toks = TOKEN.findall(texts[name][i].lower())
                grams = toks + [f"{a} {b}" for a, b in zip(toks, toks[1:])]
                row += [(g.encode(), field_seed, 1.0) for g in grams]
            rows.append(row)
        return reference_rows(rows, 2**5)

    assert murmurhash3_32(b"title", seed) & MASK32 == mmh3.hash(b"title", seed) & MASK32
    X = hasher.transform_text(texts)
    check_canonical(X, 3, 2**5)
    assert_same_csr(X, expected(["title", "body"]))
    assert_same_csr(hasher.transform_text(texts, fields=["body"]), expected(["body"]))
    assert_same_csr(hasher.transform_text(texts, fields=["body", "title"]), X)


def test_transform_text_input_errors():
    hasher = FeatureHasher(HashingConfig())
    with pytest.raises(TypeError, match="single string"):
        hasher.transform_text("just one string")
    with pytest.raises(ValueError, match="'subject'"):
        hasher.transform_text({"title": ["a"]}, fields=["subject"])
    with pytest.raises(ValueError, match="dict input only"):
        hasher.transform_text(["a"], fields=["title"])
    with pytest.raises(ValueError, match="'body' has 1 documents"):
        hasher.transform_text({"title": ["a", "b"], "body": ["c"]})


# ----------------------------------------------------------------------- transform_indices / dense


def index_reference(X: sp.csr_matrix, seed: int, n_features: int, alternate_sign=True) -> sp.csr_matrix:
    rows = []
    for i in range(X.shape[0]):
        lo, hi = X.indptr[i], X.indptr[i + 1]
        rows.append([(int(j).to_bytes(8, "little"), seed, float(v)) for j, v in zip(X.indices[lo:hi], X.data[lo:hi])])
    return reference_rows(rows, n_features, alternate_sign)


@pytest.mark.parametrize("n_features", [4, 2**10])
@pytest.mark.parametrize("alternate_sign", [True, False])
def test_transform_indices_matches_mmh3(n_features, alternate_sign):
    rng = np.random.default_rng(0)
    n_rows, nnz = 40, 600
    rows = np.sort(rng.integers(0, n_rows, nnz))
    cols = rng.integers(0, 2**40, nnz)  # beyond int32: hashed as 8 little-endian bytes
    cols[::7] = rng.integers(0, 50, cols[::7].size)
    vals = rng.normal(size=nnz)
    X = sp.csr_matrix((vals, (rows, cols)), shape=(n_rows, 2**40))
    config = HashingConfig(n_features=n_features, seed=99, alternate_sign=alternate_sign, value="log1p")
    H = FeatureHasher(config).transform_indices(X)
    check_canonical(H, n_rows, n_features)
    expected = index_reference(X, 99, n_features, alternate_sign)
    np.testing.assert_allclose(H.toarray(), expected.toarray(), rtol=1e-5, atol=1e-6)


def test_transform_indices_sums_collisions_and_drops_cancelled():
    """n_features=4: find ids sharing a column with equal and with opposite signs."""
    by_key = {}
    for j in range(64):
        by_key.setdefault(hashed(j.to_bytes(8, "little"), 0, 4), []).append(j)
    (col, _), (same_a, same_b, *_) = next((k, v) for k, v in by_key.items() if len(v) >= 2)
    plus = next(v[0] for k, v in by_key.items() if k[0] == col and k[1] == 1)
    minus = next(v[0] for k, v in by_key.items() if k[0] == col and k[1] == -1)
    X = sp.csr_matrix(([2.0, 3.0, 5.0, 5.0], ([0, 0, 1, 1], [same_a, same_b, plus, minus])), shape=(2, 64))
    H = FeatureHasher(HashingConfig(n_features=4)).transform_indices(X)
    sign = hashed(same_a.to_bytes(8, "little"), 0, 4)[1]
    assert H[0, col] == sign * 5.0 and H.nnz == 1  # 2 + 3 summed; row 1: +5 - 5 dropped


def test_hash_of_minus_two_to_the_31_goes_to_column_zero():
    """mmh3 of int64 id 2_841_062_569 (seed 0) is -2**31: column 0 with sign -1, as sklearn."""
    j = 2_841_062_569
    assert mmh3.hash(j.to_bytes(8, "little"), 0) == -(2**31)
    Y = SklearnFeatureHasher(n_features=2**10, input_type="string").transform([[j.to_bytes(8, "little")]])
    assert Y.indices.tolist() == [0] and Y.data.tolist() == [-1.0]
    X = sp.csr_matrix(([3.0], ([0], [j])), shape=(1, j + 1))
    for n_features in (1, 2**10, 2**30):
        H = FeatureHasher(HashingConfig(n_features=n_features)).transform_indices(X)
        assert H.indices.tolist() == [0] and H.data.tolist() == [-3.0]


def test_transform_dense_equals_transform_indices():
    rng = np.random.default_rng(1)
    D = rng.normal(size=(30, 50)) * (rng.random((30, 50)) < 0.2)
    D[3] = 0.0
    hasher = FeatureHasher(HashingConfig(n_features=8, seed=3))
    H = hasher.transform_dense(D)
    check_canonical(H, 30, 8)
    assert H.indptr[4] == H.indptr[3]
    assert_same_csr(H, hasher.transform_indices(sp.csr_matrix(D)))
    np.testing.assert_allclose(H.toarray(), index_reference(sp.csr_matrix(D), 3, 8).toarray(), rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="2-D"):
        hasher.transform_dense(np.ones(3))
    with pytest.raises(TypeError, match="transform_dense"):
        hasher.transform_indices(D)


# ---------------------------------------------------------------------------------- HashingConfig


def test_config_requires_power_of_two():
    with pytest.raises(ValueError, match=r"n_features=1000 .*power of two.*1024"):
        HashingConfig(n_features=1000)
    for bad in (0, -4, 2**31, 2.0**10, True):
        with pytest.raises(ValueError, match="n_features"):
            HashingConfig(n_features=bad)
    assert HashingConfig(n_features=1).n_features == 1


@pytest.mark.parametrize(
    "kwargs, name",
    [
        ({"seed": -1}, "seed"),
        ({"seed": 2**32}, "seed"),
        ({"alternate_sign": 1}, "alternate_sign"),
        ({"ngram_range": (2, 1)}, "ngram_range"),
        ({"ngram_range": (0, 1)}, "ngram_range"),
        ({"value": "tfidf"}, "value"),
        ({"min_token_length": 0}, "min_token_length"),
    ],
)
def test_config_rejects_bad_values(kwargs, name):
    with pytest.raises(ValueError, match=name):
        HashingConfig(**kwargs)


def test_config_dict_round_trip():
    config = HashingConfig(
        n_features=2**20,
        seed=2**32 - 1,
        alternate_sign=False,
        lowercase=False,
        ngram_range=(1, 3),
        value="log1p",
        min_token_length=1,
    )
    d = json.loads(json.dumps(config.to_dict()))
    assert d == config.to_dict()
    assert HashingConfig.from_dict(d) == config
    assert HashingConfig.from_dict({}) == HashingConfig()
    assert HashingConfig(ngram_range=[1, 2]).ngram_range == (1, 2)


def test_config_from_dict_rejects_unknown_key():
    with pytest.raises(ValueError, match="'n_feature'"):
        HashingConfig.from_dict({"n_feature": 2**10})


def test_occupancy_report_estimates_the_real_collisions(tmp_path):
    """5000 distinct tokens into 2^13 columns: the report's distinct-feature estimate and
    colliding share are checked against the true columns computed with mmh3."""
    import json
    from collections import Counter

    import mmh3
    from click.testing import CliRunner

    from streamfit.cli import main

    tokens = [f"tok{i}x" for i in range(5000)]
    docs = tmp_path / "docs.jsonl"
    docs.write_text(
        "".join(
            json.dumps({"text": " ".join(tokens[i : i + 10]), "label": str(i % 3)}) + "\n" for i in range(0, 5000, 10)
        )
    )
    runner = CliRunner()
    ingest = runner.invoke(main, ["ingest", str(docs), "--n-features", "8192", "--out", str(tmp_path / "s.zarr")])
    assert ingest.exit_code == 0, ingest.output
    out = runner.invoke(main, ["inspect", str(tmp_path / "s.zarr"), "--occupancy", "--json"])
    report = json.loads(out.output)["occupancy"]
    columns = Counter(abs(mmh3.hash(t, 0, signed=True)) % 8192 for t in tokens)
    assert report["columns_used"] == len(columns)
    colliding = sum(n for n in columns.values() if n > 1) / len(tokens)
    assert abs(report["estimated_colliding_share"] - colliding) < 0.02
    assert abs(report["estimated_distinct_features"] - 5000) < 250
    assert report["n_features_for_1pct"] == 2**19  # 5000 / -ln(0.99) ≈ 497 500
