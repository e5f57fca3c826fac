"""Small file helpers: every file poscli writes goes through a temporary file and a rename; locks
for a table's read-merge-write (``locked``) and for a run being trained (``held_alone``)."""

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


def _lock_file(path: Path) -> Path:
    return path.parent / ".locks" / f"{path.name}.lock"


@contextlib.contextmanager
def held_alone(path: str | os.PathLike, busy: str):
    """Hold ``path``'s lock (``.locks/NAME.lock`` beside it) while the block runs, or raise
    PoscliError(``busy``) where another process holds it a second on: a run trained by two processes at
    once would have each write its checkpoint over the other's. The operating system lets the lock
    go when its process ends, however it ends."""
    from filelock import FileLock, Timeout

    from poscli.errors import PoscliError

    path = Path(path)
    lock = FileLock(_lock_file(path))
    try:
        _lock_file(path).parent.mkdir(parents=True, exist_ok=True)
        lock.acquire(timeout=1.0)  # a second, not none: ``is_held`` takes the lock for an instant to ask
    except Timeout:
        raise PoscliError(busy) from None
    except OSError as error:  # no lock where nothing may be written: said as the run folder would say it
        raise PoscliError(
            f"cannot create {_lock_file(path).parent}: {error.strerror}; check that the results folder is writable"
        ) from None
    try:
        yield
    finally:
        lock.release()


def is_held(path: str | os.PathLike) -> bool:
    """Whether a process holds ``path``'s lock (``held_alone``) now; writes nothing where none ever did."""
    from filelock import FileLock, Timeout

    lock_file = _lock_file(Path(path))
    if not lock_file.exists():
        return False
    lock = FileLock(lock_file)
    try:
        lock.acquire(timeout=0)
    except Timeout:
        return True
    except OSError:  # a folder this user may read but not lock: its state is unknown, not "held"
        return False
    lock.release()
    return False


@contextlib.contextmanager
def locked(path: str | os.PathLike):
    """Hold an exclusive lock for a read-merge-write of ``path``, so several ``poscli eval`` processes
    writing the same table take turns and none loses another's rows (filelock: the same on POSIX and
    Windows). The lock file is ``.locks/NAME.lock`` beside it, out of sight of the results: filelock
    leaves it in place, since deleting a lock file another process waits on would race."""
    from filelock import FileLock

    path = Path(path)
    _lock_file(path).parent.mkdir(parents=True, exist_ok=True)
    with FileLock(_lock_file(path)):
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
