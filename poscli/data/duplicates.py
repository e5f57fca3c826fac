"""Near-duplicate documents: hashed token shingles, the groups of documents that share many, and how
much of the held-out text the training text shares (so a split never holds out a copy of a
training document)."""

from __future__ import annotations

import numpy as np

# Near-duplicate detection: shingles of SHINGLE bytes, a content-defined sample of 1 in
# SHINGLE_SAMPLE of them (the same text keeps the same sample wherever it sits), documents
# grouped when DUPLICATE_OVERLAP of the smaller one's sampled shingles occur in the other.
# Shingles in more than COMMON_SHINGLE_DOCUMENTS documents (licence headers) are not evidence.
SHINGLE = 32
SHINGLE_SAMPLE = 8
DUPLICATE_OVERLAP = 0.5
COMMON_SHINGLE_DOCUMENTS = 400
SHINGLE_BLOCK = 1 << 18  # shingles hashed at a time: the working arrays stay in cache


def shingle_hashes(tokens: np.ndarray, offsets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The sampled SHINGLE-byte shingles of every document, unique per document.

    Returns (hashes (M,) uint64, documents (M,) int64), sorted by hash then document. A shingle's
    hash is a polynomial hash of its bytes; it is kept when hash % SHINGLE_SAMPLE == 0, a choice
    made by the content alone, so a passage copied into another document keeps the same sampled
    shingles (winnowing's idea, Schleimer et al., 2003). Shingles that would cross a document
    boundary are dropped.
    """
    count = len(tokens) - SHINGLE + 1
    if count <= 0:
        return np.zeros(0, dtype=np.uint64), np.zeros(0, dtype=np.int64)
    multipliers = np.random.default_rng(20231).integers(1, 2**62, size=SHINGLE, dtype=np.uint64) | np.uint64(1)
    sampled_hashes, sampled_starts = [], []
    for start in range(0, count, SHINGLE_BLOCK):
        hashes = _hash_shingles(tokens, start, min(start + SHINGLE_BLOCK, count), multipliers)  # (block,)
        sampled = np.flatnonzero(hashes % np.uint64(SHINGLE_SAMPLE) == 0)
        sampled_hashes.append(hashes[sampled])
        sampled_starts.append(sampled + start)
    hashes, starts = np.concatenate(sampled_hashes), np.concatenate(sampled_starts)
    documents = np.searchsorted(offsets, starts, side="right") - 1
    inside = starts + SHINGLE <= offsets[documents + 1]
    hashes, documents = hashes[inside], documents[inside]
    order = np.lexsort((documents, hashes))
    hashes, documents = hashes[order], documents[order]
    first = np.ones(len(hashes), dtype=bool)  # the first of each run of equal (hash, document) pairs
    first[1:] = (hashes[1:] != hashes[:-1]) | (documents[1:] != documents[:-1])
    return hashes[first], documents[first].astype(np.int64)


def _hash_shingles(tokens: np.ndarray, start: int, stop: int, multipliers: np.ndarray) -> np.ndarray:
    """(stop - start,) uint64 hashes of the shingles starting at start..stop-1, in place (no
    temporaries per byte of the shingle); arithmetic wraps modulo 2^64."""
    hashes = np.zeros(stop - start, dtype=np.uint64)
    term = np.empty(stop - start, dtype=np.uint64)
    with np.errstate(over="ignore"):
        for i in range(SHINGLE):
            hashes *= np.uint64(1099511628211)
            np.multiply(tokens[start + i : stop + i], multipliers[i], out=term, casting="unsafe")
            hashes ^= term
        np.right_shift(hashes, np.uint64(29), out=term)  # a finalizer (splitmix64's) mixes the high bits down
        hashes ^= term
        hashes *= np.uint64(0xBF58476D1CE4E5B9)
        np.right_shift(hashes, np.uint64(32), out=term)
        hashes ^= term
    return hashes


def near_duplicate_groups(offsets: np.ndarray, shingles: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
    """(D,) group id of each document: connected components of the near-duplicate relation.

    Two documents are near-duplicates when at least DUPLICATE_OVERLAP of the smaller one's sampled
    shingles occur in the other (containment, Broder, 1997). Shingles found in more than
    COMMON_SHINGLE_DOCUMENTS documents are ignored: boilerplate, not copying.
    """
    num_documents = len(offsets) - 1
    hashes, documents = shingles
    parent = np.arange(num_documents)

    def find(d: int) -> int:
        while parent[d] != d:
            parent[d] = parent[parent[d]]
            d = parent[d]
        return d

    if len(hashes):
        sizes = np.bincount(documents, minlength=num_documents)  # sampled shingles per document
        unique, inverse, counts = np.unique(hashes, return_inverse=True, return_counts=True)
        shared = counts[inverse] >= 2
        shared &= counts[inverse] <= COMMON_SHINGLE_DOCUMENTS
        order = np.argsort(inverse[shared], kind="stable")
        ids, docs = inverse[shared][order], documents[shared][order]
        pair_counts: dict[tuple[int, int], int] = {}
        boundaries = np.flatnonzero(np.diff(ids)) + 1
        for members in np.split(docs, boundaries):
            members = members.tolist()
            for a in range(len(members)):
                for b in range(a + 1, len(members)):
                    key = (members[a], members[b])
                    pair_counts[key] = pair_counts.get(key, 0) + 1
        for (a, b), together in pair_counts.items():
            if together >= DUPLICATE_OVERLAP * max(1, min(sizes[a], sizes[b])):
                parent[find(a)] = find(b)
    return np.array([find(d) for d in range(num_documents)], dtype=np.int64)


def heldout_shingle_overlap(shingles: tuple[np.ndarray, np.ndarray], heldout: np.ndarray) -> dict:
    """Share of held-out sampled shingles (``shingle_hashes``) that also occur in a training
    document, overall ("share") and for the held-out document with the most ("worst")."""
    hashes, documents = shingles
    held = heldout[documents]
    if not held.any():
        return {"share": 0.0, "worst": 0.0}
    train_hashes, asked = np.sort(hashes[~held]), hashes[held]  # sorted + searchsorted: 25x np.isin's hash table
    found = np.minimum(np.searchsorted(train_hashes, asked), max(len(train_hashes) - 1, 0))
    in_train = train_hashes[found] == asked if len(train_hashes) else np.zeros(len(asked), dtype=bool)
    per_document = np.bincount(documents[held], weights=in_train, minlength=len(heldout))
    totals = np.bincount(documents[held], minlength=len(heldout))
    worst = float((per_document[totals > 0] / totals[totals > 0]).max())
    return {"share": float(in_train.mean()), "worst": worst}
