import pytest
from conftest import GOOD_PLUGIN

from fk_adapters.plugins import PluginLoadError, load_plugins, parse_allowlist, select_kernels

BROKEN_IMPORT = "raise ImportError('missing dependency xyz')\n"
BROKEN_HOOK = """
    from fk_adapters import hookimpl

    @hookimpl
    def fk_kernels(engine, device):
        raise RuntimeError("boom")
"""
BAD_SPEC = """
    from fk_adapters import Kernel, hookimpl

    @hookimpl
    def fk_kernels(engine, device):
        return [Kernel(slot="not_a_slot", fn=print)]
"""
DUPLICATE = """
    from fk_adapters import Kernel, hookimpl

    @hookimpl
    def fk_kernels(engine, device):
        return [Kernel(slot="rms_norm", fn=print), Kernel(slot="rms_norm", fn=print)]
"""
MISMATCHED = """
    from fk_adapters import Kernel, hookimpl

    def norm_without_eps(x, weight):
        return x

    @hookimpl
    def fk_kernels(engine, device):
        return [Kernel(slot="rms_norm", fn=norm_without_eps), Kernel(slot="silu_and_mul", fn=lambda x: x)]
"""
SECOND = """
    from fk_adapters import Kernel, hookimpl

    @hookimpl
    def fk_plugin_info():
        return {"backend": "test"}

    @hookimpl
    def fk_kernels(engine, device):
        return [Kernel(slot="rms_norm", fn=print, devices=("cuda", "cpu")),
                Kernel(slot="silu_and_mul", fn=print, engines=("sglang",))]
"""


def _by_name(loaded):
    return {p.name: p for p in loaded}


def test_parse_allowlist():
    assert parse_allowlist(None) is None
    assert parse_allowlist("") == []
    assert parse_allowlist(" a, b ,,") == ["a", "b"]


def test_good_plugin_loads_with_its_distribution(make_plugin):
    make_plugin("good", GOOD_PLUGIN, version="2.3")
    (p,) = load_plugins(["good"])
    assert not p.error and p.dist == "fkplug-good" and p.version == "2.3"
    assert [k.slot for k in p.kernels] == ["rms_norm"]


@pytest.mark.parametrize("source, message", [(BROKEN_IMPORT, "missing dependency xyz"), (BROKEN_HOOK, "boom"),
                                             (BAD_SPEC, "unknown slot"), (DUPLICATE, "two kernels for slot"),
                                             (MISMATCHED, "fn norm_without_eps cannot be called as rms_norm(")])
def test_broken_plugin_is_isolated(make_plugin, source, message):
    make_plugin("good", GOOD_PLUGIN)
    make_plugin("bad", source)
    loaded = _by_name(load_plugins(["bad", "good"]))
    assert message in loaded["bad"].error and not loaded["bad"].kernels
    assert not loaded["good"].error and loaded["good"].kernels


@pytest.mark.parametrize("source", [BROKEN_IMPORT, BROKEN_HOOK, BAD_SPEC, MISMATCHED])
def test_strict_mode_raises_on_broken_plugin(make_plugin, source):
    make_plugin("bad", source)
    with pytest.raises(PluginLoadError, match="'bad' failed to load"):
        load_plugins(["bad"], strict=True)


def test_a_kernel_its_slot_cannot_call_is_one_line_naming_plugin_slot_and_mismatch(make_plugin, caplog):
    make_plugin("mismatched", MISMATCHED)
    with pytest.raises(PluginLoadError) as strict:
        load_plugins(["mismatched"], strict=True)
    line = str(strict.value)
    assert "\n" not in line and line.startswith("plugin 'mismatched' failed to load: KernelSpecError: ")
    assert "kernel for 'rms_norm': fn norm_without_eps cannot be called as rms_norm(x: Tensor[..., H]" in line
    assert "(x, weight): too many positional arguments" in line and "silu_and_mul" not in line
    (p,) = load_plugins(["mismatched"])  # not strict: skipped with its error, as any broken plugin
    assert not p.kernels and p.error == line.split("failed to load: ")[1]
    assert "fk plugin mismatched failed to load: kernel for 'rms_norm'" in caplog.text


