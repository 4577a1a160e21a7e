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
