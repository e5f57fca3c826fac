"""The headline numbers in the README and docs/ are the files in results/reference, copied by
tools/readme_headline.py."""

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_the_readme_headline_is_exactly_what_results_holds():
    done = subprocess.run(
        [sys.executable, "tools/readme_headline.py", "--check"], cwd=ROOT, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    results = (ROOT / "docs" / "results.md").read_text(encoding="utf-8")
    assert (
        "<!-- results/reference/tstl-seeds.md -->\nPerplexity, mean over seeds" in results
    )  # the block is filled, not empty


# What a verdict quotes: an interval, a ratio, a p value. Outside a generated block (and code) none
# may be typed by hand in docs/results.md or the README's results, so each one is a published file's.
QUOTED = re.compile(r"\[-?\d+\.\d+, -?\d+\.\d+\]|\b\d+\.\d+x\b|Holm p|\bq \d|\bp \d?\.\d")
VERDICT_WORDS = re.compile(r"\*\*(agrees|differs|holds|same order|does not hold)\*\*|\bnot separated at \d")


def hand_written(text: str) -> list[str]:
    """The lines of ``text`` outside <!-- results/... --> blocks and code fences."""
    text = re.sub(r"<!-- results/.*?<!-- end -->", "", text, flags=re.S)
    text = re.sub(r"```.*?```", "", text, flags=re.S)
    return text.splitlines()


def readme_results() -> str:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    return readme.split("## What the reference study shows", 1)[1].split("\n## ", 1)[0]


@pytest.mark.parametrize("name", ["docs/results.md", "README.md"])
def test_every_verdict_ratio_and_p_value_in_the_docs_is_quoted_from_a_published_file(name):
    text = readme_results() if name == "README.md" else (ROOT / name).read_text(encoding="utf-8")
    typed = [line for line in hand_written(text) if QUOTED.search(line) or VERDICT_WORDS.search(line)]
    assert not typed, f"{name}: quote these from results/reference in a block (tools/readme_headline.py): {typed[:3]}"


def test_the_quote_check_catches_a_typed_ratio_and_passes_a_block():
    typed = "ALiBi keeps (0.93x [0.92, 0.93], Holm p 0.049).\n"
    block = (
        '<!-- results/reference/x-published.md only "- **a" -->\n- **a**: holds, 0.93x [0.92, 0.93].\n<!-- end -->\n'
    )
    assert any(QUOTED.search(line) for line in hand_written(typed))
    assert not any(QUOTED.search(line) for line in hand_written(block))


def test_the_check_notices_a_number_typed_by_hand(tmp_path):
    sys.path.insert(0, str(ROOT / "tools"))
    from readme_headline import render

    (tmp_path / "results").mkdir()
    (tmp_path / "results" / "t.md").write_text("| a | 1.000 |\n")
    stale = "<!-- results/t.md -->\n| a | 1.001 |\n<!-- end -->\n"
    assert render(stale, tmp_path) == "<!-- results/t.md -->\n| a | 1.000 |\n<!-- end -->\n"
    (tmp_path / "results" / "p-published.md").write_text(
        "Intro.\n\n- ALiBi: keeps.\n- alibi-s*: 0.9x.\n- Paper at 512.\n"
    )
    some = '<!-- results/p-published.md only "- ALiBi" "- Paper at" -->\nold\n<!-- end -->\n'
    assert render(some, tmp_path).splitlines()[1:3] == ["- ALiBi: keeps.", "- Paper at 512."]
    (tmp_path / "results" / "c-published.md").write_text("- **a**: holds.\n  - 4x: holds.\n- **b**: x.\n  - 4x: y.\n")
    claim = '<!-- results/c-published.md only "- **a**" -->\nold\n<!-- end -->\n'
    assert render(claim, tmp_path).splitlines()[1:3] == ["- **a**: holds.", "  - 4x: holds."]  # with its lines


def test_each_runs_table_is_what_tools_runs_table_writes_from_its_csv():
    """results/reference/TABLE-runs.md (included in docs/results.md) is regenerated from TABLE.csv, not typed."""
    import pandas as pd

    sys.path.insert(0, str(ROOT / "tools"))
    from runs_table import runs_table

    written = sorted((ROOT / "results" / "reference").glob("*-runs.md"))
    assert written, "docs/results.md includes tstl-stdlib-runs.md"
    for path in written:
        csv = path.with_name(path.name.removesuffix("-runs.md") + ".csv")
        table = pd.read_csv(csv, keep_default_na=False, na_values=["nan", "NaN", ""])
        assert path.read_text(encoding="utf-8") == runs_table(table), f"python tools/runs_table.py {csv}"


def test_each_corpora_table_is_what_the_command_on_its_first_line_writes():
    """results/reference/*-corpora.md (included in docs/results.md) is regenerated, not typed."""
    import shlex

    import pandas as pd

    sys.path.insert(0, str(ROOT / "tools"))
    from corpora_table import corpora_table

    for path in sorted((ROOT / "results" / "reference").glob("*-corpora.md")):
        first, text = path.read_text(encoding="utf-8").split("\n", 1)
        args = shlex.split(first.removeprefix("<!-- ").removesuffix(" -->"))[2:]
        encodings = set(args[args.index("--pe") + 1].split(",")) if "--pe" in args else None
        csvs = [ROOT / a for a in args[1:] if a.endswith(".csv")]
        assert text == corpora_table([pd.read_csv(csv) for csv in csvs], encodings), first


def test_the_corpora_table_puts_each_corpus_and_budget_on_its_own_row_from_the_seed_summaries():
    """tools/corpora_table.py: one row per corpus, group and budget, the 3-gram's ratio from the same
    corpus's summary, the files' intervals copied; studies at different lengths refused."""
    import pandas as pd

    sys.path.insert(0, str(ROOT / "tools"))
    from corpora_table import corpora_table

    def summary(corpus, three_gram, rope_at_128, lengths=(128, 512)):
        def row(group, pe, length, mean, ratio, seen):
            return dict(group=group, pe=pe, corpus=corpus, train_length=0 if pe == "reference" else 128, length=length,
                        seeds=5, mean=mean, ci_low=mean - 0.1, ci_high=mean + 0.1, tokens_seen=seen, ratio=ratio,
                        ratio_low=ratio - 0.01, ratio_high=ratio + 0.01)  # fmt: skip

        rows = [row("3-gram", "reference", n, three_gram, 1.0, float("nan")) for n in lengths]
        rows += [row("r-s*", "rope", n, rope_at_128 * (1 + (n > 128)), 1.0 + (n > 128), 4e6) for n in lengths]
        rows += [row("r-s*@5", "rope", n, 2 * rope_at_128, 1.5 if n > 128 else 1.0, 1e6) for n in lengths]
        rows += [row("a-s*", "alibi", n, 5.0, 1.0, 4e6) for n in lengths]
        return pd.DataFrame(rows)

    lines = corpora_table([summary("stdlib", 8.0, 4.0), summary("shakespeare", 5.0, 4.0)], {"rope"}).splitlines()
    assert lines[0] == "| corpus | runs | seeds | tokens seen | ppl at 128 (x 3-gram) | 512 (4x) |"
    assert lines[2] == "| stdlib | r-s*@5 | 5 | 1.00M | 8.000 [7.900, 8.100] (1.00x) | 1.50x [1.49, 1.51] |"
    assert lines[3] == "| stdlib | r-s* | 5 | 4.00M | 4.000 [3.900, 4.100] (0.50x) | 2.00x [1.99, 2.01] |"
    assert lines[5] == "| shakespeare | r-s* | 5 | 4.00M | 4.000 [3.900, 4.100] (0.80x) | 2.00x [1.99, 2.01] |"
    assert len(lines) == 6  # alibi left out by --pe
    with pytest.raises(ValueError, match="different lengths"):
        corpora_table([summary("stdlib", 8.0, 4.0), summary("shakespeare", 5.0, 4.0, (128, 1024))])


def test_a_runs_table_divides_by_the_3gram_and_by_the_runs_own_perplexity_at_its_train_length():
    import pandas as pd

    sys.path.insert(0, str(ROOT / "tools"))
    from runs_table import runs_table

    def row(run, pe, length, ppl, mode="nonoverlapping", seen=1e6):
        return dict(run=run, pe=pe, train_length=0 if pe == "reference" else 128, length=length, mode=mode,
                    ppl=ppl, ci_low=ppl - 0.5, ci_high=ppl + 0.5, tokens_seen=seen)  # fmt: skip

    table = pd.DataFrame(
        [row("reference-3gram", "reference", n, 8.0) for n in (128, 512)]
        + [row("r", "rope", 128, 4.0), row("r", "rope", 512, 10.0), row("r", "rope", 512, 4.5, "truncated-128")]
        + [row("r@5", "rope", 128, 6.0, seen=2.5e5), row("r@5", "rope", 512, 9.0, seen=2.5e5)]
    )
    lines = runs_table(table).splitlines()
    assert lines[2] == "| r | 1.00M | 4.000 [3.500, 4.500] (0.50x) | 10.00 (2.50x) | 4.50 |"
    assert lines[3] == "| r@5 | 0.25M | 6.000 [5.500, 6.500] (0.75x) | 9.00 (1.50x) | - |"
    assert lines[-1] == "3-gram on the same tokens: 8.000"
