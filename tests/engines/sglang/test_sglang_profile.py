"""SGLang's profiled step, without SGLang: what the driver asks SGLang's profiler for and what it reads back."""
import json
import os

import pytest

from fk_adapters import op_families, probe
from fk_adapters.engines.sglang import driver


class _ProfilingEngine:
    """``start_profile`` / ``stop_profile`` as SGLang's: a Chrome trace per rank; a device span of an fk slot range
    only where CPU activity was recorded (the span comes from the host-side range)."""

    def __init__(self):
        self.activities = None

    def start_profile(self, output_dir, activities, with_stack, record_shapes):
        self.out, self.activities = output_dir, activities

    def stop_profile(self):
        events = [{"cat": "kernel", "ph": "X", "name": "nvjet_tst", "ts": 10.0, "dur": 30.0, "pid": 0, "tid": 7},
                  {"cat": "kernel", "ph": "X", "name": "elementwise", "ts": 50.0, "dur": 10.0, "pid": 0, "tid": 7}]
        if "CPU" in self.activities:
            events.append({"cat": "gpu_user_annotation", "ph": "X", "name": op_families.SLOT_SCOPE + "gemm",
                           "ts": 10.0, "dur": 30.0, "pid": 0, "tid": 7})
        with open(os.path.join(self.out, "run-TP-0.trace.json"), "w") as f:
            json.dump({"traceEvents": events}, f)


@pytest.mark.parametrize("capturing", [True, False])
def test_a_capture_profiles_cpu_activity_too_and_reads_the_device_time_inside_slot_calls(capturing, tmp_path,
                                                                                          monkeypatch):
    monkeypatch.setenv(probe.ENV_CAPTURE, "1" if capturing else "0")
    d = driver.SGLangDriver()
    d.run_dir, d.engine = str(tmp_path), _ProfilingEngine()
    (got,) = d.profiled(lambda: None)
    assert d.engine.activities == (["CPU", "GPU"] if capturing else ["GPU"])
    assert got["rank"] == 0 and got["kernel_us"] == {"nvjet_tst": 30.0, "elementwise": 10.0}
    assert got.get("slot_us") == ({"gemm": 30.0} if capturing else None)
