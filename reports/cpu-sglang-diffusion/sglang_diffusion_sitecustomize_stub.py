"""A stand-in torchvision for importing SGLang's pure-Python modules on a CPU-only torch (no CPU torchvision
wheel here). Every attribute is a placeholder; nothing on the traced path calls torchvision except
DiffusersExecutionStage._convert_to_tensor for PIL outputs (not fk's latent path)."""
import sys, types, importlib.machinery

class _Meta(type):
    def __getattr__(cls, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return _Placeholder

class _Placeholder(metaclass=_Meta):
    def __init__(self, *a, **k):
        pass
    def __call__(self, *a, **k):
        raise RuntimeError("torchvision stand-in called")

def _mod(name):
    m = types.ModuleType(name)
    m.__spec__ = importlib.machinery.ModuleSpec(name, None, is_package=True)
    m.__path__ = []
    m.__version__ = "0.0+stub"
    def __getattr__(attr, _n=name):
        if attr.startswith("__"):
            raise AttributeError(attr)
        return _Placeholder
    m.__getattr__ = __getattr__
    return m

STUBBED = {"torchvision", "IPython"}


class _Finder:
    def find_spec(self, fullname, path=None, target=None):
        if fullname.split(".")[0] in STUBBED:
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None
    def create_module(self, spec):
        return _mod(spec.name)
    def exec_module(self, module):
        pass

sys.meta_path.insert(0, _Finder())
