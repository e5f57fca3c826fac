"""Your own corpus: one text file, local datasets with splits and joined rows (issue: bring your own data)."""

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from poscli.data.corpus import CorpusOptions, load_corpus
from poscli.data.sources.base import RowOptions
from poscli.errors import PoscliError

TEXT = "".join(f"Line {i}: the quick brown fox jumps over the lazy dog.\n" for i in range(4000))


def test_a_single_text_file_is_split_by_position_holding_out_its_tail(tmp_path):
    path = tmp_path / "input.txt"
    path.write_text(TEXT)
    corpus = load_corpus(str(path), 0.1)
    assert corpus.num_documents == 2 and corpus.heldout.tolist() == [False, True]
    held = corpus.document(1).tobytes().decode()
    assert TEXT.endswith(held) and abs(len(held) / len(TEXT) - 0.1) < 0.01 and held.startswith("Line ")
    assert "last 0.1" in corpus.summary()["split"]


def test_blocks_hold_out_text_spread_through_the_file(tmp_path):
    path = tmp_path / "input.txt"
    path.write_text(TEXT)
    corpus = load_corpus(str(path), 0.1, CorpusOptions(split="blocks:5"))
    assert corpus.heldout.sum() == 5 and "5 blocks" in corpus.summary()["split"]
    assert b"".join(corpus.document(d).tobytes() for d in range(corpus.num_documents)).decode() == TEXT


def test_split_by_documents_of_a_single_document_says_what_to_type(tmp_path):
    path = tmp_path / "input.txt"
    path.write_text(TEXT)
    with pytest.raises(PoscliError, match="--split tail"):
        load_corpus(str(path), 0.1, CorpusOptions(split="documents"))


def wikitext_parquet(path, articles: int):
    rows = []
    for a in range(articles):
        rows += [f" = Article {a} = \n", "\n"] + [f" Paragraph {p} of article {a} , with words . \n" for p in range(30)]
        rows += [f" = = Section of {a} = = \n", " More text . \n"]
    pq.write_table(pa.table({"text": rows}), path)
    return rows


def test_wikitext_style_rows_become_one_document_per_article(tmp_path):
    rows = wikitext_parquet(tmp_path / "train.parquet", 40)
    corpus = load_corpus(str(tmp_path / "train.parquet"), 0.1, CorpusOptions(rows=RowOptions(join_rows="heading")))
    assert corpus.num_documents == 40 and 0 < corpus.heldout.sum() < 40
    assert sorted(corpus.document(d).tobytes().decode().splitlines()[0] for d in range(40)) == sorted(
        f" = Article {a} = " for a in range(40)
    )
    assert corpus.document_lengths().sum() == len("".join(rows).encode())
    plain = load_corpus(str(tmp_path / "train.parquet"), 0.1)  # a row per document, as before
    assert plain.num_documents == len([r for r in rows if r])


def test_a_held_out_split_is_held_out_whole(tmp_path):
    wikitext_parquet(tmp_path / "train.parquet", 20)
    wikitext_parquet(tmp_path / "test.parquet", 3)
    options = CorpusOptions(rows=RowOptions(join_rows="heading"), heldout_split="test")
    corpus = load_corpus(str(tmp_path), 0.1, options)
    assert corpus.heldout.tolist() == [False] * 20 + [True] * 3 and "'test' held out whole" in corpus.summary()["split"]
    with pytest.raises(PoscliError, match="does not combine"):
        load_corpus(str(tmp_path), 0.1, CorpusOptions(split="tail", heldout_split="test"))


def test_the_same_files_read_with_other_row_options_are_another_corpus(tmp_path):
    wikitext_parquet(tmp_path / "train.parquet", 10)
    joined = load_corpus(str(tmp_path / "train.parquet"), 0.2, CorpusOptions(rows=RowOptions(join_rows="5")))
    rows = load_corpus(str(tmp_path / "train.parquet"), 0.2)
    assert joined.num_documents < rows.num_documents and np.array_equal(
        np.concatenate([joined.document(d) for d in range(joined.num_documents)]),
        np.concatenate([rows.document(d) for d in range(rows.num_documents)]),
    )


