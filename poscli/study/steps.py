"""One entry point for what ``poscli train``, ``poscli extend`` and ``poscli eval`` do, taking their
declared option values (``poscli.training.options``): the CLI calls these functions after parsing
its flags, and a recipe (``poscli run``) calls them with its keys through :func:`run_step`. Nothing
here reads or rebuilds a command line to run a step; :func:`command_line` only writes the
equivalent one for ``--dry-run``, the logs and ``RESULTS/history.jsonl``.

A recipe's steps run in this process, one after another, each with its output in
``RESULTS/logs/NAME.log``; with ``poscli run --jobs N`` (N > 1) each step is a fresh process
(``python -m poscli.study.steps STEP_JSON``) that calls :func:`run_step` in the same way.
"""

from __future__ import annotations

import contextlib
import json
import re
import sys
import traceback
from pathlib import Path
from typing import Any

from poscli.errors import PoscliError
from poscli.training.options import EVAL_OPTIONS, EXTEND_DECLARED, TRAIN_DECLARED, parsed, request_from
from poscli.training.requests.evaluate import EvalRequest
from poscli.training.requests.extend import ExtendRequest
from poscli.training.requests.train import TrainRequest

LINEAGE_KEYS = ("parent", "parent_options")  # what a recipe's extension step carries beside its options


def make_console(file=None):
    """The console every command writes to: stderr, or ``file`` (a recipe step's log)."""
    from rich.console import Console

    return Console(stderr=file is None, file=file, soft_wrap=True)


def progress_bar(console, quiet: bool):
    """The progress bar of an evaluation or a search: description, bar, count, elapsed, left."""
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    columns = (BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), TimeRemainingColumn())
    return Progress(TextColumn("{task.description}"), *columns, console=console, disable=quiet)


# --------------------------------------------------------------------------- train, extend, eval


def train_run(request: TrainRequest, console=None, plan=None):
    """``poscli train`` for one run (``plan``: what ``train_plan(request)`` returned, when the caller
    has it). Returns the TrainResult (None on a
    data-parallel process other than rank 0)."""
    from poscli.training.options import train_plan
    from poscli.training.train import train

    _, model_config, train_config = plan or train_plan(request)
    return train(
        model_config,
        train_config,
        name=request.name,
        results=request.results,
        console=console,
        show_progress=not request.quiet,
        replace=request.replace,
    )


def resume_run(name: str, results=None, console=None, quiet: bool = False, given: dict | None = None):
    """``poscli train --resume NAME`` (an extension too): ``given`` are options given again, by
    name, which the run checks against its config (only what may change, changes)."""
    from poscli.model.runs import find_run, read_config
    from poscli.training.options import TRAIN_OPTIONS, wanted_value

    folder = find_run(name, results)  # a missing run fails before torch is imported
    config = read_config(folder)
    fields = {TRAIN_OPTIONS[option][0]: wanted_value(config, option, value) for option, value in (given or {}).items()}
    from poscli.training.resume import resume

    return resume(name, results, console=console, show_progress=not quiet, given=fields)


def extend_pretrained_model(run: str, request: ExtendRequest) -> Path:
    """``poscli extend hf:NAME``: a frequency method written into a copy of the model; returns its folder."""
    from poscli.model.pretrained import source_of
    from poscli.model.runs import results_dir
    from poscli.training.extend_pretrained import extend_pretrained

    method, target = request.method, request.target
    if method is None or target is None:
        raise PoscliError(f"--method and --target are required, e.g. poscli extend {run} --method yarn --target 32k")
    if request.steps:
        raise PoscliError(f"{run}: hf: models are extended without fine-tuning; drop --steps")
    options = user_method_options(request.method, request.method_option)
    slug = re.sub(r"[^A-Za-z0-9._+-]", "-", Path(source_of(run)).name or source_of(run))
    name = request.name or f"{slug}+{method}-{target}"
    return extend_pretrained(run, method, target, results_dir(request.results) / "pretrained" / name, options)


