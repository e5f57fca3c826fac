"""The headline numbers in the README and docs/ are the files in results/reference, copied by
tools/readme_headline.py."""

import subprocess
import sys
from pathlib import Path

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