def test_allowlist_selects_and_orders(make_plugin):
    make_plugin("good", GOOD_PLUGIN)
    make_plugin("second", SECOND)
    assert [p.name for p in load_plugins(["second", "good"])] == ["second", "good"]
    assert [p.name for p in load_plugins(["good"])] == ["good"]
    assert load_plugins([]) == []


def test_a_process_without_fk_plugins_in_its_environment_is_stock(monkeypatch):
    from fk_adapters.plugins import any_selected_in_env

    monkeypatch.delenv("FK_PLUGINS", raising=False)
    assert not any_selected_in_env()
    for value, selected in (("", False), ("  ", False), ("triton", True), ("triton,wrong", True)):
        monkeypatch.setenv("FK_PLUGINS", value)
        assert any_selected_in_env() is selected


def test_allowlist_from_environment(make_plugin, monkeypatch):
    from fk_adapters.plugins import allowlist_from_env, strict_from_env

    monkeypatch.setenv("FK_PLUGINS", "good")
    monkeypatch.setenv("FK_STRICT", "1")
    assert allowlist_from_env() == ["good"] and strict_from_env()
    monkeypatch.delenv("FK_PLUGINS")
    monkeypatch.setenv("FK_STRICT", "0")
    assert allowlist_from_env() is None and not strict_from_env()


def test_unknown_plugin_in_allowlist_is_an_error(make_plugin):
    make_plugin("good", GOOD_PLUGIN)
    with pytest.raises(PluginLoadError, match="not installed: nope"):
        load_plugins(["good", "nope"])


def test_select_first_plugin_wins_and_filters_engine_and_device(make_plugin):
    make_plugin("good", GOOD_PLUGIN)
    make_plugin("second", SECOND)
    loaded = load_plugins(["second", "good"])
    assert _by_name(loaded)["second"].info == {"backend": "test"}
    chosen, notes = select_kernels(loaded, "vllm", "cpu")
    assert chosen["rms_norm"][0] == "second"
    assert "silu_and_mul" not in chosen
    assert any("shadowed by second" in n for n in notes) and any("not for engine vllm" in n for n in notes)
    chosen, _ = select_kernels(load_plugins(["good"]), "vllm", "cuda")
    assert chosen["rms_norm"][0] == "good"


def test_plugins_load_under_the_environment_given_and_it_is_restored(make_plugin, monkeypatch):
    import os

    make_plugin("envreader", """
        import os

        SEEN = {k: os.environ.get(k) for k in ("FK_TEST_SET", "FK_TEST_KEPT")}
        os.environ["FK_TEST_BY_PLUGIN"] = "1"
    """)
    monkeypatch.setenv("FK_TEST_KEPT", "before")
    monkeypatch.delenv("FK_TEST_SET", raising=False)
    monkeypatch.delenv("FK_TEST_BY_PLUGIN", raising=False)
    (p,) = load_plugins(["envreader"], env={"FK_TEST_SET": "1", "FK_TEST_KEPT": "during"})
    assert not p.error, p.error
    import fkplug_envreader

    assert fkplug_envreader.SEEN == {"FK_TEST_SET": "1", "FK_TEST_KEPT": "during"}
    assert "FK_TEST_SET" not in os.environ and os.environ["FK_TEST_KEPT"] == "before"
    assert "FK_TEST_BY_PLUGIN" not in os.environ  # what its import set does not reach the engines fk starts


def test_source_digest_is_of_the_code_not_the_install_location(tmp_path, monkeypatch):
    import importlib

    from fk_adapters.sources import source_digest

    for site in ("a", "b"):
        pkg = tmp_path / site / "fkdigest_pkg"
        pkg.mkdir(parents=True)
        (pkg / "__init__.py").write_text("X = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path / "a"))
    importlib.invalidate_caches()
    first = source_digest("fkdigest_pkg.plugin")
    monkeypatch.syspath_prepend(str(tmp_path / "b"))
    importlib.invalidate_caches()
    assert source_digest("fkdigest_pkg") == first and len(first) == 64
    (tmp_path / "b" / "fkdigest_pkg" / "__init__.py").write_text("X = 2\n")
    assert source_digest("fkdigest_pkg") != first
