"""diffusers models in the transformers host, without an engine process: seeded checkpoints, loading, inputs and the
denoising loops of tiny-flux, tiny-sdxl and tiny-hunyuanvideo (real diffusers on CPU, seconds)."""
import importlib.util
import json
import math

import pytest

from fk_adapters import scenarios, weights

pytestmark = pytest.mark.skipif(importlib.util.find_spec("diffusers") is None, reason="diffusers is not installed")


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """Tiny models on one thread: on a busy CPU, two threads per op made a 0.3 s loop take 40 s."""
    import torch

    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    """{scenario: (its scenario, its float32 checkpoint folder)}, written once."""
    out = {}
    for name in ("tiny-flux", "tiny-sdxl"):
        sc = scenarios.load(name)
        folder = str(tmp_path_factory.mktemp(name))
        weights.write_checkpoint(sc.model, folder, sc.seed, sc.dtype)
        out[name] = sc, folder
    return out


def _loaded(checkpoints, name, **inputs):
    from fk_adapters.engines.transformers import driver

    sc, folder = checkpoints[name]
    job = scenarios.build_job(sc, folder, "eager", engine="transformers")
    job["inputs"].update(inputs)
    return driver.load_model(job, "cpu"), job


def test_the_checkpoint_is_the_classes_own_seeded_and_spread_and_keyed_by_the_diffusers_version(
        checkpoints, tmp_path, monkeypatch):
    import torch
    from safetensors.torch import load_file

    from fk_adapters.engines.transformers.libraries import diffusers_loader

    sc, folder = checkpoints["tiny-flux"]
    key = weights.write_checkpoint(sc.model, str(tmp_path / "a"), sc.seed, sc.dtype)
    assert weights.write_checkpoint(sc.model, folder, sc.seed, sc.dtype) == key  # reused: the same key
    a = load_file(f"{folder}/diffusion_pytorch_model.safetensors")
    b = load_file(str(tmp_path / "a" / "diffusion_pytorch_model.safetensors"))
    assert set(a) == set(b) and all(torch.equal(a[k], b[k]) for k in a)  # same seed, same bytes
    norm = a["transformer_blocks.0.attn.norm_q.weight"]  # RMSNorm: 1 + N(0, 0.1), not the init's ones
    assert 0.05 < norm.std().item() < 0.2 and abs(norm.mean().item() - 1) < 0.1
    assert a["norm_out.linear.bias"].std().item() > 0  # a linear's bias keeps the class's own (nonzero) init
    cfg = json.loads(open(f"{folder}/config.json").read())
    assert cfg["_class_name"] == "FluxTransformer2DModel" and cfg["num_single_layers"] == 2
    assert "library" not in cfg and "scheduler" not in cfg
    sched = json.loads(open(f"{folder}/scheduler/scheduler_config.json").read())
    assert sched["_class_name"] == "FlowMatchEulerDiscreteScheduler" and sched["max_shift"] == 1.15
    assert json.loads(open(f"{folder}/fk-weights.json").read())["writer"] == "diffusers"
    assert weights.write_checkpoint(sc.model, str(tmp_path / "c"), sc.seed + 1, sc.dtype) != key
    monkeypatch.setattr(diffusers_loader, "version", lambda: "0.0.1")
    assert weights.write_checkpoint(sc.model, str(tmp_path / "a"), sc.seed, sc.dtype) != key  # rewritten


def test_a_bfloat16_checkpoint_is_written_in_bfloat16(tmp_path):
    from safetensors.torch import load_file

    sc = scenarios.load("tiny-flux")
    weights.write_checkpoint(sc.model, str(tmp_path), sc.seed, "bfloat16")
    dtypes = {str(t.dtype) for t in load_file(str(tmp_path / "diffusion_pytorch_model.safetensors")).values()}
    assert dtypes == {"torch.bfloat16"}


def test_an_unknown_class_or_library_is_one_clear_error(tmp_path):
    from fk_adapters.engines.transformers import libraries

    with pytest.raises(libraries.LibraryError, match="no class 'NoSuchModel'"):
        weights.write_checkpoint({"library": "diffusers", "class": "NoSuchModel"}, str(tmp_path), 0, "float32")
    with pytest.raises(libraries.LibraryError, match="no loader for library 'keras'"):
        libraries.loader("keras")
    assert libraries.of({}) == "transformers" and libraries.of({"library": "diffusers"}) == "diffusers"


