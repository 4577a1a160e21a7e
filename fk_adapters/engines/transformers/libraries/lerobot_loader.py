"""3D Diffusion Policy (DP3) in the transformers host on lerobot's Diffusion Policy: ``[model] library = "lerobot"``,
``class = "DiffusionModel"`` (lerobot's ``lerobot.policies.diffusion.modeling_diffusion.DiffusionModel``), the fields
of lerobot's ``DiffusionConfig`` that set its U-Net and scheduler (``down_dims``, ``kernel_size``, ``n_groups``,
``diffusion_step_embed_dim``, ``use_film_scale_modulation``, ``horizon``, ``n_obs_steps``, ``n_action_steps``,
``noise_scheduler_type``, ``num_train_timesteps``, ``beta_schedule``, ``clip_sample``, ``prediction_type``,
``num_inference_steps``, ...) and DP3's observation sizes: ``num_points``, ``agent_pos_dim``, ``action_dim``,
``encoder_mlp`` (the per-point MLP's widths), ``encoder_output_dim`` and ``state_mlp`` (the agent-position MLP's
widths, the last its output).

The denoiser and the sampling loop are lerobot's own: ``DiffusionModel`` built from ``DiffusionConfig`` holds
``DiffusionConditionalUnet1d`` (Diffusion Policy's conditional 1-D temporal U-Net, FiLM scale and bias from the
timestep embedding and the observation features) and the diffusers DDIM / DDPM scheduler, and its
``conditional_sample`` runs the denoising loop. lerobot has no point-cloud encoder: the DP3 encoder here
(``DP3Encoder``) is written in this module after 3D-Diffusion-Policy's ``PointNetEncoderXYZ`` + ``DP3Encoder``
(per-point Linear-LayerNorm-ReLU MLP, max pool over the points, Linear + LayerNorm projection; the agent position
through a Linear-ReLU-Linear MLP; the two concatenated per observation step, then flattened over the steps into the
U-Net's global condition). One call is one action sequence per item: the whole loop from seeded noise
[B, horizon, action_dim] on a seeded observation (point clouds [B, n_obs_steps, num_points, 3], agent positions
[B, n_obs_steps, agent_pos_dim]); the output is the full denoised horizon.

The checkpoint is the state dict beside the [model] table (``state_dict``), loaded back into the modules built
from it. Weights follow ``fk_adapters.weights``' rule: lerobot's (torch's) seeded init, then every constant
parameter spread.

lerobot 0.4.4 imports torchvision, datasets (pandas, pyarrow), av and its robot stack at the import of
``lerobot.policies``; they live in ``side_site``'s folder. Its GR00T policy's config class does not build
under transformers 5 (a dataclass field order error), and ``lerobot.policies`` imports it unless lerobot's own
``_transformers_available`` flag is off: the import sets that flag False first, which only skips lerobot's
transformers-based policies (Diffusion Policy uses no transformers code).
"""
from __future__ import annotations

import types

from fk_adapters.engines.transformers.libraries import LibraryError, side_site, state_dict

CLASS = "DiffusionModel"
# [model] keys that are fk's or DP3's observation encoder, not DiffusionConfig fields
FK_KEYS = ("library", "class", "architecture", "num_points", "point_dims", "agent_pos_dim", "action_dim",
           "encoder_mlp", "encoder_output_dim", "state_mlp")


def _modeling():
    side_site.import_torchvision()
    import lerobot.utils.import_utils as import_utils

    import_utils._transformers_available = False  # see the module docstring: GR00T's config breaks on transformers 5
    from lerobot.policies.diffusion import modeling_diffusion

    return modeling_diffusion


def version() -> str:
    _modeling()
    import lerobot

    return getattr(lerobot, "__version__", None) or _dist_version()


def _dist_version() -> str:
    from importlib.metadata import version as dist_version

    return dist_version("lerobot")


def diffusion_config(config: dict):
    """lerobot's ``DiffusionConfig``: the [model] table's DiffusionConfig fields, and as features the U-Net's
    condition (the point-cloud feature as the environment state, the agent-position feature as the robot state: one
    of each per observation step) and the action."""
    _modeling()
    from lerobot.configs.types import FeatureType, PolicyFeature
    from lerobot.policies.diffusion.configuration_diffusion import DiffusionConfig

    fields = {k: (tuple(v) if isinstance(v, list) else v) for k, v in config.items() if k not in FK_KEYS}
    state_out = int(config.get("state_mlp", [64, 64])[-1])
    return DiffusionConfig(
        input_features={"observation.state": PolicyFeature(type=FeatureType.STATE, shape=(state_out,)),
                        "observation.environment_state": PolicyFeature(
                            type=FeatureType.ENV, shape=(int(config.get("encoder_output_dim", 64)),))},
        output_features={"action": PolicyFeature(type=FeatureType.ACTION, shape=(int(config["action_dim"]),))},
        device="cpu", **fields)


