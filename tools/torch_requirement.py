"""Print the pip arguments that install a torch build fitting this machine.

- A machine with an NVIDIA driver (``nvidia-smi`` on PATH) or macOS: PyPI's own wheel
  (CUDA build on Linux, CPU/MPS build on macOS).
- Any other machine: a CPU-only build. If pip can already resolve ``torch==VERSION``
  offline (a local wheel in pip's find-links, as on the poscli development machines),
  use that; otherwise ask PyTorch's CPU index for the ``+cpu`` build, which is ~200 MB
  instead of several GB.

Used by ``make install``; override with ``make install TORCH="torch==X ..."``.
"""

from __future__ import annotations

import platform
import shutil
import subprocess
import sys

TORCH_VERSION = "2.13.0"
CPU_INDEX = "https://download.pytorch.org/whl/cpu"


def resolves_offline(requirement: str) -> bool:
    probe = [sys.executable, "-m", "pip", "install", "--dry-run", "--no-index", "--no-deps", "-q", requirement]
    return subprocess.run(probe, capture_output=True).returncode == 0


def main() -> None:
    pinned = f"torch=={TORCH_VERSION}"
    if shutil.which("nvidia-smi") or platform.system() == "Darwin" or resolves_offline(pinned):
        print(pinned)
    else:
        print(f"{pinned}+cpu --extra-index-url {CPU_INDEX}")


if __name__ == "__main__":
    main()
