"""Where a result came from: the poscli commit and the machine (recorded in config.json, the
benchmark CSVs and the report)."""

from __future__ import annotations

import platform
import subprocess
from pathlib import Path


def git_commit() -> str | None:
    """The commit of this poscli checkout, or None outside a git checkout."""
    try:
        result = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=Path(__file__).parent, capture_output=True, text=True, timeout=5
        )
        return result.stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None


def environment(device, dtype: str = "fp32") -> dict:
    """torch and Python versions, the device and its name, threads, dtype and commit."""
    import torch

    return {
        "torch": torch.__version__,
        "python": platform.python_version(),
        "device": str(device),
        "device_name": torch.cuda.get_device_name(device)
        if device.type == "cuda"
        else platform.processor() or platform.machine(),
        "threads": torch.get_num_threads(),
        "dtype": dtype,
        "poscli_commit": git_commit(),
    }
