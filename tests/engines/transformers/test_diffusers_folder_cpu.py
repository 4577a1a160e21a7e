"""Full diffusers pipeline folders written from fk's seeded checkpoints (``diffusers_folder``) for tiny-flux, tiny-sdxl
and tiny-hunyuanvideo: each loads with ``DiffusionPipeline.from_pretrained`` offline, keeps fk's transformer / UNet bit
for bit and runs one denoising step through the pipeline's own call (real diffusers on CPU, seconds; no engine)."""
import hashlib
import importlib.util
import json
import os

import pytest

from fk_adapters import scenarios, weights

pytestmark = pytest.mark.skipif(importlib.util.find_spec("diffusers") is None, reason="diffusers is not installed")

TINY = {"tiny-flux": "FluxPipeline", "tiny-sdxl": "StableDiffusionXLPipeline",
        "tiny-hunyuanvideo": "HunyuanVideo15Pipeline"}


@pytest.fixture(scope="module", autouse=True)
def offline_one_thread():
    """No hub (HF_HUB_OFFLINE) and tiny models on one thread, as test_diffusers.py."""
    import torch

    n = torch.get_num_threads()
    torch.set_num_threads(1)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HF_HUB_OFFLINE", "1")
        yield
    torch.set_num_threads(n)


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    """{scenario: (its scenario, fk's checkpoint, the pipeline folder)}, written once."""
    from fk_adapters.engines.transformers.libraries import diffusers_folder

    out = {}
    for name, pipeline in TINY.items():
        sc, root = scenarios.load(name), tmp_path_factory.mktemp(name)
        weights.write_checkpoint(sc.model, str(root / "ckpt"), sc.seed, sc.dtype)
        assert diffusers_folder.for_scenario(sc, str(root / "ckpt"), str(root / "pipe")) == pipeline
        out[name] = sc, root / "ckpt", root / "pipe"
    return out


def _pipeline(folders, name):
    import torch
    from diffusers import DiffusionPipeline

    sc, ckpt, folder = folders[name]
    pipe = DiffusionPipeline.from_pretrained(str(folder), dtype=torch.float32, local_files_only=True)
    assert type(pipe).__name__ == TINY[name]
    pipe.set_progress_bar_config(disable=True)
    return sc, ckpt, pipe


def _same_weights(model, ckpt):
    """The pipeline's transformer / UNet is fk's checkpoint, every tensor bit for bit."""
    import torch
    from safetensors.torch import load_file

    saved = load_file(str(ckpt / "diffusion_pytorch_model.safetensors"))
    state = model.state_dict()
    assert set(state) == set(saved)
    assert all(torch.equal(state[k], saved[k]) for k in saved)


def _fk_inputs(sc, model, scheduler):
    """fk's seeded inputs of one item (the host's loop of the model's class)."""
    import torch

    from fk_adapters.engines.transformers.libraries import denoising

    loop = denoising.loop(model, scheduler, sc.inputs)
    return loop.inputs(sc.inputs, 1, torch.Generator().manual_seed(sc.seed), "cpu", torch.float32)


def _fk_step(sc, model, scheduler, x):
    """One step of fk's own loop (the diffusers host's) on the same inputs."""
    import torch

    from fk_adapters.engines.transformers.libraries import denoising

    with torch.no_grad():
        return denoising.loop(model, scheduler, dict(sc.inputs, steps=1))(**x)["latents"]


def _digests(folder):
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("name", list(TINY))
def test_the_folder_is_the_same_bytes_for_the_same_seed_and_its_extra_weights_are_not_constant(
        folders, name, tmp_path):
    import torch
    from safetensors.torch import load_file

    from fk_adapters.engines.transformers.libraries import diffusers_folder

    sc, ckpt, folder = folders[name]
    diffusers_folder.for_scenario(sc, str(ckpt), str(tmp_path))
    assert _digests(tmp_path) == _digests(folder)
    index = json.loads((folder / "model_index.json").read_text())
    for part, entry in index.items():
        if isinstance(entry, list) and entry[0] is not None:
            assert (folder / part).is_dir(), part
    for path in folder.rglob("*.safetensors"):
        for key, t in load_file(str(path)).items():
            if t.is_floating_point() and t.numel() > 1:
                assert t.std().item() > 0, (path, key)
    seeded = load_file(str(folder / "vae" / "diffusion_pytorch_model.safetensors"))
    assert not all(torch.equal(t, seeded[k]) for k, t in load_file(
        str(_other_seed(sc, tmp_path) / "vae" / "diffusion_pytorch_model.safetensors")).items())


