import os
import stat

import pytest

from poscli.core.io import atomic_write, held_alone, is_held
from poscli.errors import PoscliError


def test_atomic_write_replaces_the_file_only_on_success(tmp_path):
    target = tmp_path / "table.csv"
    target.write_text("old\n")
    with pytest.raises(RuntimeError), atomic_write(target) as handle:
        handle.write("half a ta")
        raise RuntimeError("crash mid-write")
    assert target.read_text() == "old\n"
    assert [p.name for p in tmp_path.iterdir()] == ["table.csv"], "no temporary file is left behind"
    with atomic_write(target) as handle:
        handle.write("new\n")
    assert target.read_text() == "new\n"


def test_atomic_write_gives_files_the_usual_permissions(tmp_path):
    old = os.umask(0o022)
    try:
        with atomic_write(tmp_path / "f.md") as handle:
            handle.write("x")
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "f.md").stat().st_mode) == 0o644


def test_the_folder_is_synced_after_the_rename(tmp_path, monkeypatch):
    """The file is fsynced before the rename and its folder after it, so the new name survives a crash."""
    import stat

    from poscli.core import io

    synced = []
    real = io.os.fsync
    monkeypatch.setattr(io.os, "fsync", lambda fd: synced.append(stat.S_ISDIR(io.os.fstat(fd).st_mode)) or real(fd))
    io.write_text(tmp_path / "config.json", "{}")
    assert synced == [False, True]  # the temporary file, then the folder holding the new name


def test_a_config_key_this_poscli_does_not_know_is_named_on_stderr_not_dropped_in_silence(capsys):
    from poscli.config import ModelConfig

    config = ModelConfig.from_dict({"pe": "rope", "n_layer": 2, "attention_temperature_v9": 1.5})
    assert config.pe == "rope" and config.n_layer == 2
    assert "ModelConfig keys this poscli does not know (attention_temperature_v9)" in capsys.readouterr().err


def test_a_held_path_refuses_a_second_holder_at_once_and_is_free_again_after(tmp_path):
    run = tmp_path / "runs" / "r"
    assert not is_held(run) and not (tmp_path / "runs").exists()  # asking writes nothing
    with held_alone(run, "r is busy"):
        assert is_held(run)
        with pytest.raises(PoscliError, match="r is busy"), held_alone(run, "r is busy"):
            pass  # never reached: a second holder (another open file, as another process's) is refused
        assert is_held(run)  # the refusal let nothing go
    assert not is_held(run)
    with held_alone(run, "r is busy"):  # free again
        assert is_held(run)


def test_a_moment_of_asking_whether_a_run_is_held_does_not_refuse_its_trainer(tmp_path):
    """``is_held`` takes the lock for an instant: a trainer starting then waits that instant out."""
    import threading

    from filelock import FileLock

    run = tmp_path / "r"
    with held_alone(run, "busy"):
        pass  # the lock file exists now, as after any run
    asking, done = threading.Event(), threading.Event()

    def ask() -> None:  # another process asking, held a little longer than is_held holds it
        with FileLock(tmp_path / ".locks" / "r.lock"):
            asking.set()
            done.wait(0.3)

    thread = threading.Thread(target=ask)
    thread.start()
    asking.wait(5)
    with held_alone(run, "busy"):
        assert is_held(run)
    thread.join()
