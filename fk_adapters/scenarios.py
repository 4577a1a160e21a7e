"""Scenario files: a model config written out, engine settings and workloads (TOML).

Built-in scenarios live in ``scenarios/`` (package ``fk_adapters.scenario_files``); a path to
any ``.toml`` file works too. ``build_job`` turns one into the engine-agnostic job a
driver runs: every prompt is a seeded list of token ids, identical for both runs.
"""
from __future__ import annotations

import os
import random
from dataclasses import dataclass, field
from importlib import resources

import tomllib

from fk_adapters import draft_weights, engines
from fk_adapters.engines.transformers import libraries
from fk_adapters.metrics import THRESHOLDS

REQUIRED_MODEL_KEYS = ("architectures", "hidden_size", "intermediate_size", "num_hidden_layers",
                       "num_attention_heads", "vocab_size")
HOSTS = engines.NAMES
ENGINE_HOSTS = ("vllm", "sglang")
FAMILIES_OF_MODELS = ("llm", "embedding", "vision", "audio", "diffusion", "detection", "other")
MAX_TOKENS = 1 << 20  # a sequence's length where neither [engine] max_model_len nor max_position_embeddings bounds it
MAX_BATCH = 1 << 16  # requests of one workload, or items of one batch
LATE_INTERACTION = ("HF_ColBERT",)  # embedding models whose output is one vector per token (ColBERT)
ENGINE_COUNTS = ("max_model_len", "max_num_seqs", "max_num_batched_tokens", "tensor_parallel_size",
                 "pipeline_parallel_size")  # [engine] settings that count things


class ScenarioError(ValueError):
    """A scenario that does not exist or cannot be run as written."""


@dataclass
class Scenario:
    name: str
    path: str
    model: dict
    dtype: str
    seed: int = 0
    description: str = ""
    suites: list[str] = field(default_factory=list)
    device: str = ""
    engine: dict = field(default_factory=dict)
    engine_env: dict = field(default_factory=dict)
    correctness: dict = field(default_factory=dict)
    perf: dict = field(default_factory=dict)
    catalog: dict = field(default_factory=dict)  # the FastKernels entry (fk46-* scenarios)
    inputs: dict = field(default_factory=dict)  # what one item is, for families without token workloads
    extra: dict = field(default_factory=dict)  # any other table, e.g. [speculative]

    @property
    def hosts(self) -> list[str]:
        """Where this scenario can be served: its catalog entry's hosts, else both engines."""
        return list(self.catalog["hosts"]) if self.catalog else list(ENGINE_HOSTS)

    @property
    def prompt_vocab(self) -> int:
        """Prompt token ids are drawn from [3, this): the text vocabulary, below any placeholder ids."""
        if self.extra.get("prompt_vocab"):
            return int(self.extra["prompt_vocab"])
        for cfg in (self.model, self.model.get("text_config", {}),
                    self.model.get("thinker_config", {}).get("text_config", {})):
            if isinstance(cfg, dict) and cfg.get("vocab_size"):
                return int(cfg["vocab_size"])
        raise ScenarioError(f"scenario {self.name!r}: no vocab_size in [model] (nor in its text_config)")

    @property
    def library(self) -> str:
        """The library whose model class [model] names (``library``; none: transformers)."""
        return libraries.of(self.model)

    @property
    def family(self) -> str:
        return self.catalog.get("family", "llm") if self.catalog else "llm"


_KNOWN_KEYS = {"name", "description", "suites", "dtype", "seed", "device", "model", "engine", "engine_env",
               "correctness", "perf", "catalog", "inputs"}


def _builtin_dir():
    return resources.files("fk_adapters.scenario_files")


def builtin_names() -> list[str]:
    return sorted(p.name[:-5] for p in _builtin_dir().iterdir() if p.name.endswith(".toml"))