def _other_seed(sc, tmp_path):
    from fk_adapters.engines.transformers.libraries import diffusers_folder

    ckpt, out = tmp_path / "ckpt-other", tmp_path / "pipe-other"
    weights.write_checkpoint(sc.model, str(ckpt), sc.seed + 1, sc.dtype)
    diffusers_folder.write_pipeline_folder(str(ckpt), str(out), sc.model, sc.seed + 1, sc.dtype)
    return out


def test_flux_runs_a_real_prompt_through_its_tiny_encoders_and_one_step_as_fks_loop_does(folders):
    import torch

    sc, ckpt, pipe = _pipeline(folders, "tiny-flux")
    _same_weights(pipe.transformer, ckpt)
    assert pipe.vae_scale_factor == 8 and pipe.vae.config.latent_channels == 4  # in_channels 16 = 4 x 2x2
    assert pipe.text_encoder.config.hidden_size == sc.model["pooled_projection_dim"]
    assert pipe.text_encoder_2.config.d_model == sc.model["joint_attention_dim"]
    out = pipe(prompt="a photo of a red fox in the snow", height=64, width=64, num_inference_steps=1,
               guidance_scale=sc.inputs["guidance_scale"], output_type="latent",
               generator=torch.Generator().manual_seed(sc.seed)).images
    assert out.shape == (1, 16, 16) and torch.isfinite(out).all()  # 4 x 4 packed tokens of 4 x 2x2 channels
    # on fk's seeded embeddings and latents, the pipeline's step is fk's loop's
    x = _fk_inputs(sc, pipe.transformer, pipe.scheduler)
    out = pipe(prompt_embeds=x["prompt_embeds"], pooled_prompt_embeds=x["pooled_prompt_embeds"], latents=x["latents"],
               height=64, width=64, num_inference_steps=1, guidance_scale=sc.inputs["guidance_scale"],
               output_type="latent").images
    torch.testing.assert_close(out, _fk_step(sc, pipe.transformer, pipe.scheduler, x))