def _dp3_encoder(config: dict):
    """DP3's observation encoder (3D-Diffusion-Policy's PointNetEncoderXYZ with layer norms and the final layer-norm
    projection, and its agent-position MLP), written here: lerobot has none."""
    import torch
    from torch import nn

    class PointNetEncoderXYZ(nn.Module):
        def __init__(self, in_channels: int, widths: list, out_channels: int):
            super().__init__()
            layers, last = [], in_channels
            for w in widths:
                layers += [nn.Linear(last, w), nn.LayerNorm(w), nn.ReLU()]
                last = w
            self.mlp = nn.Sequential(*layers)
            self.final_projection = nn.Sequential(nn.Linear(last, out_channels), nn.LayerNorm(out_channels))

        def forward(self, x):  # [B, N, 3] -> [B, out_channels]
            return self.final_projection(torch.max(self.mlp(x), 1)[0])

    class DP3Encoder(nn.Module):
        def __init__(self):
            super().__init__()
            self.extractor = PointNetEncoderXYZ(int(config.get("point_dims", 3)),
                                                list(config.get("encoder_mlp", [64, 128, 256])),
                                                int(config.get("encoder_output_dim", 64)))
            sizes, last, layers = list(config.get("state_mlp", [64, 64])), int(config["agent_pos_dim"]), []
            for w in sizes[:-1]:
                layers += [nn.Linear(last, w), nn.ReLU()]
                last = w
            self.state_mlp = nn.Sequential(*layers, nn.Linear(last, sizes[-1]))

        def forward(self, point_cloud, agent_pos):  # [B*T, N, 3], [B*T, S] -> [B*T, out + state_out]
            return torch.cat([self.extractor(point_cloud), self.state_mlp(agent_pos)], dim=-1)

    return DP3Encoder()


def _build(config: dict):
    """The policy: DP3's encoder and lerobot's DiffusionModel (U-Net and scheduler), as one module whose call is
    the whole denoising loop."""
    import torch

    if config.get("class") != CLASS:
        raise LibraryError(f"fk serves lerobot's {CLASS} (Diffusion Policy's U-Net and loop) only, "
                           f"not {config.get('class')!r}")
    modeling = _modeling()
    cfg = diffusion_config(config)

    class DP3Policy(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.obs_encoder = _dp3_encoder(config)
            self.diffusion = modeling.DiffusionModel(cfg)
            self.config = types.SimpleNamespace(**config)  # what the host reads of a model's config

        def forward(self, point_cloud, agent_pos, noise):
            b, t = point_cloud.shape[:2]
            feats = self.obs_encoder(point_cloud.flatten(0, 1), agent_pos.flatten(0, 1))
            global_cond = feats.reshape(b, t, -1).flatten(start_dim=1)  # DP3: per-step features, steps flattened
            gen = torch.Generator(device=noise.device).manual_seed(0)  # DDPM's step noise; DDIM (eta 0) draws none
            actions = self.diffusion.conditional_sample(b, global_cond=global_cond, generator=gen, noise=noise)
            return {"actions": actions}

    return DP3Policy()


def build_and_save(config: dict, out_dir: str, seed: int, dtype: str, device: str) -> None:
    """Build the policy (seeded), spread its constant parameters, save its state dict and [model] table."""
    state_dict.seeded_save(lambda: _build(config), out_dir, seed, dtype, dict(config))


def load(job: dict, device: str):
    import torch

    config = state_dict.config(job["model_dir"])
    model = state_dict.load_into(_build(config), job["model_dir"])
    return model.to(device=device, dtype=getattr(torch, job["dtype"])).eval()


def batch(model, spec: dict, b: int, seed: int, device, dtype) -> dict:
    """A seeded observation of ``b`` items (point clouds in [-1, 1), agent positions and the loop's initial noise
    normal), drawn on the CPU: the same on every device."""
    import torch

    c, dc = model.config, model.diffusion.config
    gen = torch.Generator().manual_seed(seed)
    steps, points = int(dc.n_obs_steps), int(spec.get("num_points", c.num_points))
    x = {"point_cloud": torch.rand(b, steps, points, int(getattr(c, "point_dims", 3)), generator=gen) * 2 - 1,
         "agent_pos": torch.randn(b, steps, int(c.agent_pos_dim), generator=gen),
         "noise": torch.randn(b, int(dc.horizon), int(c.action_dim), generator=gen)}
    return {k: v.to(device=device, dtype=dtype) for k, v in x.items()}
