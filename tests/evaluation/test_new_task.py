"""The bar for a new evaluation task: ONE file and no other edit. An induction task (a random byte
string seen twice; top-1 accuracy on its second copy) written into poscli/evaluation/tasks/ is
listed by `poscli eval --help`, runs through `poscli eval --task`, writes its table and plot, and
runs from a recipe, which skips it once its rows are there; the same class works as --task
module:Class from outside the package."""

from pathlib import Path

import pandas as pd
import pytest

from poscli.errors import PoscliError
from poscli.evaluation import tasks
from tests.cli.test_cli import TINY
from tests.conftest import module_outside, package_with
from tests.conftest import run_poscli as poscli

REPOSITORY = Path(__file__).resolve().parents[2]

NEW_TASK = '''"""Induction: a random byte string seen twice; top-1 accuracy of the model on its second copy."""

from pathlib import Path

from poscli.evaluation.tasks import register
from poscli.evaluation.tasks.base import Task


@register("induction")
class Induction(Task):
    summary = "copy accuracy on the second of two copies of a random byte string"
    default_table = "induction"
    reads = ("trials",)

    def evaluate(self, run_names, options, results, progress, table):
        import torch

        from poscli.model import runs

        rows = []
        for name in run_names:
            model, config = runs.load_model(runs.find_run(name, results))
            for length in options["lengths"] or [config["model"]["train_length"]]:
                generator = torch.Generator().manual_seed(length)
                half = torch.randint(0, 256, (options["trials"], length // 2), generator=generator)
                tokens = torch.cat([half, half], dim=1)  # (N, length)
                with torch.no_grad():
                    guesses = model(tokens[:, :-1]).argmax(-1)  # (N, length - 1)
                second = slice(length // 2, length - 1)  # predictions of the second copy's tokens
                accuracy = (guesses[:, second] == tokens[:, second.start + 1 : second.stop + 1]).float().mean()
                rows.append({"run": name, "length": length, "accuracy": round(float(accuracy), 4)})
        return rows

    def write(self, result, options, results, table):
        import pandas as pd

        from poscli.model import runs

        path = runs.results_dir(results) / f"{table}.csv"
        old = pd.read_csv(path) if path.exists() else pd.DataFrame(columns=["run", "length"])
        new = pd.DataFrame(result)
        merged = pd.concat([old[~old["run"].isin(new["run"])], new])
        merged.to_csv(path, index=False)
        return [path, *self.plots(merged, path.parent, table)], None

    def owns(self, data):
        return list(data.columns) == ["run", "length", "accuracy"]

    def evaluated(self, rows, run, options):
        from poscli.core.lengths import parse_lengths

        wanted = parse_lengths(str(options["lengths"])) if options.get("lengths") else []
        return set(wanted) <= set(rows[rows["run"] == run]["length"]) and bool(wanted)

    def seed_summary(self, rows, groups, options, folder, table, min_runs):
        return None, ""

    def plots(self, data, folder, table):
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        figure, axes = plt.subplots()
        for run, part in data.groupby("run"):
            axes.plot(part["length"], part["accuracy"], marker="o", label=run)
        axes.legend()
        path = Path(folder) / f"{table}.png"
        figure.savefig(path)
        plt.close(figure)
        return [path]
'''

RECIPE = """name = "induction-study"
[[train]]
name = "ind"
pe = "alibi"
steps = 2
layers = 1
width = 32
heads = 4
train_length = 32
batch_size = 4
warmup = 2
data = "{corpus}"
[[eval]]
runs = ["ind"]
table = "induction"
task = "{task}"
lengths = "32,64"
trials = 4
"""


def through_the_cli(task: str, env: dict, corpus: Path, tmp_path: Path) -> None:
    results = tmp_path / "results"
    trained = poscli("train", "--pe", "alibi", "--name", "r", "--data", str(corpus), "--steps", "2", *TINY,
                     "--results", str(results), env=env, cwd=tmp_path)  # fmt: skip
    assert trained.returncode == 0, trained.stderr
    done = poscli("eval", "r", "--task", task, "--lengths", "32,64", "--trials", "4", "--results", str(results),
                  "--quiet", env=env, cwd=tmp_path)  # fmt: skip
    assert done.returncode == 0, done.stderr
    table = pd.read_csv(results / "induction.csv")
    assert list(table["length"]) == [32, 64] and table["accuracy"].between(0, 1).all()
    assert (results / "induction.png").exists()
    recipe = tmp_path / "study.toml"
    recipe.write_text(RECIPE.format(corpus=corpus, task=task))
    ran = poscli("run", str(recipe), "--results", str(tmp_path / "study"), env=env, cwd=tmp_path)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert len(pd.read_csv(tmp_path / "study" / "induction.csv")) == 2
    again = poscli("run", str(recipe), "--dry-run", "--results", str(tmp_path / "study"), env=env, cwd=tmp_path)
    assert "2 already done" in again.stdout + again.stderr, again.stderr  # the task said its rows are there


@pytest.mark.slow
def test_one_file_in_the_tasks_package_is_a_whole_new_task(small_corpus, tmp_path):
    env = package_with(tmp_path, "evaluation/tasks/induction.py", NEW_TASK)
    helped = poscli("eval", "--help", env=env, cwd=tmp_path)
    assert "induction" in helped.stdout
    through_the_cli("induction", env, small_corpus, tmp_path)


@pytest.mark.slow
def test_one_module_outside_the_package_is_a_whole_new_task(small_corpus, tmp_path):
    env = module_outside(tmp_path, "induction_task", NEW_TASK.replace('@register("induction")\n', ""))
    through_the_cli("induction_task:Induction", env, small_corpus, tmp_path)


def test_a_recipe_with_an_unknown_task_fails_before_anything_runs(tmp_path):
    from poscli.study.plan import RecipeError
    from poscli.study.recipes import load_recipe

    recipe = tmp_path / "bad.toml"
    recipe.write_text(RECIPE.format(corpus="stdlib", task="bogus"))
    with pytest.raises(RecipeError, match="unknown evaluation task 'bogus'"):
        load_recipe(recipe)


def test_every_built_in_task_owns_the_tables_it_writes_and_no_other():
    perplexity = pd.DataFrame({"run": ["a"], "length": [32], "ppl": [3.0], "mode": ["nonoverlapping"]})
    passkey = pd.DataFrame({"run": ["a"], "length": [32], "depth": [0.0], "accuracy": [1.0], "digit_accuracy": [1.0]})
    multiquery = pd.DataFrame({"run": ["a"], "task": ["multiquery"], "keys": [4], "length": [32], "depth": [0.0],
                               "correct": [1], "accuracy": [1.0]})  # fmt: skip
    assert tasks.owner(perplexity).name == "perplexity" and tasks.owner(passkey).name == "passkey"
    assert tasks.owner(multiquery).name == "multiquery"
    with pytest.raises(PoscliError, match="unknown evaluation task"):
        tasks.get("bogus")
