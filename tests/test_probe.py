from fk_adapters import probe


def test_merged_sums_one_counter_over_the_processes_snapshots():
    snaps = [{"pid": 1, "not_routed": {"rms_norm (X: why)": 2}, "calls": {"a:rms_norm": 5}},
             {"pid": 2, "not_routed": {"rms_norm (X: why)": 1, "silu_and_mul (Y: why)": 4}}]
    assert probe.merged(snaps, "not_routed") == {"rms_norm (X: why)": 3, "silu_and_mul (Y: why)": 4}
    assert probe.merged(snaps, "calls") == {"a:rms_norm": 5}
    assert probe.merged(None, "calls") == {}


def test_a_layer_left_stock_is_counted_per_slot_apart_from_calls_left_stock():
    saved = dict(probe.not_routed), dict(probe.stock_layers), dict(probe.constructed)
    probe.not_routed.clear()
    probe.stock_layers.clear()
    try:
        probe.left_stock(("silu_and_mul", "gelu_and_mul"), "silu_and_mul/gelu_and_mul (M: why)")
        probe.left_stock(("silu_and_mul", "gelu_and_mul"), "silu_and_mul/gelu_and_mul (M: why)")
        probe.not_routed["rms_norm (call: dtype)"] += 3
        snap = probe.snapshot()
        assert snap["not_routed"] == {"silu_and_mul/gelu_and_mul (M: why)": 2, "rms_norm (call: dtype)": 3}
        assert snap["stock_layers"] == {"silu_and_mul": 2, "gelu_and_mul": 2}
        constructed = probe.constructed["rms_norm"]
        probe.layer_built(("rms_norm",))
        probe.layer_built(("rms_norm",), "variance_size_override")
        assert probe.constructed["rms_norm"] == constructed + 1
        assert probe.not_routed["rms_norm (variance_size_override)"] == 1 and probe.stock_layers["rms_norm"] == 1
    finally:
        probe.not_routed.clear()
        probe.stock_layers.clear()
        probe.not_routed.update(saved[0])
        probe.stock_layers.update(saved[1])
        probe.constructed.clear()
        probe.constructed.update(saved[2])


def test_a_call_left_stock_is_counted_per_slot_and_reason_and_says_when_it_was_counted_at_trace_time():
    saved, layers = dict(probe.not_routed), dict(probe.stock_layers)
    probe.not_routed.clear()
    try:
        probe.call_left_stock("rms_norm", "unknown argument 'quant_linear'")
        probe.call_left_stock("rms_norm", "unknown argument 'quant_linear'")
        probe.call_left_stock("rms_norm", "unknown argument 'quant_linear'", traced=True)
        assert probe.snapshot()["not_routed"] == {
            "rms_norm (call: unknown argument 'quant_linear')": 2,
            "rms_norm (call, counted once per compiled trace: unknown argument 'quant_linear')": 1}
        assert probe.stock_layers == layers  # calls, not layers
    finally:
        probe.not_routed.clear()
        probe.not_routed.update(saved)
