"""SGLang's own kernels in the slots' interfaces (``engines/sglang/natives.py``), on a stand-in ``sgl_kernel``."""
import sys
import types

import torch

from fk_adapters.engines.sglang import natives


def test_rms_norm_hands_the_kernel_2d_rows_and_gives_back_the_slots_shape(monkeypatch):
    """sgl_kernel's rmsnorm takes rows; a diffusers model's per-head q / k norms are 4-D ([B, S, heads, D])."""
    seen = []

    def rmsnorm(x, weight, eps):
        seen.append(x.dim())
        assert x.dim() == 2
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight

    monkeypatch.setitem(sys.modules, "sgl_kernel", types.SimpleNamespace(rmsnorm=rmsnorm))
    x, w = torch.randn(2, 3, 4, 8), torch.randn(8)
    out = natives.rms_norm(x, w, 1e-6)
    assert seen == [2] and out.shape == x.shape
    torch.testing.assert_close(out, x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w)
