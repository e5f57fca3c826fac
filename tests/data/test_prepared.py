"""Prepared corpora: tokenized once into files on disk, read window by window."""

import hashlib

import numpy as np
import pytest

from poscli.data.prepared import TokenFile, heldout_by_hash, open_prepared, prepare
from poscli.data.tokenizer import ByteTokenizer, train_bpe
from poscli.data.tokens import encode
from poscli.errors import PoscliError

DOCUMENTS = [
    f"document {i}\n" + "".join(f"line {j} of document {i}: {'ü' * (j % 3)}\n" for j in range(i % 17 + 1))
    for i in range(400)
]


def test_the_files_hold_every_document_once_on_the_side_its_hash_decides(tmp_path):
    seen = []
    corpus = prepare(
        iter(DOCUMENTS), tmp_path / "p", ByteTokenizer(), 0.1, "test", progress=lambda d, b: seen.append((d, b))
    )
    held = [heldout_by_hash(hashlib.sha1(d.encode()).hexdigest(), 0.1) for d in DOCUMENTS]
    assert corpus.heldout.tolist() == held and 0 < sum(held) < len(held)
    assert corpus.lengths.tolist() == [len(d.encode()) for d in DOCUMENTS]
    heldout_docs = [d for d, h in zip(DOCUMENTS, held) if h]
    for index, text in zip(corpus.heldout_indices(), heldout_docs):
        assert (corpus.document(index) == encode(text)).all()
    train = corpus.train_tokens()
    joined = "\n\n".join(d for d, h in zip(DOCUMENTS, held) if not h)
    assert len(train) == len(joined.encode()) and (train.read(0, len(train)) == encode(joined)).all()
    assert seen[-1] == (len(DOCUMENTS), sum(len(d.encode()) for d in DOCUMENTS))
    summary = corpus.summary()
    assert summary["train_tokens"] + summary["heldout_tokens"] == sum(corpus.lengths) and "sha1" in summary["split"]
    assert open_prepared(tmp_path / "p").meta == corpus.meta


def test_the_split_depends_on_each_document_alone_not_on_order(tmp_path):
    forward = prepare(iter(DOCUMENTS), tmp_path / "a", ByteTokenizer(), 0.2, "t")
    backward = prepare(iter(DOCUMENTS[::-1]), tmp_path / "b", ByteTokenizer(), 0.2, "t")
    assert forward.heldout.tolist() == backward.heldout.tolist()[::-1]
    assert forward.heldout_sha1() == backward.heldout_sha1()


def test_windows_are_the_tokens_at_their_starts(tmp_path):
    values = np.arange(100_000, dtype=np.uint16) % 5000
    path = tmp_path / "t.bin"
    path.write_bytes(values.tobytes())
    tokens = TokenFile(path, "uint16")
    starts = np.array([0, 17, 99_000, 50_000])
    windows = tokens.windows(starts, 1000)
    assert windows.shape == (4, 1000) and all((windows[i] == values[s : s + 1000]).all() for i, s in enumerate(starts))
    with pytest.raises(IndexError):
        tokens.windows(np.array([99_500]), 1000)


def test_a_bpe_corpus_stores_its_ids_and_tokenizer(tmp_path):
    bpe = train_bpe(DOCUMENTS, 400)
    corpus = prepare(iter(DOCUMENTS), tmp_path / "p", bpe, 0.1, "test")
    assert (
        corpus.meta["dtype"] == "uint16"
        and corpus.meta["tokenizer"] == "bpe:400"
        and (tmp_path / "p" / "tokenizer.json").exists()
    )
    index = corpus.heldout_indices()[0]
    assert bpe.decode(corpus.document(index)) == DOCUMENTS[index]
    assert corpus.lengths.sum() < sum(len(d.encode()) for d in DOCUMENTS)


def test_a_corpus_with_nothing_held_out_is_refused_and_leaves_no_files(tmp_path):
    with pytest.raises(PoscliError, match="both sides"):
        prepare(iter(DOCUMENTS[:1]), tmp_path / "p", ByteTokenizer(), 0.1, "one")
    assert not any((tmp_path / "p").glob("*.bin"))


def test_a_folder_that_is_not_prepared_says_how_to_prepare_it(tmp_path):
    with pytest.raises(PoscliError, match="poscli data prepare"):
        open_prepared(tmp_path)


def test_a_big_text_file_is_cut_at_line_ends_into_documents_that_join_back(tmp_path):
    from poscli.data.sources.files import file_chunks

    text = "".join(f"line {i} ünï\n" for i in range(20_000))
    path = tmp_path / "big.txt"
    path.write_text(text)
    chunks = list(file_chunks(path, 4096))
    assert "".join(chunks) == text and all(c.endswith("\n") for c in chunks)
    assert all(len(c.encode()) <= 4096 + 20 for c in chunks) and len(chunks) > 50
    corpus = prepare(file_chunks(path, 4096), tmp_path / "p", ByteTokenizer(), 0.1, str(path))
    assert 0 < corpus.heldout.sum() < len(chunks)


def test_a_source_that_fails_midway_leaves_no_partial_files_and_a_killed_prepares_are_cleared(tmp_path):
    """A corpus that cannot be read (here: an error after the first batch) leaves no *.partial files,
    and no folder where the prepare made it;
    a folder holding only what a killed prepare left (*.partial) is taken, not refused."""
    from poscli.data.prepared import check_request

    def failing():
        yield from (f"document {i} " * 20 for i in range(300))
        raise PoscliError("cannot read the rest")

    with pytest.raises(PoscliError, match="cannot read the rest"):
        prepare(failing(), tmp_path / "out", ByteTokenizer(), 0.1, "failing")
    assert not (tmp_path / "out").exists(), "the folder this prepare made is gone with its partial files"
    (tmp_path / "kept").mkdir()  # a folder the user made is left, empty
    with pytest.raises(PoscliError, match="cannot read the rest"):
        prepare(failing(), tmp_path / "kept", ByteTokenizer(), 0.1, "failing")
    assert (tmp_path / "kept").is_dir() and not list((tmp_path / "kept").iterdir())
    (tmp_path / "killed").mkdir()
    (tmp_path / "killed" / "train.bin.partial").write_bytes(b"half")
    check_request(tmp_path / "killed", 0.1)
    assert not list((tmp_path / "killed").iterdir())
    (tmp_path / "used").mkdir()
    (tmp_path / "used" / "meta.json").write_text("{}")
    with pytest.raises(PoscliError, match="exists and is not empty"):
        check_request(tmp_path / "used", 0.1)
