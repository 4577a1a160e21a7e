import re

import pytest

from fk_adapters import scenarios
from fk_adapters.scenarios import ScenarioError


def test_builtin_scenarios_load_and_tiny_suite_has_four_families():
    names = scenarios.builtin_names()
    assert {"tiny-llama", "tiny-qwen2", "tiny-gemma", "llama31-8b-4l"} <= set(names)
    for n in names:
        scenarios.load(n)
    tiny = scenarios.load_suite("tiny")
    archs = {s.model["architectures"][0] for s in tiny}
    assert archs == {"LlamaForCausalLM", "Qwen2ForCausalLM", "GemmaForCausalLM", "Glm4ForCausalLM"}  # GLM-4: GPT-J RoPE
    for s in tiny:
        head_dim = s.model.get("head_dim") or s.model["hidden_size"] // s.model["num_attention_heads"]
        assert head_dim >= 32 and s.dtype == "float32"  # CPU attention and Triton interpreter needs


def test_llama_8b_shape():
    s = scenarios.load("llama31-8b-4l")
    m = s.model
    assert (m["hidden_size"], m["intermediate_size"], m["num_attention_heads"], m["num_key_value_heads"],
            m["head_dim"], m["vocab_size"]) == (4096, 14336, 32, 8, 128, 128256)
    assert m["num_hidden_layers"] < 32 and s.dtype == "bfloat16"


def test_glm4_9b_shape():
    """GLM-4-9B-0414's config at 4 of 40 layers: the GPU scenario with GPT-J-style rotary (on half of each head)."""
    s = scenarios.load("glm4-9b-4l")
    m = s.model
    assert (m["hidden_size"], m["intermediate_size"], m["num_attention_heads"], m["num_key_value_heads"],
            m["head_dim"], m["partial_rotary_factor"], m["vocab_size"]) == (4096, 13696, 32, 2, 128, 0.5, 151552)
    assert m["architectures"] == ["Glm4ForCausalLM"] and m["num_hidden_layers"] < 40 and s.dtype == "bfloat16"


def test_unknown_and_malformed(tmp_path):
    with pytest.raises(ScenarioError, match="unknown scenario"):
        scenarios.load("nope")
    with pytest.raises(ScenarioError, match="unknown suite"):
        scenarios.load_suite("nope")
    with pytest.raises(ScenarioError, match="not found"):
        scenarios.load(str(tmp_path / "missing.toml"))
    bad = tmp_path / "bad.toml"
    bad.write_text("name = [unclosed")
    with pytest.raises(ScenarioError, match="malformed"):
        scenarios.load(str(bad))
    bad.write_text('name = "x"\ndtype = "float32"\n')
    with pytest.raises(ScenarioError, match="missing or malformed key"):
        scenarios.load(str(bad))
    text = scenarios._builtin_dir().joinpath("tiny-llama.toml").read_text()
    bad.write_text(text.replace('dtype = "float32"', 'dtype = "float64"'))
    with pytest.raises(ScenarioError, match="dtype"):
        scenarios.load(str(bad))
    mamba = tmp_path / "mamba.toml"
    mamba.write_text(text.replace('"LlamaForCausalLM"', '"MambaForCausalLM"'))
    assert scenarios.load(str(mamba)).model["architectures"] == ["MambaForCausalLM"]  # transformers builds its weights
    bad.write_text(text.replace("output_len = 12", "output_len = 0"))
    with pytest.raises(ScenarioError, match="positive integer"):
        scenarios.load(str(bad))


def test_jobs_are_deterministic_and_in_vocab():
    s = scenarios.load("tiny-llama")
    a, b = scenarios.build_job(s, "/m", "eager"), scenarios.build_job(s, "/m", "eager")
    assert a == b
    c = a["correctness"]
    assert len(c["prompts"]) == s.correctness["requests"] and len(c["prompts"][0]) == s.correctness["prompt_len"]
    ids = [t for p in c["prompts"] + c["teacher"] for t in p]
    assert min(ids) >= 3 and max(ids) < s.model["vocab_size"]
    quick = scenarios.build_job(s, "/m", "eager", quick=True)
    assert quick["correctness"] == c and quick["perf"]["repeats"] == 1
    smoke = scenarios.build_job(scenarios.load("fk46-mixtral"), "/m", "compiled", quick=32)
    assert smoke["perf"]["repeats"] == 1 and smoke["perf"]["latency_repeats"] == 3  # short runs: all repeats kept


