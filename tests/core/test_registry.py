"""An encoding an installed package declares as an entry point (``[project.entry-points."poscli.encodings"]``
in its pyproject) is a member by its name, as a built-in is: listed, accepted and loaded. The
package is installed here the way pip leaves one on disk: a module and a dist-info folder whose
entry_points.txt names the class."""

import pytest

from poscli.encodings import REGISTRY
from poscli.errors import PoscliError

MODULE = """
from poscli.encodings.alibi import ALiBi


class InstalledBias(ALiBi):
    summary = "ALiBi, from an installed package"
"""


def test_an_entry_point_of_an_installed_package_is_listed_accepted_and_loaded(tmp_path, monkeypatch):
    (tmp_path / "installed_bias.py").write_text(MODULE)
    info = tmp_path / "installed_bias-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: installed-bias\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[poscli.encodings]\ninstalled-bias = installed_bias:InstalledBias\n")
    with pytest.raises(PoscliError, match="unknown encoding 'installed-bias'"):
        REGISTRY.check_name("installed-bias")  # not before the package is on the path
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(REGISTRY, "_resolved", dict(REGISTRY._resolved))  # what get() remembers stays in this test
    assert "installed-bias" in REGISTRY.names() and REGISTRY.is_member("installed-bias")
    loaded = REGISTRY.get("installed-bias")
    assert loaded.__name__ == "InstalledBias" and loaded.name == "installed-bias"
