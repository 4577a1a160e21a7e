from fk_adapters import probe


def test_merged_sums_one_counter_over_the_processes_snapshots():
    snaps = [{"pid": 1, "not_routed": {"rms_norm (X: why)": 2}, "calls": {"a:rms_norm": 5}},
             {"pid": 2, "not_routed": {"rms_norm (X: why)": 1, "silu_and_mul (Y: why)": 4}}]
    assert probe.merged(snaps, "not_routed") == {"rms_norm (X: why)": 3, "silu_and_mul (Y: why)": 4}
    assert probe.merged(snaps, "calls") == {"a:rms_norm": 5}
    assert probe.merged(None, "calls") == {}
