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
from poscli.study.step_checks import (
    LINEAGE_KEYS,
    check_eval_request,
    check_search_score,
    checked_method_options,
    extend_request,
    method_options,
    user_method_options,
)
from poscli.training.options import EVAL_OPTIONS, request_from
from poscli.training.requests.evaluate import EvalRequest
from poscli.training.requests.extend import ExtendRequest
from poscli.training.requests.inspect import InspectRequest
from poscli.training.requests.train import TrainRequest


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


def check_distinct_runs(run_names: list[str], results) -> None:
    """Every run exists and is given once: a run named twice, or by its name and by its folder, would
    be scored twice and its rows doubled in the table."""
    from poscli.model.pretrained import is_pretrained
    from poscli.model.runs import find_run

    seen: dict[str, str] = {}
    for name in run_names:
        key = name if is_pretrained(name) else str(find_run(name, results).resolve())
        if key in seen:
            also = "" if seen[key] == name else f" (as {seen[key]!r} too)"
            raise PoscliError(f"run {name!r} is given twice{also}; give each run once")
        seen[key] = name


def _check_table_kind(evaluation, results, table: str) -> None:
    """Another task's table is refused before any run is evaluated."""
    from poscli.evaluation import tasks
    from poscli.evaluation.tables import read_table
    from poscli.model.runs import results_dir

    path = results_dir(results) / f"{table}.csv"
    if path.exists():
        tasks.refuse_other_kind(evaluation, read_table(path), path, "use another --table or move it away")


def evaluate_runs(run_names: list[str], request: EvalRequest, console=None):
    """``poscli eval RUN...``. Returns (the files written,
    the table to show, the table's name)."""
    from poscli.model.runs import check_table_name

    options = {name: getattr(request, name) for name in EVAL_OPTIONS}  # what a task reads
    results, quiet, sinks, window = request.results, request.quiet, request.sinks, request.window
    evaluation = check_eval_request(request)
    table = check_table_name(request.table or evaluation.default_table)
    from poscli.evaluation.algorithmic import AlgorithmicTask
    from poscli.model.pretrained import is_pretrained

    takes_hf = request.task in (EVAL_OPTIONS["task"], "passkey") or isinstance(evaluation, AlgorithmicTask)
    for run_name in run_names:
        if is_pretrained(run_name) and not takes_hf:
            raise PoscliError(f"{run_name}: hf: models take the perplexity, passkey and algorithmic evaluations")
    check_distinct_runs(run_names, results)  # a missing run fails before torch is imported
    _check_table_kind(evaluation, results, table)
    if sinks is not None:
        run_names = [_with_sinks(name, sinks, window, request.lengths, results, request.device) for name in run_names]
    with progress_bar(console, quiet) as progress:
        result = evaluation.evaluate(run_names, options, results, progress, table)
    written, shown = evaluation.write(result, options, results, table)
    return written, shown, table


def inspect_runs(run_names: list[str], request: InspectRequest, console=None):
    """``poscli inspect RUN...`` (attention and angles of runs on eval's spans), or ``poscli inspect --pe
    NAME`` with no run (angle coverage from the configuration, beside each ``--method``). Returns (the files
    written, the summary table or None, the table's name)."""
    from poscli.model.runs import check_table_name

    table = check_table_name(request.table)
    if bool(run_names) == (request.pe is not None):
        raise PoscliError("give runs to inspect (poscli inspect RUN...) or --pe NAME with no run, not both")
    _check_inspect_flags(request, bool(run_names))
    check_distinct_runs(run_names, request.results)  # a missing run fails before torch is imported
    from poscli.evaluation import tasks
    from poscli.evaluation.inspection.tables import write_inspection

    _check_table_kind(tasks.get("inspect"), request.results, table)

    if request.pe is not None:
        tables = {"angles": _configured_angles(request)}
    else:
        from poscli.evaluation.inspection.runs import inspect_runs as measure

        with progress_bar(console, request.quiet) as progress:
            tables = measure(run_names, request.lengths, request.results, request.max_tokens, request.device, progress)
    written, summary = write_inspection(tables, request.results, table)
    return written, summary, table


CONFIGURATION_ONLY = ("pe_option", "train_length", "head_dim", "method", "target", "method_option")


def _check_inspect_flags(request: InspectRequest, runs: bool) -> None:
    """A flag the chosen mode does not read is refused, never ignored: runs read their own configuration
    (not --pe-option, --train-length, ...); --pe reads no text (not --max-tokens); and --head-dim must give
    RoPE pairs."""
    import dataclasses

    defaults = {field.name: field.default for field in dataclasses.fields(InspectRequest)}
    unread = CONFIGURATION_ONLY if runs else ("max_tokens",)
    given = [name for name in unread if getattr(request, name) != defaults[name]]
    if given:
        flags = ", ".join("--" + name.replace("_", "-") for name in given)
        mode = "runs read their own configuration" if runs else "--pe with no run reads no text"
        raise PoscliError(f"{flags}: {mode}; drop {'them' if len(given) > 1 else 'it'}")
    repeated = sorted({m for m in request.method or [] if (request.method or []).count(m) > 1})
    if repeated:
        raise PoscliError(f"--method {repeated[0]} is given twice; give each method once")
    if not runs and (request.head_dim < 4 or request.head_dim % 2):
        raise PoscliError(f"--head-dim {request.head_dim}: give an even number of at least 4, e.g. 32")


def _configured_angles(request: InspectRequest) -> list[dict]:
    """The angle rows of ``--pe`` and of each ``--method`` of it, from flags alone."""
    from poscli.encodings import parse_option_pairs
    from poscli.evaluation.inspection.angles import configured_frequencies, coverage_rows

    assert request.pe is not None
    lengths = request.lengths or [4 * request.train_length, 16 * request.train_length]
    pe_options = parse_option_pairs(request.pe_option or [])
    options = method_options(request.method_option or [])
    rows = []
    for method in [None, *(request.method or [])]:
        frequencies = configured_frequencies(
            request.pe, pe_options, request.train_length, request.head_dim, method,
            request.target or max(lengths), options,
        )  # fmt: skip
        rows += coverage_rows(frequencies, sorted({request.train_length, *lengths}))
    return rows


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
    from poscli.core.device import take_free_cores

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
