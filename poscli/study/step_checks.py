"""What a step of poscli train, extend or eval would refuse, found before anything runs: ``poscli run``
checks every step of a recipe with ``check_step`` (``--dry-run`` too), and the commands check their
own requests with the same functions first thing. Also the parsing of extension methods' options,
which both the checks and the commands read."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from poscli.errors import PoscliError
from poscli.training.options import EVAL_OPTIONS, EXTEND_DECLARED, TRAIN_DECLARED, parsed, request_from
from poscli.training.requests.evaluate import EvalRequest
from poscli.training.requests.extend import ExtendRequest
from poscli.training.requests.train import TrainRequest

LINEAGE_KEYS = ("parent", "parent_options")  # what a recipe's extension step carries beside its options


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


def check_search_score(factors: Path | None, score: str | None) -> None:
    """``--search-score`` chooses what ``--factors search`` minimises: refused without it, or unknown."""
    from poscli.training.options import check_score

    if score is None:
        return
    if str(factors) != "search":
        raise PoscliError(f"--search-score {score} chooses what --factors search minimises; add --factors search")
    check_score(score, "--search-score")


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
