"""A diffusion model's denoising loop as one module call: the scheduler's steps from seeded latents.

Seeded text embeddings stand in for the text encoders (no tokenizer, nothing downloaded); what a pipeline adds
around the model (latent packing, timestep scaling, classifier-free guidance) is done as its diffusers pipeline
does it. The call returns the final latents, the item the runner diffs. [inputs]: height and width (pixels),
steps, guidance_scale, text_len (embedding tokens), vae_scale_factor (pixels per latent, 8).
"""
from __future__ import annotations

import math

import numpy as np
import torch


def _randn(gen, shape, device, dtype):
    return torch.randn(*shape, generator=gen).to(device=device, dtype=dtype)


class Loop(torch.nn.Module):
    """The model (a submodule: the host routes slots into it) and its scheduler; ``forward`` runs the loop."""

    def __init__(self, model, scheduler, spec: dict):
        super().__init__()
        self.model, self.scheduler = model, scheduler
        self.config = model.config
        self.steps = int(spec.get("steps", 4))
        self.guidance_scale = float(spec.get("guidance_scale", 1.0))

    @staticmethod
    def latent_side(spec: dict, key: str) -> int:
        return int(spec[key]) // int(spec.get("vae_scale_factor", 8))


class FluxLoop(Loop):
    """FLUX (FluxPipeline's loop): packed 2x2 latent tokens, flow-matching sigmas 1 .. 1/steps shifted by the
    image's token count, the guidance embedding (no classifier-free guidance), timesteps / 1000."""

    def inputs(self, spec: dict, b: int, gen, device, dtype) -> dict:
        h, w = self.latent_side(spec, "height") // 2, self.latent_side(spec, "width") // 2
        text = int(spec.get("text_len", 8))
        c = self.config
        rows, cols = torch.meshgrid(torch.arange(h), torch.arange(w), indexing="ij")
        img_ids = torch.stack([torch.zeros_like(rows), rows, cols], dim=-1).reshape(h * w, 3)
        return {"latents": _randn(gen, (b, h * w, c.in_channels), device, dtype),
                "prompt_embeds": _randn(gen, (b, text, c.joint_attention_dim), device, dtype),
                "pooled_prompt_embeds": _randn(gen, (b, c.pooled_projection_dim), device, dtype),
                "img_ids": img_ids.to(device=device, dtype=dtype),
                "txt_ids": torch.zeros(text, 3, device=device, dtype=dtype)}

    def mu(self, tokens: int) -> float | None:
        """The resolution-dependent shift: linear in the token count between the scheduler's two anchors."""
        s = self.scheduler.config
        if not s.get("use_dynamic_shifting"):
            return None
        slope = (s.max_shift - s.base_shift) / (s.max_image_seq_len - s.base_image_seq_len)
        return s.base_shift + slope * (tokens - s.base_image_seq_len)

    def forward(self, latents, prompt_embeds, pooled_prompt_embeds, img_ids, txt_ids):
        b = latents.shape[0]
        sigmas = torch.linspace(1.0, 1.0 / self.steps, self.steps).tolist()
        self.scheduler.set_timesteps(self.steps, device=latents.device, sigmas=sigmas, mu=self.mu(latents.shape[1]))
        guidance = None
        if self.config.guidance_embeds:
            guidance = torch.full((b,), self.guidance_scale, device=latents.device, dtype=torch.float32)
        for t in self.scheduler.timesteps:
            v = self.model(hidden_states=latents, timestep=t.expand(b).to(latents.dtype) / 1000, guidance=guidance,
                           pooled_projections=pooled_prompt_embeds, encoder_hidden_states=prompt_embeds,
                           txt_ids=txt_ids, img_ids=img_ids, return_dict=False)[0]
            latents = self.scheduler.step(v, t, latents, return_dict=False)[0]
        return {"latents": latents}


class UNetLoop(Loop):
    """A UNet (StableDiffusionXLPipeline's loop): latents scaled by the scheduler's initial sigma, each step's input
    scaled by it, SDXL's added conditions (pooled text embeddings, the six size / crop ids) where the UNet has
    ``addition_embed_type = "text_time"``, and classifier-free guidance (zero negative embeddings, as SDXL's
    empty negative prompt) when guidance_scale > 1."""

    def inputs(self, spec: dict, b: int, gen, device, dtype) -> dict:
        c = self.config
        h, w = self.latent_side(spec, "height"), self.latent_side(spec, "width")
        x = {"latents": _randn(gen, (b, c.in_channels, h, w), device, dtype),
             "prompt_embeds": _randn(gen, (b, int(spec.get("text_len", 8)), c.cross_attention_dim), device, dtype)}
        if c.addition_embed_type == "text_time":
            pooled = c.projection_class_embeddings_input_dim - 6 * c.addition_time_embed_dim
            x["text_embeds"] = _randn(gen, (b, pooled), device, dtype)
            size = [int(spec["height"]), int(spec["width"]), 0, 0, int(spec["height"]), int(spec["width"])]
            x["time_ids"] = torch.tensor([size] * b, device=device, dtype=dtype)
        return x

    def forward(self, latents, prompt_embeds, text_embeds=None, time_ids=None):
        cfg = self.guidance_scale > 1
        added = {"text_embeds": text_embeds, "time_ids": time_ids} if text_embeds is not None else None
        if cfg:
            prompt_embeds = torch.cat([torch.zeros_like(prompt_embeds), prompt_embeds])
            if added:
                added = {"text_embeds": torch.cat([torch.zeros_like(text_embeds), text_embeds]),
                         "time_ids": torch.cat([time_ids, time_ids])}
        self.scheduler.set_timesteps(self.steps, device=latents.device)
        latents = latents * self.scheduler.init_noise_sigma
        for t in self.scheduler.timesteps:
            x = self.scheduler.scale_model_input(torch.cat([latents] * 2) if cfg else latents, t)
            eps = self.model(x, t, encoder_hidden_states=prompt_embeds, added_cond_kwargs=added, return_dict=False)[0]
            if cfg:
                uncond, text = eps.chunk(2)
                eps = uncond + self.guidance_scale * (text - uncond)
            latents = self.scheduler.step(eps, t, latents, return_dict=False)[0]
        return {"latents": latents}


