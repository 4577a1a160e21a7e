"""The PI0 action loop's seeded inputs and its wrapping, on a tiny PI0 built in memory (no engine run)."""
import importlib.util

import pytest
import torch

from fk_adapters import scenarios
from fk_adapters.engines.transformers import action_loop, inputs

pytestmark = pytest.mark.skipif(importlib.util.find_spec("transformers") is None,
                                reason="transformers is not installed")


@pytest.fixture(scope="module")
def loop():
    import transformers

    sc = scenarios.load("tiny-pi0")
    cfg = transformers.PI0Config(**{k: v for k, v in sc.model.items() if k not in ("architectures", "model_type")})
    torch.manual_seed(0)
    return action_loop.wrap(transformers.PI0ForConditionalGeneration(cfg).eval(), sc.inputs), sc.inputs


def test_inputs_give_each_camera_its_image_tokens_and_pad_the_state_with_zeros(loop):
    model, spec = loop
    x = inputs.batch(model, spec, 2, 7, "cpu", torch.float32)
    per_image = (32 // 8) ** 2
    assert x["input_ids"].shape == (2, 2 * per_image + 6)
    assert (x["input_ids"][:, :2 * per_image] == 511).all() and (x["input_ids"][:, 2 * per_image:] != 511).all()
    assert x["pixel_values"].shape == (2, 2, 3, 32, 32) and x["noise"].shape == (2, 8, 16)
    assert (x["state"][:, 14:] == 0).all() and (x["state"][:, :14] != 0).all()
    again = inputs.batch(model, spec, 2, 7, "cpu", torch.float32)
    assert all(torch.equal(x[k], again[k]) for k in x)


def test_one_call_is_the_whole_denoising_loop_and_its_steps_follow_the_inputs(loop):
    model, spec = loop
    x = inputs.batch(model, spec, 1, 0, "cpu", torch.float32)
    calls = []
    hook = model.model.action_out_proj.register_forward_hook(lambda *a: calls.append(1))
    try:
        with torch.inference_mode():
            out = model(**x)
    finally:
        hook.remove()
    assert out["actions"].shape == (1, 8, 16) and len(calls) == spec["steps"] == 4
    assert not torch.equal(out["actions"], x["noise"])


def test_a_model_without_a_loop_is_left_as_it_is():
    module = torch.nn.Linear(2, 2)
    assert action_loop.wrap(module, {}) is module
