import os
import stat

import pytest

from poscli.core.io import atomic_write


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
