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
