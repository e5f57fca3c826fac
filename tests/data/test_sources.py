"""Rows of local dataset files (written here: parquet, jsonl, arrow, csv) joined into documents; the hub offline."""

import time

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from poscli.data.sources import resolve
from poscli.data.sources.base import RowOptions, join, parse_join
from poscli.data.sources.dataset_files import dataset_files
from poscli.errors import EnvironmentFailure, PoscliError


def load_rows(spec: str, options: RowOptions, split: str | None = None):
    """The rows of a dataset source (the hub's or local files'), as ``--data spec`` reads them."""
    return resolve(spec, options).rows(split)


def documents(spec: str, options: RowOptions):
    return resolve(spec, options).documents()


# WikiText's layout: a row per paragraph or heading, top-level titles " = Title = ".
WIKI = [
    " = Alpha = \n",
    "\n",
    " Alpha is a letter . \n",
    " = = History = = \n",
    " It is old . \n",
    " = Beta = \n",
    " Beta follows alpha . \n",
    " = Gamma = \n",
    " Gamma . \n",
]


def write(folder, kind, rows, column="text"):
    table = pa.table({column: rows, "id": list(range(len(rows)))})
    path = folder / f"data.{kind}"
    if kind == "parquet":
        pq.write_table(table, path)
    elif kind == "jsonl":
        import json

        path.write_text("".join(json.dumps({column: r, "id": i}) + "\n" for i, r in enumerate(rows)))
    elif kind == "arrow":
        with pa.ipc.new_stream(str(path), table.schema) as writer:
            writer.write_table(table)
    elif kind == "csv":
        import csv

        with open(path, "w", newline="") as handle:
            out = csv.writer(handle)
            out.writerow([column, "id"])
            out.writerows([r, i] for i, r in enumerate(rows))
    return path


@pytest.mark.parametrize("kind", ["parquet", "jsonl", "arrow", "csv"])
def test_local_dataset_files_give_their_rows_in_order(tmp_path, kind):
    rows = [f"row {i} with ünïcode\n" for i in range(50)]
    path = write(tmp_path, kind, rows)
    assert list(load_rows(str(path), RowOptions())) == rows
    assert list(load_rows(str(tmp_path), RowOptions())) == rows  # the folder that holds it
    assert list(load_rows(str(path), RowOptions(streaming=True))) == rows


def test_the_text_column_is_chosen_or_asked_for(tmp_path):
    path = write(tmp_path, "parquet", ["a\n", "b\n"], column="content")
    assert list(load_rows(str(path), RowOptions())) == ["a\n", "b\n"]  # the only string column
    assert list(load_rows(str(path), RowOptions(text_column="content"))) == ["a\n", "b\n"]
    with pytest.raises(PoscliError, match="no column 'body'.*--text-column"):
        list(load_rows(str(path), RowOptions(text_column="body")))


def test_wikitext_rows_join_into_articles_at_top_level_titles():
    articles = list(join(WIKI, "heading"))
    assert [a.splitlines()[0] for a in articles] == [" = Alpha = ", " = Beta = ", " = Gamma = "]
    assert "History" in articles[0] and "".join(articles) == "".join(WIKI)


def test_rows_join_by_count_and_empty_rows_are_dropped_alone():
    assert list(join(["a", "b", "c", "d", "e"], 2)) == ["ab", "cd", "e"]
    assert list(join(["a", "", "b"], None)) == ["a", "b"]


def test_a_byte_budget_stops_a_stream(tmp_path):
    path = write(tmp_path, "jsonl", ["x" * 100 + "\n"] * 1000)
    got = list(documents(str(path), RowOptions(streaming=True, max_bytes=1000)))
    assert len(got) == 10


@pytest.mark.parametrize("text", ["0", "rows", "-3"])
def test_a_bad_join_rule_is_one_line(text):
    with pytest.raises(PoscliError, match="--join-rows"):
        parse_join(text)


def test_a_folder_of_plain_text_is_not_a_dataset(tmp_path):
    (tmp_path / "a.txt").write_text("hello")
    assert dataset_files(str(tmp_path)) is None


def test_offline_a_hub_name_fails_at_once_in_one_line(monkeypatch):
    """A host that never answers (a non-routable address): without the switch to offline mode,
    datasets would wait and retry for minutes."""
    import datasets
    import huggingface_hub

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("HF_DATASETS_OFFLINE", raising=False)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", False)
    monkeypatch.setenv("HF_ENDPOINT", "https://10.255.255.1")
    started = time.perf_counter()
    with pytest.raises(EnvironmentFailure) as caught:
        list(load_rows("hf:someone/no-such-dataset", RowOptions()))
    assert (
        time.perf_counter() - started < 10
        and "\n" not in str(caught.value)
        and "hf:someone/no-such-dataset" in str(caught.value)
    )


def test_a_folder_with_train_and_test_files_has_both_splits(tmp_path):
    write(tmp_path, "parquet", ["train row\n"] * 3).rename(tmp_path / "train.parquet")
    write(tmp_path, "parquet", ["test row\n"] * 2).rename(tmp_path / "test.parquet")
    assert list(load_rows(str(tmp_path), RowOptions())) == ["train row\n"] * 3
    assert list(load_rows(str(tmp_path), RowOptions(), split="test")) == ["test row\n"] * 2
    with pytest.raises(PoscliError, match="split 'validation'"):
        list(load_rows(str(tmp_path), RowOptions(), split="validation"))


def test_a_size_takes_k_m_g_and_nonsense_is_one_line_exit_2():
    import subprocess
    import sys

    from poscli.core.lengths import parse_size

    assert parse_size("2G") == 2 << 30 and parse_size("200m") == 200 << 20 and parse_size("1000") == 1000
    for bad in ("abc", "0", "-5M", "G"):
        with pytest.raises(ValueError):
            parse_size(bad)
    done = subprocess.run(
        [sys.executable, "-m", "poscli", "train", "--max-data-bytes", "lots"], capture_output=True, text=True
    )
    assert done.returncode == 2 and "is not a size" in done.stderr and "Traceback" not in done.stderr
