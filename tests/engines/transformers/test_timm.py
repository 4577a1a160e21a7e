"""The timm loader without an engine run: timm imports (this CPU's torchvision is a CUDA build: its two NMS ops are
declared, never given a kernel; ``side_site``), a seeded checkpoint loads back into the same model, seeded
images."""
import pytest
import torch

from fk_adapters.engines.transformers.libraries import LibraryError, timm_loader


@pytest.fixture(scope="module")
def timm():
    return timm_loader.import_timm()  # make setup installs it (<venv>/side-site)


def test_timm_imports_and_a_declared_op_has_no_kernel(timm):
    import torchvision

    assert hasattr(timm, "create_model")
    if not torchvision.extension._has_ops():  # the declared ops: calling one fails, never returns a value
        with pytest.raises((RuntimeError, NotImplementedError)):
            torch.ops.torchvision.nms(torch.zeros(1, 4), torch.zeros(1), 0.5)


def test_a_seeded_checkpoint_loads_back_into_the_model_it_was_built_as(timm, tmp_path):
    config = {"library": "timm", "class": "mobilenetv4_conv_small", "num_classes": 10}
    timm_loader.build_and_save(config, str(tmp_path), 29, "float32", "cpu")
    model = timm_loader.load({"model_dir": str(tmp_path), "dtype": "float32"}, "cpu")
    assert type(model).__name__ == "MobileNetV3" and model.config.kwargs == {"num_classes": 10}
    x = timm_loader.batch(model, {"image_size": 32}, 2, 5, "cpu", torch.float32)
    assert list(x) == ["x"] and x["x"].shape == (2, 3, 32, 32)
    assert torch.equal(x["x"], timm_loader.batch(model, {"image_size": 32}, 2, 5, "cpu", torch.float32)["x"])
    with torch.inference_mode():
        assert model(**x).shape == (2, 10)
    again = timm_loader.load({"model_dir": str(tmp_path), "dtype": "float32"}, "cpu")
    assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), again.state_dict().values()))
    norms = [m.weight for m in model.modules() if isinstance(m, torch.nn.BatchNorm2d)]
    assert norms and not torch.equal(norms[0], torch.ones_like(norms[0]))  # constants spread


def test_an_unknown_model_name_is_refused(timm, tmp_path):
    with pytest.raises(LibraryError, match="has no model 'mobilenetv9'"):
        timm_loader.build_and_save({"class": "mobilenetv9"}, str(tmp_path), 0, "float32", "cpu")


def _rounding(timm, build) -> float:
    """How far bf16 moves the logits of ``build``'s seeded model (relative to the float32 logits)."""
    from fk_adapters.engines.transformers.libraries import state_dict

    model = state_dict.seeded(build, 31).eval()
    x = state_dict.images({"image_size": 64}, 2, 5, "cpu", torch.float32)["x"]
    with torch.inference_mode():
        y = model(x)
        y16 = model.to(torch.bfloat16)(x.bfloat16()).float()
    return float((y16 - y).norm() / y.norm())


def test_residual_branches_start_small_so_rounding_does_not_dominate_a_deep_cnn(timm):
    def stock():
        return timm_loader._create("efficientnetv2_rw_t", {"num_classes": 10})

    model = timm_loader.zero_residual_norms(stock())
    zeroed = [b for b in model.modules() if getattr(b, "has_skip", False)]
    assert zeroed and all(not [m for m in b.modules() if isinstance(m, torch.nn.BatchNorm2d)][-1].weight.any()
                          for b in zeroed)
    assert _rounding(timm, lambda: timm_loader.zero_residual_norms(stock())) < 0.03  # 1.0% here
    assert _rounding(timm, stock) > 0.05  # 11% with timm's init alone: the check can tell them apart