def test_the_job_names_the_library_and_class():
    sc = scenarios.load("tiny-sdxl")
    job = scenarios.build_job(sc, "/m", "eager", engine="transformers")
    assert (job["library"], job["architectures"], job["family"]) == ("diffusers", ["UNet2DConditionModel"],
                                                                     "diffusion")
    assert job["correctness_batch"] == 1 and job["perf"]["batches"] == [1, 2] and job["inputs"]["steps"] == 4
    assert scenarios.build_job(scenarios.load("tiny-dinov3"), "/m", "eager", engine="transformers")["library"] \
        == "transformers"


def _calls(model):
    """Batch sizes of each call of the diffusers model inside a loop."""
    seen = []
    model.model.register_forward_pre_hook(lambda m, args, kwargs: seen.append(
        (args[0] if args else kwargs["hidden_states"]).shape[0]), with_kwargs=True)
    return seen


def test_flux_runs_the_shifted_flow_matching_loop_from_packed_seeded_latents(checkpoints):
    import torch

    from fk_adapters.engines.transformers import driver
    from fk_adapters.engines.transformers.libraries.denoising import FluxLoop

    loop, job = _loaded(checkpoints, "tiny-flux")
    assert isinstance(loop, FluxLoop) and type(loop.scheduler).__name__ == "FlowMatchEulerDiscreteScheduler"
    x = driver.batch(loop, job, 2, "cpu")
    assert x["latents"].shape == (2, 16, 16)  # 64 px / 8 / 2 = a 4 x 4 grid of packed tokens, 4 channels x 2 x 2
    assert x["img_ids"][5].tolist() == [0, 1, 1] and x["prompt_embeds"].shape == (2, 8, 32)
    assert all(torch.equal(x[k], driver.batch(loop, job, 2, "cpu")[k]) for k in x)  # seeded
    seen = _calls(loop)
    with torch.inference_mode():
        out = loop(**x)
    assert seen == [2, 2, 2, 2] and out["latents"].shape == x["latents"].shape
    assert not torch.allclose(out["latents"], x["latents"])
    mu = 0.5 + (1.15 - 0.5) / (4096 - 256) * (16 - 256)  # FLUX's shift for 16 tokens
    want = [math.exp(mu) / (math.exp(mu) + 1 / s - 1) for s in (1.0, 0.75, 0.5, 0.25)]
    assert loop.scheduler.timesteps.tolist() == pytest.approx([1000 * s for s in want], rel=1e-5)
    with torch.inference_mode():
        assert torch.equal(loop(**x)["latents"], out["latents"])  # a second loop starts afresh


def test_sdxl_runs_the_euler_loop_with_guidance_on_a_doubled_batch(checkpoints):
    import torch

    from fk_adapters.engines.transformers import driver
    from fk_adapters.engines.transformers.libraries.denoising import UNetLoop

    loop, job = _loaded(checkpoints, "tiny-sdxl")
    assert isinstance(loop, UNetLoop) and type(loop.scheduler).__name__ == "EulerDiscreteScheduler"
    x = driver.batch(loop, job, 1, "cpu")
    assert x["latents"].shape == (1, 4, 8, 8) and x["text_embeds"].shape == (1, 32)
    assert x["time_ids"].tolist() == [[64, 64, 0, 0, 64, 64]]
    seen = _calls(loop)
    with torch.inference_mode():
        guided = loop(**x)["latents"]
        loop.guidance_scale = 1.0
        plain = loop(**x)["latents"]
    assert seen == [2] * 4 + [1] * 4  # classifier-free guidance: the negative and the prompt in one batch
    assert loop.scheduler.timesteps.tolist() == [751, 501, 251, 1]  # SDXL's "leading" spacing, offset 1
    assert guided.shape == (1, 4, 8, 8) and not torch.allclose(guided, plain)


