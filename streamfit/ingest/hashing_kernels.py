"""The numba kernels of feature hashing (streamfit.ingest.hashing): MurmurHash3_x86_32, the byte
tokenizer, word n-grams and the per-row radix sort into canonical CSR.

Counters and constants passed to another kernel are np.int64, not Python ints: numba types a
0 as Literal[int](0) until a loop's increments are seen, and compiles the callee for that type
as well (a whole second compilation); slices are copied element by element, since an
array-to-slice assignment compiles numba's shape-error message (str formatting, seconds).

Kept apart from hashing.py so that importing HashingConfig (every CLI command does) does not
import numba: FeatureHasher imports this module on its first transform.
"""

from __future__ import annotations

import numpy as np

from streamfit._jit import kernel
from streamfit.sorting import stable_argsort


@kernel(nogil=True, inline="always")
def rotl32(x, r):
    """x (< 2**32) rotated left by r bits within 32 bits."""
    return ((x << r) | (x >> (32 - r))) & 0xFFFFFFFF


@kernel(nogil=True)
def murmur3_32(buf, start, end, seed):
    """MurmurHash3_x86_32 of buf[start:end] as a signed int32 value (held in an int64).

    All arithmetic is on int64 holding uint32 values, masked to 32 bits after each product."""
    c1 = 0xCC9E2D51
    c2 = 0x1B873593
    n = end - start
    h = np.int64(seed) & 0xFFFFFFFF
    tail = start + (n & ~3)
    for p in range(start, tail, 4):
        k = np.int64(buf[p]) | (np.int64(buf[p + 1]) << 8) | (np.int64(buf[p + 2]) << 16) | (np.int64(buf[p + 3]) << 24)
        k = rotl32((k * c1) & 0xFFFFFFFF, 15)
        h ^= (k * c2) & 0xFFFFFFFF
        h = (rotl32(h, 13) * 5 + 0xE6546B64) & 0xFFFFFFFF
    rem = n & 3
    if rem:
        k = np.int64(0)
        if rem == 3:
            k ^= np.int64(buf[tail + 2]) << 16
        if rem >= 2:
            k ^= np.int64(buf[tail + 1]) << 8
        k ^= np.int64(buf[tail])
        k = rotl32((k * c1) & 0xFFFFFFFF, 15)
        h ^= (k * c2) & 0xFFFFFFFF
    h ^= n
    h ^= h >> 16
    h = (h * 0x85EBCA6B) & 0xFFFFFFFF
    h ^= h >> 13
    h = (h * 0xC2B2AE35) & 0xFFFFFFFF
    h ^= h >> 16
    return h - 0x100000000 if h >= 0x80000000 else h


@kernel(nogil=True, inline="always")
def key(h, mask, alternate_sign):
    """Sortable int32 key of a hash: 2 * col + (1 if the sign is negative else 0)."""
    neg = 1 if (alternate_sign and h < 0) else 0
    return np.int32(((abs(h) & mask) << 1) | neg)


@kernel(nogil=True)
def tokenize(buf, start, end, min_len, word, tok_start, tok_end, char_start, char_end):
    """Store the maximal runs of word bytes in buf[start:end] having >= min_len UTF-8 characters
    (bytes that are not 0b10xxxxxx) as [tok_start[t], tok_end[t]); return their number.

    Branch-free scan: at each byte p the current run counters' slots are overwritten with p (and
    the character index p - continuation bytes so far), and a counter only advances on a
    non-word -> word (start) or word -> non-word (end) transition. Arrays need (end - start) // 2 + 2
    slots."""
    n_start = 0
    n_end = 0
    prev = 0
    n_cont = 0
    for p in range(start, end):
        b = buf[p]
        w = np.int64(word[b])
        tok_start[n_start] = p
        char_start[n_start] = p - n_cont
        n_start += w & (1 - prev)
        tok_end[n_end] = p
        char_end[n_end] = p - n_cont
        n_end += prev & (1 - w)
        n_cont += (b & 0xC0) == 0x80
        prev = w
    tok_end[n_end] = end
    char_end[n_end] = end - n_cont
    n_tok = 0
    for t in range(n_start):
        tok_start[n_tok] = tok_start[t]
        tok_end[n_tok] = tok_end[t]
        n_tok += char_end[t] - char_start[t] >= min_len
    return n_tok


@kernel(nogil=True)
def radix_sort(keys, n, n_bits, tmp, counts):
    """Sort keys[:n] (non-negative, < 2**n_bits) in place: LSD radix sort on 8-bit digits, using
    tmp (size >= n) and counts (size 256) as scratch."""
    src, dst = keys, tmp
    for shift in range(0, n_bits, 8):
        counts[:] = 0
        for j in range(n):
            counts[(src[j] >> shift) & 255] += 1
        total = 0
        for d in range(256):
            c = counts[d]
            counts[d] = total
            total += c
        for j in range(n):
            d = (src[j] >> shift) & 255
            dst[counts[d]] = src[j]
            counts[d] += 1
        src, dst = dst, src
    if (n_bits + 7) // 8 % 2 == 1:
        for j in range(n):
            keys[j] = tmp[j]


