"""poscli eval hf:DIR: a transformers model scored by poscli's protocol. The round trip is the test:
a poscli run exported with poscli export and evaluated as hf:DIR gives the run's own perplexity on
the same held-out tokens, at two lengths."""

import pandas as pd
import pytest

from tests.cli.test_cli import TINY, poscli
from tests.conftest import write_text_corpus


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    base = tmp_path_factory.mktemp("pretrained")
    corpus = write_text_corpus(base / "corpus", documents=12, words=1200)
    results = base / "results"
    done = poscli("train", "--pe", "rope", "--data", str(corpus), "--steps", "6", "--name", "r", "--results",
                  str(results), *TINY)  # fmt: skip
    assert done.returncode == 0, done.stderr
    done = poscli("export", "r", str(base / "hf"), "--no-check", "--results", str(results))
    assert done.returncode == 0, done.stderr
    return corpus, results, base / "hf"


@pytest.mark.slow
def test_an_exported_run_evaluated_as_hf_gives_the_runs_own_perplexity(exported):
    corpus, results, folder = exported
    common = ["--lengths", "32,64", "--results", str(results), "--no-reference", "--quiet"]
    done = poscli("eval", "r", "--table", "own", *common)
    assert done.returncode == 0, done.stderr
    done = poscli("eval", f"hf:{folder}", "--data", str(corpus), "--table", "hf", *common)
    assert done.returncode == 0, done.stderr
    own = pd.read_csv(results / "own.csv").set_index("length")
    hf = pd.read_csv(results / "hf.csv").set_index("length")
    assert (hf["run"] == f"hf:{folder}").all() and (hf["pe"] == "rope").all() and (hf["train_length"] == 32).all()
    for length in (32, 64):
        assert hf.loc[length, "tokens"] == own.loc[length, "tokens"] > 0  # the same held-out tokens
        assert hf.loc[length, "ppl"] == pytest.approx(own.loc[length, "ppl"], rel=1e-4)


def test_a_hub_name_offline_and_a_missing_folder_fail_in_one_line(tmp_path):
    for name in ("hf:no-such-org/no-such-model", f"hf:{tmp_path / 'missing'}"):
        done = poscli("eval", name, "--lengths", "32", "--results", str(tmp_path))
        assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1, done.stderr
        assert "cannot load its config" in done.stderr and "give a local folder (hf:PATH)" in done.stderr


def test_hf_models_refuse_other_tasks_for_now(tmp_path):
    done = poscli("eval", "hf:whatever", "--task", "passkey", "--lengths", "256", "--results", str(tmp_path))
    assert done.returncode == 2 and "hf: models take the perplexity evaluation for now" in done.stderr