def test_a_bfloat16_run_saves_the_float32_loop_as_its_reference(tmp_path, monkeypatch):
    import torch
    from safetensors.torch import load_file

    from fk_adapters.engines.transformers import driver

    sc = scenarios.load("tiny-flux")
    weights.write_checkpoint(sc.model, str(tmp_path / "m"), sc.seed, "bfloat16")
    job = scenarios.build_job(sc, str(tmp_path / "m"), "eager", engine="transformers")
    job["dtype"] = "bfloat16"
    loop = driver.load_model(job, "cpu")
    before = {k: v.clone() for k, v in loop.state_dict().items()}
    monkeypatch.setenv("FK_RUN_DIR", str(tmp_path))
    res = driver._reference(loop, job, "cpu")
    ref = load_file(res["reference_file"])
    assert set(ref) == {"latents"} and ref["latents"].dtype == torch.float32
    after = loop.state_dict()
    assert all(after[k].dtype == torch.bfloat16 and torch.equal(after[k], before[k]) for k in before)
    with torch.inference_mode():
        out = loop(**driver.batch(loop, job, 1, "cpu"))["latents"].float()
    assert out.dtype == torch.float32 and 0 < (out - ref["latents"]).abs().mean() < 0.1 * ref["latents"].abs().mean()


def test_hunyuanvideo_runs_the_shifted_flow_matching_loop_with_guidance_as_two_calls():
    """Built in memory from tiny-hunyuanvideo's config: 4 steps of two calls (the prompt, then the empty negative)."""
    import torch

    from fk_adapters.engines.transformers.libraries import denoising, diffusers_loader

    sc = scenarios.load("tiny-hunyuanvideo")
    torch.manual_seed(sc.seed)
    model = diffusers_loader.diffusers_class(sc.model["class"]).from_config(
        diffusers_loader.class_config(sc.model)).eval()
    sched = diffusers_loader.diffusers_class(sc.model["scheduler"]["class"]).from_config(
        diffusers_loader.class_config(sc.model["scheduler"]))
    loop = denoising.loop(model, sched, sc.inputs)
    assert isinstance(loop, denoising.HunyuanVideo15Loop)
    x = diffusers_loader.batch(loop, sc.inputs, 2, sc.seed, "cpu", torch.float32)
    assert x["latents"].shape == (2, 4, 3, 4, 4)  # 9 frames / 4 + 1, 64 px / 16
    assert x["prompt_mask"].tolist() == [[1.0] * 6 + [0.0] * 2] * 2 and x["glyph_mask"][0].sum() == 4
    assert x["negative_mask"][1].sum() == 3 and x["glyph_embeds"].shape == (2, 8, 24)
    assert all(torch.equal(v, diffusers_loader.batch(loop, sc.inputs, 2, sc.seed, "cpu", torch.float32)[k])
               for k, v in x.items())  # seeded
    seen = []
    model.register_forward_pre_hook(lambda m, args, kw: seen.append(kw), with_kwargs=True)
    with torch.inference_mode():
        out = loop(**x)["latents"]
    assert len(seen) == 8 and out.shape == x["latents"].shape and not torch.allclose(out, x["latents"])
    first, negative = seen[0], seen[1]
    assert first["hidden_states"].shape == (2, 9, 3, 4, 4)  # the latents, t2v's zero condition latents and mask
    assert torch.equal(first["hidden_states"][:, :4], x["latents"]) and not first["hidden_states"][:, 4:].any()
    assert first["image_embeds"].shape == (2, 729, 16) and not first["image_embeds"].any()
    assert torch.equal(negative["encoder_hidden_states"], x["negative_embeds"])
    assert not negative["encoder_attention_mask_2"].any()  # the empty prompt has no glyph text
    assert first["timestep"].tolist() == [1000.0, 1000.0]
    want = [5 * s / (1 + 4 * s) * 1000 for s in (1.0, 0.75, 0.5, 0.25)]  # shift 5 on sigmas 1 .. 1/4
    assert loop.scheduler.timesteps.tolist() == pytest.approx(want, rel=1e-5)
    seen.clear()
    with torch.inference_mode():
        assert torch.equal(loop(**x)["latents"], out)  # a second loop starts afresh
        loop.guidance_scale = 1.0
        assert not torch.allclose(loop(**x)["latents"], out)
    assert len(seen) == 8 + 4  # without guidance, one call a step
