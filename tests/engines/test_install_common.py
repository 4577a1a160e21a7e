"""The part of install() every engine adapter shares: ops handed to the hosts of their slots, entries listed."""
import logging

from fk_adapters.engines import calls, install_common


def test_every_host_of_a_chosen_slot_gets_its_ops_and_is_listed_in_order():
    chosen = {"rms_norm": ("p", None), "silu_and_mul": ("p", None)}
    ops = {"rms_norm": "op-rms", "silu_and_mul": "op-silu"}
    hosts = [("RMSNorm", ("rms_norm", "fused_add_rms_norm")), ("GeluAndMul", ("gelu_and_mul",)),
             ("SiluAndMul", ("silu_and_mul",)), ("GemmaRMSNorm", ("rms_norm",))]
    handed = []

    def register(host, mine):
        handed.append((host, mine))
        return install_common.where(host, "note" if host == "GemmaRMSNorm" else "")

    entered = install_common.enter(chosen, ops, hosts, register)
    assert handed == [("RMSNorm", {"rms_norm": "op-rms"}), ("SiluAndMul", {"silu_and_mul": "op-silu"}),
                      ("GemmaRMSNorm", {"rms_norm": "op-rms"})]  # GeluAndMul hosts nothing chosen
    assert entered == {"rms_norm": ["RMSNorm", "GemmaRMSNorm (note)"], "silu_and_mul": ["SiluAndMul"]}


def test_a_chosen_slot_no_host_takes_enters_nothing():
    assert install_common.enter({"rotary_embedding": ("p", None)}, {"rotary_embedding": "op"},
                                [("RMSNorm", ("rms_norm",))], lambda host, mine: host) == {"rotary_embedding": []}


def test_drift_is_logged_and_returned(caplog):
    class InTree:
        def forward(self, y, x):
            pass

    params = calls.Params(("x", "y"), 2)
    with caplog.at_level(logging.WARNING, logger="t"):
        drift, note = install_common.checked_drift(params, InTree, ("forward",), logging.getLogger("t"))
    assert drift.startswith("in-tree InTree.forward(y, x) is not the (x, y)") and note == ""
    assert caplog.messages == [f"fk-adapters: {drift}"]


def test_only_a_kernel_that_is_the_engines_own_native_counts_as_engine_own(monkeypatch):
    from fk_adapters.engines.loading import engine_own
    from fk_adapters.kernel import Kernel

    def native(x):
        return x

    natives = {"rms_norm": native}
    own = Kernel(slot="rms_norm", factory=lambda n: n, name="engine:rms_norm", devices=("cpu",))
    wrapped = Kernel(slot="rms_norm", factory=lambda n: (lambda x: n(x)), name="mine", devices=("cpu",))
    fn = Kernel(slot="rms_norm", fn=native, name="same_function_given", devices=("cpu",))
    assert engine_own(own, natives, "rms_norm")
    assert not engine_own(wrapped, natives, "rms_norm") and not engine_own(fn, natives, "rms_norm")
    assert not engine_own(own, {}, "rms_norm")
    monkeypatch.setenv("FK_CAPTURE", "1")  # the recorder's op must see every call
    assert not engine_own(own, natives, "rms_norm")


def test_the_engines_own_kernels_are_marked_for_the_load_record(monkeypatch):
    from fk_adapters.engines import loading
    from fk_adapters.kernel import Kernel

    def native(x):
        return x

    monkeypatch.setattr(loading, "ENGINE_OWN", {})
    chosen = {"rms_norm": ("pass", Kernel(slot="rms_norm", factory=lambda n: n, name="engine:rms_norm",
                                          devices=("cpu",))),
              "silu_and_mul": ("mine", Kernel(slot="silu_and_mul", fn=native, name="mine", devices=("cpu",)))}
    own = install_common.engine_own_ops(chosen, {"rms_norm": native, "silu_and_mul": native})
    assert own == {"rms_norm": "pass:rms_norm"} and loading.ENGINE_OWN == own


