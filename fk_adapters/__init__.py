"""fk-adapters: prove GPU kernels inside real, unmodified inference engines."""
from fk_adapters.hookspec import hookimpl
from fk_adapters.kernel import Kernel

__version__ = "0.1.0"
__all__ = ["Kernel", "hookimpl", "__version__"]
