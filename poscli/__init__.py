"""poscli: train tiny GPTs with pluggable positional encodings and measure how they extrapolate.

The library works from Python without the CLI::

    from poscli.config import ModelConfig
    from poscli.model.gpt import GPT
    model = GPT(ModelConfig(pe="alibi"))

Heavy imports (torch, datasets, pandas) happen in the submodules that need them, so
``import poscli`` and ``poscli --help`` stay fast.
"""

__version__ = "0.1.0"
