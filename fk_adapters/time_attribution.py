"""The profiled runs set against the timed delta they should explain: per interleaved round, one profiled run of the
timed latency workload a side, its kernels' delta (device time and the device's waits before their launches) beside
the same processes' timed delta of that workload; over the rounds, the share of the timed delta the kernels name."""
from __future__ import annotations

import math
import statistics

from fk_adapters import metrics, stats, time_split

ACCOUNTS = (0.8, 1.25)  # the kernels' delta over the timed one: within, the profile accounts for the delta


def _latency_s(res: dict, workload: str) -> float | None:
    return metrics.round_value(((res.get("perf") or {}).get("latency") or {}).get(workload) or [], "latency_s")


def one_round(base: dict, cand: dict, workload: str) -> dict | None:
    """One round's pair of processes: their timed medians of ``workload``, their profiled runs of its requests (the
    kernels' delta; the run's wall time where the driver kept it); None unless both timed it and profiled it with
    the waits measured."""
    tb, tc = _latency_s(base, workload), _latency_s(cand, workload)
    s = time_split.split(base.get("profile"), cand.get("profile"))
    m = (s or {}).get("movers") or {}
    if tb is None or tc is None or m.get("named_wait_us") is None or "kernels_delta_us" not in m:
        return None
    out = {"baseline_s": tb, "candidate_s": tc, "timed_delta_us": round((tc - tb) * 1e6, 1),
           "kernels_delta_us": m["kernels_delta_us"], "device_delta_us": round(s["candidate_us"] - s["baseline_us"], 1),
           "profiled_speedup": time_split.step_speedup(s), "host_pace": (s.get("host_pace") or {}).get("ratio")}
    wb, wc = base.get("profile_wall_s"), cand.get("profile_wall_s")
    if wb is not None and wc is not None:
        out["profiled_wall_delta_us"] = round((wc - wb) * 1e6, 1)
        out["profiler_cost_us"] = [round((wb - tb) * 1e6, 1), round((wc - tc) * 1e6, 1)]
    return out


def against_timed(pairs: list[tuple[dict, dict]], workload: str | None) -> dict | None:
    """Every round's profiled pair (``pairs``: (baseline, candidate) results, round by round) against the timed
    delta of the latency ``workload`` the profiled runs served: the mean kernels' delta over the mean timed delta
    (``named_share``), whether that accounts for it (``ACCOUNTS``), and over 3 rounds or more a 95% interval from
    the rounds' unexplained parts (timed minus kernels' delta, paired within each round's processes). None unless
    some round has both."""
    rounds = [{**r, "round": i} for i, r in enumerate((one_round(b, c, workload) for b, c in pairs), 1)
              if r] if workload else []
    if not rounds:
        return None
    mean = {k: statistics.fmean(r[k] for r in rounds) for k in ("baseline_s", "candidate_s", "timed_delta_us",
                                                               "kernels_delta_us")}
    still = abs(mean["timed_delta_us"]) < time_split.STILL * mean["baseline_s"] * 1e6
    share = None if still else mean["kernels_delta_us"] / mean["timed_delta_us"]
    steps = [r["profiled_speedup"] for r in rounds if r["profiled_speedup"]]
    out = {"workload": f"latency {workload}", "rounds": rounds,
           "timed_speedup": mean["baseline_s"] / mean["candidate_s"],
           "profiled_speedup": math.exp(statistics.fmean(math.log(v) for v in steps)) if steps else None,
           "timed_delta_us": round(mean["timed_delta_us"], 1), "kernels_delta_us": round(mean["kernels_delta_us"], 1),
           "named_share": share, "accounts": None if still else ACCOUNTS[0] <= share <= ACCOUNTS[1]}
    if share is not None and len(rounds) >= 3:
        out["share_interval"] = share_interval(rounds, "timed_delta_us")
    if all("device_delta_us" in r for r in rounds):
        out["device_delta_us"], out["device_interval_us"] = _mean_ci([r["device_delta_us"] for r in rounds])
        out["wait_delta_us"], out["wait_interval_us"] = _mean_ci(
            [r["kernels_delta_us"] - r["device_delta_us"] for r in rounds])
    if all("profiled_wall_delta_us" in r for r in rounds):
        wall = statistics.fmean(r["profiled_wall_delta_us"] for r in rounds)
        out["profiled_wall_delta_us"] = round(wall, 1)
        out["profiled_share"] = mean["kernels_delta_us"] / wall if wall else None
        out["profiled_share_interval"] = share_interval(rounds, "profiled_wall_delta_us")
        out["profiler_cost_us"] = [round(statistics.fmean(r["profiler_cost_us"][i] for r in rounds), 1)
                                   for i in (0, 1)]
    return out