CATALOG_ENTRY = '''name = "x"
dtype = "bfloat16"
[catalog]
number = 45
category = "World models"
architecture = "Oasis"
checkpoint = "Etched/oasis-500m"
hosts = []
not_hosted = "open-oasis only"
family = "other"
layers = { full = 16, here = 2 }
[model]
hidden_size = 1024
'''


def test_catalog_entries_are_checked(tmp_path):
    f = tmp_path / "x.toml"
    f.write_text(CATALOG_ENTRY)
    sc = scenarios.load(str(f))  # not hosted: no workloads needed
    assert sc.hosts == [] and sc.family == "other"
    with pytest.raises(ScenarioError, match="not hosted by vllm.*open-oasis only"):
        scenarios.check_runnable(sc, "vllm")
    for old, new, message in [('not_hosted = "open-oasis only"\n', "", "not_hosted must say why"),
                              ("hosts = []", 'hosts = ["trt"]', "not among"),
                              ("number = 45", "number = 47", "1..46"),
                              ('family = "other"', 'family = "robots"', "family"),
                              ("here = 2", "here = 17", "layers")]:
        f.write_text(CATALOG_ENTRY.replace(old, new))
        with pytest.raises(ScenarioError, match=message):
            scenarios.load(str(f))


def test_an_engine_hosted_llm_entry_needs_its_workloads(tmp_path):
    f = tmp_path / "x.toml"
    f.write_text(CATALOG_ENTRY.replace('hosts = []', 'hosts = ["vllm"]').replace('family = "other"', 'family = "llm"'))
    with pytest.raises(ScenarioError, match="lacks"):
        scenarios.load(str(f))


def test_every_fk46_entry_loads_with_a_distinct_number():
    entries = scenarios.load_suite("fk46")
    numbers = sorted(s.catalog["number"] for s in entries)
    assert numbers == list(range(1, 47))
    for s in entries:
        assert s.model and s.catalog["layers"]["here"] <= s.catalog["layers"]["full"]
        if s.family == "llm" and set(s.hosts) & {"vllm", "sglang"}:
            assert set(s.perf["throughput"]) == {"prefill-heavy", "balanced", "decode-heavy"}, s.name
            assert set(s.perf["latency"]) == {"batch1", "batch32"}, s.name
        elif s.hosts:
            assert s.inputs or s.correctness, s.name


def test_prompts_stay_below_placeholder_ids_of_multimodal_models():
    sc = scenarios.load("fk46-qwen2-vl")
    assert sc.prompt_vocab == 151643 < sc.model["vocab_size"]
    job = scenarios.build_job(sc, "/m", "compiled", quick=True)
    ids = [t for p in job["correctness"]["prompts"] + job["perf"]["latency"]["batch32"]["prompts"] for t in p]
    assert max(ids) < 151643


def test_a_speculative_scenario_carries_its_draft_into_the_job():
    for name, n in (("fk46-eagle-3", 5), ("tiny-eagle-3", 3)):
        sc = scenarios.load(name)
        job = scenarios.build_job(sc, "/m", "eager", quick=True)
        spec = job["speculative"]
        assert spec["method"] == "eagle3" and spec["num_speculative_tokens"] == n and spec["draft_dir"] == "/m/draft"
        assert {"num_steps", "eagle_topk", "num_draft_tokens"} <= set(spec)
        assert sc.extra["speculative"]["model"]["architectures"] == ["LlamaForCausalLMEagle3"]
    assert "speculative" not in scenarios.build_job(scenarios.load("tiny-llama"), "/m", "eager")


def test_speculative_needs_a_method(tmp_path):
    f = tmp_path / "x.toml"
    f.write_text(scenarios._builtin_dir().joinpath("tiny-llama.toml").read_text()
                 + '\n[speculative]\nnum_speculative_tokens = 3\n')
    with pytest.raises(ScenarioError, match="needs a method"):
        scenarios.load(str(f))