def test_flux_clip_is_saved_under_text_model_as_a_real_checkpoint_and_loads_every_weight(folders):
    """SGLang's CLIP loader matches a real checkpoint's names (``text_model.*``): with transformers' own names it
    loads none and runs HF's model instead, out of SGLang's layers (docs/design/sglang-diffusion.md)."""
    import torch
    from safetensors.torch import load_file
    from transformers import CLIPTextModel

    _, _, folder = folders["tiny-flux"]
    saved = load_file(str(folder / "text_encoder" / "model.safetensors"))
    assert saved and all(k.startswith("text_model.") for k in saved)
    model, info = CLIPTextModel.from_pretrained(str(folder / "text_encoder"), output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"]
    state = model.state_dict()  # transformers 5's CLIPTextModel holds the text model's modules at its top level
    loaded = {k.removeprefix("text_model."): v for k, v in saved.items()}
    assert set(loaded) == set(state) and all(torch.equal(state[k], loaded[k]) for k in state)


def test_flux_tokenizers_load_as_sglang_loads_them_and_pad_to_77_and_512(folders):
    from transformers import AutoTokenizer

    _, _, folder = folders["tiny-flux"]
    clip = AutoTokenizer.from_pretrained(str(folder / "tokenizer"), padding_side="right")
    t5 = AutoTokenizer.from_pretrained(str(folder / "tokenizer_2"), padding_side="right")
    assert (clip.model_max_length, t5.model_max_length) == (77, 512)
    for tok, n in ((clip, 77), (t5, 512)):
        short = tok("a cat", padding="max_length", max_length=tok.model_max_length, truncation=True).input_ids
        long = tok("a cat " * 200, padding="max_length", max_length=tok.model_max_length, truncation=True).input_ids
        assert len(short) == len(long) == n
        assert short[-1] == tok.pad_token_id and tok.eos_token_id in short and long[-1] == tok.eos_token_id
    ids = clip("a cat").input_ids
    assert ids[0] == clip.bos_token_id and ids[-1] == clip.eos_token_id == max(ids)  # CLIP's pooling token
    assert t5("a cat").input_ids[-1] == t5.eos_token_id == 1


def test_sdxl_runs_one_step_on_fks_embeddings_as_fks_loop_does(folders):
    import torch

    sc, ckpt, pipe = _pipeline(folders, "tiny-sdxl")
    _same_weights(pipe.unet, ckpt)
    assert pipe.text_encoder is None and pipe.tokenizer is None and pipe.vae_scale_factor == 8
    x = _fk_inputs(sc, pipe.unet, pipe.scheduler)
    g = sc.inputs["guidance_scale"]
    out = pipe(prompt_embeds=x["prompt_embeds"], pooled_prompt_embeds=x["text_embeds"], latents=x["latents"],
               height=64, width=64, num_inference_steps=1, guidance_scale=g, output_type="latent").images
    assert out.shape == (1, 4, 8, 8) and torch.isfinite(out).all()
    # the empty negative prompt is zeros (force_zeros_for_empty_prompt), as in fk's loop: the same step
    torch.testing.assert_close(out, _fk_step(sc, pipe.unet, pipe.scheduler, x))


def test_hunyuanvideo15_runs_one_guided_step_as_fks_loop_does_and_encodes_a_real_prompt(folders):
    import torch

    sc, ckpt, pipe = _pipeline(folders, "tiny-hunyuanvideo")
    _same_weights(pipe.transformer, ckpt)
    assert pipe.guider.guidance_scale == sc.inputs["guidance_scale"]
    assert pipe.num_channels_latents == 4 and pipe.vae_scale_factor_spatial == 16
    assert pipe.vae_scale_factor_temporal == 4
    x = _fk_inputs(sc, pipe.transformer, pipe.scheduler)
    zeros = torch.zeros_like
    out = pipe(prompt_embeds=x["prompt_embeds"], prompt_embeds_mask=x["prompt_mask"],
               prompt_embeds_2=x["glyph_embeds"], prompt_embeds_mask_2=x["glyph_mask"],
               negative_prompt_embeds=x["negative_embeds"], negative_prompt_embeds_mask=x["negative_mask"],
               negative_prompt_embeds_2=zeros(x["glyph_embeds"]), negative_prompt_embeds_mask_2=zeros(x["glyph_mask"]),
               latents=x["latents"], height=64, width=64, num_frames=9, num_inference_steps=1,
               output_type="latent").frames
    assert out.shape == (1, 4, 3, 4, 4) and torch.isfinite(out).all()
    torch.testing.assert_close(out, _fk_step(sc, pipe.transformer, pipe.scheduler, x))
    # the tiny Qwen2.5-VL (chat template) and ByT5 encoders run on a prompt that quotes a glyph text
    e, m, e2, m2 = pipe.encode_prompt('a neon sign that reads "open"', device="cpu", dtype=torch.float32)
    assert e.shape == (1, 1000, sc.model["text_embed_dim"]) and e2.shape == (1, 256, sc.model["text_embed_2_dim"])
    assert 0 < m.sum() < 1000 and 0 < m2.sum() < 256 and torch.isfinite(e).all() and torch.isfinite(e2).all()


def test_a_model_without_a_pipeline_is_refused(tmp_path):
    from fk_adapters.engines.transformers.libraries import LibraryError, diffusers_folder

    with pytest.raises(LibraryError, match="no pipeline folder"):
        diffusers_folder.write_pipeline_folder(str(tmp_path), str(tmp_path / "out"), {"class": "UNet1DModel"}, 0)
    assert not os.path.exists(tmp_path / "out")
