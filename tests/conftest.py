import contextlib
import importlib
import os
import random
import shutil
import subprocess
import sys
from pathlib import Path

# Under pytest-xdist (make test runs two workers on two cores) each worker, and every poscli
# process it starts, gets one thread: two torch processes that each take every core run many
# times slower than one at a time.
if os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ["OMP_NUM_THREADS"] = os.environ["MKL_NUM_THREADS"] = "1"

import pytest
import torch

from poscli.config import ModelConfig

if os.environ.get("PYTEST_XDIST_WORKER"):
    torch.set_num_threads(1)


@pytest.fixture(autouse=True)
def isolated_caches(tmp_path_factory, monkeypatch):
    """Keep every test's corpus cache and datasets cache out of the user's home. Under xdist the
    workers share one cache (corpus files are written atomically), so the built-in corpus is
    tokenized once per session, not once per worker."""
    base = tmp_path_factory.getbasetemp()
    cache = (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "cache"
    monkeypatch.setenv("POSCLI_CACHE", str(cache / "poscli"))
    monkeypatch.setenv("HF_DATASETS_CACHE", str(cache / "hf"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.delenv("POSCLI_RESULTS", raising=False)
    torch.manual_seed(0)


def tiny_config(pe: str, options: dict | None = None, **overrides) -> ModelConfig:
    """A model small enough that a forward pass takes milliseconds. ``options``: encoding options,
    of which each encoding takes those it declares (so one dict can serve several encodings)."""
    import dataclasses

    from poscli import encodings

    values = dict(pe=pe, n_layer=2, n_head=4, d_model=32, train_length=32, attention_block=16)
    values.update(overrides)
    if options:
        declared = {f.name for f in dataclasses.fields(encodings.get(pe).Options)}
        values["pe_options"] = {key: value for key, value in options.items() if key in declared}
    return ModelConfig(**values)


def cli_workspace(tmp_path_factory, name: str):
    """A module's folder for CLI tests: (small text corpus, results folder); the corpus cache
    goes inside it, for this process and the poscli processes it starts."""
    base = tmp_path_factory.mktemp(name)
    os.environ.setdefault("POSCLI_CACHE", str(base / "cache"))
    return write_text_corpus(base / "corpus"), base / "results"


def write_text_corpus(folder, documents: int = 12, words: int = 400, seed: int = 0):
    """A folder of plain-text documents of different lengths (the longest ~10x the shortest)."""
    rng = random.Random(seed)
    vocabulary = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta", "iota", "kappa", "lambda", "mu"]
    folder.mkdir(parents=True, exist_ok=True)
    for d in range(documents):
        count = words * (1 + d % 10) // 4 + 50
        text = " ".join(rng.choice(vocabulary) for _ in range(count))
        (folder / f"doc{d:02d}.txt").write_text(f"document {d}\n{text}\n", encoding="utf-8")
    return folder


@pytest.fixture
def text_corpus(tmp_path):
    return write_text_corpus(tmp_path / "corpus")


# The longest files first: two workers then finish together instead of one waiting on the other.
LONGEST_FIRST = ("test_docs.py", "test_smoke.py", "test_bench.py", "test_recipes.py", "test_new_method.py")


# Files whose tests share no costly module fixture: each test may run on either worker (the rest
# keep a file's tests on one worker, so its fixtures are built once).
SPLIT_BY_TEST = ("test_docs.py", "test_new_method.py", "test_new_task.py", "test_new_encoding.py")


def pytest_collection_modifyitems(items):
    """The longest files first; every test in a file's xdist group (make test's ``--dist loadgroup``),
    or its own group for the files in SPLIT_BY_TEST, so the README's blocks and the guide's run side by side."""
    items.sort(
        key=lambda item: LONGEST_FIRST.index(item.path.name) if item.path.name in LONGEST_FIRST else len(LONGEST_FIRST)
    )
    for item in items:
        group = item.nodeid if item.path.name in SPLIT_BY_TEST else str(item.path)
        item.add_marker(pytest.mark.xdist_group(group))


REPOSITORY = Path(__file__).resolve().parent.parent
# The checkout on PYTHONPATH, named: user code the tests give by name (examples.power_penalty:PowerPenalty)
# is then on the user's path, which is where poscli imports a package.module:Class from (not the
# current folder, poscli.core.registry.import_user_module); the processes the tests start inherit it.
os.environ["PYTHONPATH"] = os.pathsep.join([str(REPOSITORY), *filter(None, [os.environ.get("PYTHONPATH")])])
IN_PROCESS = "POSCLI_TEST_IN_PROCESS"  # read by run_poscli only: run the command in this process
COPY = "POSCLI_TEST_COPY"  # read by run_poscli only: the folder of the copy of poscli to import instead


@pytest.fixture(scope="session")
def small_corpus(tmp_path_factory):
    """One small text corpus shared by the tests that drive a new plugin through the CLI."""
    return write_text_corpus(tmp_path_factory.mktemp("small-corpus") / "corpus")


def run_poscli(*args, env: dict, cwd: Path) -> subprocess.CompletedProcess:
    """``python -m poscli ARGS`` in ``env`` (e.g. one whose PYTHONPATH holds a plugin), captured, run
    in this process: an environment from ``module_outside`` (the plugin beside this very poscli) with
    its folder on sys.path and PYTHONPATH (for the processes a recipe starts); one from
    ``package_with`` (another copy of poscli) with that copy imported in place of this one for the
    call (``another_poscli``). Any other environment gets a process of its own."""
    if env.get(IN_PROCESS) != "1":
        return subprocess.run([sys.executable, "-m", "poscli", *args], capture_output=True, text=True, env=env, cwd=cwd)
    with in_environment(env, cwd), another_poscli(env.get(COPY)):
        return poscli_in_process(*args, cwd=cwd)


def _is_library(module) -> bool:
    """A module of the interpreter or of an installed package (torch, numpy, ...), as against one of
    poscli, of a copy of it, or of user code a test wrote (which may hold a copy's classes)."""
    path = getattr(module, "__file__", None)
    return (
        path is None
        or Path(path).resolve().is_relative_to(Path(sys.base_prefix).resolve())
        or any(Path(path).resolve().is_relative_to(Path(prefix).resolve()) for prefix in {sys.prefix, sys.exec_prefix})
    )


@contextlib.contextmanager
def another_poscli(site: str | None):
    """With ``site`` (a folder holding a copy of poscli, from ``package_with``): ``import poscli``
    gives that copy until the block ends; then every module imported from outside the installed
    libraries in the meantime (the copy's, and user code bound to its classes) is forgotten and this
    checkout's modules are back. Without ``site``, nothing changes."""
    if not site:
        yield
        return
    before = set(sys.modules)
    ours = {name: sys.modules.pop(name) for name in list(sys.modules) if name == "poscli" or name.startswith("poscli.")}
    importlib.invalidate_caches()
    try:
        yield
    finally:
        for name in set(sys.modules) - before | {n for n in sys.modules if n == "poscli" or n.startswith("poscli.")}:
            if not _is_library(sys.modules[name]):
                del sys.modules[name]
        sys.modules.update(ours)


@contextlib.contextmanager
def in_environment(env: dict, cwd: Path):
    """This process's os.environ replaced by ``env`` and sys.path headed by its PYTHONPATH (relative
    entries from ``cwd``), as a fresh ``poscli`` process started in ``cwd`` with ``env`` would see them."""
    saved_environ, saved_path = dict(os.environ), list(sys.path)
    os.environ.clear()
    os.environ.update(env)
    sys.path[:0] = [str(Path(cwd) / entry) for entry in env.get("PYTHONPATH", "").split(os.pathsep) if entry]
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved_environ)
        sys.path[:] = saved_path


def package_with(tmp_path: Path, member: str, text: str) -> dict:
    """A copy of poscli under ``tmp_path/site`` with one file added (``member``, its path inside
    poscli/) and nothing else changed; returns the environment that imports that copy (in a poscli
    process, or in this one through ``run_poscli``)."""
    site = tmp_path / "site"
    shutil.copytree(REPOSITORY / "poscli", site / "poscli", ignore=shutil.ignore_patterns("__pycache__"))
    (site / "poscli" / member).write_text(text)
    return {**os.environ, "PYTHONPATH": f"{site}{os.pathsep}{REPOSITORY}", IN_PROCESS: "1", COPY: str(site)}


def module_outside(tmp_path: Path, module: str, text: str) -> dict:
    """``module``.py written to ``tmp_path``; returns the environment that imports it (and poscli)."""
    (tmp_path / f"{module}.py").write_text(text)
    return {**os.environ, "PYTHONPATH": f"{tmp_path}{os.pathsep}{REPOSITORY}", IN_PROCESS: "1"}


def poscli_in_process(*args, cwd=None) -> subprocess.CompletedProcess:
    """``poscli ARGS`` run by this process's interpreter as ``python -m poscli`` would run it: the
    same ``main``, sys.argv, working folder, stdout and stderr captured, the exit code from
    SystemExit, an escaped exception as a traceback on stderr and exit 1. Saves each call the
    seconds a fresh interpreter spends importing torch (and torch._dynamo, which building an
    optimizer imports); a test that needs a separate process (signals, PYTHONPATH, POSCLI_DEBUG)
    starts one itself."""
    import contextlib
    import io
    import traceback

    from poscli.cli.app import main

    out, err, code = io.StringIO(), io.StringIO(), 0
    saved_argv, saved_cwd = sys.argv, os.getcwd()
    sys.argv = ["poscli", *map(str, args)]
    try:
        if cwd is not None:
            os.chdir(cwd)
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                main([str(arg) for arg in args])
            except SystemExit as exit:
                code = exit.code if isinstance(exit.code, int) else (0 if exit.code is None else 1)
            except Exception:  # what the interpreter would print before exiting with 1
                traceback.print_exc()
                code = 1
    finally:
        sys.argv = saved_argv
        os.chdir(saved_cwd)
    return subprocess.CompletedProcess(["poscli", *map(str, args)], code, out.getvalue(), err.getvalue())
