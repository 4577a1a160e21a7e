import pytest

from fk_adapters import Kernel
from fk_adapters.kernel import KernelSpecError
from fk_adapters.tasks import SLOTS


def f(x):
    return x


def test_valid_kernel_passes_and_describes_itself():
    k = Kernel(slot="silu_and_mul", fn=f, cuda_graph_safe=True, kernel_names=("my_kernel",))
    k.validate(SLOTS)
    d = k.describe()
    assert d["slot"] == "silu_and_mul" and d["name"] == "f" and d["cuda_graph_safe"] and d["kind"] == "fn"


@pytest.mark.parametrize("kwargs, message", [
    ({"slot": "no_such_slot", "fn": f}, "unknown slot"),
    ({"slot": "rms_norm"}, "exactly one of fn= or factory="),
    ({"slot": "rms_norm", "fn": f, "factory": f}, "exactly one of fn= or factory="),
    ({"slot": "rms_norm", "fn": f, "engines": ("trt",)}, "unknown engines"),
    ({"slot": "rms_norm", "fn": f, "dtypes": ("float8",)}, "unknown dtypes"),
    ({"slot": "rms_norm", "fn": f, "devices": "cuda"}, "non-empty tuple"),
    ({"slot": "rms_norm", "fn": f, "devices": ()}, "non-empty tuple"),
])
def test_contract_violations_are_refused(kwargs, message):
    with pytest.raises(KernelSpecError, match=message):
        Kernel(**kwargs).validate(SLOTS)


def two_args(x, weight):
    return x


def takes_native_and_more(native, extra):
    return native


@pytest.mark.parametrize("kwargs, message", [
    ({"slot": "rms_norm", "fn": two_args},
     r"kernel for 'rms_norm': fn two_args cannot be called as rms_norm\(x: .*\(\(x, weight\): too many positional"),
    ({"slot": "rms_norm", "factory": takes_native_and_more},
     r"kernel for 'rms_norm': factory takes_native_and_more cannot take the engine's own kernel .*missing a required"),
    ({"slot": "rms_norm", "fn": 42}, r"kernel for 'rms_norm': fn int cannot be called .*\(int is not callable\)"),
])
def test_a_callable_that_cannot_take_its_slots_arguments_is_refused(kwargs, message):
    with pytest.raises(KernelSpecError, match=message):
        Kernel(**kwargs).validate(SLOTS)


@pytest.mark.parametrize("kwargs", [
    {"slot": "rms_norm", "fn": lambda x, weight, eps: x},
    {"slot": "rms_norm", "fn": lambda *args: None},
    {"slot": "rms_norm", "fn": lambda x, weight, eps, extra=None: x},
    {"slot": "rms_norm", "fn": print},  # a builtin: no signature to read, nothing refused
    {"slot": "rms_norm", "factory": lambda native: native},
])
def test_a_callable_that_takes_its_slots_arguments_passes(kwargs):
    Kernel(**kwargs).validate(SLOTS)