def extend_run(run: str, request: ExtendRequest, console=None):
    """``poscli extend RUN``. Returns the TrainResult."""
    method, target, results, quiet = request.method, request.target, request.results, request.quiet
    tuned: dict[str, Any] = {}
    if request.options_from is not None:
        from poscli.training.tune import read_options

        source = request.options_from
        if str(source) == "tune" and not Path(source).exists():  # poscli tune with its defaults first (resumable)
            if method is None or target is None:
                raise PoscliError("--options-from tune needs --method and --target")
            source = tune_run(run, method, target, results, request.device, console, quiet)
        method, tuned = read_options(source, method)
    if method is None or target is None:
        raise PoscliError(f"--method and --target are required, e.g. poscli extend {run} --method yarn --target 32k")
    options = (
        tuned
        | user_method_options(method, request.method_option)
        | _factors(request.factors, request.search_score, run, target, results, request.device, console, quiet)
    )
    from poscli.training.extend import extend

    settings = ("factor", "steps", "finetune_length", "name", "lr", "batch_size", "seed", "device", "replace", "pose",
                "cream", "mixed_short", "eval_every", "eval_lengths")  # fmt: skip
    return extend(
        run, method, target, options=options, results=results, console=console, show_progress=not quiet,
        **{key: getattr(request, key) for key in settings},
    )  # fmt: skip


def user_method_options(method_name: str | None, pairs: list[str] | None) -> dict[str, Any]:
    """The method options a user gave (``-M KEY=VALUE`` pairs, which a method's own flags and a
    recipe's keys become), read as the method declares them. A 0 for an option whose default is 0
    (worked out from the lengths, e.g. Self-Extend's window and group) is refused: it would silently
    mean the default."""
    given = method_options(pairs or [])
    return checked_method_options(method_name, given) if method_name else given


def checked_method_options(method_name: str, given: dict[str, Any]) -> dict[str, Any]:
    """``given`` read as ``method_name`` declares its options, a 0 that would mean the default refused."""
    from poscli.extension import methods

    method = methods.get(method_name)
    given = method.read_options(given)
    defaults = method.defaults()
    for key, value in given.items():
        if defaults[key] == 0.0 and not isinstance(value, tuple | str) and float(value) == 0:
            flag = "--" + key.replace("_", "-")
            raise PoscliError(
                f"{flag} 0: --method {method_name} works {flag} out from the lengths when it is left out; "
                "leave it out for that, or give a positive value"
            )
    return given


def method_options(pairs: list[str]) -> dict[str, Any]:
    """``-M KEY=VALUE`` pairs: numbers where they read as numbers (a comma-separated value: a tuple
    of them), else the string (a method's choice, read by its declaration)."""
    from poscli.encodings import parse_option_pairs

    options: dict[str, Any] = {}
    for key, value in parse_option_pairs(pairs, flag="--method-option").items():
        try:
            numbers = tuple(float(part) for part in value.split(","))
        except ValueError:
            options[key] = value
            continue
        options[key] = numbers if "," in value else numbers[0]
    return options


def method_flags(arguments: list[str]) -> list[str]:
    """A method's own flags as ``poscli extend`` leaves them to the method (``--beta-fast 16``,
    ``--beta-fast=16``) as ``-M`` pairs; anything else is a one-line error."""
    pairs, rest = [], list(arguments)
    while rest:
        flag = rest.pop(0)
        name, equals, value = flag.partition("=")
        if not name.startswith("--") or len(name) < 3 or (not equals and not rest):
            raise PoscliError(
                f"poscli extend: {flag!r} is not an option; a method's own options go after RUN as --NAME VALUE "
                "(poscli methods lists them) or -M NAME=VALUE"
            )
        pairs.append(f"{name[2:].replace('-', '_')}={value if equals else rest.pop(0)}")
    return pairs


