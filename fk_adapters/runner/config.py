"""What one `fk run` of one engine was asked to do (its flags, resolved)."""
from __future__ import annotations

from dataclasses import dataclass, field

from fk_adapters.engines import EngineSpec


@dataclass
class RunConfig:
    engine: EngineSpec
    plugins: list[str]
    device: str
    mode: str
    out_dir: str
    timeout_s: float = 900.0
    strict: bool = False
    allow_unexercised: bool = False  # slots whose layers were built but whose kernel never ran
    allow_uncovered: bool = False  # slots no scenario's model has a layer for
    aa: bool = False
    quick: bool = False
    repeats: int = 0  # N >= 1: timed repeats in each engine process (0: the scenario's; see scenarios._timing)
    # 0 < share < 1: each throughput workload's untimed warm-up pass serves only its first share of the requests
    warmup_share: float = 1.0
    correctness_only: bool = False  # no throughput or latency phases: a verdict on correctness alone
    workloads: tuple[str, ...] = ()  # --workloads: time only these (scenarios.workload_named); (): every one
    profile: bool = False
    multiprocessing: bool = True
    model_cache: str = ""
    baseline_from: str = ""
    reference_from: str = ""  # an earlier fk run whose float32 reference run (same job) this run reuses
    fresh_reference: bool = False  # make the float32 reference again, not from fk's reference store
    # with interleaved rounds: a second stock process in every round, whose A/A against the first is the row's "aa"
    with_aa: bool = False
    interleave: int = 0  # N >= 2: N rounds of both sides, each a fresh engine process, in ORDER
    stop_by: float = 0.0  # epoch seconds (--time-budget): no later round starts that would not end by then
    # CUDA device sets (CUDA_VISIBLE_DEVICES values): round 1 on the first, later rounds side by side, one set each;
    # without rounds to spread, a suite's scenarios side by side, one set each (``spreads_scenarios``)
    gpus: tuple[str, ...] = ()
    force: bool = False  # start over even where out_dir holds finished scenarios of this same run
    # each round (1, 2, ...) of this scenario that an earlier run into out_dir finished before --time-budget cut it,
    # as {side: its process's seconds}: those rounds are kept, and the rounds after them run (``finished_rows``)
    earlier_rounds: tuple[dict, ...] = ()
    # fk's and the plugins' source digests (and plugin info): part of the run key
    code: dict = field(default_factory=dict)
    command: str = ""
    extra_env: dict = field(default_factory=dict)
    engine_integrity: dict = field(default_factory=dict)  # {engine: engine_integrity.verify()}: "stock" only if ok

    @property
    def candidate_label(self) -> str:
        return "baseline (A/A)" if self.aa else "+".join(self.plugins)
