import json
import os
import time

import pytest
import torch
from safetensors.torch import load_file

from fk_adapters import scenarios, weights


@pytest.mark.parametrize("name", ["tiny-llama", "tiny-qwen2", "tiny-gemma"])
def test_checkpoint_is_seeded_realistic_and_complete(tmp_path, name):
    sc = scenarios.load(name)
    key = weights.write_checkpoint(sc.model, str(tmp_path / "a"), sc.seed, "float32")
    assert weights.write_checkpoint(sc.model, str(tmp_path / "a"), sc.seed, "float32") == key  # reused
    weights.write_checkpoint(sc.model, str(tmp_path / "b"), sc.seed, "float32")
    a, b = load_file(str(tmp_path / "a" / "model.safetensors")), load_file(str(tmp_path / "b" / "model.safetensors"))
    assert set(a) == set(weights.parameter_shapes(sc.model))
    assert all(torch.equal(a[k], b[k]) for k in a)  # same seed, same bytes
    emb = a["model.embed_tokens.weight"]
    assert 0.015 < emb.std().item() < 0.025  # not the engines' flat dummy weights
    norm = a["model.norm.weight"]
    assert norm.std().item() > 0.05  # norm weights vary, so a kernel ignoring them shows
    cfg = json.loads((tmp_path / "a" / "config.json").read_text())
    assert cfg["torch_dtype"] == "float32" and cfg["architectures"] == sc.model["architectures"]
    assert ("lm_head.weight" in a) == (name != "tiny-gemma")
    assert ("model.layers.0.self_attn.q_proj.bias" in a) == (name == "tiny-qwen2")


def test_other_seed_other_weights(tmp_path):
    sc = scenarios.load("tiny-llama")
    weights.write_checkpoint(sc.model, str(tmp_path / "a"), 0, "float32")
    weights.write_checkpoint(sc.model, str(tmp_path / "b"), 1, "float32")
    a, b = load_file(str(tmp_path / "a" / "model.safetensors")), load_file(str(tmp_path / "b" / "model.safetensors"))
    assert not torch.equal(a["model.embed_tokens.weight"], b["model.embed_tokens.weight"])


def test_a_family_checkpoint_for_a_gpu_is_drawn_in_a_child_and_keyed_by_its_device(tmp_path, monkeypatch):
    sc = scenarios.load("tiny-llama")
    cfg = dict(sc.model, torch_dtype="float32")
    for d in ("here", "child"):
        os.makedirs(tmp_path / d)
    weights.write_family(cfg, str(tmp_path / "here"), sc.seed, "float32")
    weights._in_child(["family", cfg, str(tmp_path / "child"), sc.seed, "float32", "cpu"], None, "cpu")
    here, child = (load_file(str(tmp_path / d / "model.safetensors")) for d in ("here", "child"))
    assert set(here) == set(child) and all(torch.equal(here[k], child[k]) for k in here)
    cpu_key = weights.write_checkpoint(sc.model, str(tmp_path / "cpu"), sc.seed, "float32")
    seen = []
    monkeypatch.setattr(weights, "_in_child", lambda args, env, device: seen.append((args[0], args[-1])))
    gpu_key = weights.write_checkpoint(sc.model, str(tmp_path / "gpu"), sc.seed, "float32", "cuda")
    assert seen == [("family", "cuda")] and gpu_key != cpu_key  # CUDA's generator draws other bytes


def test_a_disk_that_fills_while_writing_is_a_weights_error_and_leaves_no_partial_checkpoint(tmp_path, monkeypatch):
    from safetensors import SafetensorError

    sc = scenarios.load("tiny-llama")
    out = tmp_path / "tiny-llama-float32"

    def fills(cfg, out_dir, *_args):
        (out / "model.safetensors").write_bytes(b"half")
        raise SafetensorError("Error while serializing: I/O error: No space left on device (os error 28)")

    monkeypatch.setattr(weights, "write_family", fills)
    with pytest.raises(weights.WeightsError, match=r"writing the seeded weights to .*tiny-llama-float32 failed, the "
                       r"partial folder removed \([\d,]+ MiB free on its disk now\): .*No space left on device"):
        weights.scenario_checkpoint(sc, str(tmp_path))
    assert not out.exists()
    monkeypatch.undo()
    weights.scenario_checkpoint(sc, str(tmp_path))  # the next try writes it whole
    assert (out / "fk-weights.json").exists()