def extend_request(options: dict[str, Any]) -> ExtendRequest:
    """A recipe's [[extend]] options as ``poscli extend``'s request: its own options parsed as their flags
    read them; the rest are the method's options (``window = 64``), carried as ``-M`` pairs."""
    own = {key: value for key, value in options.items() if key in EXTEND_DECLARED}
    pairs = [
        f"{key}={','.join(map(str, value)) if isinstance(value, list | tuple) else value}"
        for key, value in options.items()
        if key not in EXTEND_DECLARED
    ]
    values = parsed(EXTEND_DECLARED, own)
    return ExtendRequest(**{**values, "method_option": [*(values["method_option"] or []), *pairs]})


def _factors(
    factors: Path | None, score: str | None, run: str, target: int, results, device: str, console, quiet: bool
) -> dict:
    """``--factors FILE`` read, or ``--factors search`` run first (scored by ``score``, default
    perplexity); {} without it. A missing run fails here, before torch is imported."""
    from poscli.model.runs import find_run

    find_run(run, results)
    check_search_score(factors, score)
    if factors is None:
        return {}
    searching = str(factors) == "search" and not Path(factors).exists()
    from poscli.extension.scaling import read_factors

    if searching:
        factors = search(run, target, results, device, console, quiet, score=score or "perplexity")
    return read_factors(Path(factors))


def check_search_score(factors: Path | None, score: str | None) -> None:
    """``--search-score`` chooses what ``--factors search`` minimises: refused without it, or unknown."""
    from poscli.training.options import check_score

    if score is None:
        return
    if str(factors) != "search":
        raise PoscliError(f"--search-score {score} chooses what --factors search minimises; add --factors search")
    check_score(score, "--search-score")


def search(run: str, target: int, results, device: str, console, quiet: bool, out: Path | None = None, **settings):
    """LongRoPE's factor search for ``run`` at ``target``; returns the factors file."""
    from poscli.model.runs import find_run, results_dir

    folder = find_run(run, results)  # a missing run fails before torch is imported
    from poscli.training.factor_search import SearchSettings, perplexity_of, search_factors

    scored = "" if settings.get("score", "perplexity") == "perplexity" else f"-{settings['score']}"
    out = out or results_dir(results) / "searches" / f"{folder.name}-longrope-{target}{scored}.json"
    console = console or make_console()
    with progress_bar(console, quiet) as progress:
        state = search_factors(SearchSettings(folder.name, target, **settings), out, results, device, progress)
    console.print(
        f"LongRoPE factors for {folder.name} at {target}: perplexity {perplexity_of(state):.3f} on its training "
        f"windows after {state['generation']} generations; wrote {out} and its trajectory {out.name}.search.json"
    )
    return out


def tune_run(run: str, method: str, target: int, results, device: str, console, quiet: bool, out: Path | None = None,
             grid: list[str] | None = None, **settings):  # fmt: skip
    """``poscli tune``: the method's options for ``run`` at ``target``; returns the options file."""
    from poscli.model.runs import find_run, results_dir

    values = {
        key: list(value) if isinstance(value, tuple) else [value] for key, value in method_options(grid or []).items()
    }
    for key, tried in values.items():  # every value read as the method declares it, not only the first
        for value in tried:
            checked_method_options(method, {key: value})
    folder = find_run(run, results)  # a missing run fails before torch is imported
    from poscli.training.tune import TuneSettings, best_of, tune

    out = out or results_dir(results) / "tuning" / f"{folder.name}-{method}-{target}.json"
    console = console or make_console()
    with progress_bar(console, quiet) as progress:
        state = tune(TuneSettings(folder.name, method, target, grid=values, **settings), out, results, device, progress)
    options, loss = best_of(state)
    shown = ", ".join(f"{key}={value:g}" for key, value in options.items()) or "its defaults"
    console.print(
        f"{method} on {folder.name} at {target}: best {shown}, loss {loss:.4f} (defaults {state['scores'][0]:.4f}) on "
        f"the tuning split after {sum(s is not None for s in state['scores'])} candidates; wrote {out} and its "
        f"trajectory {out.name}.tune.json. Apply with: poscli extend {folder.name} --options-from {out}"
    )
    if edges := json.loads(out.read_text()).get("at_edge"):
        named = ", ".join(f"{key}={options[key]:g} is the {side}" for key, side in edges.items())
        console.print(
            f"[yellow]note:[/] {named} of the values tried: the best may lie beyond; widen with "
            f"--grid {' '.join(f'{key}=V1,V2,...' for key in edges)}"
        )
    return out