def _check(sc: Scenario) -> None:
    where = f"scenario {sc.name!r} ({sc.path})"
    if sc.catalog:
        _check_catalog(sc, where)
    if sc.dtype not in THRESHOLDS:
        raise ScenarioError(f"{where}: dtype {sc.dtype!r} not one of {', '.join(THRESHOLDS)}")
    _check_engine_numbers(sc, where)
    _check_inputs(sc, where)
    _check_library(sc, where)
    if sc.catalog and not (set(sc.hosts) & set(ENGINE_HOSTS) and sc.family == "llm"):
        return  # no token workloads: described here, run by another host or not at all
    # catalog entries keep their checkpoint's layout
    required = ("architectures",) if sc.catalog else REQUIRED_MODEL_KEYS
    missing = [k for k in required if k not in sc.model]
    if missing:
        raise ScenarioError(f"{where}: [model] lacks {', '.join(missing)}")
    sc.prompt_vocab  # noqa: B018  (raises when there is none)
    spec = sc.extra.get("speculative")
    if spec is not None and not (isinstance(spec, dict) and spec.get("method")):
        raise ScenarioError(f"{where}: [speculative] needs a method")
    for key in ("requests", "prompt_len", "output_len", "teacher_len"):
        if not isinstance(sc.correctness.get(key), int) or sc.correctness[key] < 1:
            raise ScenarioError(f"{where}: [correctness] {key} must be a positive integer")
    for kind in ("throughput", "latency"):
        for wname, w in sc.perf.get(kind, {}).items():
            need = (("requests", "input_len", "output_len") if kind == "throughput"
                    else ("batch", "input_len", "output_len"))
            bad = [k for k in need if not isinstance(w.get(k), int) or w[k] < 1]
            if bad:
                raise ScenarioError(f"{where}: [perf.{kind}.{wname}] needs positive integers {', '.join(bad)}")
    _check_lengths(sc, where)


def _check_library(sc: Scenario, where: str) -> None:
    """A [model] of another library than transformers names that library's model ``class``, and only the
    transformers host loads it (and SGLang's diffusion runtime a diffusers model, from the pipeline folder fk
    writes)."""
    if sc.library == libraries.DEFAULT:
        return
    if sc.library not in libraries.NAMES:
        raise ScenarioError(f"{where}: [model] library {sc.library!r} not one of {', '.join(libraries.NAMES)}")
    if not isinstance(sc.model.get("class"), str):
        raise ScenarioError(f"{where}: [model] library = {sc.library!r} needs the model's class")
    others = [h for h in sc.hosts if h != "transformers" and not (h == "sglang" and sc.library == "diffusers")]
    if others:
        raise ScenarioError(f"{where}: a {sc.library} model is hosted by transformers only, not {', '.join(others)}")


def _positive_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= 1


def _check_engine_numbers(sc: Scenario, where: str) -> None:
    """The [engine] settings fk knows to be counts or a fraction: the engine would refuse them only once started."""
    for key in ENGINE_COUNTS:
        if key in sc.engine and not _positive_int(sc.engine[key]):
            raise ScenarioError(f"{where}: [engine] {key} must be a positive integer, not {sc.engine[key]!r}")
    util = sc.engine.get("gpu_memory_utilization", 0.5)
    if isinstance(util, bool) or not isinstance(util, (int, float)) or not 0 < util <= 1:
        raise ScenarioError(f"{where}: [engine] gpu_memory_utilization must be in (0, 1], not {util!r}")


def _check_inputs(sc: Scenario, where: str) -> None:
    """[inputs]: every number positive, batch sizes whole and at most MAX_BATCH, an LLM's sequence within its
    limit."""
    for key, v in sc.inputs.items():
        if isinstance(v, (int, float)) and not isinstance(v, bool) and not v > 0:
            raise ScenarioError(f"{where}: [inputs] {key} must be positive, not {v!r}")
    batches = sc.inputs.get("batches", [])
    if not isinstance(batches, list) or not all(_positive_int(b) and b <= MAX_BATCH for b in batches):
        raise ScenarioError(f"{where}: [inputs] batches must be positive integers up to {MAX_BATCH}, not {batches!r}")
    prompt, output = sc.inputs.get("prompt_len"), sc.inputs.get("output_len")
    if sc.family == "llm" and _positive_int(prompt) and _positive_int(output):
        _within(sc, where, "[inputs] prompt_len + output_len", prompt + output)


def length_limit(sc: Scenario) -> tuple[int, str]:
    """(the longest sequence the scenario may ask for, what says so): [engine] max_model_len, else the model's
    max_position_embeddings (or its text_config's), else fk's cap MAX_TOKENS."""
    if _positive_int(sc.engine.get("max_model_len")):
        return sc.engine["max_model_len"], "[engine] max_model_len"
    text = sc.model.get("text_config") if isinstance(sc.model.get("text_config"), dict) else {}
    for where, cfg in (("[model]", sc.model), ("[model.text_config]", text)):
        if _positive_int(cfg.get("max_position_embeddings")):
            return cfg["max_position_embeddings"], f"{where} max_position_embeddings"
    return MAX_TOKENS, "fk's cap on a sequence"


