"""The host CPUs a GPU engine process runs on: those local to its GPUs (their NUMA node), where the host has several.

On a host of several NUMA nodes the scheduler may put an engine's host threads on either node, near its GPU or far
from it, and not alike for the two sides of a comparison. Binding every process of both sides to its GPUs'
CPUs takes it out of the comparison, and keeps runs on other GPUs of the host off those CPUs. The runner plans the
binding (``plan``), the engine process applies it to itself before the engine starts (``apply``) and records the
CPUs its session may run on (``session_cpus``). Nothing is bound on a one-node host (the lent 4-H200 machine, session
44). ``FK_BIND_CPUS=0`` turns it off; ``FK_BIND_CPUS=gpu`` gives each GPU its own share of its node's cores; a CPU
list (``FK_BIND_CPUS=0-7``) binds every engine process to exactly those, on any host.
"""
from __future__ import annotations

import os

from fk_adapters import engine_runs, gpu_share

VAR = "FK_ENGINE_CPUS"  # the CPU list the runner asks the engine process to run on
OFF_VAR = "FK_BIND_CPUS"
SYSFS_PCI = "/sys/bus/pci/devices"
SYSFS_CPU = "/sys/devices/system/cpu"
ONE_NODE = "the GPUs' local CPUs are all the CPUs fk runs on"
NODE, GPU_SHARE, ASKED = "the GPUs' node", "each GPU's share of its node", "the CPUs asked"  # what it was given


def parse_cpulist(text: str) -> set[int]:
    """Linux's CPU list format ("0-3,8,10-11") as a set; ValueError on anything else."""
    cpus: set[int] = set()
    for part in text.strip().split(","):
        if not part:
            continue
        lo, _, hi = part.partition("-")
        cpus.update(range(int(lo), int(hi or lo) + 1))
    return cpus


def format_cpulist(cpus) -> str:
    """A set of CPUs in Linux's CPU list format, runs joined ("0-3,8")."""
    out, run = [], []
    for c in sorted(cpus):
        if run and c != run[-1] + 1:
            out.append(_span(run))
            run = []
        run.append(c)
    if run:
        out.append(_span(run))
    return ",".join(out)


def _span(run: list[int]) -> str:
    return str(run[0]) if len(run) == 1 else f"{run[0]}-{run[-1]}"


def _sysfs_name(bus_id: str) -> str:
    """nvidia-smi's "00000000:19:00.0" as sysfs names the device: "0000:19:00.0"."""
    domain, _, rest = bus_id.strip().lower().partition(":")
    return f"{domain[-4:]}:{rest}"


def _local_cpus(bus_id: str) -> set[int]:
    with open(os.path.join(SYSFS_PCI, _sysfs_name(bus_id), "local_cpulist")) as f:
        return parse_cpulist(f.read())


def plan(env: dict) -> dict:
    """For an engine process started with ``env``: {"cpus": CPU list, "gpus": CUDA_VISIBLE_DEVICES, "share": how} to
    bind it to, or {"unbound": why} (off, nothing to gain, or the GPUs' CPUs unknown). ``FK_BIND_CPUS=gpu``: each GPU
    its equal share of its node's CPUs (by PCI bus order), not the whole node; a CPU list: those CPUs."""
    mode = env.get(OFF_VAR, "1")
    if mode == "0":
        return {"unbound": f"{OFF_VAR}=0"}
    if mode not in ("1", "gpu"):
        return _asked(mode, env.get("CUDA_VISIBLE_DEVICES"))
    visible = env.get("CUDA_VISIBLE_DEVICES")
    buses = gpu_share.gpu_field("pci.bus_id", visible)
    if not buses or (visible is not None and len(buses) != len([v for v in visible.split(",") if v.strip()])):
        return {"unbound": "nvidia-smi did not name the PCI bus of every GPU the process sees"}
    try:
        allowed = os.sched_getaffinity(0)
        local = _gpu_shares(buses, allowed) if mode == "gpu" else [_local_cpus(b) & allowed for b in buses]
    except (OSError, ValueError, AttributeError) as exc:
        return {"unbound": f"the GPUs' local CPUs could not be read ({exc})"}
    cpus = set().union(*local)
    if not cpus:
        return {"unbound": "none of the GPUs' local CPUs is one fk may run on"}
    if cpus == allowed:
        return {"unbound": ONE_NODE}
    return {"cpus": format_cpulist(cpus), "gpus": visible if visible is not None else "all",
            "share": GPU_SHARE if mode == "gpu" else NODE}


def check(env: dict) -> None:
    """ValueError, with what is wrong, where ``env``'s ``FK_BIND_CPUS`` is a CPU list fk cannot bind to (``fk run``
    refuses it before any engine starts; elsewhere the processes run unbound, with why)."""
    mode = env.get(OFF_VAR, "1")
    why = "" if mode in ("0", "1", "gpu") else _asked(mode, None).get("unbound", "")
    if why:
        raise ValueError(why)