# The options of poscli eval that some tasks read and others do not (Task.reads); the rest (lengths,
# device, table, sinks, window) apply to every task.
TASK_OPTIONS = ("max_tokens", "stride", "protocol", "data", "reference", "null", "allow_split_mismatch", "compile",
                "depths", "trials", "sizes", "keys")  # fmt: skip


def check_eval_request(request: EvalRequest):
    """What ``poscli eval`` would refuse before loading a run: the task and the options it reads
    (``Task.check``), and the StreamingLLM sinks and window. -> the task."""
    from poscli.evaluation import tasks

    evaluation = tasks.get(tasks.check_name(request.task))
    read_by = {option: [n for n in tasks.names() if option in tasks.get(n).reads] for option in TASK_OPTIONS}
    for option, readers in read_by.items():
        if getattr(request, option) != EVAL_OPTIONS[option] and option not in evaluation.reads:
            flag, named = "--" + option.replace("_", "-"), ", ".join(readers[:4])
            more = f" and {len(readers) - 4} more (poscli eval --help)" if len(readers) > 4 else ""
            raise PoscliError(f"{flag} is read by --task {named}{more}, not by --task {request.task}: drop it, or "
                              "choose one of those tasks")  # fmt: skip
    evaluation.check({name: getattr(request, name) for name in EVAL_OPTIONS})
    if request.window is not None and request.sinks is None:
        raise PoscliError("--window goes with --sinks S (StreamingLLM); add --sinks 4, or drop --window")
    for flag, value in (("--sinks", request.sinks), ("--window", request.window)):
        if value is not None and value < 1:
            raise PoscliError(f"{flag} must be at least 1, got {value}")
    return evaluation


def evaluate_runs(run_names: list[str], request: EvalRequest, console=None):
    """``poscli eval RUN...``. Returns (the files written,
    the table to show, the table's name)."""
    from poscli.model.runs import check_table_name, find_run

    options = {name: getattr(request, name) for name in EVAL_OPTIONS}  # what a task reads
    results, quiet, sinks, window = request.results, request.quiet, request.sinks, request.window
    evaluation = check_eval_request(request)
    table = check_table_name(request.table or evaluation.default_table)
    from poscli.evaluation.algorithmic import AlgorithmicTask
    from poscli.model.pretrained import is_pretrained

    for run_name in run_names:  # a missing run fails before torch is imported
        if is_pretrained(run_name):
            if request.task not in (EVAL_OPTIONS["task"], "passkey") and not isinstance(evaluation, AlgorithmicTask):
                raise PoscliError(
                    f"{run_name}: hf: models take the perplexity, passkey and algorithmic evaluations for now"
                )
            continue
        find_run(run_name, results)
    if sinks is not None:
        run_names = [_with_sinks(name, sinks, window, request.lengths, results, request.device) for name in run_names]
    with progress_bar(console, quiet) as progress:
        result = evaluation.evaluate(run_names, options, results, progress, table)
    written, shown = evaluation.write(result, options, results, table)
    return written, shown, table


def _with_sinks(run: str, sinks: int, window: int | None, lengths: list[int] | None, results, device: str) -> str:
    """``poscli eval --sinks``: the run's StreamingLLM variant, RUN+sinksS[-wR], made (no training,
    the weights copied) unless it exists; evaluated like any run, so its rows carry its own name."""
    from poscli.model.runs import find_run, read_config, runs_dir

    name = f"{run}+sinks{sinks}" + (f"-w{window}" if window is not None else "")
    if (runs_dir(results) / name).is_dir():
        return name
    from poscli.training.extend import extend

    original = read_config(find_run(run, results))["model"]["train_length"]
    target = max([*(lengths or []), 2 * original])  # recorded only: sinks run at any length
    options: dict[str, float] = {"sinks": sinks, **({"window": window} if window is not None else {})}
    extend(
        run, "sinks", target, steps=0, options=options, name=name, results=results, device=device, show_progress=False
    )
    return name


