"""Where the device time went: the profiled step of each side (same requests, same steps), per op family, and the
kernels that ran on one side only (a replacement's own kernels; an engine fusion the replacement broke)."""
from __future__ import annotations

import statistics

from fk_adapters import kernel_names, op_families

TOP_KERNELS = 5
MOVERS = 8  # the kernels whose device time moved most, named with their share of the step's delta
STILL = 0.01  # a step whose time moved less than this fraction is not attributed: its delta is noise
PACE_CALLS, PACE_MIN_US, PACE_RANGES = 0.02, 1000.0, 5  # host_pace: the ranges it reads, and how many it needs


def _families(kernel_us: dict[str, float]) -> dict[str, float]:
    out: dict[str, float] = {}
    for name, us in kernel_us.items():
        fam = op_families.family(name)
        out[fam] = out.get(fam, 0.0) + us
    return out


def _top(kernel_us: dict[str, float], names: set[str]) -> list[dict]:
    ranked = sorted(names, key=lambda n: -kernel_us[n])
    return [{"kernel": n, "family": op_families.family(n), "us": round(kernel_us[n], 1)} for n in ranked[:TOP_KERNELS]]


def split(base_profile: list[dict] | None, cand_profile: list[dict] | None) -> dict | None:
    """Device microseconds per op family, baseline and candidate, each family's share of the step's delta, and the
    kernels only one side launched; None unless both sides were profiled on a GPU."""
    base, cand = op_families.merge_kernel_us(base_profile), op_families.merge_kernel_us(cand_profile)
    if not base or not cand:
        return None
    fb, fc = _families(base), _families(cand)
    tb, tc = sum(base.values()), sum(cand.values())
    delta = tc - tb
    slots = {fam: list(s) for fam, s in op_families.SLOT_FAMILIES.items()}
    rows = [{"family": fam, "slots": slots.get(fam, []), "baseline_us": round(fb.get(fam, 0.0), 1),
             "candidate_us": round(fc.get(fam, 0.0), 1), "delta_us": round(fc.get(fam, 0.0) - fb.get(fam, 0.0), 1),
             "share_of_delta": (fc.get(fam, 0.0) - fb.get(fam, 0.0)) / delta if delta else None}
            for fam in set(fb) | set(fc)]
    rows.sort(key=lambda r: -abs(r["delta_us"]))
    out = {"baseline_us": round(tb, 1), "candidate_us": round(tc, 1), "step_ratio": tb / tc if tc else None,
           "families": rows, "only_candidate": _top(cand, set(cand) - set(base)),
           "only_baseline": _top(base, set(base) - set(cand)),
           "baseline_idle_us": _idle(base_profile), "candidate_idle_us": _idle(cand_profile)}
    out["movers"] = _movers(base, cand, tb + (out["baseline_idle_us"] or 0.0), out["baseline_idle_us"],
                            out["candidate_idle_us"], (_waits(base_profile), _waits(cand_profile)))
    host = host_movers(base_profile, cand_profile)
    pace = host_pace(base_profile, cand_profile)
    return {**out, **({"host": host} if host else {}), **({"host_pace": pace} if pace else {})}


def own_variation(profiles: list[list[dict] | None]) -> list[str]:
    """The op families whose kernels (by name) differ between one side's own profiled processes, one profile a
    round: e.g. the gemm tiles cuBLAS picks per process. Kernels of such a family on one side only of a pair are the
    engine's choice as much as the plugin's."""
    sets = [set(op_families.merge_kernel_us(p)) for p in profiles if p]
    if len(sets) < 2:
        return []
    moved = set().union(*sets) - set.intersection(*sets)
    return sorted({op_families.family(name) for name in moved})


def _host_sides(base_profile, cand_profile) -> list[tuple[dict, dict, bool]] | None:
    """Each side's host self µs and calls per range name, merged over its processes, and whether a profile cut it."""
    if not base_profile or not cand_profile or not all(p.get("host_us") for p in base_profile + cand_profile):
        return None
    return [(op_families.merge_kernel_us(ps, "host_us"), op_families.merge_kernel_us(ps, "host_calls"),
             any(p.get("host_cut") for p in ps)) for ps in (base_profile, cand_profile)]


