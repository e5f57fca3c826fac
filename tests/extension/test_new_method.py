"""The bar for a new context-extension method: ONE file and no other edit. A frequency method with an
option of its own (PI with the factor raised to a power), written into poscli/extension/methods/, is
listed by `poscli methods` and `poscli encodings`, extends a RoPE run through `poscli extend` (its
option as -M KEY=VALUE) and runs from a recipe, which skips it once done; the same class works as
--method module:Class from outside the package, where its one-line errors and an encoding it does
not apply to are checked too (in this process: the class is the same either way)."""

import json
from pathlib import Path

import pandas as pd
import pytest

from poscli.encodings import builtin_names, get
from tests.cli.test_cli import TINY
from tests.conftest import module_outside, package_with
from tests.conftest import run_poscli as poscli

REPOSITORY = Path(__file__).resolve().parents[2]

NEW_METHOD = '''"""Position interpolation by s^power: every RoPE frequency divided by the factor raised to a power."""

from poscli.extension.methods import register
from poscli.extension.methods.protocol import FrequencyMethod, MethodOption
from poscli.extension.scaling import default_inv_freq


@register("power-pi")
class PowerPI(FrequencyMethod):
    summary = "every frequency divided by s^power (power 1: position interpolation)"
    citation = "a test of the extension-method interface"
    options = {"power": MethodOption(1.0, "the power of s that divides every frequency")}

    @classmethod
    def frequencies(cls, head_dim, base, factor, original_length, seq_len, power=1.0):
        return default_inv_freq(head_dim, base) / factor**power, 1.0
'''

RECIPE = """name = "method-study"
[[train]]
name = "r"
pe = "rope"
steps = 2
layers = 1
width = 32
heads = 4
train_length = 32
batch_size = 4
warmup = 2
data = "{corpus}"
[[extend]]
runs = ["r"]
name = "{{run}}+new"
method = "{method}"
target = "128"
steps = 1
power = 0.5
[[eval]]
runs = ["r", "r+new"]
table = "ppl"
lengths = "32,128"
max_tokens = "1k"
reference = false
"""


def through_the_cli(method: str, env: dict, corpus: Path, tmp_path: Path, refusals: bool) -> None:
    """A recipe trains, extends with ``method`` and evaluates (then counts all three done); the CLI
    extends its run again with another option and evaluates that; with ``refusals``, the method's
    one-line errors and an encoding it does not apply to."""
    results = tmp_path / "study"
    common = ("--results", str(results))
    recipe = tmp_path / "study.toml"
    recipe.write_text(RECIPE.format(corpus=corpus, method=method))
    ran = poscli("run", str(recipe), *common, env=env, cwd=tmp_path)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    config = json.loads((results / "runs" / "r+new" / "config.json").read_text())
    assert config["model"]["rope_scaling"]["options"] == {"power": 0.5}
    again = poscli("run", str(recipe), "--dry-run", *common, env=env, cwd=tmp_path)
    assert "3 already done" in again.stdout + again.stderr, again.stdout + again.stderr
    extended = poscli("extend", "r", "--method", method, "--target", "256", "--steps", "1", "--power", "0.25",
                      "--name", "r+cli", "--quiet", *common, env=env, cwd=tmp_path)  # fmt: skip
    assert extended.returncode == 0, extended.stderr
    scaling = json.loads((results / "runs" / "r+cli" / "config.json").read_text())["model"]["rope_scaling"]
    assert scaling["method"] == method and scaling["options"] == {"power": 0.25} and scaling["factor"] == 8.0
    evaluated = poscli("eval", "r+cli", "--lengths", "32,256", "--max-tokens", "1k", "--no-reference", "--quiet",
                       "--table", "cli", *common, env=env, cwd=tmp_path)  # fmt: skip
    assert evaluated.returncode == 0, evaluated.stderr
    assert pd.read_csv(results / "cli.csv")["ppl"].notna().all()
    if not refusals:
        return
    refused = poscli("extend", "r", "--method", method, "--target", "128", "-M", "bogus=1", *common,
                     env=env, cwd=tmp_path)  # fmt: skip
    assert refused.returncode == 2 and f"--method {method} does not take --bogus; it takes --power" in refused.stderr
    misspelt = poscli("extend", "r", "--method", method, "--target", "128", "--pwer", "2", *common,
                      env=env, cwd=tmp_path)  # fmt: skip
    assert misspelt.returncode == 2 and "does not take --pwer (did you mean --power?)" in misspelt.stderr
    trained = poscli("train", "--pe", "alibi", "--name", "alibi", "--data", str(corpus), "--steps", "2", *TINY,
                     *common, env=env, cwd=tmp_path)  # fmt: skip
    assert trained.returncode == 0, trained.stderr
    needless = poscli("extend", "alibi", "--method", method, "--target", "128", *common, env=env, cwd=tmp_path)
    assert needless.returncode == 0 and "needs no rescaling" in needless.stderr, needless.stderr


@pytest.mark.slow
def test_one_file_in_the_methods_package_is_a_whole_new_method(small_corpus, tmp_path):
    env = package_with(tmp_path, "extension/methods/power_pi.py", NEW_METHOD)
    listed = poscli("methods", env=env, cwd=tmp_path)
    assert "power-pi" in listed.stdout
    rotary = ", ".join(sorted(name for name in builtin_names() if get(name).rotary_frequencies))  # rope, xpos, ...
    assert f"training: optional; applies to: {rotary}" in listed.stdout
    assert "--power (default 1.0): the power of s that divides every frequency" in listed.stdout
    encodings = poscli("encodings", env=env, cwd=tmp_path)
    assert "power-pi" in encodings.stdout
    through_the_cli("power-pi", env, small_corpus, tmp_path, refusals=False)


@pytest.mark.slow
def test_one_module_outside_the_package_is_a_whole_new_method(small_corpus, tmp_path):
    env = module_outside(tmp_path, "power_method", NEW_METHOD.replace('@register("power-pi")\n', ""))
    through_the_cli("power_method:PowerPI", env, small_corpus, tmp_path, refusals=True)