# --------------------------------------------------------------------------- a recipe's step


def command_line(kind: str, name: str, positional: list[str], options: dict, resume: bool = False) -> list[str]:
    """The poscli command (after ``poscli``) that does what a step does: shown, logged and recorded."""
    if resume:
        return ["train", "--resume", name, "--quiet"] if kind == "train" else ["extend", name, "--resume", "--quiet"]
    flags = _flags({key: value for key, value in options.items() if key not in LINEAGE_KEYS})
    return {
        "train": ["train", *flags, "--name", name],
        "extend": ["extend", *positional, *flags, "--name", name],
        "eval": ["eval", *positional, *flags],
    }[kind]


def _flags(options: dict) -> list[str]:
    flags = []
    for key, value in options.items():
        flag = f"--{key.replace('_', '-')}"
        if isinstance(value, dict):  # pe_option = { base = 500000 }: one --pe-option KEY=VALUE each
            flags += [part for option, setting in value.items() for part in (flag, f"{option}={setting}")]
        elif isinstance(value, bool):  # a switch: --reference / --no-reference
            flags.append(f"--{'' if value else 'no-'}{key.replace('_', '-')}")
        else:
            flags += [flag, str(value)]
    return flags


def check_step(kind: str, name: str, positional: list[str], options: dict) -> None:
    """What ``run_step`` would refuse, found before anything runs (``poscli run`` checks every step of
    a recipe this way, ``--dry-run`` too): every option read as its flag reads it; a training's plan
    (``train_plan``: the encodings and their options, the training config, its task or mix); an
    extension's method against its parent's encoding, with its options and fine-tuning
    (``check_extension``); an evaluation's task."""
    if kind == "train":
        from poscli.training.options import train_plan

        train_plan(request_from(TrainRequest, {**options, "name": name}))
    elif kind == "extend":
        check_extend_step(name, positional[0], options)
    else:
        check_eval_request(request_from(EvalRequest, options))


def check_extend_step(name: str, parent_name: str, options: dict) -> None:
    """``check_step`` for an [[extend]]: the files its options come from exist and hold what they
    should; with the options in the recipe, the method against the parent's encoding and train
    length, with its options and fine-tuning (``check_extension``)."""
    from poscli.extension.scaling import read_factors
    from poscli.training.tune import read_options

    request = extend_request({key: value for key, value in options.items() if key not in LINEAGE_KEYS})
    check_search_score(request.factors, request.search_score)
    if request.factors is not None and str(request.factors) != "search":
        read_factors(Path(request.factors))
    if request.options_from is not None and str(request.options_from) != "tune":
        read_options(request.options_from, request.method)
    if request.options_from is not None or request.factors is not None:
        return  # the options come from a file or a search the step itself runs
    from poscli.training.extend import check_extension
    from poscli.training.options import train_defaults, with_size

    if request.method is None or request.target is None:
        raise PoscliError(f"[[extend]] {name} needs method and target")
    options_given = user_method_options(request.method, request.method_option)
    parent = with_size(parsed(TRAIN_DECLARED, {**train_defaults(), **options.get("parent_options", {})}))
    settings = ("factor", "pose", "cream", "mixed_short", "finetune_length", "batch_size", "eval_every")
    check_extension(parent_name, parent["pe"], parent["train_length"], request.method, request.target, options_given,
                    request.steps, **{key: getattr(request, key) for key in settings})  # fmt: skip


