"""GPU kernel names sorted into op families, and each family's share of device time.

The families name what a slot would have to cover: those in ``SLOT_FAMILIES`` are the catalog's (``SLOT_FAMILIES``),
the rest are where the catalog could grow. A kernel is put in the first family whose pattern
its name matches (case-insensitive), so the more specific patterns come first.
"""
from __future__ import annotations

import bisect
import re
from collections.abc import Iterable

FAMILIES: list[tuple[str, str]] = [
    # tensor parallelism's collectives: NCCL's, vLLM's / SGLang's custom all-reduce (cross_device_reduce_*)
    ("all-reduce", r"all_?reduce|cross_device_reduce|custom_ar_|quick_?reduce"),
    ("collectives (other)", r"nccl|all_?gather|reduce_?scatter|all_?to_?all"),
    ("rms_norm", r"rms_?norm"),
    ("layer_norm", r"layer_?norm|layernorm|group_?norm|ln_fwd"),
    ("batch norm", r"batch_?norm"),  # the vision models' (no slot): before the families its template arguments match
    ("rotary", r"rotary|rope"),
    # routing (top-k, grouped top-k, the fused gate) stays the engine's: its own family, outside the fused_moe slot
    ("moe routing", r"topk_?gating|topk_?softmax|moe_?fused_?gate|grouped_?topk|router"),
    ("moe", r"moe|expert|grouped_?gemm|matmul_ogs"),  # ogs: triton_kernels' MoE matmul
    # the linear-attention / SSM slots cover the recurrence: the mixers' conv1d and gating stay the engine's
    ("ssm conv / gating", r"causal_conv|gdn_gating|post_conv_prep|kda_gate"),
    ("ssm / linear attention", r"mamba|ssd_|selective|_scan|gated_delta|chunk_gla|kda|linear_attn|fla_|gdn|"
                               r"ssm_update|chunk_state|state_passing|bmm_chunk|chunk_cumsum|chunk_fwd_kernel_o|"
                               r"recompute_w_u|chunk_local_cumsum|solve_tril|scaled_dot_kkt|fused_recurrent"),
    # the paged_attention slot covers the attention kernel itself: the cache writes and MLA stay the engine's
    ("kv cache write", r"reshape_and_cache|concat_and_cache|store_?kv|set_kv_buffer"),
    ("mla attention", r"mla"),
    ("attention", r"flash|fmha|attn|attention|paged|sdpa|merge_state"),
    ("activation", r"silu|gelu|swiglu|geglu|act_and_mul|relu|sigmoid|tanh"),
    ("conv", r"conv|winograd|implicit_gemm|cudnn"),
    ("gemm", r"gemm|gemv|matmul|cublas|cutlass|nvjet|xmma|wgmma|splitk|sgemm|hgemm|sm\d\d_"),
    ("softmax / sampling", r"softmax|sampl|argmax|top_?k|top_?p|multinomial|logit"),
    ("embedding / gather", r"embedding|index|gather|scatter"),
    ("reduce", r"reduce|_sum|_mean|norm_kernel"),
    ("copy / elementwise", r"copy|memcpy|memset|fill|elementwise|vectorized|unrolled|cat_|transpose|cast"),
]
# gated_rms_norm in both norm families: vLLM's one-group Mamba2 norm is FLA's Triton layer-norm kernel
SLOT_FAMILIES = {"rms_norm": ("rms_norm", "fused_add_rms_norm", "gated_rms_norm"),
                 "layer_norm": ("layer_norm", "gated_rms_norm"), "conv": ("conv2d",),
                 "activation": ("silu_and_mul", "gelu_and_mul"),
                 "rotary": ("rotary_embedding",), "gemm": ("gemm",), "moe": ("fused_moe",),
                 "attention": ("paged_attention", "sdpa"), "all-reduce": ("all_reduce",),
                 "ssm / linear attention": ("gated_delta_rule", "gated_delta_rule_decode", "ssd_chunk_scan",
                                            "ssm_state_update")}
OTHER = "other"
HOST_KEEP = 40  # host-side names kept per profile (``host_time``), most self time first
SLOT_SCOPE = "fk.slot:"  # the profiler range fk capture opens around each slot call (``ops.wrap``)
# how a capture's "slot_us" was measured; older captures summed host ranges' device totals, which can count a span twice
SLOT_US_FROM = "kernels inside device spans"
_COMPILED = [(name, re.compile(pattern, re.IGNORECASE)) for name, pattern in FAMILIES]


def family(kernel_name: str) -> str:
    for name, pattern in _COMPILED:
        if pattern.search(kernel_name):
            return name
    return OTHER


