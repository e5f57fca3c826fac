"""The shape of the code: no import circles, a library that never imports its CLI, no encoding
named outside poscli/encodings/, and a thin CLI."""

import ast
import re
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "poscli"


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports() -> dict[str, set[str]]:
    """poscli module -> the poscli modules it imports, at the top or inside a function."""
    modules = {module_name(p): p for p in PACKAGE.rglob("*.py")}
    graph = {}
    for name, path in modules.items():
        found = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("poscli"):
                for alias in node.names:  # `from poscli import runs` imports the module poscli.model.runs
                    found.add(
                        f"{node.module}.{alias.name}" if f"{node.module}.{alias.name}" in modules else node.module
                    )
            elif isinstance(node, ast.Import):
                found |= {alias.name for alias in node.names if alias.name.startswith("poscli")}
        graph[name] = {m for m in found if m in modules and m != name}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every strongly connected group of more than one module (Tarjan)."""
    index, low, stack, on_stack, groups, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    for v in graph:
        if v not in index:
            visit(v)
    return groups


# A package's __init__ and the modules it registers are one unit: poscli.encodings imports its
# encoding modules by name at run time, and each registers itself with the package.
def collapsed(graph):
    unit = lambda m: "poscli.encodings" if m.startswith("poscli.encodings") else m  # noqa: E731
    merged = {}
    for v, targets in graph.items():
        merged.setdefault(unit(v), set()).update(unit(t) for t in targets if unit(t) != unit(v))
    return merged


def test_no_two_modules_import_each_other_even_lazily():
    assert cycles(collapsed(imports())) == []


def test_the_library_never_imports_its_cli():
    importers = sorted(
        m
        for m, targets in imports().items()
        if any(t.startswith("poscli.cli") for t in targets) and not m.startswith(("poscli.cli", "poscli.__main__"))
    )
    assert importers == []


def design_layers() -> list[str]:
    """The layers, lowest first, as docs/design.md's "Code layout" lists them: its unindented
    poscli/ entries ("poscli" is the package's __init__: the version only)."""
    text = (PACKAGE.parent / "docs" / "design.md").read_text(encoding="utf-8")
    block = text.split("## Code layout", 1)[1].split("```text", 1)[1].split("```", 1)[0]
    entries = [line.split()[0] for line in block.splitlines() if line.startswith("poscli/")]
    return [
        entry.removesuffix("/").removesuffix(".py").replace("/", ".").removesuffix(".__init__") for entry in entries
    ]


# The import contract: a module may import its own layer and those below it, never one above, at the
# top of a file or inside a function. The order is docs/design.md's, read from it, so the two agree.
LAYERS = design_layers()


def test_the_layers_are_the_designed_order():
    assert LAYERS[:2] == ["poscli", "poscli.errors"] and LAYERS[-2:] == ["poscli.cli", "poscli.__main__"]
    assert LAYERS.index("poscli.extension") < LAYERS.index("poscli.encodings") < LAYERS.index("poscli.model")
    assert LAYERS.index("poscli.evaluation") < LAYERS.index("poscli.training") < LAYERS.index("poscli.study")


def test_the_evaluation_modules_below_the_task_registry_import_only_its_protocol():
    """poscli/evaluation/*.py (scoring, tables, plots) sit below the --task registry whose members use
    them: they import the Task protocol at most (AlgorithmicTask extends it), never the registry."""
    offenders = sorted(
        f"{m} -> {t}"
        for m, targets in imports().items()
        if m.startswith("poscli.evaluation.") and not m.startswith("poscli.evaluation.tasks")
        for t in targets
        if t.startswith("poscli.evaluation.tasks") and t != "poscli.evaluation.tasks.base"
    )
    assert offenders == []


def test_the_config_validates_its_own_fields_without_the_data_layer():
    """Checks that need data (tokenizer, split, passkey format, dataset rows) live in poscli.data.checks."""
    assert not any(t.startswith("poscli.data") for t in imports()["poscli.config"])


def test_the_model_imports_no_extension_method():
    """The model asks its encoding for what an extension recorded (remap, query scaling), never a method."""
    offenders = sorted(
        f"{m} -> {t}"
        for m, targets in imports().items()
        if m.startswith("poscli.model")
        for t in targets
        if t.startswith("poscli.extension")
    )
    assert offenders == []


def layer(module: str) -> int:
    return LAYERS.index(max((name for name in LAYERS if module == name or module.startswith(name + ".")), key=len))


def test_every_module_belongs_to_a_declared_layer():
    unplaced = sorted(m for m in imports() if m != "poscli" and layer(m) == 0)
    assert unplaced == []


def test_no_module_imports_a_layer_above_its_own():
    upward = sorted(f"{m} -> {t}" for m, targets in imports().items() for t in targets if layer(t) > layer(m))
    assert upward == []


def test_the_library_is_in_subpackages():
    packages = sorted(p.parent.name for p in PACKAGE.glob("*/__init__.py"))
    top_level = sorted(p.stem for p in PACKAGE.glob("*.py") if p.stem not in ("__init__", "__main__"))
    assert len(packages) >= 6 and top_level == ["config", "errors"]


def test_importing_any_subpackage_loads_no_torch():
    """``poscli --help`` stays fast: a subpackage's ``__init__`` imports nothing heavy."""
    import subprocess
    import sys

    packages = [f"poscli.{p.parent.name}" for p in PACKAGE.glob("*/__init__.py")]
    code = f"import sys; import {', '.join(packages)}; print('torch' in sys.modules, 'pandas' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.split() == ["False", "False"]


NAME_TEST = re.compile(
    r"""(\bpe\b|\["pe"\]|\.pe\b|encoding)\s*(==|!=|\bin\b|\bnot in\b)\s*[("{\[]?\s*["']"""
    r"""(none|sinusoidal|learned|shaw|t5|rope|alibi|xpos|kerple|fire)["']"""
)


def test_no_code_outside_the_encodings_package_asks_an_encodings_name():
    offenders = []
    for path in PACKAGE.rglob("*.py"):
        if "encodings" in path.parts:
            continue
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if NAME_TEST.search(line) and not line.strip().startswith("for "):
                offenders.append(f"{path.relative_to(PACKAGE.parent)}:{number}: {line.strip()}")
    assert offenders == []


def cli_functions() -> list[ast.FunctionDef]:
    """The top-level functions of every module of poscli/cli."""
    return [
        node
        for path in sorted((PACKAGE / "cli").glob("*.py"))
        for node in ast.parse(path.read_text(encoding="utf-8")).body
        if isinstance(node, ast.FunctionDef)
    ]


def command_lengths() -> dict[str, int]:
    """Each command's statements, its docstring aside (statements, not lines: the formatter puts a
    call's every argument on a line of its own)."""
    lengths = {}
    for node in cli_functions():
        if isinstance(node, ast.FunctionDef) and any("command" in ast.unparse(d) for d in node.decorator_list):
            body = node.body[1:] if isinstance(node.body[0], ast.Expr) else node.body  # without the docstring
            lengths[node.name] = sum(isinstance(n, ast.stmt) for statement in body for n in ast.walk(statement))
    return lengths


@pytest.mark.parametrize("command", sorted(command_lengths()))
def test_each_command_body_is_short(command):
    """Parse, call one library function, print: no command's body (its signature and docstring
    aside) runs past 25 statements."""
    assert command_lengths()[command] <= 25


def test_no_command_takes_its_options_as_untyped_keywords():
    """Every command takes named, typed parameters or a typed request (poscli.training.requests), never ``**values``."""
    commands = [node for node in cli_functions() if any("command" in ast.unparse(d) for d in node.decorator_list)]
    assert len(commands) >= 10 and [c.name for c in commands if c.args.kwarg is not None] == []


# Axes whose members the layout does not list one by one (poscli encodings, methods, data sources and
# eval --help do): only the protocol, so a new member is one file with no other edit.
MEMBER_FOLDERS = ("encodings", "methods", "tasks", "sources")


def test_the_design_documents_layout_names_every_module_and_only_modules_that_exist():
    """docs/design.md's "Code layout" lists each module under its package; checked both ways."""
    text = (PACKAGE.parent / "docs" / "design.md").read_text(encoding="utf-8")
    block = text.split("## Code layout", 1)[1].split("```text", 1)[1].split("```", 1)[0]
    listed, folders = set(), []  # folders: (indent, path) of the folders the current line is in
    for line in block.splitlines():
        if not line.strip():
            continue
        indent, entry = len(line) - len(line.lstrip()), line.split()[0]
        while folders and folders[-1][0] >= indent:
            folders.pop()
        path = (folders[-1][1] if folders else "") + entry
        if entry.endswith("/"):
            folders.append((indent, path))
        elif entry.endswith(".py"):
            listed.add(path)
    wanted = {
        str(p.relative_to(PACKAGE.parent))
        for root in ("poscli", "benchmarks")
        for p in (PACKAGE.parent / root).rglob("*.py")
        if not (p.name == "__init__.py" and p.parent != PACKAGE) and p.parent.name not in MEMBER_FOLDERS
    } | {"poscli/encodings/base.py", "poscli/extension/methods/protocol.py"}
    wanted |= {"poscli/evaluation/tasks/base.py", "poscli/data/sources/base.py"}
    assert sorted(wanted - listed) == [] and sorted(listed - wanted) == []


LONGEST_FUNCTION = 80  # lines, signature and docstring included (issue 31's bar)


def test_no_library_function_is_longer_than_80_lines():
    """Long functions mix jobs; the library's are split below 80 lines (the AST's line span)."""
    too_long = [
        f"{path.relative_to(PACKAGE.parent)}:{node.lineno} {node.name} ({node.end_lineno - node.lineno + 1} lines)"
        for path in PACKAGE.rglob("*.py")
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        and node.end_lineno - node.lineno + 1 > LONGEST_FUNCTION
    ]
    assert too_long == []


LONGEST_MODULE = 500  # lines (issue 64's bar)


def test_no_module_is_longer_than_500_lines():
    """A module over 500 lines holds several jobs; each is split into rooms that say what they hold."""
    too_long = sorted(
        f"{path.relative_to(PACKAGE.parent)} ({count} lines)"
        for path in PACKAGE.rglob("*.py")
        if (count := len(path.read_text(encoding="utf-8").splitlines())) > LONGEST_MODULE
    )
    assert too_long == []


def test_the_tests_mirror_the_package():
    """tests/NAME/ holds the tests of poscli/NAME/ (a subpackage), tests/repository/ those of the
    repository as a whole (docs, README numbers, this file, benchmarks, the GPU check); no test
    file lies loose in tests/."""
    tests = PACKAGE.parent / "tests"
    folders = sorted(p.name for p in tests.iterdir() if p.is_dir() and p.name != "__pycache__")
    subpackages = sorted(p.parent.name for p in PACKAGE.glob("*/__init__.py"))
    assert set(folders) - {"repository"} <= set(subpackages)
    assert sorted(p.name for p in tests.glob("test_*.py")) == []
    assert all((tests / folder / "__init__.py").exists() for folder in folders)
