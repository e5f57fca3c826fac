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