def shares(kernel_us: dict[str, float]) -> dict[str, float]:
    """{family: share of the summed device time}, largest first."""
    total = sum(kernel_us.values())
    if total <= 0:
        return {}
    out: dict[str, float] = {}
    for name, us in kernel_us.items():
        fam = family(name)
        out[fam] = out.get(fam, 0.0) + us / total
    return dict(sorted(out.items(), key=lambda kv: -kv[1]))


def tally(kernel_events: Iterable[tuple[str, float]]) -> tuple[dict[str, int], dict[str, float]]:
    """({kernel name: launches}, {kernel name: device microseconds}) of (name, microseconds) events."""
    kernels: dict[str, int] = {}
    kernel_us: dict[str, float] = {}
    for name, us in kernel_events:
        kernels[name] = kernels.get(name, 0) + 1
        kernel_us[name] = kernel_us.get(name, 0.0) + us
    return kernels, kernel_us


def kernel_profile(prof) -> dict:
    """{"kernels": launches, "kernel_us": device microseconds, per CUDA kernel name, ``span_busy``'s keys,
    ``host_time``'s, and "slot_us" where fk's capture marked its slot calls} of a stopped ``torch.profiler.profile``.
    A ``record_function`` range shows on the device too, as a span over its kernels: not a kernel, left out."""
    events = prof.events()
    ranges = [(evt.name, evt.time_range.start, evt.time_range.end) for evt in events
              if _on_device(evt) and not getattr(evt, "is_user_annotation", False)]
    kernels, kernel_us = tally((name, end - start) for name, start, end in ranges)
    slots = slot_us(events)
    host = host_time((getattr(evt, "thread", 0), evt.time_range.start, evt.time_range.end, evt.name)
                     for evt in events if not _on_device(evt))
    return {"kernels": kernels, "kernel_us": kernel_us, **span_busy((start, end, name) for name, start, end in ranges),
            **host, **({"slot_us": slots} if slots else {})}


def host_time(ranges: Iterable[tuple]) -> dict:
    """{"host_calls": calls, "host_us": self microseconds} per name of the profiler's host-side ranges (thread, start,
    end, name): torch ops, CUDA runtime calls (``cudaLaunchKernel``, ``cudaGraphLaunch``) and ``record_function``
    ranges, each range's time less that of the ranges nested in it on its thread; the ``HOST_KEEP`` names of most self
    time ({} without ranges). Python between ops is in no range unless a range encloses it: not seen here."""
    by_thread: dict = {}
    for thread, lo, hi, name in ranges:
        by_thread.setdefault(thread, []).append((float(lo), -float(hi), name))  # an enclosing range first on a tie
    calls: dict[str, int] = {}
    self_us: dict[str, float] = {}

    def close(entry, parent):
        hi, lo, name, nested = entry
        calls[name] = calls.get(name, 0) + 1
        self_us[name] = self_us.get(name, 0.0) + max(0.0, hi - lo - nested)
        if parent is not None:
            parent[3] += hi - lo

    for spans in by_thread.values():
        stack: list[list] = []  # [end, start, name, µs of the ranges nested in it]
        for lo, neg_hi, name in sorted(spans):
            while stack and stack[-1][0] <= lo:
                close(stack.pop(), stack[-1] if stack else None)
            stack.append([max(-neg_hi, lo), lo, name, 0.0])
        while stack:
            close(stack.pop(), stack[-1] if stack else None)
    keep = sorted(self_us, key=lambda n: (-self_us[n], n))[:HOST_KEEP]
    if not keep:
        return {}
    return {"host_calls": {n: calls[n] for n in keep}, "host_us": {n: round(self_us[n], 1) for n in keep},
            "host_cut": len(self_us) > len(keep)}  # True: names of less self time were left out


def trace_host_time(events: list[dict]) -> dict:
    """``host_time`` from a Chrome trace's events (SGLang's profiler): its torch ops, CUDA runtime / driver calls and
    ``record_function`` ranges."""
    cats = ("cpu_op", "cuda_runtime", "cuda_driver", "user_annotation")
    return host_time(((e.get("pid"), e.get("tid")), float(e["ts"]), float(e["ts"]) + float(e.get("dur", 0.0)),
                      e["name"]) for e in events if e.get("ph") == "X" and e.get("cat") in cats and "ts" in e)


def _on_device(evt) -> bool:
    return str(getattr(evt, "device_type", "")).endswith("CUDA")


