"""A vision-language-action model's inference as one module call: transformers' PI0 ``sample_actions``.

The prefix (camera images and prompt tokens) runs once through the VLM into a KV cache; the action expert then
denoises an action chunk from seeded noise in ``steps`` flow-matching Euler steps over that cache. The call returns
the actions, the item the runner diffs. [inputs]: cameras, image_size (pixels), prompt_len (text tokens after the
image tokens), state_dim (the robot's state, zero-padded to the model's max_state_dim), steps.
"""
from __future__ import annotations

import torch


class ActionLoop(torch.nn.Module):
    """The model (a submodule: the host routes slots into it); ``forward`` runs its ``sample_actions``."""

    def __init__(self, model, spec: dict):
        super().__init__()
        self.model = model
        self.config = model.config
        self.steps = int(spec.get("steps", model.config.num_inference_steps))

    def inputs(self, spec: dict, b: int, gen, device, dtype) -> dict:
        c, vlm = self.config, self.config.vlm_config
        cams, side = int(spec.get("cameras", 1)), int(spec["image_size"])
        per_image = (side // vlm.vision_config.patch_size) ** 2
        ids = torch.randint(3, vlm.text_config.vocab_size, (b, cams * per_image + int(spec.get("prompt_len", 8))),
                            generator=gen)
        ids[:, :cams * per_image] = vlm.image_token_id
        state = torch.zeros(b, c.max_state_dim)
        state[:, :int(spec.get("state_dim", c.max_state_dim))] = torch.randn(
            b, int(spec.get("state_dim", c.max_state_dim)), generator=gen)
        return {"state": state.to(device=device, dtype=dtype), "input_ids": ids.to(device),
                "attention_mask": torch.ones_like(ids).to(device),
                "pixel_values": torch.randn(b, cams, 3, side, side, generator=gen).to(device=device, dtype=dtype),
                "pixel_attention_mask": torch.ones(b, cams, dtype=torch.bool, device=device),
                "noise": torch.randn(b, c.chunk_size, c.max_action_dim, generator=gen).to(device=device, dtype=dtype)}

    def forward(self, state, input_ids, attention_mask, pixel_values, pixel_attention_mask, noise):
        actions = self.model.sample_actions(state=state, input_ids=input_ids, pixel_values=pixel_values, noise=noise,
                                            attention_mask=attention_mask, pixel_attention_mask=pixel_attention_mask,
                                            num_steps=self.steps)
        return {"actions": actions}


LOOPS = {"PI0ForConditionalGeneration": ActionLoop}  # transformers classes whose inference is not their forward


def wrap(model, spec: dict):
    """The model as its inference loop where it has one (LOOPS), else the model itself."""
    cls = LOOPS.get(type(model).__name__)
    return cls(model, spec) if cls else model
