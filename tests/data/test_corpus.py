"""poscli.data.corpus: byte tokens, the built-in corpus, the document split (stratified by length,
near-duplicates together) and the split of one text by position (a single file as a corpus,
nanoGPT's habit), the corpus cache."""

import numpy as np
import pytest

from poscli.core.lengths import format_length, parse_length, parse_lengths
from poscli.data import corpus as data
from poscli.data.corpus import cut_near, load_corpus, parse_split, position_split, stratified_split
from poscli.data.sources.stdlib import stdlib_files
from poscli.data.tokens import encode
from poscli.errors import PoscliError


def test_byte_tokenizer_round_trips_unicode():
    text = "naïve café — 東京 🙂\n\ttabs"
    tokens = data.encode(text)
    assert tokens.dtype == np.uint8 and len(tokens) == len(text.encode("utf-8"))
    assert data.decode(tokens) == text


def test_stdlib_corpus_excludes_tests_and_site_packages():
    files = stdlib_files()
    assert len(files) > 300
    names = {f.name for f in files}
    assert {"os.py", "typing.py", "argparse.py"} <= names
    for path in files:
        assert "site-packages" not in path.parts
        assert not {"test", "tests", "idle_test"} & set(path.parts)
        assert not path.name.startswith("test_")


def test_split_is_deterministic_disjoint_and_independent_of_document_order():
    rng = np.random.default_rng(0)
    lengths = rng.integers(10, 10000, size=200)
    hashes = [f"{rng.integers(0, 2**62):016x}" for _ in range(200)]
    heldout = stratified_split(lengths, hashes, 0.1)
    assert heldout.sum() == 20
    permutation = rng.permutation(200)
    shuffled = stratified_split(lengths[permutation], [hashes[i] for i in permutation], 0.1)
    assert np.array_equal(shuffled, heldout[permutation])
    # the longest tenth of documents contributes a held-out document, so long windows exist
    longest = np.argsort(lengths)[-10:]
    assert heldout[longest].sum() == 1


def test_local_corpus_loads_one_document_per_file_and_is_cached(text_corpus, tmp_path):
    corpus = load_corpus(str(text_corpus))
    assert corpus.num_documents == 12
    first = (text_corpus / "doc00.txt").read_bytes()
    assert any(corpus.document(d).tobytes() == first for d in range(corpus.num_documents))
    assert 1 <= corpus.heldout.sum() < corpus.num_documents
    cached = list(data.cache_dir().glob("corpus-*.npz"))
    assert cached, "the tokenized corpus should be cached"
    again = load_corpus(str(text_corpus))
    assert np.array_equal(again.tokens, corpus.tokens) and np.array_equal(again.heldout, corpus.heldout)
    # changing a file invalidates the cache
    (text_corpus / "doc00.txt").write_text("changed " * 100)
    assert load_corpus(str(text_corpus)).tokens.tobytes() != corpus.tokens.tobytes()


def test_binary_files_are_skipped_and_a_binary_only_folder_is_an_error(tmp_path):
    folder = tmp_path / "bin"
    folder.mkdir()
    (folder / "blob.bin").write_bytes(b"\x00\x01\x02" * 100)
    with pytest.raises(PoscliError, match="no non-empty text files"):
        load_corpus(str(folder))


@pytest.mark.parametrize("text, value", [("256", 256), ("1k", 1024), ("4K", 4096), ("16k", 16384), ("1m", 1048576)])
def test_lengths_parse_with_k_as_1024(text, value):
    assert parse_length(text) == value


@pytest.mark.parametrize("text", ["1x", "0", "-5", "", "1.5k", "k", "1kk"])
def test_malformed_lengths_say_what_is_accepted(text):
    with pytest.raises(PoscliError, match="256,1k,4k"):
        parse_lengths(text)


def test_length_lists_keep_order_and_drop_repeats():
    assert parse_lengths("1k,256,1024,4k") == [1024, 256, 4096]
    assert [format_length(n) for n in (256, 1024, 1536, 65536)] == ["256", "1k", "1536", "64k"]


def test_hub_corpus_uses_the_text_column_of_the_train_split(monkeypatch):
    """The hf: loader for online users, exercised with an in-memory dataset in place of the hub."""
    import datasets

    calls = []

    def fake_load_dataset(name, config=None, split=None, streaming=False):
        calls.append((name, config, split, streaming))
        return datasets.Dataset.from_dict({"id": [1, 2, 3], "body": ["first doc " * 50, "", "second doc " * 80]})

    monkeypatch.setattr(datasets, "load_dataset", fake_load_dataset)
    monkeypatch.setattr("poscli.data.sources.hf.hub_reachable", lambda: True)  # as for a user who is online
    corpus = load_corpus("hf:someone/corpus:small")
    assert calls == [("someone/corpus", "small", "train", False)]
    assert corpus.num_documents == 2  # the empty row is dropped
    assert data.decode(corpus.document(0)).startswith("first doc") or data.decode(corpus.document(1)).startswith(
        "first doc"
    )


