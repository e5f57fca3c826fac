"""Small file helpers: every file poscli writes goes through a temporary file and a rename."""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from pathlib import Path


def _umask() -> int:
    current = os.umask(0)
    os.umask(current)
    return current


@contextlib.contextmanager
def atomic_write(path: str | os.PathLike, mode: str = "w"):
    """Write to a temporary file beside ``path`` and rename it over ``path`` only on success,
    so an interrupted write never leaves a half-written file."""
    path = Path(path)
    descriptor, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.chmod(temporary, 0o666 & ~_umask())  # mkstemp makes 0600; give the file the usual permissions
    try:
        with os.fdopen(descriptor, mode, **({} if "b" in mode else {"encoding": "utf-8"})) as handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, path)
        _sync_folder(path.parent)  # the rename itself on disk: a power cut after it keeps the new file
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temporary)
        raise


def _sync_folder(folder: Path) -> None:
    """fsync a folder, so the renames in it survive a crash (POSIX; a no-op where folders cannot be opened)."""
    try:
        descriptor = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(descriptor)
    except OSError:
        pass  # some filesystems refuse to sync a folder; the file itself is synced
    finally:
        os.close(descriptor)


@contextlib.contextmanager
def locked(path: str | os.PathLike):
    """Hold an exclusive lock for a read-merge-write of ``path``, so several ``poscli eval`` processes
    writing the same table take turns and none loses another's rows (filelock: the same on POSIX and
    Windows). The lock file is ``.locks/NAME.lock`` beside it, out of sight of the results: filelock
    leaves it in place, since deleting a lock file another process waits on would race."""
    from filelock import FileLock

    path = Path(path)
    (path.parent / ".locks").mkdir(parents=True, exist_ok=True)
    with FileLock(path.parent / ".locks" / f"{path.name}.lock"):
        yield


def write_text(path: str | os.PathLike, text: str) -> None:
    with atomic_write(path) as handle:
        handle.write(text)


def write_json(path: str | os.PathLike, value) -> None:
    with atomic_write(path) as handle:
        json.dump(value, handle, indent=2, sort_keys=False, default=str)
        handle.write("\n")


def read_json(path: str | os.PathLike):
    with open(path, encoding="utf-8") as handle:
        return json.load(handle)


def cache_dir() -> Path:
    """Where corpora are cached: ``$POSCLI_CACHE``, default ``~/.cache/poscli``."""
    return Path(os.environ.get("POSCLI_CACHE", Path.home() / ".cache" / "poscli"))