def host_pace(base_profile: list[dict] | None, cand_profile: list[dict] | None) -> dict | None:
    """How long the candidate's host took for the same work as the baseline's: the median, over the host ranges both
    sides ran as often (calls within ``PACE_CALLS``, at least ``PACE_MIN_US`` self time each: the engine's own
    scheduler and runner phases, torch ops, CUDA runtime calls), of candidate / baseline self time. Session 57 saw
    it 0.6-1.3 between engine processes of one H100 VM, alike over every such range: the processes' host speed,
    which a host-bound latency moves with whatever the kernels do. None under ``PACE_RANGES`` ranges."""
    sides = _host_sides(base_profile, cand_profile)
    if not sides:
        return None
    (bu, bc, _), (cu, cc, _) = sides
    ratios = sorted(cu[n] / bu[n] for n in set(bu) & set(cu)
                    if min(bu[n], cu[n]) >= PACE_MIN_US and bc.get(n) and abs(cc.get(n, 0) / bc[n] - 1) <= PACE_CALLS)
    if len(ratios) < PACE_RANGES:
        return None
    return {"ratio": round(statistics.median(ratios), 3), "ranges": len(ratios),
            "quartiles": [round(q, 3) for q in statistics.quantiles(ratios, n=4)[::2]]}


def host_movers(base_profile: list[dict], cand_profile: list[dict]) -> list[dict]:
    """The host-side ranges (``op_families.host_time``) whose self time moved most between the sides' profiled steps,
    largest |Δ| first, with their calls: where the host's extra time went (a name a side's profile left out below its
    cut is not compared; one it never ran counts as 0). [] unless both sides' profiles measured it."""
    sides = _host_sides(base_profile, cand_profile)
    if not sides:
        return []
    (bu, bc, b_cut), (cu, cc, c_cut) = sides
    names = [n for n in set(bu) | set(cu) if (n in bu or not b_cut) and (n in cu or not c_cut)]
    delta = {n: cu.get(n, 0.0) - bu.get(n, 0.0) for n in names}
    ranked = sorted((n for n in names if delta[n]), key=lambda n: (-abs(delta[n]), n))[:MOVERS]
    return [{"name": n, "baseline_calls": int(bc.get(n, 0)), "candidate_calls": int(cc.get(n, 0)),
             "baseline_us": round(bu.get(n, 0.0), 1), "candidate_us": round(cu.get(n, 0.0), 1),
             "delta_us": round(delta[n], 1)} for n in ranked]


def per_slot(s: dict, evidence: dict, cand_profile: list[dict] | None) -> list[dict]:
    """Per slot whose plugin kernel ran by its declared kernel names: those kernels' device µs in the candidate's
    profiled step, beside its op family's µs on both sides. The family's stock µs is the slot's own where no other
    slot of the family ran here (``family_alone``); otherwise the family's rows hold both slots' kernels."""
    cand = op_families.merge_kernel_us(cand_profile)
    family_of: dict[str, str] = {}
    for fam, slots in op_families.SLOT_FAMILIES.items():  # a slot in two families (gated_rms_norm): the first
        for slot in slots:
            family_of.setdefault(slot, fam)
    ran = {slot: ev for slot, ev in (evidence.get("slots") or {}).items()
           if ev.get("status") == "exercised" and ev.get("kernel_names")}
    fams = {r["family"]: r for r in s["families"]}
    rows = []
    for slot, ev in sorted(ran.items()):
        fam = family_of.get(slot, op_families.OTHER)
        us = sum(v for k, v in cand.items() if any(kernel_names.matches(n, k) for n in ev["kernel_names"]))
        rows.append({"slot": slot, "family": fam, "kernels_us": round(us, 1),
                     "family_baseline_us": fams.get(fam, {}).get("baseline_us", 0.0),
                     "family_candidate_us": fams.get(fam, {}).get("candidate_us", 0.0),
                     "family_alone": not any(family_of.get(o) == fam for o in ran if o != slot)})
    return rows


def _movers(base: dict[str, float], cand: dict[str, float], step_b: float, idle_b: float | None,
            idle_c: float | None, waits: tuple[dict | None, dict | None] = (None, None)) -> dict:
    """The kernels whose time moved most (largest |Δ| first) and the share of the step's delta they name: the step's
    delta is its device time's plus, where measured, the device's wait on the host. Where both sides measured whose
    launch the device waited for (``waits``), a kernel's Δ counts that wait too, so slower launches are named.
    No shares for a step that moved less than ``STILL`` of the baseline's ``step_b``: there is nothing to attribute."""
    timed_waits = waits[0] is not None and waits[1] is not None
    wb, wc = waits if timed_waits else ({}, {})
    names = set(base) | set(cand) | set(wb) | set(wc)
    dev = {n: cand.get(n, 0.0) - base.get(n, 0.0) for n in names}
    wait = {n: wc.get(n, 0.0) - wb.get(n, 0.0) for n in names}
    ranked = sorted((n for n in names if dev[n] + wait[n]), key=lambda n: (-abs(dev[n] + wait[n]), n))[:MOVERS]
    idle = idle_c - idle_b if idle_b is not None and idle_c is not None else None
    total = sum(dev.values()) + (idle or 0.0)
    moved = bool(step_b) and abs(total) >= STILL * step_b
    return {"kernels": [{"kernel": n, "family": op_families.family(n), "baseline_us": round(base.get(n, 0.0), 1),
                         "candidate_us": round(cand.get(n, 0.0), 1), "delta_us": round(dev[n], 1),
                         **({"wait_delta_us": round(wait[n], 1)} if timed_waits else {})} for n in ranked],
            "step_delta_us": round(total, 1), "idle_delta_us": None if idle is None else round(idle, 1),
            "kernels_delta_us": round(sum(dev.values()) + sum(wait.values()), 1),
            "named_share": sum(dev[n] + wait[n] for n in ranked) / total if moved else None,
            "idle_share": idle / total if moved and idle is not None else None,
            "named_wait_us": round(sum(wait[n] for n in ranked), 1) if timed_waits else None}


