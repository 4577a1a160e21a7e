"""Functions run once a module is imported: at once for one already imported, right after its code otherwise."""
import sys

import pytest

from fk_adapters.engines import after_import


@pytest.fixture
def package(tmp_path, monkeypatch):
    (tmp_path / "fk_later_pkg").mkdir()
    (tmp_path / "fk_later_pkg" / "__init__.py").write_text("")
    (tmp_path / "fk_later_pkg" / "host.py").write_text("class Host:\n    pass\nRAN = []\n")
    (tmp_path / "fk_later_pkg" / "broken.py").write_text("X = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    yield "fk_later_pkg"
    for name in [m for m in sys.modules if m.startswith("fk_later_pkg")]:
        del sys.modules[name]


def test_a_function_waits_for_the_module_and_runs_after_its_code(package):
    seen = []
    after_import.when_imported(f"{package}.host", lambda m: seen.append(m.Host.__name__) or m.RAN.append("fn"))
    assert seen == [] and f"{package}.host" in after_import.waiting() and f"{package}.host" not in sys.modules
    import fk_later_pkg.host as host

    assert seen == ["Host"] and host.RAN == ["fn"] and f"{package}.host" not in after_import.waiting()
    import importlib

    importlib.reload(host)  # once only
    assert seen == ["Host"]
    after_import.when_imported(f"{package}.host", lambda m: seen.append("now"))  # imported already: at once
    assert seen == ["Host", "now"]


def test_a_function_that_raises_fails_the_import(package):
    def refuse(module):
        raise RuntimeError("already replaced")

    after_import.when_imported(f"{package}.broken", refuse)
    with pytest.raises(RuntimeError, match="already replaced"):
        import fk_later_pkg.broken  # noqa: F401
    assert f"{package}.broken" not in sys.modules