def test_a_gpu_writer_holds_the_gpu_lock_and_is_stopped_at_its_time_limit(tmp_path, monkeypatch):
    import fcntl
    import subprocess

    monkeypatch.setenv("FK_LOCK_DIR", str(tmp_path))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2")
    seen = []

    def child(cmd, timeout, **_kw):  # the lock must be held while the writer runs
        with open(tmp_path / "fk-gpu-2.lock", "a+") as f:
            with pytest.raises(BlockingIOError):
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        seen.append(timeout)
        raise subprocess.TimeoutExpired(cmd, timeout)

    monkeypatch.setattr(weights.subprocess, "run", child)
    monkeypatch.setattr(weights, "WRITER_TIMEOUT_S", 7.0)
    with pytest.raises(weights.WeightsError, match="took over 7 s"):
        weights._in_child(["family", {}, str(tmp_path), 0, "float32", "cuda"], None, "cuda")
    assert seen == [7.0]
    with open(tmp_path / "fk-gpu-2.lock", "a+") as f:  # released after the writer
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)


def test_two_runs_writing_one_model_folder_take_turns_and_the_second_reuses_the_first(tmp_path, monkeypatch):
    import threading

    config = {"architectures": ["LlamaForCausalLM"], "hidden_size": 32}
    out, wrote, inside = str(tmp_path / "m"), [], threading.Lock()

    def write_family(cfg, out_dir, seed, dtype, device="cpu"):
        assert inside.acquire(blocking=False), "two writers in one folder at once"
        wrote.append(out_dir)
        time.sleep(0.3)
        inside.release()

    monkeypatch.setattr(weights, "write_family", write_family)
    keys = []
    runs = [threading.Thread(target=lambda: keys.append(weights.write_checkpoint(config, out, 0, "float32")))
            for _ in range(2)]
    for t in runs:
        t.start()
    for t in runs:
        t.join()
    assert wrote == [out] and len(keys) == 2 and len(set(keys)) == 1  # one wrote, the other found its stamp


def test_unknown_architecture():
    with pytest.raises(weights.WeightsError):
        weights.parameter_shapes({"architectures": ["Foo"], "hidden_size": 8})


REPO = os.path.dirname(os.path.dirname(os.path.abspath(weights.__file__)))
TINY_MOE = {"architectures": ["MixtralForCausalLM"], "model_type": "mixtral", "hidden_size": 64,
            "intermediate_size": 96,
            "num_hidden_layers": 1, "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 32,
            "vocab_size": 128, "num_local_experts": 4, "num_experts_per_tok": 2}


def test_other_architectures_are_built_by_transformers_in_checkpoint_names(tmp_path):
    from safetensors import safe_open

    a, b = tmp_path / "a", tmp_path / "b"
    key = weights.write_checkpoint(TINY_MOE, str(a), 3, "float32")
    assert weights.write_checkpoint(TINY_MOE, str(b), 3, "float32") == key
    with safe_open(str(a / "model.safetensors"), "pt") as fa, safe_open(str(b / "model.safetensors"), "pt") as fb:
        assert "model.layers.0.block_sparse_moe.experts.3.w2.weight" in fa.keys()  # per expert, as checkpoints are
        for name in fa.keys():
            assert torch.equal(fa.get_tensor(name), fb.get_tensor(name)), name  # same seed, same bytes
        norm = fa.get_tensor("model.layers.0.input_layernorm.weight")
        assert 0.05 < float(norm.std()) < 0.2 and abs(float(norm.mean()) - 1) < 0.1  # not all ones


