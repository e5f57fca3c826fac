"""Evaluation tasks, the ``--task`` axis: one file per task in this package (see
``poscli.evaluation.tasks.base.Task`` for the protocol, ``poscli.core.registry`` for the pattern).

``poscli eval --task NAME`` and a recipe's ``[[eval]] task = "NAME"`` run it; a task of your own is
``--task package.module:Class`` or a name an installed package declares in the entry-point group
``poscli.evaluation.tasks``.
"""

from __future__ import annotations

from poscli.core.registry import Registry


def _base() -> type:
    from poscli.evaluation.tasks.base import Task

    return Task


REGISTRY: Registry = Registry("evaluation task", __name__, "--task", "passkey", _base)
register = REGISTRY.register
names = REGISTRY.names
check_name = REGISTRY.check_name


def get(name: str):
    """The task ``name`` (an instance of its class)."""
    return REGISTRY.get(name)()


def owner(data) -> object | None:
    """The task that wrote a results table (its rows, a DataFrame), or None."""
    return next((task for task in map(get, REGISTRY.builtin_names()) if task.owns(data)), None)
