"""Both reference studies in miniature (recipes/smoke.toml, also `make smoke`): train, extend,
evaluate, summarise over seeds, compare with the papers and report, end to end. It checks the
pipeline, not the science."""

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_the_smoke_recipe_runs_both_studies_and_reports_beside_both_papers(tmp_path):
    results = tmp_path / "results"
    done = subprocess.run(
        [sys.executable, "-m", "poscli", "run", str(ROOT / "recipes" / "smoke.toml"), "--results", str(results)],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    report = (results / "REPORT.md").read_text(encoding="utf-8")
    assert "Beside Press et al." in report and "Beside Peng et al." in report
    assert "Passkey retrieval beside the YaRN repository" in report and "Perplexity is not retrieval" in report
    gates = (results / "smoke-extend-gates.md").read_text(encoding="utf-8")  # every run's gate, one seed or five
    assert "- learned: smoke-rope-s0+yarn-4, " in gates and "x the 3-gram at" in gates
    assert "![smoke-inspect-angles](smoke-inspect-angles.png)" in report and "## smoke-inspect_mass" not in report
    assert "effective length" in (results / "smoke-extend-passkey-seeds.md").read_text(encoding="utf-8")