@pytest.mark.parametrize("old, new, message", [
    ("max_num_seqs = 8", "max_num_seqs = -3", "[engine] max_num_seqs must be a positive integer"),
    ("max_model_len = 256", "max_model_len = 0", "[engine] max_model_len must be a positive integer"),
    ("max_num_seqs = 8", "max_num_seqs = 8\ngpu_memory_utilization = 1.5", "gpu_memory_utilization must be in (0, 1]"),
    ("output_len = 12", "output_len = 100000000", "[correctness] prompt_len + output_len = 100000024 exceeds "
                                                  "[engine] max_model_len (256)"),
    ("teacher_len = 48", "teacher_len = 256", "teacher_len + 1 = 257 exceeds [engine] max_model_len"),
    ("input_len = 32, output_len = 16", "input_len = 250, output_len = 16",
     "[perf.throughput.balanced] input_len + output_len = 266 exceeds"),
    ("requests = 8,", "requests = 100000,", "[perf.throughput.balanced] requests = 100000 exceeds fk's cap"),
    ("repeats = 3", "repeats = 0", "[perf] repeats must be a positive integer"),
])
def test_impossible_numbers_are_refused_at_load(tmp_path, old, new, message):
    text = scenarios._builtin_dir().joinpath("tiny-llama.toml").read_text()
    assert old in text
    bad = tmp_path / "bad.toml"
    bad.write_text(text.replace(old, new, 1))
    with pytest.raises(ScenarioError, match=re.escape(message)):
        scenarios.load(str(bad))


def test_the_length_limit_falls_back_to_the_model_then_to_fks_cap(tmp_path):
    text = scenarios._builtin_dir().joinpath("tiny-llama.toml").read_text().replace("max_model_len = 256\n", "")
    path = tmp_path / "s.toml"
    path.write_text(text)
    assert scenarios.length_limit(scenarios.load(str(path))) == (1024, "[model] max_position_embeddings")
    unbounded = text.replace("max_position_embeddings = 1024\n", "")
    path.write_text(unbounded.replace("output_len = 12", "output_len = 1100"))
    sc = scenarios.load(str(path))  # 1124 tokens: within fk's cap once nothing else bounds it
    assert scenarios.length_limit(sc) == (scenarios.MAX_TOKENS, "fk's cap on a sequence")
    path.write_text(unbounded.replace("output_len = 12", f"output_len = {scenarios.MAX_TOKENS}"))
    with pytest.raises(ScenarioError, match="exceeds fk's cap on a sequence"):
        scenarios.load(str(path))


def test_inputs_numbers_must_be_positive(tmp_path):
    text = scenarios._builtin_dir().joinpath("tiny-dinov3.toml").read_text()
    path = tmp_path / "s.toml"
    for old, new, message in (("image_size = 64", "image_size = -64", "[inputs] image_size must be positive"),
                              ("batches = [2, 4]", "batches = [2, 0]", "[inputs] batches must be positive integers")):
        assert old in text
        path.write_text(text.replace(old, new))
        with pytest.raises(ScenarioError, match=re.escape(message)):
            scenarios.load(str(path))


def test_a_diffusers_scenario_names_its_class_and_is_hosted_by_transformers_alone(tmp_path):
    suite = scenarios.load_suite("tiny-diffusers")
    assert {(s.name, s.library, s.model["class"], s.family) for s in suite} == {
        ("tiny-flux", "diffusers", "FluxTransformer2DModel", "diffusion"),
        ("tiny-sdxl", "diffusers", "UNet2DConditionModel", "diffusion")}
    video = scenarios.load_suite("tiny-video")
    assert {(s.name, s.library, s.model["class"], s.family) for s in video} == {
        ("tiny-hunyuanvideo", "diffusers", "HunyuanVideo15Transformer3DModel", "diffusion")}
    assert scenarios.load("tiny-dinov3").library == "transformers"  # no library: transformers, as ever
    for s in suite + video + [scenarios.load("fk46-hunyuanvideo-1.5")]:
        scenarios.check_runnable(s, "transformers")
    edge = scenarios.load_suite("tiny-edge") + [scenarios.load(n) for n in ("fk46-mobilenetv4", "fk46-efficientnetv2",
                                                                             "fk46-yolov10")]
    assert {(s.library, s.model["class"]) for s in edge} == {
        ("timm", "mobilenetv4_conv_small"), ("timm", "efficientnetv2_rw_t"), ("timm", "mobilenetv4_conv_medium"),
        ("timm", "efficientnetv2_rw_m"), ("ultralytics", "yolov10n.yaml")}
    for s in edge:
        scenarios.check_runnable(s, "transformers")
    text = scenarios._builtin_dir().joinpath("tiny-flux.toml").read_text()
    bad = tmp_path / "bad.toml"
    for old, new, error in (('library = "diffusers"', 'library = "keras"', "library 'keras' not one of"),
                            ('class = "FluxTransformer2DModel"', "", "needs the model's class"),
                            ('hosts = ["transformers"]', 'hosts = ["transformers", "vllm"]',
                             "hosted by transformers only, not vllm")):
        bad.write_text(text.replace(old, new))
        with pytest.raises(ScenarioError, match=error):
            scenarios.load(str(bad))