def test_a_kernel_that_runs_the_engines_op_inside_is_counted_per_call():
    """A factory's kernel that only wraps the native it was given (or falls back to it) is seen (audit, s53)."""
    import torch

    from fk_adapters import evidence, probe
    from fk_adapters.kernel import Kernel
    from fk_adapters.tasks import SLOTS

    def native(x, w, eps):
        return SLOTS["rms_norm"].reference(x, w, eps)

    def fallback(n):
        return lambda x, w, eps: n(x, w, eps) if x.shape[0] > 2 else SLOTS["rms_norm"].reference(x, w, eps)

    chosen = {"rms_norm": ("audit_wrap", Kernel(slot="rms_norm", factory=lambda n: (lambda *a: n(*a)), name="w",
                                                devices=("cpu",)))}
    op = install_common.wrap_chosen(chosen, {"rms_norm": native})["rms_norm"]
    probe.reset_calls()
    x, w = torch.randn(4, 8), torch.ones(8)
    op(x, w, 1e-6), op(x, w, 1e-6)
    assert probe.native_inside["audit_wrap:rms_norm"] == 2 and probe.calls["audit_wrap:rms_norm"] == 2
    load = {"pid": 1, "installed": {"rms_norm": {"plugin": "audit_wrap", "kernel": "w", "entered": ["RMSNorm"]}},
            "plugins": [{"name": "audit_wrap", "kernels": [{"slot": "rms_norm", "kernel_names": []}]}]}
    res = {"probe": [dict(probe.snapshot(), constructed={"rms_norm": 1})], "profile": None}
    ev = evidence.judge(res, [load], "eager")["slots"]["rms_norm"]
    assert ev["engine_own"] is True and ev["proof"].startswith("the engine's own op ran inside every call")

    part = install_common.wrap_chosen({"rms_norm": ("audit_fallback", Kernel(
        slot="rms_norm", factory=fallback, name="f", devices=("cpu",)))}, {"rms_norm": native})["rms_norm"]
    part(x, w, 1e-6), part(x[:2], w, 1e-6)
    assert probe.native_inside["audit_fallback:rms_norm"] == 1 and probe.calls["audit_fallback:rms_norm"] == 2
    load["installed"]["rms_norm"]["plugin"] = load["plugins"][0]["name"] = "audit_fallback"
    res = {"probe": [dict(probe.snapshot(), constructed={"rms_norm": 1})], "profile": None}
    ev = evidence.judge(res, [load], "eager")["slots"]["rms_norm"]
    assert "engine_own" not in ev
    assert ev["proof"].endswith("1 of its 2 calls ran the engine's own op inside (a fallback)")


def test_an_earlier_install_in_the_process_marks_nothing_of_this_one(monkeypatch, tmp_path):
    """ENGINE_OWN is one install's: a slot another host marked before must not mark this plugin's (CI, s53)."""
    from fk_adapters.engines import loading
    from fk_adapters.kernel import Kernel
    from fk_adapters.plugins import LoadedPlugin

    def native(x):
        return x

    mine = Kernel(slot="rms_norm", fn=native, name="mine", devices=("cpu",))
    monkeypatch.setenv("FK_RUN_DIR", str(tmp_path))
    monkeypatch.setattr("fk_adapters.plugins.load_plugins", lambda *a, **k: [LoadedPlugin(name="p", kernels=[mine])])
    monkeypatch.setattr(loading, "ENGINE_OWN", {"rms_norm": "p:rms_norm"})  # left by an earlier install
    detail = loading.load_and_install("vllm", "cpu", lambda chosen: {s: ["RMSNorm"] for s in chosen}, {})
    assert detail["installed"]["rms_norm"] == {"plugin": "p", "kernel": "mine", "entered": ["RMSNorm"]}

    def own_install(chosen):
        install_common.engine_own_ops({"rms_norm": ("p", Kernel(slot="rms_norm", factory=lambda n: n, name="own",
                                                                 devices=("cpu",)))}, {"rms_norm": native})
        return {s: ["RMSNorm"] for s in chosen}

    assert loading.load_and_install("vllm", "cpu", own_install, {})["installed"]["rms_norm"]["engine_own"] is True