def slot_us(events) -> dict[str, float]:
    """{slot: device microseconds of the kernels inside its calls} from a torch profiler's events: the device-side
    spans of the ranges fk's capture opens around each slot call (``SLOT_SCOPE`` + slot name), as ``credit_slots``."""
    spans, kernels = [], []
    for evt in events:
        if not _on_device(evt):
            continue
        stream = (getattr(evt, "device_index", 0), getattr(evt, "device_resource_id", 0))
        lo, hi = float(evt.time_range.start), float(evt.time_range.end)
        if getattr(evt, "is_user_annotation", False):
            if evt.name.startswith(SLOT_SCOPE):
                spans.append((stream, lo, hi, evt.name[len(SLOT_SCOPE):]))
        else:
            kernels.append((stream, lo, hi - lo))
    return credit_slots(spans, kernels)


def trace_slot_us(events: list[dict]) -> dict[str, float]:
    """``slot_us`` from a Chrome trace's events (SGLang's profiler, which must record CPU activity too: the device
    span of a range comes from its host-side range)."""
    spans = [((e.get("pid"), e.get("tid")), float(e["ts"]), float(e["ts"]) + float(e.get("dur", 0.0)),
              e["name"][len(SLOT_SCOPE):]) for e in events
             if e.get("cat") == "gpu_user_annotation" and str(e.get("name", "")).startswith(SLOT_SCOPE) and "ts" in e]
    kernels = [((k.get("pid"), k.get("tid")), float(k["ts"]), float(k.get("dur", 0.0))) for k in events
               if k.get("cat") == "kernel" and "ts" in k]
    return credit_slots(spans, kernels)


def _outermost(spans: list[tuple[float, float, str]]) -> list[tuple[float, float, str]]:
    """Sorted spans without those inside an earlier one (a slot call nested in another counts for the outer)."""
    out: list[tuple[float, float, str]] = []
    for span in spans:
        if not out or span[0] >= out[-1][1]:
            out.append(span)
    return out


def credit_slots(spans: Iterable[tuple], kernels: Iterable[tuple]) -> dict[str, float]:
    """{slot: microseconds}: each kernel (stream, start, duration) inside the outermost slot span (stream, start,
    end, slot) on its own stream counts once, for that slot (eager: a stream runs one range's kernels at a time), so
    the sum never exceeds the kernels' own time."""
    by_stream: dict[tuple, list[tuple[float, float, str]]] = {}
    for stream, lo, hi, slot in spans:
        by_stream.setdefault(stream, []).append((lo, hi, slot))
    by_stream = {stream: _outermost(sorted(s)) for stream, s in by_stream.items()}
    starts = {stream: [lo for lo, _, _ in s] for stream, s in by_stream.items()}
    out: dict[str, float] = {}
    for stream, start, dur in kernels:
        if stream not in by_stream:
            continue
        i = bisect.bisect_right(starts[stream], start) - 1  # the last span on this stream starting at or before it
        if i >= 0 and start + dur <= by_stream[stream][i][1]:
            slot = by_stream[stream][i][2]
            out[slot] = out.get(slot, 0.0) + dur
    return out


def span_busy(intervals: Iterable[tuple]) -> dict:
    """{"span_us": first kernel start to last kernel end, "busy_us": the union of the kernels' time ranges}, in
    microseconds ({} without kernels). Their difference is the time the device waited on the host within the step
    (launches, Python, synchronisations): no kernel's device time shows it. Intervals (start, end, kernel name) add
    "wait_us": {kernel name: the device's idle time just before its launches}, which sums to that difference: the
    host work the device waited on before it could run that kernel."""
    spans = sorted(intervals, key=lambda iv: (iv[0], iv[1]))
    if not spans:
        return {}
    named = len(spans[0]) > 2
    waits: dict[str, float] = {}
    busy, lo, hi = 0.0, spans[0][0], spans[0][1]
    for iv in spans[1:]:
        if iv[0] > hi:
            busy += hi - lo
            if named:
                waits[iv[2]] = waits.get(iv[2], 0.0) + iv[0] - hi
            lo, hi = iv[0], iv[1]
        else:
            hi = max(hi, iv[1])
    busy += hi - lo
    out = {"span_us": round(max(iv[1] for iv in spans) - spans[0][0], 1), "busy_us": round(busy, 1)}
    return {**out, "wait_us": {k: round(v, 1) for k, v in waits.items()}} if named else out


def merge_kernel_us(profiles: list[dict] | None, key: str = "kernel_us") -> dict[str, float]:
    """Device microseconds per kernel name (``key="slot_us"``: per slot), summed over the per-process profiles of a
    run."""
    out: dict[str, float] = {}
    for prof in profiles or []:
        for name, us in (prof.get(key) or {}).items():
            out[name] = out.get(name, 0.0) + us
    return out
