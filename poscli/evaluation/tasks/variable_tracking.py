"""``--task variable-tracking``: RULER's variable tracking (Hsieh et al., 2024) in miniature: a
chain of `size` assignments (x:7, then y:x, z:y, ...) interleaved with a distractor chain of the
same length from another value; the answer is the value of the chain's last variable."""

from __future__ import annotations

from poscli.errors import PoscliError
from poscli.evaluation.algorithmic import AlgorithmicTask
from poscli.evaluation.tasks import register

NAMES = "abcdefghijklmnopqrstuvwxyz"


@register("variable-tracking")
class VariableTracking(AlgorithmicTask):
    summary = "a chain of `size` assignments beside a distractor chain; the value of the last variable"
    citation = "Hsieh et al., 2024 (RULER, variable tracking)"

    def instance(self, size, rng):
        if 2 * size > len(NAMES):
            raise PoscliError(
                f"--task variable-tracking names {len(NAMES)} variables; use --sizes up to {len(NAMES) // 2}"
            )
        names = rng.sample(NAMES, 2 * size)
        chains = [names[:size], names[size:]]
        values = rng.sample("0123456789", 2)
        statements = []
        for step in range(size):
            for chain, value in zip(chains, values):
                source = value if step == 0 else chain[step - 1]
                statements.append(f"{chain[step]}:{source}")
        return ";".join(statements) + f"?{chains[0][-1]}", values[0]