class HunyuanVideo15Loop(Loop):
    """HunyuanVideo-1.5 text-to-video (HunyuanVideo15Pipeline's loop): latents (B, C, F, H, W), each step's input
    those with t2v's zero condition latents and zero mask channel appended; Qwen2.5-VL embeddings (text_len tokens,
    the first text_tokens valid) and ByT5 glyph embeddings (glyph_len, the first glyph_tokens valid) with their masks,
    zero image embeddings (729 tokens: no image); sigmas 1 .. 1/steps under the scheduler's shift, timesteps as they
    are; classifier-free guidance as a second call (the empty negative prompt: negative_tokens valid, no glyph text)
    unless guidance_scale is 1. [inputs] adds num_frames, vae_scale_factor (16) and vae_temporal_factor (4)."""

    IMAGE_TOKENS = 729  # the pipeline's vision_num_semantic_tokens

    def inputs(self, spec: dict, b: int, gen, device, dtype) -> dict:
        c, scale = self.config, int(spec.get("vae_scale_factor", 16))
        frames = (int(spec.get("num_frames", 1)) - 1) // int(spec.get("vae_temporal_factor", 4)) + 1
        text, glyph = int(spec.get("text_len", 8)), int(spec.get("glyph_len", 8))

        def mask(n, valid):  # right padding, as the tokenizers pad
            return (torch.arange(n) < valid).to(device=device, dtype=dtype).expand(b, n).contiguous()

        return {"latents": _randn(gen, (b, c.out_channels, frames, int(spec["height"]) // scale,
                                        int(spec["width"]) // scale), device, dtype),
                "prompt_embeds": _randn(gen, (b, text, c.text_embed_dim), device, dtype),
                "prompt_mask": mask(text, int(spec.get("text_tokens", text))),
                "glyph_embeds": _randn(gen, (b, glyph, c.text_embed_2_dim), device, dtype),
                "glyph_mask": mask(glyph, int(spec.get("glyph_tokens", glyph))),
                "negative_embeds": _randn(gen, (b, text, c.text_embed_dim), device, dtype),
                "negative_mask": mask(text, int(spec.get("negative_tokens", 1)))}

    def forward(self, latents, prompt_embeds, prompt_mask, glyph_embeds, glyph_mask, negative_embeds, negative_mask):
        b, dtype = latents.shape[0], latents.dtype
        self.scheduler.set_timesteps(sigmas=np.linspace(1.0, 0.0, self.steps + 1)[:-1], device=latents.device)
        cond = torch.cat([torch.zeros_like(latents), torch.zeros_like(latents[:, :1])], dim=1)
        image = torch.zeros(b, self.IMAGE_TOKENS, self.config.image_embed_dim, device=latents.device, dtype=dtype)
        texts = [(prompt_embeds, prompt_mask, glyph_embeds, glyph_mask)]
        if not math.isclose(self.guidance_scale, 1.0):  # the guider's rule; the prompt's call first, as it runs them
            texts.append((negative_embeds, negative_mask, torch.zeros_like(glyph_embeds), torch.zeros_like(glyph_mask)))
        for t in self.scheduler.timesteps:
            x = torch.cat([latents, cond], dim=1)
            preds = [self.model(hidden_states=x, timestep=t.expand(b).to(dtype), encoder_hidden_states=e,
                                encoder_attention_mask=m, encoder_hidden_states_2=e2, encoder_attention_mask_2=m2,
                                image_embeds=image, return_dict=False)[0] for e, m, e2, m2 in texts]
            v = preds[0] if len(preds) == 1 else preds[1] + self.guidance_scale * (preds[0] - preds[1])
            latents = self.scheduler.step(v, t, latents, return_dict=False)[0]
        return {"latents": latents}


LOOPS = {"FluxTransformer2DModel": FluxLoop, "UNet2DConditionModel": UNetLoop,
         "HunyuanVideo15Transformer3DModel": HunyuanVideo15Loop}


def loop(model, scheduler, spec: dict) -> Loop:
    """The loop of the model's class."""
    from fk_adapters.engines.transformers.libraries import LibraryError

    cls = LOOPS.get(type(model).__name__)
    if cls is None:
        raise LibraryError(f"no denoising loop for {type(model).__name__} (known: {', '.join(LOOPS)})")
    return cls(model, scheduler, spec)
