"""RoPE angle coverage: which rotary pairs meet angles at a length that training never showed them.

Pair i of a rotary encoding turns by p * theta_i at position p, so a query and a key d positions apart
meet at the angle d * theta_i. A model trained on windows of L tokens has seen every d from 0 to L - 1,
hence the angles up to L theta_i in pair i, to within one position's step (the bound the issue and Peng
et al. use; PI's target window, (sL - 1) theta_i / s, then stays inside it). A pair whose wavelength
2 pi / theta_i is at most L has turned a whole period within training and has seen every angle there
is; any other pair meets, at a longer window n, angles up to (n - 1) theta'_i that it never saw (theta'
are the frequencies the model runs with: the trained ones, or an extension's). This is the explanation
Peng et al. (2023, section 3.2) give for why RoPE fails past its train length, and why NTK-by-parts and YaRN keep the
high-frequency pairs (many periods in training: "extrapolate"), interpolate the low ones (less than
one period: their angles are squeezed into the trained range, as PI squeezes every pair; Chen et al.,
2023) and ramp between; the ramp's ends are where a pair makes ``beta_fast`` and ``beta_slow`` turns
over L (``poscli.extension.scaling.ramp_bounds``, the boundaries of transformers'
``_compute_yarn_parameters``).

Everything here comes from a configuration alone: a run's config.json, an encoding with an extension
named on the command line, or an ``hf:`` model's config; no weights.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import torch
from torch import Tensor

from poscli.errors import PoscliError
from poscli.extension.scaling import ramp_bounds

# How each pair's frequency came out of the extension (``RotaryFrequencies.treatments``).
KEPT, INTERPOLATED, RAMPED, RESCALED = "kept", "interpolated", "ramped", "rescaled"
SAME = 1e-5  # relative tolerance for "the same frequency" (float32 frequencies)


@dataclass(frozen=True)
class RotaryFrequencies:
    """The frequencies of a rotary model before and after an extension.

    trained: (P,) theta_i as trained (P rotary pairs, highest frequency first; 0 for a pair p-RoPE
    zeroed); used: (P,) the frequencies the model runs with now; train_length: L, the windows it was
    trained on; method: the extension ("default": none); factor: its scale s; ramp: (low, high), the
    pair indices where NTK-by-parts' ramp starts and ends, for a method with one, else None.
    """

    label: str
    trained: Tensor
    used: Tensor
    train_length: int
    method: str = "default"
    factor: float = 1.0
    ramp: tuple[float, float] | None = None

    def treatments(self) -> list[str]:
        """Per pair: kept, interpolated (divided by s), ramped (a ramp method's blend) or rescaled (another
        change: NTK's new base). A ramp method's pairs are classed by its own boundaries, not the values."""
        if self.ramp is not None:
            low, high = self.ramp
            return [KEPT if i <= low else INTERPOLATED if i >= high else RAMPED for i in range(len(self.trained))]
        out = []
        for trained, used in zip(self.trained.tolist(), self.used.tolist()):
            if math.isclose(used, trained, rel_tol=SAME, abs_tol=0.0) or trained == 0:
                out.append(KEPT)
            elif math.isclose(used * self.factor, trained, rel_tol=SAME):
                out.append(INTERPOLATED)
            else:
                out.append(RESCALED)
        return out


def coverage_rows(frequencies: RotaryFrequencies, lengths: list[int]) -> list[dict]:
    """One row per (length, pair): the pair's wavelength, the largest angle training showed it,
    L theta_i, the largest at the length, (n - 1) theta'_i, and whether the pair turned a whole
    period in training (``full_period``) or meets angles it never saw there (``unseen``: neither a
    whole period in training nor inside the trained range)."""
    L = frequencies.train_length
    trained = frequencies.trained.double()
    used = frequencies.used.double()
    trained_max = L * trained  # (P,)
    full_period = trained_max >= 2 * math.pi
    treatments = frequencies.treatments()
    rows = []
    for length in lengths:
        reached = (length - 1) * used  # (P,)
        unseen = ~full_period & (reached > trained_max * (1 + SAME))
        for pair in range(len(trained)):
            rows.append(
                {
                    "run": frequencies.label,
                    "method": frequencies.method,
                    "length": length,
                    "train_length": L,
                    "pair": pair,
                    "inv_freq_trained": float(trained[pair]),
                    "inv_freq": float(used[pair]),
                    "wavelength": 2 * math.pi / float(used[pair]) if used[pair] > 0 else math.inf,
                    "trained_max_angle": float(trained_max[pair]),
                    "max_angle": float(reached[pair]),
                    "full_period": bool(full_period[pair]),
                    "unseen": bool(unseen[pair]),
                    "treatment": treatments[pair],
                }
            )
    return rows


def run_frequencies(label: str, model_config) -> RotaryFrequencies | None:
    """A poscli ModelConfig's frequencies (a run, or one built from flags), or None for an encoding that
    does not rotate. The trained ones are the method "default" at the same base and pairs."""
    from poscli import encodings

    encoding = encodings.build(model_config)
    if not getattr(encoding, "rotary_frequencies", False):
        return None
    trained_config = dataclasses.replace(model_config, rope_scaling={})
    trained = encodings.build(trained_config).inv_freq  # (P,) p-RoPE's zeroed pairs included
    method, settings = encoding.method.name, encoding.scaling
    ramp = None
    if "beta_fast" in settings and "beta_slow" in settings:
        ramp = ramp_bounds(
            encoding.rotary_dim,
            encoding.options.base,
            int(settings["original_length"]),
            settings["beta_fast"],
            settings["beta_slow"],
        )
    return RotaryFrequencies(
        label,
        trained,
        encoding.inv_freq.clone(),
        int(settings["original_length"]) if method != "default" else model_config.train_length,
        method,
        float(settings.get("factor", 1.0)),
        ramp,
    )


def pretrained_frequencies(label: str, hf_config) -> RotaryFrequencies:
    """An ``hf:`` model's frequencies from its transformers config, through transformers' own rope
    functions (``ROPE_INIT_FUNCTIONS``): the trained ones are its base's default frequencies, the used
    ones its rope type's; the train length is ``original_max_position_embeddings`` where the rope type
    records one, else ``max_position_embeddings``."""
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    values = hf_config.to_dict()
    settings = dict(values.get("rope_parameters") or values.get("rope_scaling") or {})
    rope_type = settings.get("rope_type") or settings.get("type") or "default"
    base = settings.get("rope_theta") or values.get("rope_theta") or values.get("rotary_emb_base")
    if base is None:
        raise PoscliError(f"{label}: its config has no RoPE base (rope_theta); angle coverage is for rotary models")
    head_dim = values.get("head_dim") or values["hidden_size"] // values["num_attention_heads"]
    fraction = settings.get("partial_rotary_factor") or values.get("partial_rotary_factor") or 1.0
    rotary = int(head_dim * fraction) // 2 * 2
    trained = (float(base) ** (-torch.arange(0, rotary, 2, dtype=torch.float64) / rotary)).float()
    used = trained if rope_type == "default" else ROPE_INIT_FUNCTIONS[rope_type](hf_config, None)[0].float()
    original = int(settings.get("original_max_position_embeddings") or values.get("max_position_embeddings") or 0)
    ramp = None
    if rope_type == "yarn":
        ramp = ramp_bounds(
            rotary, float(base), original, settings.get("beta_fast") or 32.0, settings.get("beta_slow") or 1.0,
            truncate=settings.get("truncate", True),
        )  # fmt: skip
    return RotaryFrequencies(label, trained, used, original, rope_type, float(settings.get("factor") or 1.0), ramp)


def configured_frequencies(
    pe: str,
    pe_options: dict,
    train_length: int,
    head_dim: int,
    method: str | None = None,
    target: int | None = None,
    method_options: dict | None = None,
) -> RotaryFrequencies:
    """An encoding's frequencies from flags alone (``poscli inspect --pe rope [--method yarn]``): trained at
    ``train_length`` with ``head_dim`` dimensions a head, and extended to ``target`` by ``method``. A
    non-rotary encoding, or a method that does not apply to it, is a one-line error."""
    from poscli import encodings
    from poscli.config import ModelConfig
    from poscli.extension import methods

    config = ModelConfig(pe=pe, pe_options=dict(pe_options), train_length=train_length, n_head=1, d_model=head_dim)
    encoding = encodings.get(pe)
    if not encoding.rotary_frequencies:
        raise PoscliError(f"--pe {pe} does not rotate queries and keys: angle coverage is for rope and its extensions")
    label = pe
    if method is not None:
        chosen = methods.get(method)
        if (reason := chosen.applies_to(encoding)) is not None or not chosen.rescales:
            raise PoscliError(
                f"--method {method} {reason or 'changes no frequency'}; angle coverage takes a frequency method: "
                f"{', '.join(m for m in methods.frequency_method_names() if m != 'default')}"
            )
        if target is None or target <= train_length:
            raise PoscliError(f"--target {target}: give a length longer than --train-length {train_length}")
        factor = target / train_length
        options = chosen.check_options(method_options or {})
        config = dataclasses.replace(config, **chosen.extended_config(encoding, config, factor, target, options, {}))
        label = f"{pe}+{method}-x{factor:g}"
    frequencies = run_frequencies(label, config)
    if frequencies is None:
        raise PoscliError(f"--pe {pe}: its frequencies cannot be read from a configuration")
    return frequencies