def step_speedup(s: dict) -> float | None:
    """The profiled step's stock / candidate time, its kernels' and the device's waits on the host between them; None
    where a side's profile predates the waits."""
    if s.get("baseline_idle_us") is None or s.get("candidate_idle_us") is None:
        return None
    return (s["baseline_us"] + s["baseline_idle_us"]) / (s["candidate_us"] + s["candidate_idle_us"])


def _waits(profiles: list[dict]) -> dict[str, float] | None:
    """{kernel name: the device's idle time before its launches}, summed over the side's processes; None where a
    profile predates the measure."""
    if not profiles or not all("wait_us" in p for p in profiles):
        return None
    return op_families.merge_kernel_us(profiles, key="wait_us")


def _idle(profiles: list[dict]) -> float | None:
    """Microseconds the device waited on the host between the step's kernels, summed over the side's processes
    (``op_families.span_busy``); None where a profile predates the measure."""
    if not all("span_us" in p for p in profiles):
        return None
    return round(sum(p["span_us"] - p["busy_us"] for p in profiles), 1)


def markdown(scenario: str, s: dict) -> list[str]:
    """The table of one scenario's split, most of the delta first, and the kernels only one side launched."""
    from tabulate import tabulate

    def share(r):
        return "-" if r["share_of_delta"] is None else f"{100 * r['share_of_delta']:+.1f}%"

    rows = [[r["family"], ", ".join(r["slots"]) or "-", f"{r['baseline_us']:.0f}", f"{r['candidate_us']:.0f}",
             f"{r['delta_us']:+.0f}", share(r)] for r in s["families"]]
    idle = ""
    if s.get("baseline_idle_us") is not None and s.get("candidate_idle_us") is not None:
        idle = (f" Between its kernels the device waited on the host (launches, Python, synchronisations) for "
                f"{s['baseline_idle_us']:.0f} µs in the baseline and {s['candidate_idle_us']:.0f} µs in the candidate "
                f"(Δ {s['candidate_idle_us'] - s['baseline_idle_us']:+.0f} µs): time no kernel's device time shows.")
    lines = [f"**{scenario}**: the profiled step took {s['baseline_us']:.0f} µs of device time in the baseline, "
             f"{s['candidate_us']:.0f} µs in the candidate (baseline / candidate {s['step_ratio']:.3f}).{idle}", "",
             tabulate(rows, headers=["op family", "catalog slots", "baseline µs", "candidate µs", "Δ µs",
                                     "share of Δ"], tablefmt="github"), ""]
    lines += _slot_lines(s.get("slots") or [])
    lines += _mover_lines(s.get("movers"))
    lines += _host_lines(s.get("host") or [], s.get("host_pace"))
    for key, who in (("only_candidate", "Only in the candidate"), ("only_baseline", "Only in the baseline")):
        if s[key]:
            lines.append(f"{who} (largest first): " + "; ".join(f"`{k['kernel'][:80]}` ({k['family']}, "
                                                                f"{k['us']:.0f} µs)" for k in s[key]))
    varies = sorted({k["family"] for key in ("only_candidate", "only_baseline") for k in s[key]}
                    & set(s.get("stock_varies") or []))
    if varies:
        lines.append(f"Stock's own profiled processes (one a round) did not all launch the same {', '.join(varies)} "
                     "kernels either: on one side only, such kernels are not by themselves the plugin's doing.")
    return lines + [""]


def _slot_lines(rows: list[dict]) -> list[str]:
    """Per slot: the plugin's own kernels' device time in the candidate's step, beside its family's."""
    from tabulate import tabulate

    if not rows:
        return []
    table = [[r["slot"], f"{r['kernels_us']:.0f}", r["family"], f"{r['family_baseline_us']:.0f}",
              f"{r['family_candidate_us']:.0f}", "yes" if r["family_alone"] else "no: the family's rows hold both"]
             for r in rows]
    return ["Per slot: the device time of the plugin's own kernels (its declared kernel names) in the candidate's "
            "step, beside its op family's on both sides (the stock engine's kernels have no slot's name: where the "
            "slot is its family's only one here, the family's baseline µs is the slot's).", "",
            tabulate(table, headers=["slot", "plugin kernels µs", "op family", "family baseline µs",
                                     "family candidate µs", "only slot of its family here"], tablefmt="github"), ""]