def _mean_ci(values: list[float]) -> tuple[float, list[float] | None]:
    """The mean over the rounds, with its 95% t-interval from 3 rounds (the variation between engine processes)."""
    mean = statistics.fmean(values)
    if len(values) < 3:
        return round(mean, 1), None
    half = stats.t95_half(values)
    return round(mean, 1), [round(mean - half, 1), round(mean + half, 1)]


def share_interval(rounds: list[dict], of: str) -> list[float] | None:
    """The 95% t-interval of the share S = mean(kernels' delta) / mean(``of`` delta) (the timed one, or the profiled
    runs' own wall-time one), a ratio of means: by the delta method, S +- t * sd(kernels - S x of) / sqrt(n) /
    mean(of), each round's pair of deltas from its own processes; None under 3 rounds or without a delta to share."""
    if len(rounds) < 3 or any(r.get(of) is None for r in rounds):
        return None
    total = statistics.fmean(r[of] for r in rounds)
    if not total:
        return None
    share = statistics.fmean(r["kernels_delta_us"] for r in rounds) / total
    half = stats.t95_half([r["kernels_delta_us"] - share * r[of] for r in rounds]) / abs(total)
    return [share - half, share + half]


def timed_lines(t: dict) -> list[str]:
    """The profiled runs against their workload's timed delta, in words (a row of an older fk: round 1's only)."""
    n = len(t.get("rounds") or [None])
    each = "one profiled run a side" + (f" in each of {n} interleaved rounds" if n > 1 else "")
    head = (f"The profiled run is one run of **{t['workload']}** (the requests its timed repeats serve; {each}): "
            f"stock / candidate {_num(t['profiled_speedup'])} profiled (device time and the device's waits on the "
            f"host), {t['timed_speedup']:.3f} timed (medians).")
    if t["accounts"] is None:
        rounds = t.get("rounds") or []
        return [head + f" Its timed delta, {t['timed_delta_us'] / 1000:+.1f} ms a run, is under "
                f"{100 * time_split.STILL:.0f}% of stock's: nothing to attribute."
                + (_pace_line(rounds) if len(rounds) > 1 else ""), ""]
    bounds = f"{ACCOUNTS[0]:.0%}-{ACCOUNTS[1]:.0%}"
    verdict = ("so the table above accounts for the timed delta" if t["accounts"] else
               f"outside {bounds}: the profile does not account for the timed delta")
    if t["accounts"] and t.get("share_interval") and not _within(t["share_interval"]):
        verdict = (f"within {bounds} as an estimate, but its interval reaches outside: the rounds do not establish "
                   "that the table above accounts for the timed delta")
    ci = _pct(t.get("share_interval"))
    mean = " (means over the rounds)" if n > 1 else ""
    lines = [head + f" The kernels' time moved by {t['kernels_delta_us'] / 1000:+.1f} ms (device time and the waits "
             f"before their launches), **{100 * t['named_share']:.0f}%**{ci} of the timed delta of "
             f"{t['timed_delta_us'] / 1000:+.1f} ms a run{mean}: {verdict}." + _parts(t) + _why(t, n)]
    return lines + _round_lines(t) + [""]