def run_step(kind: str, name: str, positional: list[str], options: dict, results=None, resume=False, out=None) -> None:
    """One step of a recipe: ``poscli KIND`` with the recipe's ``options`` (option names as keys,
    values as TOML gives them: read as the command line reads its flags). ``name``: the run to
    train or extend, or the evaluation's table; ``positional``: the parent run, or the runs to
    evaluate; ``out``: where its console output goes (default stderr). The step is recorded in
    RESULTS/history.jsonl as the command it is."""
    from poscli.study.report import record_command

    where = make_console(out)
    runner = {"results": results, "quiet": True}
    if resume:
        result = resume_run(name, results, where, quiet=True)
    elif kind == "train":
        result = train_run(request_from(TrainRequest, {**options, "name": name, **runner}), where)
    elif kind == "extend":
        values = {key: value for key, value in options.items() if key not in LINEAGE_KEYS}
        result = extend_run(positional[0], extend_request({**values, "name": name, **runner}), where)
    else:
        written, _, table = evaluate_runs(positional, request_from(EvalRequest, {**options, **runner}), where)
        where.print("wrote " + ", ".join(str(p) for p in written))
    if kind != "eval":
        where.print(result.summary())
    tables = [table] if kind == "eval" else []
    command = command_line(kind, name, positional, options, resume)
    runner_flags = [*(["--results", str(results)] if results is not None else []), "--quiet"]
    record_command(results, ["poscli", *command, *(f for f in runner_flags if f not in command)], tables)


def run_logged(step: dict, log: Path) -> tuple[int, str]:
    """:func:`run_step` with its output in ``log``: (exit code, the line to report on failure).
    Ctrl-C and a stopped training run propagate (the caller stops the recipe)."""
    with (
        open(log, "w", encoding="utf-8") as handle,
        contextlib.redirect_stdout(handle),
        contextlib.redirect_stderr(handle),
    ):
        try:
            run_step(**step, out=handle)
            return 0, ""
        except PoscliError as error:
            if error.exit_code in (130, 143):
                raise
            print(f"{error.prefix}{error}", file=handle)
            return error.exit_code, f"{error.prefix}{error}"
        except Exception as error:  # a bug: the traceback goes to the log, the recipe carries on
            traceback.print_exc(file=handle)
            return 1, f"{type(error).__name__}: {error}"


def run_reported(name: str, step: dict, log: Path, report) -> int:
    """:func:`run_logged`, with a line to ``report`` when the step starts and when it ends (how long,
    or why it failed); its exit code."""
    import time

    report(f"started {name}")
    started = time.perf_counter()
    code, line = run_logged(step, log)
    if code:
        report(f"FAILED {name} (exit {code}): {line}  [log: {log}]")
    else:
        report(f"finished {name} in {(time.perf_counter() - started) / 60:.1f} min")
    return code


def run_chain(chain: list[tuple[str, dict]], log_dir: str) -> int:
    """``poscli run --each --jobs N``: a run's steps (its training, its evaluations, its extensions
    and theirs) one after another, each with its output in LOG_DIR/NAME.log; the exit code of the
    first that fails (the steps after it need it), else 0. Before each step it takes the cores the
    sweep's other chains have freed (the last chain running gets them all)."""
    from poscli.study.sweep import take_free_cores

    for name, step in chain:
        take_free_cores()
        if code := run_reported(name, step, Path(log_dir) / f"{name}.log", lambda line: print(line, flush=True)):
            return code
    return 0


def main(argv: list[str] | None = None) -> None:
    """``python -m poscli.study.steps STEP_JSON``: one step in a fresh process (``poscli run --jobs N``),
    or a chain of them (``{"chain": [[NAME, STEP], ...], "log_dir": DIR}``, ``poscli run --each --jobs N``)."""
    step = json.loads((argv or sys.argv[1:])[0])
    try:
        if "chain" in step:
            sys.exit(run_chain(step["chain"], step["log_dir"]))
        run_step(**step)
    except PoscliError as error:
        print(f"{error.prefix}{error}", file=sys.stderr)
        sys.exit(error.exit_code)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        sys.exit(130)


if __name__ == "__main__":
    main()