def _within(sc: Scenario, where: str, what: str, tokens: int) -> None:
    limit, source = length_limit(sc)
    if tokens > limit:
        raise ScenarioError(f"{where}: {what} = {tokens} exceeds {source} ({limit})")


def _check_lengths(sc: Scenario, where: str) -> None:
    """Token workloads: each sequence within the scenario's length limit, each workload's requests up to MAX_BATCH."""
    c = sc.correctness
    _within(sc, where, "[correctness] prompt_len + output_len", c["prompt_len"] + c["output_len"])
    _within(sc, where, "[correctness] teacher_len + 1", c["teacher_len"] + 1)  # one token generated after it
    counts = [("[correctness] requests", c["requests"])]
    for kind, many in (("throughput", "requests"), ("latency", "batch")):
        for wname, w in sc.perf.get(kind, {}).items():
            _within(sc, where, f"[perf.{kind}.{wname}] input_len + output_len", w["input_len"] + w["output_len"])
            counts.append((f"[perf.{kind}.{wname}] {many}", w[many]))
    for what, n in counts:
        if n > MAX_BATCH:
            raise ScenarioError(f"{where}: {what} = {n} exceeds fk's cap of {MAX_BATCH}")
    repeats, warmup = sc.perf.get("repeats", 3), sc.perf.get("warmup", 1)
    if not _positive_int(repeats) or not (isinstance(warmup, int) and not isinstance(warmup, bool) and warmup >= 0):
        raise ScenarioError(f"{where}: [perf] repeats must be a positive integer and warmup one >= 0")


def _check_catalog(sc: Scenario, where: str) -> None:
    c = sc.catalog
    for key in ("number", "category", "architecture", "checkpoint", "hosts", "family", "layers"):
        if key not in c:
            raise ScenarioError(f"{where}: [catalog] lacks {key}")
    if not isinstance(c["number"], int) or not 1 <= c["number"] <= 46:
        raise ScenarioError(f"{where}: [catalog] number must be 1..46, not {c['number']!r}")
    unknown = [h for h in c["hosts"] if h not in HOSTS]
    if unknown:
        raise ScenarioError(f"{where}: [catalog] hosts {unknown} not among {', '.join(HOSTS)}")
    if not c["hosts"] and not c.get("not_hosted"):
        raise ScenarioError(f"{where}: [catalog] hosts nothing, so not_hosted must say why")
    if c["family"] not in FAMILIES_OF_MODELS:
        raise ScenarioError(f"{where}: [catalog] family {c['family']!r} not one of {', '.join(FAMILIES_OF_MODELS)}")
    layers = c["layers"]
    if not (isinstance(layers, dict) and isinstance(layers.get("full"), int) and isinstance(layers.get("here"), int)
            and 1 <= layers["here"] <= layers["full"]):
        raise ScenarioError(f"{where}: [catalog] layers must be {{ full = N, here = n }} with 1 <= n <= N")


def late_interaction(sc: Scenario) -> bool:
    """Whether the scenario's model outputs one vector per token (vLLM's pooling task ``token_embed``)."""
    return bool(set(sc.model.get("architectures") or []) & set(LATE_INTERACTION))


# what each engine's driver serves (the transformers host: every family): token generation ("llm"), embeddings
# (vLLM's pooling runner, SGLang's is_embedding engine), speech (vLLM's encoder-decoder transcription path: decoder
# prompts with seeded audio), diffusion (SGLang's diffusion runtime on the pipeline folder fk writes)
DRIVEN_FAMILIES = {"vllm": ("llm", "embedding", "audio"), "sglang": ("llm", "embedding", "diffusion")}


