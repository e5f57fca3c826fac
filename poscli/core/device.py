"""Device selection: ``auto`` picks CUDA, then Apple's MPS, then the CPU; and a sweep job's share
of the CPU cores."""

from __future__ import annotations

import os
from pathlib import Path

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
        raise PoscliError(
            f"--device {requested} is not available on this machine; available: {', '.join(available_devices())} (or "
            "--device auto)"
        )
    if device.type == "mps" and "mps" not in available_devices():
        raise PoscliError(
            f"--device mps is not available on this machine; available: {', '.join(available_devices())} (or --device "
            "auto)"
        )
    return device


def autocast(device: torch.device, dtype: str):
    """The precision context of a training step: nothing for fp32, bfloat16 autocast for bf16.

    Under autocast, matmuls and attention run in bfloat16 while layer norms, the loss and
    softmax statistics stay in float32; poscli's RoPE computes its angles and rotation in
    float32 and its banded attention keeps its band in float32 whatever the autocast dtype.
    """
    return torch.autocast(device_type=device.type, dtype=torch.bfloat16, enabled=dtype == "bf16")


def compile_model(model, device: torch.device, length: int, report=print) -> bool:
    """``torch.compile`` the model's forward in place (``nn.Module.compile``, so its state dict keeps
    its names), then run it once on ``length`` tokens: a backend that cannot compile here (no C++
    compiler for the CPU backend, no Triton for CUDA) fails on that call, and the model goes back
    to eager with one line saying why. Returns whether the model is compiled."""
    if not hasattr(torch, "compile"):
        report("--compile: this torch has no torch.compile; running eager")
        return False
    model.compile()
    try:
        with torch.no_grad():
            model(torch.zeros(1, length, dtype=torch.long, device=device))
    except Exception as error:  # the backends raise many types (InductorError, BackendCompilerFailed, ...)
        model._compiled_call_impl = None  # what nn.Module.compile set: back to eager
        reason = (str(error).strip().splitlines() or [type(error).__name__])[0][:160]
        report(f"--compile: torch.compile failed on {device.type} ({reason}); running eager")
        return False
    return True


def free_memory(device: torch.device) -> int | None:
    """Bytes free for a new tensor on ``device``: CUDA's free memory, or Linux's MemAvailable for
    the CPU; None where neither is known."""
    if device.type == "cuda":
        return int(torch.cuda.mem_get_info(device)[0])
    if device.type == "cpu":
        try:
            with open("/proc/meminfo", encoding="ascii") as meminfo:
                for line in meminfo:
                    if line.startswith("MemAvailable:"):
                        return int(line.split()[1]) * 1024
        except OSError:
            return None
    return None


RUNNING_JOBS_VARIABLE = "POSCLI_RUNNING_JOBS"  # the file where a sweep keeps how many of its jobs run now


def threads_for(parallel: int) -> int:
    """Each of ``parallel`` jobs' share of the cores."""
    return max(1, (os.cpu_count() or 1) // max(1, parallel))


def take_free_cores() -> int:
    """In a job of a sweep (``poscli run --jobs N``, ``poscli train --jobs N``): the share of the
    cores for as many jobs as the sweep runs now (``RUNNING_JOBS_VARIABLE``), set as torch's thread
    count, so the last job left running takes every core instead of its share of a pair, and gives
    them back when another starts. Called before each step of a chain (``--each``) and at each
    checkpoint of a training. Returns the thread count (unchanged outside a sweep)."""
    path = os.environ.get(RUNNING_JOBS_VARIABLE)
    try:
        threads = threads_for(int(Path(path).read_text())) if path else torch.get_num_threads()
    except (OSError, ValueError):  # the sweep has ended or is writing it: keep the threads as they are
        return torch.get_num_threads()
    if threads != torch.get_num_threads():
        torch.set_num_threads(threads)
    return threads