def _parts(t: dict) -> str:
    """The kernels' delta in its two parts: their device time, and the device's waits on the host before them."""
    if t.get("device_delta_us") is None:
        return ""

    def ms(key: str) -> str:
        ci = t.get(key.replace("delta", "interval"))
        return f"{t[key] / 1000:+.1f} ms" + (f" [95% interval {ci[0] / 1000:+.1f}, {ci[1] / 1000:+.1f}]" if ci else "")
    return (f" Of that, the kernels' device time moved {ms('device_delta_us')} "
            f"({100 * t['device_delta_us'] / t['timed_delta_us']:.0f}% of the timed delta) and the device's waits on "
            f"the host before their launches {ms('wait_delta_us')}.")


def _why(t: dict, n: int) -> str:
    """What the profiled runs' own wall times say about a gap, and what one round cannot say."""
    out = ""
    if t.get("profiler_cost_us"):
        cb, cc = t["profiler_cost_us"]
        own = t.get("profiled_share_interval") or share_interval(t.get("rounds") or [], "profiled_wall_delta_us")
        named = (f"; the kernels name {100 * t['profiled_share']:.0f}%{_pct(own)} of that"
                 if t.get("profiled_share") is not None else "")
        out += (f" The profiled runs themselves took {t['profiled_wall_delta_us'] / 1000:+.1f} ms longer in the "
                f"candidate (wall time){named}; the profiler lengthened the baseline's run by {cb / 1000:+.1f} ms and "
                f"the candidate's by {cc / 1000:+.1f} ms beyond their timed medians.")
        timed = t.get("share_interval")
        if timed and _within(own) and not _within(timed):
            out += (" The kernels account for the profiled runs' own delta; what the rounds leave uncertain is one "
                    "profiled run a side against the timed medians (the variation of a single run between processes), "
                    "not time the kernels miss.")
    if n < 3 and t["accounts"] is False:
        out += (f" With {n} round{'s' if n > 1 else ''} the timed delta's variation between engine processes is not "
                "measured: run --interleave 3 or more to tell it from the profile's gap.")
    return out


def _round_lines(t: dict) -> list[str]:
    rounds = t.get("rounds") or []
    if len(rounds) < 2:
        return []
    keys = ["timed_delta_us", "kernels_delta_us"]
    what = "timed delta / kernels' delta"
    if all(r.get("profiled_wall_delta_us") is not None for r in rounds):
        keys.insert(1, "profiled_wall_delta_us")
        what = "timed delta / profiled runs' delta (wall time) / kernels' delta"
    parts = all(r.get("device_delta_us") is not None for r in rounds)
    return ["", f"Per round, {what} (ms a run): " + "; ".join(
        f"{r.get('round', i)}: " + " / ".join(f"{r[k] / 1000:+.1f}" for k in keys) + (_split_of(r) if parts else "")
        for i, r in enumerate(rounds, 1)) + "." + _pace_line(rounds)]


def _pace_line(rounds: list[dict]) -> str:
    """The candidate's host pace round by round (``time_split.host_pace``), where every round's profiles measured it."""
    paces = [r.get("host_pace") for r in rounds]
    if not all(paces):
        return ""
    return (" The candidate's host took " + " / ".join(f"x{p:.2f}" for p in paces) + " the baseline's time for the "
            "same host work, round by round (`time_split.host_pace`): where the host bounds a latency, its timed "
            "delta moves with that, whatever the kernels do.")


def _split_of(r: dict) -> str:
    return (f" (device {r['device_delta_us'] / 1000:+.1f}, "
            f"waits {(r['kernels_delta_us'] - r['device_delta_us']) / 1000:+.1f})")


def _pct(ci: list[float] | None) -> str:
    return f" [95% interval {100 * ci[0]:.0f}%, {100 * ci[1]:.0f}%]" if ci else ""


def _within(ci: list[float] | None) -> bool:
    return bool(ci) and ACCOUNTS[0] <= ci[0] and ci[1] <= ACCOUNTS[1]


def _num(v: float | None) -> str:
    return "n/a" if v is None else f"{v:.3f}"
