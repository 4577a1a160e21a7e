"""What a check predicts for a whole run: each checked slot's predicted speedup weighted by its share of the device
time the workload's capture profiled (``profile.slot_us`` over all its kernels' time); every other slot and kernel
taken as stock (1.000) and listed with its share, so a plugin that also replaces an unchecked slot is seen to be
mispredicted there."""
from __future__ import annotations

from fk_adapters.results.status import CheckStatus


def shares(workload: dict) -> dict[str, float]:
    """{slot: its share of the captured device time}; {} for a capture without a profile."""
    prof = workload.get("profile") or {}
    total = sum((prof.get("kernel_us") or {}).values())
    return {s: us / total for s, us in (prof.get("slot_us") or {}).items()} if total else {}


def run_predictions(slots: list[dict], workloads: list[dict]) -> list[dict]:
    """Per (workload, plugin): the predicted speedup of a run (stock time / candidate time), the share of the device
    time it weighed, and the shares taken as stock; None as the speedup where a checked slot did not pass."""
    out = []
    for wl in workloads:
        share, name = shares(wl), wl.get("scenario", "?")
        for plugin in dict.fromkeys(e["plugin"] for e in slots if e["workload"] == name) if share else ():
            out.append({"workload": name, "plugin": plugin, **_predict(
                [e for e in slots if e["workload"] == name and e["plugin"] == plugin
                 and e["status"] != CheckStatus.NOT_OFFERED], share)})
    return out


def _predict(checked: list[dict], share: dict[str, float]) -> dict:
    failed = sorted(e["slot"] for e in checked if e["status"] != CheckStatus.PASSED or not e.get("predicted_speedup"))
    weighed = {e["slot"]: e["predicted_speedup"] for e in checked if e["slot"] not in failed and e["slot"] in share}
    time = sum(share[s] / r for s, r in weighed.items()) + 1.0 - sum(share[s] for s in weighed)
    return {"speedup": None if failed else 1.0 / time, "weighed": {s: round(share[s], 4) for s in weighed},
            "as_stock": {s: round(v, 4) for s, v in share.items() if s not in weighed},
            "rest_as_stock": round(1.0 - sum(share.values()), 4), "not_passed": failed}
