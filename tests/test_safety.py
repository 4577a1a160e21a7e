import pytest

from fk_adapters import Kernel, safety


def k(**flags):
    return Kernel(slot="rms_norm", fn=print, **flags)


def test_refusals_follow_declared_capabilities():
    kernels = {"rms_norm": ("p", k(compile_safe=True, cuda_graph_safe=False))}
    assert safety.refusals(kernels, compiled=False, cuda_graphs=False) == []
    assert safety.refusals(kernels, compiled=True, cuda_graphs=False) == []
    (why,) = safety.refusals(kernels, compiled=True, cuda_graphs=True)
    assert "cuda_graph_safe" in why
    eager_only = {"rms_norm": ("p", k())}
    assert len(safety.refusals(eager_only, compiled=True, cuda_graphs=True)) == 2
    with pytest.raises(safety.UnsafeKernelError, match="eager mode"):
        safety.check(eager_only, compiled=True, cuda_graphs=False)


def test_fk_run_refuses_unsafe_kernel_before_starting_an_engine(make_plugin, capsys):
    from fk_adapters.cli.main import main

    make_plugin("eageronly", """
        from fk_adapters import Kernel, hookimpl

        @hookimpl
        def fk_kernels(engine, device):
            return [Kernel(slot="rms_norm", fn=print, devices=("cpu", "cuda"))]
    """)
    assert main(["run", "--plugins", "eageronly", "--scenario", "tiny-llama", "--device", "cuda",
                 "--mode", "compiled"]) == 2
    assert "not declared compile_safe" in capsys.readouterr().err
    make_plugin("gpuonly", """
        from fk_adapters import Kernel, hookimpl

        @hookimpl
        def fk_kernels(engine, device):
            return [Kernel(slot="rms_norm", fn=print, devices=("cuda",))]
    """)
    assert main(["run", "--plugins", "gpuonly", "--scenario", "tiny-llama", "--device", "cpu"]) == 2
    assert "offer no kernel for vllm on cpu" in capsys.readouterr().err
