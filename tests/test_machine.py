"""What a run records of its machine: the tuning environment its engine processes inherit."""
from fk_adapters import machine
from fk_adapters.report import _header
from fk_adapters.results import RunResults


def test_tuning_variables_are_recorded_but_not_devices_or_places():
    env = {"TRITON_CACHE_AUTOTUNING": "1", "VLLM_ENABLE_FLA_PACKED_RECURRENT_DECODE": "0", "CUDA_VISIBLE_DEVICES": "1",
           "TRITON_CACHE_DIR": "/tmp/t", "VLLM_CACHE_ROOT": "/tmp/v", "HOME": "/root", "PATH": "/bin"}
    assert machine.tuning_env(env) == {"TRITON_CACHE_AUTOTUNING": "1", "VLLM_ENABLE_FLA_PACKED_RECURRENT_DECODE": "0"}


def test_the_report_header_names_the_tuning_environment():
    run = RunResults(engine="vllm", candidate="triton", tuning_env={"TRITON_CACHE_AUTOTUNING": "1"})
    assert "- tuning environment (both sides' engine processes): `TRITON_CACHE_AUTOTUNING=1`" in _header(run)
    assert not any("tuning environment" in line for line in _header(RunResults(engine="vllm")))
