import numpy as np
import pytest

from poscli.core.lengths import format_length, parse_length, parse_lengths
from poscli.data import corpus as data
from poscli.data.corpus import load_corpus, stratified_split
from poscli.data.sources.stdlib import stdlib_files
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