def check_runnable(sc: Scenario, engine: str) -> None:
    """ScenarioError unless ``engine`` can serve ``sc`` with fk's token workloads."""
    if engine not in sc.hosts:
        why = f": {sc.catalog['not_hosted']}" if sc.catalog.get("not_hosted") else ""
        raise ScenarioError(f"scenario {sc.name!r} is not hosted by {engine} "
                            f"(hosts: {', '.join(sc.hosts) or 'none'}){why}")
    if engine == "transformers":  # token workloads, or what one item is ([inputs]) for the model's forward
        need = ("prompt_len", "output_len") if sc.family == "llm" and not sc.correctness else ()
        if not (sc.correctness or sc.inputs) or any(not isinstance(sc.inputs.get(k), int) for k in need):
            raise ScenarioError(f"scenario {sc.name!r} ({sc.family}) has no token workloads nor an [inputs] table "
                                f"for transformers" + (f" with {' and '.join(need)}" if need else ""))
        return
    driven = DRIVEN_FAMILIES.get(engine, ("llm",))
    if sc.family not in driven:
        raise ScenarioError(f"scenario {sc.name!r} is a{'n' if sc.family[0] in 'aeiou' else ''} {sc.family} model: "
                            f"fk's {engine} driver runs {', '.join(driven)} models only")
    if sc.family == "embedding":  # the engine's pooling path: sequences of [inputs] seq_len
        if not isinstance(sc.inputs.get("seq_len"), int):
            raise ScenarioError(f"scenario {sc.name!r} (embedding) has no [inputs] seq_len for {engine}'s pooling "
                                "runner")
        if engine == "sglang" and late_interaction(sc):
            raise ScenarioError(f"scenario {sc.name!r} is a late-interaction model (a vector per token): fk's sglang "
                                "driver pools one vector per sequence")
        return
    if sc.family == "diffusion":  # [inputs] for one request; a pipeline folder fk can write for the [model] class
        from fk_adapters.engines.transformers.libraries import diffusers_folder

        if sc.model.get("class") not in diffusers_folder.PIPELINES or not all(
                isinstance(sc.inputs.get(k), int) for k in ("height", "width")):
            raise ScenarioError(f"scenario {sc.name!r} (diffusion) needs a [model] class fk writes a pipeline folder "
                                f"for ({', '.join(diffusers_folder.PIPELINES)}) and [inputs] height and width")
        return
    if not sc.correctness:
        raise ScenarioError(f"scenario {sc.name!r} ({sc.family}) has no token workloads for {engine}")


def _read(name_or_path: str) -> tuple[str, dict]:
    """(path, the parsed table) of a built-in scenario by name, or a scenario file by path."""
    if name_or_path.endswith(".toml") or os.sep in name_or_path:
        path = name_or_path
        if not os.path.isfile(path):
            raise ScenarioError(f"scenario file not found: {path}")
        text = open(path, encoding="utf-8").read()
    else:
        res = _builtin_dir() / f"{name_or_path}.toml"
        if not res.is_file():
            raise ScenarioError(f"unknown scenario {name_or_path!r} (built-in: {', '.join(builtin_names())})")
        path, text = str(res), res.read_text(encoding="utf-8")
    try:
        return path, tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ScenarioError(f"malformed scenario file {path}: {exc}") from None