def test_a_scenario_extends_a_built_in_one_table_by_table_without_its_suites(tmp_path):
    f = tmp_path / "x.toml"
    f.write_text('name = "x"\nextends = "tiny-llama"\n'
                 '[engine]\ntensor_parallel_size = 2\n[model]\nnum_hidden_layers = 1\n')
    sc, base = scenarios.load(str(f)), scenarios.load("tiny-llama")
    assert sc.name == "x" and sc.suites == [] and sc.dtype == base.dtype and sc.correctness == base.correctness
    assert sc.engine == dict(base.engine, tensor_parallel_size=2)
    assert sc.model == dict(base.model, num_hidden_layers=1)


@pytest.mark.parametrize("extends, match", [("no-such-scenario", "unknown scenario"), (3, "must name")])
def test_a_bad_extends_is_one_clear_error(tmp_path, extends, match):
    f = tmp_path / "x.toml"
    f.write_text(f'name = "x"\nextends = {extends!r}\n'.replace("'", '"'))
    with pytest.raises(ScenarioError, match=match):
        scenarios.load(str(f))


def test_tensor_parallel_scenarios_keep_their_base_model_and_name_their_size():
    for name, size in [("fk46-llama-3.1-tp2", 2), ("fk46-llama-3.1-tp4", 4), ("fk46-mixtral-tp2", 2),
                       ("fk46-mixtral-tp4", 4), ("fk46-qwen3-next-tp2", 2), ("fk46-qwen3-next-tp4", 4)]:
        sc = scenarios.load(name)
        assert sc.engine["tensor_parallel_size"] == size and "fk46" not in sc.suites and "fk46-tp" in sc.suites
        assert sc.model["num_hidden_layers"] == sc.catalog["layers"]["here"]
        types = sc.model.get("layer_types")
        assert types is None or len(types) == sc.model["num_hidden_layers"]
        kv = sc.model["num_key_value_heads"]  # fewer KV heads than ranks: each is replicated (size a multiple of kv)
        assert sc.model["num_attention_heads"] % size == 0 and (kv % size == 0 or size % kv == 0)


def test_smoke_jobs_ask_for_cuda_graphs_only_up_to_their_largest_batch():
    """docs/design/suite-time.md: a vLLM start spent 41 s of 58 on 86 graph sizes; a --smoke job sends at most 32."""
    mixtral = scenarios.load("fk46-mixtral")
    assert "graph_sizes" not in scenarios.build_job(mixtral, "/m", "compiled")  # full size: the engine's defaults
    assert "graph_sizes" not in scenarios.build_job(mixtral, "/m", "compiled", quick=True)  # 1/4: 256 and more
    assert scenarios.build_job(mixtral, "/m", "compiled", quick=32)["graph_sizes"] == [1, 2, 4, 8, 16, 32]
    for own in ("llama31-8b-decode", "fk46-eagle-3"):  # its own sizes; speculative decoding: vLLM fits them
        assert "graph_sizes" not in scenarios.build_job(scenarios.load(own), "/m", "compiled", quick=32), own


def test_workloads_are_named_by_kind_name_or_both():
    assert scenarios.parse_workloads(" latency , batch32,,latency") == ("latency", "batch32")
    named = scenarios.workload_named
    assert named("latency", "latency", "batch32") and named("batch32", "latency", "batch32")
    assert named("latency:batch32", "latency", "batch32") and named("latency batch32", "latency", "batch32")
    assert not named("throughput:batch32", "latency", "batch32") and not named("batch1", "latency", "batch32")
    perf = {"repeats": 3, "throughput": {"balanced": {"prompts": [[1]]}},
            "latency": {"batch1": {"prompts": [[2]]}, "batch32": {"prompts": [[3]] * 32}}}
    kept = scenarios.keep_workloads(perf, ("batch32",))
    assert kept == {"repeats": 3, "throughput": {}, "latency": {"batch32": perf["latency"]["batch32"]}}
    assert scenarios.workload_names(kept) == ["latency batch32"]
    assert scenarios.items_naming(perf, ("batch32", "throughput:batch32", "latency")) == {"batch32", "latency"}
    assert scenarios.workload_names({"iters": 8, "batches": [1, 2]}) == []  # items per second: nothing named
