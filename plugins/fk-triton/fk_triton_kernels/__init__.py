"""Example fk-adapters plugin with Triton kernels; the hooks live in ``fk_triton_kernels.plugin``."""

__version__ = "0.1.0"
