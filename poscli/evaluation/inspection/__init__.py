"""Why a model extrapolates or fails: attention entropy, attention mass by distance, the share on the
first keys, rotary angle coverage and frequency use (``poscli inspect``). Torch is imported by the
modules, not here."""