def test_hub_corpus_offline_is_an_environment_failure(monkeypatch):
    import datasets

    def offline(*args, **kwargs):
        raise ConnectionError("Couldn't reach the Hugging Face Hub\nmore detail")

    monkeypatch.setattr(datasets, "load_dataset", offline)
    monkeypatch.setattr("poscli.data.sources.hf.hub_reachable", lambda: True)  # the probe answered, the load did not
    with pytest.raises(PoscliError, match="could not load hf:wikitext:wikitext-2-raw-v1 .*Couldn't reach") as error:
        load_corpus("hf:wikitext:wikitext-2-raw-v1")
    assert error.value.exit_code == 1


# --------------------------------------------------------------------------- one text split by position

TEXT = encode("".join(f"line {i}: {'é' * (i % 7)} some words of text\n" for i in range(5000)))


@pytest.mark.parametrize("fraction, blocks", [(0.1, 1), (0.1, 10), (0.2, 3), (0.05, 4)])
def test_the_split_covers_the_text_once_holds_out_the_fraction_and_cuts_at_line_starts(fraction, blocks):
    offsets, heldout = position_split(TEXT, fraction, blocks)
    assert offsets[0] == 0 and offsets[-1] == len(TEXT) and (np.diff(offsets) > 0).all()
    assert len(heldout) == len(offsets) - 1 and heldout.sum() == blocks and heldout[-1]
    assert not (heldout[:-1] & heldout[1:]).any() and not (~heldout[:-1] & ~heldout[1:]).any()  # they alternate
    held = np.diff(offsets)[heldout].sum() / len(TEXT)
    assert abs(held - fraction) < 0.01, held
    for cut in offsets[1:-1]:
        assert TEXT[cut - 1] == ord("\n")  # every segment starts a line


def test_blocks_spread_the_held_out_text_through_the_file():
    offsets, heldout = position_split(TEXT, 0.1, 10)
    starts = offsets[:-1][heldout] / len(TEXT)
    assert np.allclose(starts, np.arange(10) / 10 + 0.09, atol=0.01)


def test_a_cut_never_splits_a_utf8_character():
    text = encode("é" * 5000)  # no newline within reach
    cut = cut_near(text, 1001)
    assert text[cut] == 0xC3 and cut in (1002,)


@pytest.mark.parametrize(
    "text, phrase", [("blocks:0", "blocks:K"), ("rows", "auto, documents, tail"), ("blocks:x", "blocks:K")]
)
def test_a_bad_split_is_one_line_naming_the_choices(text, phrase):
    with pytest.raises(PoscliError, match=phrase):
        parse_split(text)


def test_a_text_too_short_for_the_split_is_refused():
    with pytest.raises(PoscliError, match="too few"):
        position_split(encode("short text\n"), 0.1, 10)


def test_the_held_out_overlap_counts_the_shingles_a_training_document_also_has():
    rng = np.random.default_rng(0)
    hashes = rng.integers(0, 300, size=400, dtype=np.uint64)  # repeats: some shared, some not
    documents = np.sort(rng.integers(0, 8, size=400))
    heldout = np.array([False, True, False, False, True, False, False, True])
    held = heldout[documents]
    got = data.heldout_shingle_overlap((hashes, documents), heldout)
    in_train = np.array([h in set(hashes[~held].tolist()) for h in hashes[held].tolist()])
    per_document = [in_train[documents[held] == d].mean() for d in np.flatnonzero(heldout)]
    assert got == {"share": pytest.approx(in_train.mean()), "worst": pytest.approx(max(per_document))}
    assert 0 < got["share"] < 1
    everything_held = data.heldout_shingle_overlap((hashes, documents), np.ones(8, dtype=bool))
    assert everything_held == {"share": 0.0, "worst": 0.0}  # no training document: nothing shared


def test_a_held_out_split_of_text_files_is_refused_not_the_training_text_again(text_corpus):
    """Text files have no dataset splits: --heldout-split there would read the training text again as
    the held-out text (every held-out token seen in training)."""
    with pytest.raises(PoscliError, match="--heldout-split reads the rows of a dataset; --data .* is not one"):
        load_corpus(str(text_corpus), options=data.CorpusOptions(heldout_split="test"))
    from poscli.data.sources.base import RowOptions

    for rows, flag in ((RowOptions(split="test"), "--data-split"), (RowOptions(text_column="body"), "--text-column")):
        with pytest.raises(PoscliError, match=f"{flag} reads the rows of a dataset; --data stdlib is not one"):
            load_corpus("stdlib", options=data.CorpusOptions(rows=rows))  # was ignored without a word