def _merged(base: dict, over: dict) -> dict:
    """``base`` with ``over``'s keys: tables merged key by key, anything else replaced."""
    out = dict(base)
    for k, v in over.items():
        out[k] = _merged(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def _resolved(path: str, data: dict, seen: tuple[str, ...] = ()) -> dict:
    """``data`` on top of the built-in scenario it ``extends`` (recursively); its suites are never inherited."""
    base_name = data.get("extends")
    if base_name is None:
        return data
    if not isinstance(base_name, str) or base_name in seen:
        raise ScenarioError(f"scenario file {path}: extends {base_name!r} " +
                            ("in a cycle" if base_name in seen else "must name a built-in scenario"))
    base_path, base = _read(base_name)
    base = dict(_resolved(base_path, base, seen + (base_name,)), suites=[])
    return {k: v for k, v in _merged(base, data).items() if k != "extends"}


def load(name_or_path: str) -> Scenario:
    """Load a built-in scenario by name, or a scenario file by path (``extends = "name"``: on top of a built-in one)."""
    path, data = _read(name_or_path)
    data = _resolved(path, data)
    try:
        sc = Scenario(name=data["name"], path=path, model=dict(data["model"]), dtype=data["dtype"],
                      seed=data.get("seed", 0), description=data.get("description", ""),
                      suites=list(data.get("suites", [])), device=data.get("device", ""),
                      engine=dict(data.get("engine", {})), engine_env=dict(data.get("engine_env", {})),
                      correctness=dict(data.get("correctness", {})), perf=dict(data.get("perf", {})),
                      catalog=dict(data.get("catalog", {})), inputs=dict(data.get("inputs", {})),
                      extra={k: v for k, v in data.items() if k not in _KNOWN_KEYS})
    except (KeyError, TypeError) as exc:
        raise ScenarioError(f"scenario file {path}: missing or malformed key {exc}") from None
    _check(sc)
    return sc


def load_suite(suite: str) -> list[Scenario]:
    found = [s for s in (load(n) for n in builtin_names()) if suite in s.suites]
    if not found:
        suites = sorted({x for n in builtin_names() for x in load(n).suites})
        raise ScenarioError(f"unknown suite {suite!r} (suites: {', '.join(suites)})")
    return found


def _ids(rng: random.Random, vocab: int, n: int) -> list[int]:
    return [rng.randrange(3, vocab) for _ in range(n)]


QUICK_DIV, SMOKE_DIV = 4, 32  # --quick and --smoke: the throughput workloads' requests divided by this


def requests_divisor(quick: bool | int) -> int:
    """``quick`` as given to build_job: False (all requests), True (--quick) or a divisor."""
    return 1 if not quick else QUICK_DIV if quick is True else int(quick)


def _timing(sc: Scenario, quick: bool | int, latency: bool = True) -> dict:
    """Timed repeats and warm-up runs per engine process: one repeat of each throughput workload under --quick /
    --smoke; the latency workloads (a run is short) keep the scenario's (``latency``: a job that has them)."""
    repeats = sc.perf.get("repeats", 3)
    out = {"repeats": 1 if quick else repeats, "warmup": sc.perf.get("warmup", 1)}
    return {**out, "latency_repeats": repeats} if latency else out


def build_job(sc: Scenario, model_dir: str, mode: str, quick: bool | int = False, engine: str = "") -> dict:
    """The driver's job for this scenario: same seed, same prompts on every run.

    ``quick``: True or a divisor (--quick 4, --smoke 32) for fewer throughput requests and one repeat of each (the
    latency workloads keep their repeats).
    ``engine`` "transformers": its own job (``_transformers_job``).
    """
    if engine == "transformers":
        return _transformers_job(sc, model_dir, quick)
    if sc.family == "embedding" and not sc.correctness:
        return _pooling_job(sc, model_dir, mode, quick)
    if sc.family == "diffusion":
        return _diffusion_job(sc, model_dir, mode, quick)
    rng = random.Random(sc.seed)
    vocab = sc.prompt_vocab
    c = sc.correctness
    job = {"model_dir": model_dir, "dtype": sc.dtype, "seed": sc.seed, "mode": mode,
           "engine_args": dict(sc.engine),
           "correctness": {"prompts": [_ids(rng, vocab, c["prompt_len"]) for _ in range(c["requests"])],
                           "max_tokens": c["output_len"],
                           "teacher": [_ids(rng, vocab, c["teacher_len"]) for _ in range(max(1, c["requests"] // 2))]}}
    if sc.perf:
        p = sc.perf
        div = requests_divisor(quick)
        job["perf"] = {**_timing(sc, quick),
                       "throughput": {n: {"prompts": [_ids(rng, vocab, w["input_len"])
                                                      for _ in range(max(1, w["requests"] // div))],
                                          "output_len": w["output_len"]} for n, w in p.get("throughput", {}).items()},
                       "latency": {n: {"prompts": [_ids(rng, vocab, w["input_len"]) for _ in range(w["batch"])],
                                       "output_len": w["output_len"]} for n, w in p.get("latency", {}).items()}}
    if sc.family == "audio":  # each decoder prompt with its own seeded clip of [inputs] audio_seconds
        job["audio"] = {"seconds": float(sc.inputs.get("audio_seconds", 30))}
        _start_decoder_prompts(job, sc.model.get("decoder_start_token_id"))
    if sc.extra.get("speculative"):
        job["speculative"] = speculative_job(sc.extra["speculative"], model_dir)
    elif quick and sc.perf:
        _fewer_graphs(job)
    return job


TOKEN_WORKLOADS = ("throughput", "latency")  # the timed workload kinds of a token job's "perf"


def parse_workloads(text: str) -> tuple[str, ...]:
    """--workloads' items, comma separated: each 'KIND', 'NAME', 'KIND:NAME' or 'KIND NAME' (``workload_named``)."""
    return tuple(dict.fromkeys(item.strip() for item in text.split(",") if item.strip()))


def workload_named(item: str, kind: str, name: str) -> bool:
    """Whether --workloads' ``item`` names workload ``name`` of ``kind`` (throughput, latency)."""
    k, sep, n = item.replace(":", " ", 1).partition(" ")
    return (k == kind and n.strip() == name) if sep else item in (kind, name)


def workload_names(perf: dict) -> list[str]:
    """'KIND NAME' of each timed workload of a token job's ``perf`` (none for a job timing items per second)."""
    return [f"{kind} {name}" for kind in TOKEN_WORKLOADS for name in (perf.get(kind) or {})]


def items_naming(perf: dict, chosen: tuple[str, ...]) -> set[str]:
    """The items of ``chosen`` that name at least one timed workload of a token job's ``perf``."""
    return {c for c in chosen for kind in TOKEN_WORKLOADS for name in (perf.get(kind) or {})
            if workload_named(c, kind, name)}


def keep_workloads(perf: dict, chosen: tuple[str, ...]) -> dict:
    """A token job's ``perf`` with only the workloads ``chosen`` names (each kept workload's requests as the whole
    job has them); its repeats and warm-up as they were."""
    return {**perf, **{kind: {name: w for name, w in perf[kind].items()
                              if any(workload_named(c, kind, name) for c in chosen)}
                       for kind in TOKEN_WORKLOADS if kind in perf}}


def _start_decoder_prompts(job: dict, start: int | None) -> None:
    """Every prompt of an encoder-decoder job begins with the decoder's start token, as Whisper's do (vLLM prepends
    it to a prompt that lacks it, which would shift the teacher-forced positions by one)."""
    if start is None:
        return
    for prompts in prompt_batches(job):
        for p in prompts:
            p[0] = int(start)


def prompt_batches(job: dict) -> list[list]:
    """Every batch of prompts a token job sends: correctness (greedy, teacher-forced), then each timed workload."""
    c = job["correctness"]
    return [c["prompts"], c["teacher"]] + [w["prompts"] for kind in ("throughput", "latency")
                                           for w in job.get("perf", {}).get(kind, {}).values()]


GRAPH_SIZES_DEFAULT_FROM = 256  # the engines capture up to 256-512 by default: fewer sizes only below that


def _fewer_graphs(job: dict) -> None:
    """Under --quick / --smoke: ``graph_sizes``, the batch sizes up to the largest batch the job sends (powers of
    two), for vLLM on CUDA to capture instead of its defaults: one vLLM 0.26 start spent 41 s of its 58 s capturing
    and profiling 86 graph sizes up to 512 tokens (docs/design/suite-time.md). Both sides run the same job; a
    scenario's own sizes stay, and speculative decoding (vLLM fits its sizes to the draft) is left at the engine's."""
    cc = job["engine_args"].get("compilation_config") or {}
    if "cudagraph_capture_sizes" in cc or "max_cudagraph_capture_size" in cc:
        return
    largest = max(len(prompts) for prompts in prompt_batches(job))
    sizes = [1 << i for i in range((largest - 1).bit_length() + 1)]  # 1, 2, 4, ... up to largest rounded up
    if sizes[-1] >= GRAPH_SIZES_DEFAULT_FROM:
        return
    job["graph_sizes"] = sizes


SPECULATIVE_KEYS = ("method", "num_speculative_tokens", "num_steps", "eagle_topk", "num_draft_tokens")


def speculative_job(spec: dict, model_dir: str) -> dict:
    """The job's speculative decoding settings from the scenario's [speculative] table: the draft head that
    ``fk_adapters.weights.scenario_checkpoint`` writes from [speculative.model] is in ``draft_dir``."""
    out = {k: spec[k] for k in SPECULATIVE_KEYS if k in spec}
    if spec.get("model"):
        out["draft_dir"] = draft_weights.draft_dir(model_dir)
    return out


def _pooling_job(sc: Scenario, model_dir: str, mode: str, quick: bool | int) -> dict:
    """An embedding model in an engine's pooling runner: ``pooling`` holds the correctness batch (the smallest of
    [inputs] batches) and, per batch size, its seeded sequences of ``seq_len`` token ids; perf as the transformers
    host's (items/s over ``iters`` calls per repeat, the latency of one)."""
    rng = random.Random(sc.seed)
    batches = _item_batches(sc)
    n = int(sc.inputs["seq_len"])
    seqs = {f"batch{b}": [_ids(rng, sc.prompt_vocab, n) for _ in range(b)] for b in batches}
    return {"model_dir": model_dir, "dtype": sc.dtype, "seed": sc.seed, "mode": mode, "engine_args": dict(sc.engine),
            "family": sc.family, "pooling": {"correctness": seqs[f"batch{batches[0]}"], "batches": seqs,
                                             "task": "token_embed" if late_interaction(sc) else "embed"},
            "perf": _items_perf(sc, quick, batches)}


def _item_batches(sc: Scenario) -> list[int]:
    """The [inputs] batch sizes of a model whose item is not a token, smallest first."""
    return sorted({int(b) for b in sc.inputs.get("batches", [2])})


def _items_perf(sc: Scenario, quick: bool | int, batches: list[int]) -> dict:
    """Items/s per batch size over ``iters`` calls per repeat (``driver_common.measure_items``)."""
    return {**_timing(sc, quick, latency=False),
            "iters": max(1, TRANSFORMERS_ITERS // requests_divisor(quick)), "batches": batches}


TRANSFORMERS_ITERS = 8  # forwards per timed throughput repeat of a non-LLM model (divided by --quick / --smoke)
TRANSFORMERS_REQUESTS = 4  # correctness prompts of an LLM scenario that has no [correctness] table


def _diffusion_job(sc: Scenario, model_dir: str, mode: str, quick: bool | int) -> dict:
    """A diffusion engine's job: the [model] table (the pipeline folder is written from it), [inputs] for each
    request, the smallest batch for correctness and items/s per batch size, as the transformers host's."""
    return {"model_dir": model_dir, "dtype": sc.dtype, "seed": sc.seed, "mode": mode, "family": sc.family,
            "engine_args": dict(sc.engine), "model": dict(sc.model), "inputs": dict(sc.inputs),
            **_items_workloads(sc, quick)}


def _items_workloads(sc: Scenario, quick: bool | int) -> dict:
    """A model whose item is not a token: its correctness batch (the smallest [inputs] batch) and items/s perf."""
    batches = _item_batches(sc)
    return {"correctness_batch": batches[0], "perf": _items_perf(sc, quick, batches)}


def _transformers_job(sc: Scenario, model_dir: str, quick: bool | int) -> dict:
    """Eager, always. LLMs: token workloads ([correctness] and [perf], else from [inputs]: prompt_len, output_len,
    one throughput workload per batch size, latency at the smallest); other families: [inputs] for one forward
    on a seeded batch (the smallest batch size) and items/s per batch size. ``library`` and ``architectures`` say
    which class the driver loads (another library's model: [model] class)."""
    rng = random.Random(sc.seed)
    batches = _item_batches(sc)
    archs = [sc.model["class"]] if sc.library != libraries.DEFAULT else list(sc.model["architectures"])
    job = {"engine": "transformers", "model_dir": model_dir, "dtype": sc.dtype, "seed": sc.seed, "mode": "eager",
           "library": sc.library, "architectures": archs, "family": sc.family, "inputs": dict(sc.inputs)}
    if sc.family != "llm":
        return dict(job, **_items_workloads(sc, quick))
    perf = _timing(sc, quick)
    if sc.correctness:
        tokens = build_job(sc, model_dir, "eager", quick)
        job.update({k: tokens[k] for k in ("correctness", "perf") if k in tokens})
        return job
    vocab, p, n = sc.prompt_vocab, sc.inputs["prompt_len"], sc.inputs["output_len"]
    job["correctness"] = {"prompts": [_ids(rng, vocab, p) for _ in range(TRANSFORMERS_REQUESTS)], "max_tokens": n,
                          "teacher": [_ids(rng, vocab, p + n) for _ in range(max(1, TRANSFORMERS_REQUESTS // 2))]}
    job["perf"] = dict(perf, throughput={f"batch{b}": {"prompts": [_ids(rng, vocab, p) for _ in range(b)],
                                                       "output_len": n} for b in batches},
                       latency={f"batch{batches[0]}": {"prompts": [_ids(rng, vocab, p) for _ in range(batches[0])],
                                                       "output_len": n}})
    return job