@kernel(nogil=True)
def hash_ngrams(buf, tok_start, tok_end, n_tok, seed, mask, alternate_sign, min_n, max_n, scratch, keys, k):
    """Append to keys[k:] the keys of all word n-grams, min_n <= n <= max_n, over the tokens; an
    n-gram is its tokens joined by one space (built in scratch). Return the new key count."""
    for n in range(min_n, max_n + 1):
        for t in range(n_tok - n + 1):
            if n == 1:
                h = murmur3_32(buf, tok_start[t], tok_end[t], seed)
            else:
                q = np.int64(0)
                for u in range(t, t + n):
                    if u > t:
                        scratch[q] = 32
                        q += 1
                    for p in range(tok_start[u], tok_end[u]):
                        scratch[q] = buf[p]
                        q += 1
                h = murmur3_32(scratch, np.int64(0), q, seed)
            keys[k] = key(h, mask, alternate_sign)
            k += 1
    return k


@kernel(nogil=True)
def hash_text(buf, offsets, seeds, mask, key_bits, alternate_sign, min_len, min_n, max_n, value_mode, word):
    """Hash documents into CSR (indptr, indices, data).

    Row i gathers the n-grams of every field f, the bytes buf[offsets[f, i]:offsets[f, i + 1]]
    hashed with seeds[f]; its keys are sorted, each run of one column summed to v = sum of signs,
    v = 0 dropped, and v mapped by value_mode: 0 -> v, 1 -> sign(v), 2 -> sign(v) * log1p(|v|)."""
    n_fields = offsets.shape[0]
    n_docs = offsets.shape[1] - 1
    max_seg = 0
    max_keys = 0
    for i in range(n_docs):
        doc_keys = 0
        for f in range(n_fields):
            seg = offsets[f, i + 1] - offsets[f, i]
            max_seg = max(max_seg, seg)
            doc_keys += (seg + 1) // (min_len + 1)  # t tokens of >= m bytes need t * m + t - 1 bytes
        max_keys = max(max_keys, doc_keys)
    tok_start = np.empty(max_seg // 2 + 2, dtype=np.int64)
    tok_end = np.empty_like(tok_start)
    char_start = np.empty_like(tok_start)
    char_end = np.empty_like(tok_start)
    scratch = np.empty(max_seg, dtype=np.uint8)
    keys = np.empty(max_keys * (max_n - min_n + 1), dtype=np.int32)
    sort_tmp = np.empty_like(keys)
    sort_counts = np.empty(256, dtype=np.int64)

    indptr = np.zeros(n_docs + 1, dtype=np.int64)
    capacity = buf.size // 8 + 1024
    indices = np.empty(capacity, dtype=np.int32)
    data = np.empty(capacity, dtype=np.float32)
    nnz = np.int64(0)
    for i in range(n_docs):
        k = np.int64(0)
        for f in range(n_fields):
            n_tok = tokenize(
                buf, offsets[f, i], offsets[f, i + 1], min_len, word, tok_start, tok_end, char_start, char_end
            )
            k = hash_ngrams(
                buf, tok_start, tok_end, n_tok, seeds[f], mask, alternate_sign, min_n, max_n, scratch, keys, k
            )
        if nnz + k > capacity:
            capacity = max(2 * capacity, nnz + k)
            indices = grow(indices, capacity, nnz)
            data = grow(data, capacity, nnz)
        radix_sort(keys, k, key_bits, sort_tmp, sort_counts)
        j = 0
        while j < k:
            col = keys[j] >> 1
            v = 0
            while j < k and (keys[j] >> 1) == col:
                v += 1 - 2 * (keys[j] & 1)
                j += 1
            if v != 0:
                indices[nnz] = col
                if value_mode == 0:
                    data[nnz] = v
                elif value_mode == 1:
                    data[nnz] = 1.0 if v > 0 else -1.0
                else:
                    data[nnz] = np.log1p(abs(v)) * (1.0 if v > 0 else -1.0)
                nnz += 1
        indptr[i + 1] = nnz
    return indptr, indices[:nnz].copy(), data[:nnz].copy()


@kernel(nogil=True)
def grow(a, capacity, n):
    """Copy of a[:n] in a new array of the given capacity."""
    b = np.empty(capacity, dtype=a.dtype)
    for j in range(n):
        b[j] = a[j]
    return b


@kernel(nogil=True)
def hash_entries(indptr, buf, starts, ends, values, seed, mask, alternate_sign):
    """Hash CSR entries whose j-th key is the bytes buf[starts[j]:ends[j]] (a raw id's 8 bytes,
    or a token): entry value v goes to column col(key) as sgn(key) * v; each row's entries of
    one column are summed (in input order, float64), and sums that are 0 in float32 are dropped."""
    n_rows = indptr.size - 1
    nnz_in = values.size
    cols = np.empty(nnz_in, dtype=np.int32)
    signed = np.empty(nnz_in, dtype=np.float64)
    for j in range(nnz_in):
        h = murmur3_32(buf, starts[j], ends[j], seed)
        cols[j] = abs(h) & mask
        signed[j] = -values[j] if (alternate_sign and h < 0) else values[j]
    out_indptr = np.zeros(n_rows + 1, dtype=np.int64)
    out_indices = np.empty(nnz_in, dtype=np.int32)
    out_data = np.empty(nnz_in, dtype=np.float32)
    nnz = 0
    for i in range(n_rows):
        s = indptr[i]
        e = indptr[i + 1]
        order = stable_argsort(cols[s:e]) + s
        j = 0
        while j < e - s:
            col = cols[order[j]]
            v = 0.0
            while j < e - s and cols[order[j]] == col:
                v += signed[order[j]]
                j += 1
            v32 = np.float32(v)
            if v32 != 0:
                out_indices[nnz] = col
                out_data[nnz] = v32
                nnz += 1
        out_indptr[i + 1] = nnz
    return out_indptr, out_indices[:nnz].copy(), out_data[:nnz].copy()
