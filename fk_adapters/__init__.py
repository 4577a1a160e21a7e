"""fk-adapters: prove GPU kernels inside real, unmodified inference engines."""
import sys
from importlib.util import spec_from_file_location
from pathlib import Path

from fk_adapters.kernel import Kernel

__version__ = "0.1.0"
__all__ = ["Kernel", "hookimpl", "__version__"]


def __getattr__(name):
    """``hookimpl`` on first use: it needs pluggy, which ``fk --help`` in an uninstalled checkout does without."""
    if name == "hookimpl":
        from fk_adapters.hookspec import hookimpl

        return hookimpl
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

# Subpackages kept at the checkout's top level; pyproject.toml's package-dir installs them under fk_adapters.
_CHECKOUT_SUBPACKAGES = {"fk_adapters.tasks": "tasks", "fk_adapters.scenario_files": "scenarios"}


class _CheckoutFinder:
    """Import finder for _CHECKOUT_SUBPACKAGES from the top-level folders of one source checkout."""

    def __init__(self, root: Path):
        self.root = root

    def find_spec(self, fullname, path=None, target=None):
        folder = _CHECKOUT_SUBPACKAGES.get(fullname)
        if folder is None:
            return None
        where = self.root / folder
        return spec_from_file_location(fullname, where / "__init__.py", submodule_search_locations=[str(where)])


def _serve_checkout_subpackages() -> None:
    """Make ``python -m fk_adapters...`` work from a checkout's root, where tasks/ and scenarios/ sit beside us.

    An installed copy has them inside this folder and is left alone. The finder goes first so that the
    subpackages come from the same tree as this package even where another checkout is installed editable.
    """
    here = Path(__file__).resolve().parent
    if (here / "tasks").is_dir():
        return
    root = here.parent
    if all((root / folder / "__init__.py").is_file() for folder in _CHECKOUT_SUBPACKAGES.values()):
        sys.meta_path.insert(0, _CheckoutFinder(root))


_serve_checkout_subpackages()