def test_a_bpe_corpus_keeps_the_documents_and_split_in_fewer_tokens(tmp_path):
    from poscli.data.tokenizer import train_bpe

    path = tmp_path / "input.txt"
    path.write_text(TEXT)
    corpus = load_corpus(str(path), 0.1, CorpusOptions(split="blocks:4"))
    bpe = train_bpe(corpus.texts(heldout=False), 400)
    tokenized = corpus.tokenized(bpe)
    assert tokenized.heldout.tolist() == corpus.heldout.tolist() and tokenized.heldout_sha1() == corpus.heldout_sha1()
    assert tokenized.tokens.dtype == np.uint16 and len(tokenized.tokens) < len(corpus.tokens) / 2
    for d in range(corpus.num_documents):
        assert bpe.decode(tokenized.document(d)) == corpus.texts()[d]
    stream = tokenized.train_tokens()
    assert bpe.decode(stream) == "\n\n".join(corpus.texts(heldout=False))
    assert tokenized.summary()["heldout_shingles_in_train"] == corpus.summary()["heldout_shingles_in_train"]
    again = corpus.tokenized(bpe)  # from the cache
    assert np.array_equal(again.tokens, tokenized.tokens)


TINY = ["--layers", "1", "--heads", "2", "--width", "32", "--train-length", "64", "--batch-size", "4"]


def poscli(*args, cwd=None):
    from tests.conftest import poscli_in_process

    return poscli_in_process(*args, cwd=cwd)


@pytest.mark.slow
def test_a_bpe_run_is_extended_resumed_and_evaluated_with_its_own_tokenizer(tmp_path):
    import json

    path = tmp_path / "input.txt"
    path.write_text(TEXT)
    results = str(tmp_path / "results")
    trained = poscli(
        "train",
        "--data",
        str(path),
        "--tokenizer",
        "bpe:300",
        "--steps",
        "3",
        "--name",
        "b",
        "--results",
        results,
        *TINY,
    )
    assert trained.returncode == 0, trained.stderr
    run = tmp_path / "results" / "runs" / "b"
    config = json.loads((run / "config.json").read_text())
    vocabulary = json.loads((run / "tokenizer.json").read_text())["model"]["vocab"]
    assert (
        config["train"]["tokenizer"] == "bpe:300" and config["model"]["vocab_size"] == len(vocabulary) <= 300
    )  # fewer when merges run out
    (run / "config.json").write_text(json.dumps({**config, "status": "interrupted"}))  # as a Ctrl-C leaves it
    resumed = poscli("train", "--resume", "b", "--results", results)
    assert resumed.returncode == 0, resumed.stderr
    extended = poscli("extend", "b", "--method", "yarn", "--target", "128", "--steps", "2", "--results", results)
    assert extended.returncode == 0, extended.stderr
    child = next(p for p in (tmp_path / "results" / "runs").iterdir() if p.name != "b")
    assert (child / "tokenizer.json").read_text() == (run / "tokenizer.json").read_text()
    evaluated = poscli("eval", "b", child.name, "--lengths", "64,128", "--results", results)
    assert evaluated.returncode == 0, evaluated.stderr
    table = (tmp_path / "results" / "ppl.md").read_text()
    assert "Perplexity per token" in table and "Bits per byte" in table
    import pandas as pd

    rows = pd.read_csv(tmp_path / "results" / "ppl.csv")
    rows = rows[rows["run"] == "b"]
    # a BPE token stands for one or more bytes; the interval brackets the estimate
    assert (rows["bytes"] > rows["tokens"]).all() and (rows["bpb"] < rows["loss"] / 0.6931471805599453).all()
    assert ((rows["bpb_low"] <= rows["bpb"]) & (rows["bpb"] <= rows["bpb_high"])).all()