def _asked(text: str, visible: str | None) -> dict:
    """``FK_BIND_CPUS`` as a CPU list ("0-7"): every engine process bound to exactly those, whatever its GPUs (both
    sides of a comparison on the same CPUs); unbound, with why, for a list that is not one or holds a CPU fk may not
    use."""
    try:
        cpus = parse_cpulist(text)
    except ValueError:
        return {"unbound": f"{OFF_VAR}={text!r}: not 0, 1, gpu or a CPU list such as 0-7"}
    allowed = os.sched_getaffinity(0)
    if not cpus or not cpus <= allowed:
        return {"unbound": f"{OFF_VAR}={text}: fk may run on CPUs {format_cpulist(allowed)} only"}
    return {"cpus": format_cpulist(cpus), "gpus": visible if visible is not None else "all", "share": ASKED}


def _gpu_shares(buses: list[str], allowed: set[int]) -> list[set[int]]:
    """Each of ``buses``' GPUs' equal share of the CPUs (of ``allowed``) of its NUMA node, the node's CPUs dealt in
    order to its GPUs in PCI bus order: disjoint for any two GPUs of the host."""
    every = sorted(gpu_share.gpu_field("pci.bus_id", every=True), key=_sysfs_name)
    node_of = {b: frozenset(_local_cpus(b) & allowed) for b in every}
    shares = []
    for bus in buses:
        peers = [b for b in every if node_of[b] == node_of[bus]]
        cores = _cores(node_of[bus])
        k, size = peers.index(bus), len(cores) // len(peers)
        shares.append(set().union(*cores[k * size:(k + 1) * size]))
    return shares


def _cores(cpus) -> list[set[int]]:
    """``cpus`` grouped by physical core (sysfs ``thread_siblings_list``; a CPU it does not describe alone), in
    order: a share of whole cores never splits two hyperthreads of one core between GPUs."""
    cores: dict = {}
    for c in sorted(cpus):
        try:
            with open(os.path.join(SYSFS_CPU, f"cpu{c}", "topology", "thread_siblings_list")) as f:
                key = min(parse_cpulist(f.read()))
        except (OSError, ValueError):
            key = c
        cores.setdefault(key, set()).add(c)
    return [cores[k] for k in sorted(cores)]


def apply() -> str | None:
    """In the engine process, before the engine starts: every thread of this process bound to ``$FK_ENGINE_CPUS``
    (its later threads and processes inherit it); the CPU list it then runs on, None where none was asked."""
    asked = os.environ.get(VAR)
    if not asked:
        return None
    cpus = parse_cpulist(asked)
    for tid in os.listdir("/proc/self/task"):
        try:
            os.sched_setaffinity(int(tid), cpus)
        except ProcessLookupError:  # a thread that ended meanwhile
            pass
    return format_cpulist(os.sched_getaffinity(0))


def session_cpus() -> str:
    """The CPUs any thread of this process's session (the engine process and every process it started) may run on,
    as a CPU list: once the engine is up, where its host threads really run."""
    me, cpus = os.getsid(0), set()
    for pid in filter(str.isdigit, os.listdir("/proc")):
        if gpu_share.session_id(int(pid)) != me:
            continue
        try:
            tids = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        for tid in tids:
            try:
                cpus |= os.sched_getaffinity(int(tid))
            except OSError:  # ended meanwhile
                pass
    return format_cpulist(cpus)


def findings(runs: dict) -> list[str]:
    """Over a scenario's engine runs ({side: [round 1, ...]}): which host CPUs the GPU runs were bound to, any that
    ran elsewhere than asked, and why any was not bound (nothing on a one-node host, or for CPU runs)."""
    bound: dict = {}
    astray, unbound, shares = [], {}, set()
    for where, _, _, res in engine_runs.each(runs):
        b = res.get("cpu_binding")
        if not b:
            continue
        if "cpus" in b:
            bound.setdefault((b["gpus"], b["cpus"]), []).append(where)
            shares.add(b.get("share", NODE))
            ran = res.get("host_cpus")
            if not ran or not parse_cpulist(ran) <= parse_cpulist(b["cpus"]):
                astray.append(f"{where} ran on CPUs {res.get('host_cpus') or 'unknown'}")
        elif b["unbound"] != ONE_NODE:
            unbound.setdefault(b["unbound"], []).append(where)
    out = []
    if bound:
        which = (f"the host CPUs {OFF_VAR} asked for" if ASKED in shares else
                 f"the host CPUs local to their GPUs ({', '.join(sorted(shares))}; {OFF_VAR}=0 turns this off)")
        out.append(f"engine processes ran on {which}: " + "; ".join(
                       f"GPU {gpus}: CPUs {cpus} ({len(w)} process{'es' if len(w) > 1 else ''})"
                       for (gpus, cpus), w in bound.items()))
    if astray:
        out.append("asked to run on the CPUs they were bound to, " + ", ".join(astray))
    out += [f"{', '.join(w)}: not bound to the GPUs' host CPUs ({why})" for why, w in unbound.items()]
    return out