def test_glm4_is_built_by_transformers_with_spread_norms_and_biases(tmp_path):
    """tiny-glm4 (GPT-J-style rotary): four norms a layer and q/k/v biases, none left at the init's constant."""
    from safetensors import safe_open

    sc = scenarios.load("tiny-glm4")
    weights.write_checkpoint(sc.model, str(tmp_path), sc.seed, sc.dtype)
    with safe_open(str(tmp_path / "model.safetensors"), "pt") as f:
        p = "model.layers.1."
        assert f.get_tensor(p + "mlp.gate_up_proj.weight").shape == (2 * 640, 256)  # fused, as GLM-4 checkpoints
        for norm in ("input_layernorm", "post_self_attn_layernorm", "post_attention_layernorm", "post_mlp_layernorm"):
            assert float(f.get_tensor(p + norm + ".weight").std()) > 0.05, norm
        for proj in "qkv":
            assert 0.01 < float(f.get_tensor(p + f"self_attn.{proj}_proj.bias").std()) < 0.03, proj


def test_an_alias_is_written_by_its_transformers_class_under_the_checkpoints_name(tmp_path, monkeypatch):
    import transformers

    from fk_adapters import model_classes

    assert model_classes.model_class("Qwen2_5OmniModel") is transformers.Qwen2_5OmniForConditionalGeneration
    monkeypatch.setitem(model_classes.ALIASES, "TinyMoeAlias", "MixtralForCausalLM")
    weights.write_checkpoint(dict(TINY_MOE, architectures=["TinyMoeAlias"]), str(tmp_path), 0, "float32")
    assert json.loads((tmp_path / "config.json").read_text())["architectures"] == ["TinyMoeAlias"]


def test_an_architecture_transformers_lacks_is_one_clear_error(tmp_path):
    with pytest.raises(weights.WeightsError, match="not a class of transformers"):
        weights.write_checkpoint(dict(TINY_MOE, architectures=["NoSuchForCausalLM"]), str(tmp_path), 0, "float32")


def test_a_writer_pythonpath_builds_what_transformers_here_cannot_in_a_child_with_the_same_bytes(tmp_path, monkeypatch):
    from safetensors import safe_open

    key = weights.write_checkpoint(TINY_MOE, str(tmp_path / "here"), 3, "float32")
    monkeypatch.setenv(weights.WRITER_PATH_VAR, REPO)  # the child imports fk from the repo, transformers as here
    assert weights._writer_env(TINY_MOE) is None  # transformers here has Mixtral: built here
    monkeypatch.setattr(weights, "_builds_here", lambda config: False)
    assert weights.write_checkpoint(TINY_MOE, str(tmp_path / "child"), 3, "float32") == key
    with safe_open(str(tmp_path / "here" / "model.safetensors"), "pt") as fa, \
            safe_open(str(tmp_path / "child" / "model.safetensors"), "pt") as fb:
        assert set(fa.keys()) == set(fb.keys())
        assert all(torch.equal(fa.get_tensor(n), fb.get_tensor(n)) for n in fa.keys())


def test_the_writers_transformers_version_keys_its_checkpoints(tmp_path, monkeypatch):
    fake = tmp_path / "site" / "transformers"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("__version__ = '0.0.fake'\n")
    monkeypatch.setenv(weights.WRITER_PATH_VAR, os.pathsep.join([str(tmp_path / "site"), REPO]))
    assert weights._transformers_version(TINY_MOE) != "0.0.fake"  # built here: this process's version
    monkeypatch.setattr(weights, "_builds_here", lambda config: False)
    assert weights._transformers_version(TINY_MOE) == "0.0.fake"  # the writer's, not this process's
    with pytest.raises(weights.WeightsError, match="writing the weights on cpu failed"):  # built there, not here
        weights.write_checkpoint(TINY_MOE, str(tmp_path / "w"), 3, "float32")
    (fake / "__init__.py").write_text("raise ImportError('broken on purpose')\n")
    broken = "transformers does not import there: ImportError: broken on purpose"
    with pytest.raises(weights.WeightsError, match=broken):
        weights._transformers_version(TINY_MOE)