def _mover_lines(m: dict | None) -> list[str]:
    """The kernels behind the step's delta, and how much of it they name (splits of an older fk have none)."""
    if not m or not m["kernels"]:
        return []
    waits = m.get("named_wait_us") is not None

    def delta(k):
        return (f"{k['delta_us'] + k['wait_delta_us']:+.0f} µs: device {k['delta_us']:+.0f}, "
                f"wait before its launches {k['wait_delta_us']:+.0f}" if waits else f"{k['delta_us']:+.0f} µs")
    named = "; ".join(f"`{k['kernel'][:80]}` ({k['family']}, {delta(k)})" for k in m["kernels"])
    what = "time (device time and the device's wait before their launches)" if waits else "device time"
    if m["named_share"] is None:
        return [f"Kernels whose {what} moved most: {named}. The step moved by {m['step_delta_us']:+.0f} µs, "
                f"less than {100 * STILL:.0f}% of the baseline's: nothing to attribute.", ""]
    idle = ("" if m["idle_share"] is None else
            f"; the device's wait on the host, {m['idle_delta_us']:+.0f} µs, is {100 * m['idle_share']:.0f}%"
            + (f" ({m['named_wait_us']:+.0f} µs of it before these kernels' launches)" if waits else ""))
    over = (" (over 100%: the kernels not listed moved the other way, e.g. the rest of those a replacement displaced)"
            if m["named_share"] > 1.005 else "")
    return [f"Kernels whose {what} moved most: {named}. These {len(m['kernels'])} kernels name "
            f"**{100 * m['named_share']:.0f}%** of the step's delta of {m['step_delta_us']:+.0f} µs{over}{idle}.", ""]


def _host_lines(rows: list[dict], pace: dict | None = None) -> list[str]:
    """The host-side ranges whose self time moved most, and the host's pace (splits of an older fk have none)."""
    if not rows:
        return []
    named = "; ".join(f"`{r['name'][:80]}` (calls {r['baseline_calls']} → {r['candidate_calls']}, self "
                      f"{r['baseline_us']:.0f} → {r['candidate_us']:.0f} µs, {r['delta_us']:+.0f})" for r in rows)
    return [f"On the host (the profiler's host-side ranges: torch ops, CUDA runtime calls, `record_function` ranges; "
            f"each one's self time, Python outside them unseen), moved most: {named}." + pace_words(pace), ""]


def pace_words(pace: dict | None) -> str:
    """``host_pace`` in a sentence ("" without one)."""
    if not pace:
        return ""
    lo, hi = pace["quartiles"]
    return (f" The candidate's host took x{pace['ratio']:.2f} the baseline's time for the same host work (median over "
            f"the {pace['ranges']} ranges both sides ran as often, quartiles x{lo:.2f}-x{hi:.2f}): alike over all of "
            f"them, that is the engine processes' host speed, not a kernel's work.")


def moved(base_split: dict | None, head_split: dict | None) -> list[dict]:
    """Per op family, the candidate's device time in BASE's profiled step and in HEAD's (each beside its own stock
    run's), largest move first: where a kernel change moved the time. [] unless both were profiled."""
    if not base_split or not head_split:
        return []
    b = {r["family"]: r for r in base_split["families"]}
    h = {r["family"]: r for r in head_split["families"]}
    rows = []
    for fam in set(b) | set(h):
        rb, rh = b.get(fam, {}), h.get(fam, {})
        rows.append({"family": fam, "base_stock_us": rb.get("baseline_us", 0.0), "base_us": rb.get("candidate_us", 0.0),
                     "head_stock_us": rh.get("baseline_us", 0.0), "head_us": rh.get("candidate_us", 0.0),
                     "delta_us": round(rh.get("candidate_us", 0.0) - rb.get("candidate_us", 0.0), 1)})
    return sorted(rows, key=lambda r: -abs(r["delta_us"]))


def moved_slots(base_split: dict | None, head_split: dict | None) -> list[dict]:
    """Per slot, the device µs of the plugin's own kernels in BASE's profiled step and in HEAD's (``per_slot``), largest
    move first; [] unless both were profiled with per-slot rows."""
    b = {r["slot"]: r["kernels_us"] for r in (base_split or {}).get("slots") or []}
    h = {r["slot"]: r["kernels_us"] for r in (head_split or {}).get("slots") or []}
    if not b or not h:
        return []
    rows = [{"slot": slot, "base_us": b.get(slot), "head_us": h.get(slot),
             "delta_us": round(h[slot] - b[slot], 1) if slot in b and slot in h else None} for slot in set(b) | set(h)]
    return sorted(rows, key=lambda r: -abs(r["delta_us"] or 0.0))
