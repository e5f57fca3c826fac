"""``--task parity``: whether a bit string holds an odd number of ones (Kazemnejad et al., 2023;
Ruoss et al., 2023, parity check)."""

from __future__ import annotations

from poscli.evaluation.algorithmic import AlgorithmicTask
from poscli.evaluation.tasks import register


@register("parity")
class Parity(AlgorithmicTask):
    summary = "1 if a string of `size` bits has an odd number of ones, else 0"
    citation = "Kazemnejad et al., 2023; Ruoss et al., 2023 (parity check)"

    def instance(self, size, rng):
        bits = "".join(rng.choice("01") for _ in range(size))
        return bits, str(bits.count("1") % 2)
