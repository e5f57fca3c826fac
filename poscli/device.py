"""Device selection: ``auto`` picks CUDA, then Apple's MPS, then the CPU."""

from __future__ import annotations

import torch

from poscli.errors import PoscliError


def available_devices() -> list[str]:
    found = ["cpu"]
    if torch.cuda.is_available():
        found.insert(0, "cuda")
    if getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
        found.insert(0, "mps")
    return found


def select_device(requested: str = "auto") -> torch.device:
    if requested == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda")
        if getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
            return torch.device("mps")
        return torch.device("cpu")
    try:
        device = torch.device(requested)
    except RuntimeError as error:
        raise PoscliError(f"--device {requested!r} is not a device name; use auto, cpu, cuda, cuda:N or mps") from error
    if device.type not in ("cpu", "cuda", "mps"):
        raise PoscliError(f"--device {requested!r} is not supported; use auto, cpu, cuda, cuda:N or mps")
    if device.type == "cuda" and (not torch.cuda.is_available() or (device.index or 0) >= torch.cuda.device_count()):
        raise PoscliError(f"--device {requested} is not available on this machine; available: {', '.join(available_devices())} (or --device auto)")
    if device.type == "mps" and "mps" not in available_devices():
        raise PoscliError(f"--device mps is not available on this machine; available: {', '.join(available_devices())} (or --device auto)")
    return device
