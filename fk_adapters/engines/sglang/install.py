"""Register AROUND hooks for the selected kernels through SGLang's HookRegistry.

Runs inside ``load_plugins()`` (before the model is built); SGLang applies the hooks
right after every plugin has run. Imports sglang only inside functions.
"""
from __future__ import annotations

import logging
import pkgutil

from fk_adapters.engines import install_common
from fk_adapters.engines.sglang import linear_attention, targets
from fk_adapters.engines.sglang.natives import NATIVES
from fk_adapters.kernel import Kernel

log = logging.getLogger("fk_adapters.sglang")


def engine_modes() -> tuple[bool, bool]:
    """(compiled, cuda_graphs) from the published server args; (True, True) while unknown.

    ``forward_cuda`` is traced by torch.compile only under the ``tc_piecewise`` graph backend
    (``--enable-torch-compile`` switches ops to ``forward_native``, away from the hooks).
    """
    from sglang.srt.server_args import get_global_server_args

    try:
        sa = get_global_server_args()
    except ValueError:
        return True, True
    cfg = getattr(sa, "cuda_graph_config", None)
    if cfg is None:
        return True, not sa.disable_cuda_graph
    backends = {cfg.decode.backend, cfg.prefill.backend}
    graphs = not sa.disable_cuda_graph and backends != {"disabled"}
    return "tc_piecewise" in backends, graphs


def _capturing() -> bool:
    import torch

    return torch.cuda.is_available() and torch.cuda.is_current_stream_capturing()


def _batch_invariant() -> bool:
    from sglang.srt.batch_invariant_ops import is_batch_invariant_mode_enabled

    return is_batch_invariant_mode_enabled()


def install(chosen: dict[str, tuple[str, Kernel]], where: tuple[targets.Target, ...] = targets.TARGETS
            ) -> dict[str, list[str]]:
    """Register one AROUND hook per hooked method of ``where`` (SGLang's SRT targets unless given: the diffusion
    runtime's are ``diffusion_targets.TARGETS``), and one on its ``__init__`` to count layers.

    Where the installed method's signature is not the one its adapter was written for, every call and
    layer stays stock (counted, with why); parameters the adapter does not know are noted on the path
    entered (calls passing them stay stock). Returns {slot: [hooked method paths]}.
    """
    from sglang.srt.plugins import hook_registry

    try:
        import sglang.srt.batch_invariant_ops  # noqa: F401

        targets.Runtime.batch_invariant = staticmethod(_batch_invariant)
    except ImportError:
        pass
    _point_runtime()
    linear_attention.point_runtime()
    guard = targets.ModeGuard(chosen, engine_modes, _capturing)
    wrapped = {s: guard.wrap(s, op) for s, op in install_common.wrap_chosen(chosen, NATIVES).items()}
    install_common.engine_own_ops(chosen, NATIVES)
    counters: dict[str, list] = {}  # constructor path -> the layer counters of the targets counting there
    return install_common.enter(chosen, wrapped, ((t, t.slots) for t in where),
                                lambda t, mine: _register(hook_registry, t, mine, counters))


def _linear_backend_why() -> str:
    from sglang.srt.layers.quantization import unquant

    if getattr(unquant, "_use_aiter", False):
        return "aiter GEMM (ROCm)"
    try:
        from sglang.srt.layers.quantization.unquant import get_bf16_gemm_backend

        return "bf16 GEMM backend cutedsl" if get_bf16_gemm_backend().is_cutedsl() else ""
    except (ImportError, AttributeError, ValueError):  # older SGLang, or server args not published yet
        return ""


def _lm_head_why() -> str:
    from sglang.srt.server_args import get_global_server_args

    try:
        return "rl_on_policy_target" if get_global_server_args().rl_on_policy_target is not None else ""
    except ValueError:  # not published: not a server
        return ""


def _attention_backend_why() -> str:
    """"" when SGLang runs fa3 (FlashAttentionBackend, whose forward is hooked) for prefill or decode."""
    from sglang.srt.server_args import get_global_server_args

    try:
        sa = get_global_server_args()
    except ValueError:  # not published yet: the per-call checks still apply
        return ""
    chosen = {sa.prefill_attention_backend or sa.attention_backend, sa.decode_attention_backend or sa.attention_backend}
    return "" if "fa3" in chosen else f"attention backend {'/'.join(sorted(map(str, chosen)))} (fk hooks fa3)"


def _point_runtime() -> None:
    try:
        from sglang.srt.layers.moe.token_dispatcher.standard import StandardCombineInput
    except ImportError as exc:
        log.warning("fk-adapters: SGLang's StandardCombineInput is not where fk expects it: %s", exc)
        return
    targets.Runtime.combine = staticmethod(StandardCombineInput)
    targets.Runtime.attention_backend_why = staticmethod(_attention_backend_why)
    try:
        from sglang.srt.mem_cache.memory_pool import KVWriteLoc

        targets.Runtime.kv_write_loc = staticmethod(KVWriteLoc)
    except ImportError as exc:
        log.warning("fk-adapters: SGLang's KVWriteLoc is not where fk expects it: %s", exc)
    targets.Runtime.linear_backend_why = staticmethod(_linear_backend_why)
    targets.Runtime.lm_head_why = staticmethod(_lm_head_why)


def _register(hooks, t: targets.Target, mine: dict, counters: dict[str, list]) -> str:
    """One AROUND hook (``hooks``: SGLang's hook_registry) on the method ``t`` names and one on its ``__init__``
    (shared by the targets counting at the same constructor: ``counters``); the path entered, for the report."""
    around = hooks.HookType.AROUND
    drift, note = _drift(t)
    hooks.HookRegistry.register(t.path, targets.make_hook(t, mine, drift), around)
    if t.counts_layers:
        if t.init_path not in counters:
            counters[t.init_path] = []
            hooks.HookRegistry.register(t.init_path, targets.make_counting_hook(counters[t.init_path]), around)
        counters[t.init_path].append(targets.make_layer_counter(t, tuple(mine), _host(t.cls), drift))
    return install_common.where(t.path, note)


def _host(path: str):
    return lambda: pkgutil.resolve_name(path)


def _drift(t: targets.Target) -> tuple[str, str]:
    """The installed SGLang's signature of the hooked method against the one its adapter was written for:
    (why no call can route, ""; a note on parameters the adapter does not know, "")."""
    try:
        cls = pkgutil.resolve_name(t.cls)  # SGLang resolves it right after the plugins load, to apply the hooks
    except (ImportError, AttributeError) as exc:
        log.warning("fk-adapters: cannot read %s to check its signature: %s", t.cls, exc)
        return "", ""
    return install_common.checked_drift(t.params, cls, (t.method,), log)