def test_builds_here_knows_what_this_transformers_lacks():
    assert weights._builds_here(TINY_MOE)
    assert not weights._builds_here(dict(TINY_MOE, architectures=["NoSuchForCausalLM"]))
    assert not weights._builds_here(dict(TINY_MOE, model_type="no_such_type"))


# the tensors of yuhuili/EAGLE3-LLaMA3.1-Instruct-8B (the fk46-eagle-3 head), as vLLM's Eagle3LlamaForCausalLM and
# SGLang's LlamaForCausalLMEagle3 load them: no embed_tokens (the target's is shared)
EAGLE3_8B = {"midlayer.input_layernorm.weight": (4096,), "midlayer.hidden_norm.weight": (4096,),
             "midlayer.self_attn.q_proj.weight": (4096, 8192), "midlayer.self_attn.k_proj.weight": (1024, 8192),
             "midlayer.self_attn.v_proj.weight": (1024, 8192), "midlayer.self_attn.o_proj.weight": (4096, 4096),
             "midlayer.post_attention_layernorm.weight": (4096,), "midlayer.mlp.gate_proj.weight": (14336, 4096),
             "midlayer.mlp.up_proj.weight": (14336, 4096), "midlayer.mlp.down_proj.weight": (4096, 14336),
             "fc.weight": (4096, 3 * 4096), "norm.weight": (4096,), "lm_head.weight": (32000, 4096),
             "d2t": (32000,), "t2d": (128256,)}


def test_eagle3_layout_is_the_real_heads():
    from fk_adapters import draft_weights

    spec = scenarios.load("fk46-eagle-3").extra["speculative"]["model"]
    assert {k: s for k, (s, _) in draft_weights.eagle3_shapes(spec).items()} == EAGLE3_8B
    full = draft_weights.eagle3_shapes(dict(spec, draft_vocab_size=None))
    assert "d2t" not in full and full["lm_head.weight"][0] == (128256, 4096)  # full vocabulary: no mapping
    with pytest.raises(draft_weights.DraftError, match="EAGLE-3"):
        draft_weights.eagle3_shapes(dict(spec, architectures=["LlamaForCausalLM"]))


def test_a_draft_head_fk_cannot_write_is_a_weights_error_naming_the_scenario(tmp_path):
    sc = scenarios.load("tiny-eagle-3")
    bad = scenarios.Scenario(**dict(vars(sc), extra={"speculative": dict(
        sc.extra["speculative"], model=dict(sc.extra["speculative"]["model"], num_hidden_layers=2))}))
    with pytest.raises(weights.WeightsError, match=r"tiny-eagle-3: \[speculative.model\]: .*one decoder layer"):
        weights.scenario_checkpoint(bad, str(tmp_path))


