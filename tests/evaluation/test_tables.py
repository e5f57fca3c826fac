"""Result tables read back as they were written, and merged without losing rows."""

import math

from poscli.evaluation.tables import format_estimate, merge_rows, read_table


def test_a_table_reads_back_text_as_text_and_an_empty_note_as_empty(tmp_path):
    """pandas' defaults would read the run named "NA" and the note "n/a" as missing values and an
    empty note as NaN (which is truthy: a reader testing ``if note`` would print "nan")."""
    path = tmp_path / "t.csv"
    path.write_text("run,length,ppl,note\nNA,128,3.5,\nr,512,,n/a\n")
    table = read_table(path)
    assert table["run"].tolist() == ["NA", "r"]
    assert table["note"].tolist() == ["", "n/a"] and not table["note"].iloc[0]
    assert table["ppl"].iloc[0] == 3.5 and math.isnan(table["ppl"].iloc[1])


def test_merged_rows_replace_those_with_the_same_key_and_keep_the_rest(tmp_path):
    path, columns = tmp_path / "t.csv", ["run", "length", "ppl", "note"]
    merge_rows(
        path,
        [{"run": "a", "length": 128, "ppl": 3.0, "note": ""}, {"run": "b", "length": 128, "ppl": 4.0, "note": ""}],
        columns,
        ["run", "length"],
    )
    merged = merge_rows(path, [{"run": "a", "length": 128, "ppl": 2.5, "note": "n/a"}], columns, ["run", "length"])
    assert merged[["run", "ppl", "note"]].values.tolist() == [["a", 2.5, "n/a"], ["b", 4.0, ""]]
    assert read_table(path).equals(merged)


def test_an_estimate_prints_its_interval_in_its_own_digits_and_unit_and_only_what_it_has():
    """One formatter for perplexity cells (3 decimals) and ratios (2 decimals and "x"): an interval
    that is missing at either end (one seed) prints the value alone, a missing value "n/a"."""
    assert format_estimate(3.14159, 3.0, 3.3) == "3.142 [3.000, 3.300]"
    assert format_estimate(5.834, 5.21, 6.625, 2, "x") == "5.83x [5.21, 6.62]"
    assert format_estimate(1.0, math.nan, math.nan, 2, "x") == "1.00x"
    assert format_estimate(1.0, 0.9, None) == "1.000"
    assert format_estimate(math.nan, 0.9, 1.1) == "n/a" and format_estimate(None) == "n/a"