def test_scenario_checkpoint_writes_a_seeded_draft_head(tmp_path):
    from fk_adapters import draft_weights

    sc = scenarios.load("tiny-eagle-3")
    spec = sc.extra["speculative"]["model"]
    said = []
    model_dir, key = weights.scenario_checkpoint(sc, str(tmp_path / "a"), said.append)
    assert said[0] == "tiny-eagle-3: writing seeded weights"
    assert said[1].startswith("tiny-eagle-3: seeded weights ready in ")
    assert weights.scenario_checkpoint(sc, str(tmp_path / "b"))[1] == key
    target_key = weights.write_checkpoint(sc.model, model_dir, sc.seed, sc.dtype)
    assert key != target_key  # the digest covers the draft: a changed head is another checkpoint
    draft = tmp_path / "a" / f"{sc.name}-{sc.dtype}" / "draft"
    assert draft_weights.draft_dir(model_dir) == str(draft)
    a = load_file(str(draft / "model.safetensors"))
    b = load_file(str(tmp_path / "b" / f"{sc.name}-{sc.dtype}" / "draft" / "model.safetensors"))
    shapes = draft_weights.eagle3_shapes(spec)
    assert {k: tuple(t.shape) for k, t in a.items()} == {k: s for k, (s, _) in shapes.items()}
    assert all(torch.equal(a[k], b[k]) for k in a)  # same seed, same bytes
    assert 0.015 < a["fc.weight"].std().item() < 0.025 and a["midlayer.hidden_norm.weight"].std().item() > 0.05
    assert a["fc.weight"].dtype == torch.float32 and a["d2t"].dtype == torch.int64 and a["t2d"].dtype == torch.bool
    target = a["d2t"] + torch.arange(spec["draft_vocab_size"])  # draft id i is target id i + d2t[i]
    assert target.min() >= 0 and target.max() < spec["vocab_size"] and bool((target[1:] > target[:-1]).all())
    assert int(a["t2d"].sum()) == spec["draft_vocab_size"] and bool(a["t2d"][target].all())
    cfg = json.loads((draft / "config.json").read_text())
    assert cfg == dict(spec, torch_dtype="float32")
    target_emb = load_file(f"{model_dir}/model.safetensors")["model.embed_tokens.weight"]
    assert not torch.equal(a["lm_head.weight"][:4, :8], target_emb[:4, :8])  # its own generator
    changed = scenarios.Scenario(**dict(vars(sc), extra={"speculative": dict(sc.extra["speculative"],
                                                                             model=dict(spec, rms_norm_eps=1e-6))}))
    assert weights.scenario_checkpoint(changed, str(tmp_path / "a"))[1] != key  # rewritten
    assert json.loads((draft / "config.json").read_text())["rms_norm_eps"] == 1e-6


def test_checkpoint_key_fixes_rename_tensors_and_the_shard_index(tmp_path):
    import json

    import torch
    from safetensors import safe_open
    from safetensors.torch import save_file

    names = ["model.layers.0.block_sparse_moe.gate_proj.weight", "model.layers.1.block_sparse_moe.experts.0.w1.weight",
             "model.layers.1.block_sparse_moe.shared_experts.up_proj.weight"]
    save_file({n: torch.zeros(2) for n in names}, str(tmp_path / "model-00001.safetensors"), metadata={"format": "pt"})
    (tmp_path / "model.safetensors.index.json").write_text(
        json.dumps({"weight_map": {n: "model-00001.safetensors" for n in names}}))
    assert weights.rename_checkpoint_keys(str(tmp_path), weights.CHECKPOINT_KEY_FIXES["kimi_linear"]) == 1
    want = ["model.layers.0.mlp.gate_proj.weight", *names[1:]]  # experts and shared experts keep their names
    with safe_open(str(tmp_path / "model-00001.safetensors"), "pt") as f:
        assert sorted(f.keys()) == sorted(want)
    assert sorted(json.loads((tmp_path / "model.safetensors.index.json").read_text())["weight_map"]) == sorted(want)
    assert weights.rename_checkpoint_keys(str(tmp_path), ()) == 0


def test_a_library_missing_a_dependency_is_a_weights_error_naming_who_imports_it(tmp_path, monkeypatch):
    (tmp_path / "fk_lib_stand_in.py").write_text("import fk_no_such_dependency\n")
    monkeypatch.syspath_prepend(str(tmp_path))

    def write_checkpoint(*_args):
        import fk_lib_stand_in  # noqa: F401

    monkeypatch.setattr(weights, "write_checkpoint", write_checkpoint)
    with pytest.raises(weights.WeightsError, match=r"nerfstudio does not import: No module named "
                       r"'fk_no_such_dependency' \(imported by .*fk_lib_stand_in.py:1\)"):
        weights.scenario_checkpoint(scenarios.load("tiny-instantngp"), str(tmp_path))
