"""OpenFold3 (the AlphaFold3 architecture) in the transformers host: ``[model] library = "openfold3"``, ``class =
"OpenFold3"`` and ``[model.config]``: overrides of OpenFold3's own model config
(``openfold3.projects.of3_all_atom.config.model_config``), dotted paths to values, e.g.
``"architecture.pairformer.no_blocks" = 2``. Its widths are ``FieldReference``s, so setting one (``architecture.shared.
c_s``) sets it in every module that shares it, as OpenFold3's own config updates do.

The model is the library's ``OpenFold3`` (``openfold3.projects.of3_all_atom.model``), built from that config: input
embedder with its atom attention encoder, template embedder, MSA module, Pairformer trunk (triangle multiplication and
attention, attention with pair bias) over ``num_recycles + 1`` cycles, the diffusion module's full rollout
(``no_full_rollout_steps`` sampler steps for ``no_full_rollout_samples`` samples: atom encoder, diffusion transformer,
atom decoder) and the confidence heads. One call is one whole inference forward as OpenFold3 serves it (eval, no
ground truth); the item is one complex, and the outputs compared are every tensor it returns: the trunk's single and
pair representations, the predicted atom positions and the heads' logits. The sampler's noise, the MSA subsampling
and the random augmentation draw from torch's generator, which each call seeds from the checkpoint's seed.

Settings fk always applies: OpenFold3's Triton triangle kernels off (``use_triton_triangle_kernels``: the stock
PyTorch path), chunk-size tuning off and no chunk size (no chunking), no presets. The host's slots enter exact
``nn.Linear`` / ``nn.LayerNorm`` modules only, so ``load`` re-classes OpenFold3's ``Linear`` (an ``nn.Linear`` whose
forward is ``F.linear``) and ``LayerNorm`` (``F.layer_norm`` over its last channels) as those torch classes, their
parameters kept (``torch_modules``): in float32 the math is the same op for op. In bf16 OpenFold3's own forwards turn
autocast off (Linear on bf16 inputs, LayerNorm computed on float32 copies and cast back); torch's do not, so inside
OpenFold3's float32 autocast regions a bf16 input's gemm runs in float32 (the stock run and the candidate alike).
Weights follow ``fk_adapters.weights``' rule: OpenFold3's own seeded init (its Linear init schemes), then every
constant parameter spread; besides, every weight matrix that init leaves all zero (OpenFold3's "final" output
layers: untrained, the heads' logits and the diffusion updates would be zero) is drawn N(0, 0.02) (fk's, as
gsplat's loader does for its zero ``shN``).

No real complex is featurised (OpenFold3's data pipeline needs rdkit, pdbeccdutils and CCD files): ``batch`` draws
seeded features of the shapes the model takes, as OpenFold3's own test helper (``random_of3_features``) does, but
for one protein chain: random residues (their atom counts from OpenFold3's residue tables), a one-hot MSA whose first
row is the query, templates with one-hot distograms. Reference-conformer features (``ref_*``) stay float32 in bf16
runs, as OpenFold3's precision plugin keeps them. Imports come from fk's side site folder (``side_site``).
"""
from __future__ import annotations

import copy
import types

from fk_adapters.engines.transformers.libraries import LibraryError, side_site, state_dict

CLASS = "OpenFold3"
ALWAYS = {"settings.memory.eval.use_triton_triangle_kernels": False,
          "settings.memory.eval.tune_chunk_size": False,
          "settings.memory.eval.chunk_size": None}


def version() -> str:
    side_site.on_path()
    from importlib.metadata import version as dist_version

    return dist_version("openfold3")


def model_config(overrides: dict):
    """OpenFold3's model config (a deep copy: its references linked within it) with fk's settings and ``overrides``."""
    side_site.on_path()
    from openfold3.projects.of3_all_atom.config.model_config import model_config as base

    cfg = copy.deepcopy(base)
    for key, value in {**ALWAYS, **overrides}.items():
        *parents, leaf = key.split(".")
        node = cfg
        for p in parents:
            if p not in node:
                raise LibraryError(f"OpenFold3's model config has no {key!r}")
            node = node[p]
        if leaf not in node:
            raise LibraryError(f"OpenFold3's model config has no {key!r}")
        node[leaf] = value
    return cfg


def _build(config: dict):
    if config.get("class", CLASS) != CLASS:
        raise LibraryError(f"fk serves openfold3's OpenFold3 model only, not {config['class']!r}")
    side_site.on_path()
    from openfold3.projects.of3_all_atom.model import OpenFold3

    return OpenFold3(model_config(config.get("config", {})))


def build_and_save(config: dict, out_dir: str, seed: int, dtype: str, device: str) -> None:
    """OpenFold3's seeded init, constants spread, saved with the [model] table and the seed."""
    import torch

    from fk_adapters.weights import spread_constants

    torch.manual_seed(seed)
    model = _build(config)  # on the CPU whatever ``device``: OpenFold3's Fourier embedding draws from a CPU generator
    gen = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():  # fk: the init leaves OpenFold3's "final" and gating-output matrices zero
        for p in model.parameters():
            if p.ndim >= 2 and not bool(p.any()):
                p.copy_((0.02 * torch.randn(p.shape, generator=gen)).to(p.device, p.dtype))
    spread_constants(model, seed)
    state_dict.save(model, out_dir, dtype, dict(config, seed=seed))


def _inference(model, config: dict):
    """OpenFold3's inference forward as one module (the model its submodule: the host routes slots into it)."""
    import torch

    class OpenFold3Inference(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.model, self.seed = model, int(config["seed"])
            self.config = types.SimpleNamespace(**config)  # what the host reads of a model's config

        def forward(self, **features):
            dtype = next(self.model.parameters()).dtype
            batch = {k: v.to(dtype) if v.is_floating_point() and not k.startswith("ref_") else v
                     for k, v in features.items()}
            devices = [torch.cuda.current_device()] if next(self.model.parameters()).is_cuda else []
            with torch.random.fork_rng(devices=devices):
                torch.manual_seed(self.seed)
                _, out = self.model(batch)
            return {k: v for k, v in out.items() if torch.is_tensor(v) and v.is_floating_point()}

    return OpenFold3Inference()


def load(job: dict, device: str):
    import torch

    config = state_dict.config(job["model_dir"])
    model = state_dict.load_into(_build(config), job["model_dir"])
    model = model.to(device=device, dtype=getattr(torch, job["dtype"])).eval()
    return _inference(torch_modules(model), config)


def torch_modules(model):
    """OpenFold3's ``Linear`` and ``LayerNorm`` as the torch modules whose math they are, so the host's slots can
    enter them (its routing takes exact ``nn.Linear`` / ``nn.LayerNorm`` only), parameters kept. OpenFold3's
    ``Linear`` is an ``nn.Linear`` whose forward (no ``precision`` set: none in OpenFold3's model) is
    ``F.linear(x, weight, bias)``, with autocast off in bf16; its ``LayerNorm`` is ``F.layer_norm`` over the last
    ``c_in`` channels (in bf16/fp16 computed on float32 copies, autocast off, and cast back)."""
    from openfold3.core.model.primitives.linear import Linear
    from openfold3.core.model.primitives.normalization import LayerNorm
    from torch import nn

    for m in model.modules():
        if type(m) is Linear and m.precision is None:
            m.__class__ = nn.Linear
        elif type(m) is LayerNorm:
            m.__class__ = nn.LayerNorm
            m.normalized_shape, m.elementwise_affine = tuple(m.c_in), m.weight is not None
    return model


def features(b: int, tokens: int, msa_depth: int, templates: int, seed: int) -> dict:
    """Seeded OpenFold3 input features of one protein chain of ``tokens`` residues (float32 and integer tensors)."""
    import torch

    side_site.on_path()
    from openfold3.core.data.resources.residues import STANDARD_RESIDUES_3, STANDARD_RESIDUES_WITH_GAP_3
    from openfold3.core.data.resources.token_atom_constants import TOKEN_NAME_TO_ATOM_NAMES

    gen = torch.Generator().manual_seed(seed)
    n_res, n_classes = 20, len(STANDARD_RESIDUES_WITH_GAP_3)  # the 20 amino acids; 32 restype classes
    restype = torch.randint(0, n_res, (tokens,), generator=gen)
    atoms = torch.tensor([len(TOKEN_NAME_TO_ATOM_NAMES[STANDARD_RESIDUES_3[i]]) for i in restype])
    n_atom = int(atoms.sum())
    start = torch.cat([torch.zeros(1, dtype=torch.long), atoms.cumsum(0)[:-1]])
    atom_to_token = torch.repeat_interleave(torch.arange(tokens), atoms)
    msa_rows = torch.randint(0, n_res, (msa_depth, tokens), generator=gen)
    msa_rows[0] = restype
    msa = torch.nn.functional.one_hot(msa_rows, n_classes)
    distogram = torch.nn.functional.one_hot(torch.randint(0, 39, (templates, tokens, tokens), generator=gen), 39)
    unit = torch.nn.functional.normalize(torch.randn(templates, tokens, tokens, 3, generator=gen), dim=-1)
    name_chars = torch.nn.functional.one_hot(torch.randint(0, 64, (n_atom, 4), generator=gen), 64)
    element = torch.nn.functional.one_hot(torch.full((n_atom,), 6), 119)  # carbon (OpenFold3's 119 elements)
    one = {
        "residue_index": torch.arange(tokens), "token_index": torch.arange(tokens),
        "asym_id": torch.ones(tokens), "entity_id": torch.ones(tokens), "sym_id": torch.ones(tokens),
        "restype": torch.nn.functional.one_hot(restype, n_classes),
        "is_protein": torch.ones(tokens), "is_dna": torch.zeros(tokens), "is_rna": torch.zeros(tokens),
        "is_ligand": torch.zeros(tokens), "is_atomized": torch.zeros(tokens),
        "ref_pos": torch.randn(n_atom, 3, generator=gen), "ref_mask": torch.ones(n_atom),
        "ref_element": element, "ref_charge": torch.zeros(n_atom), "ref_atom_name_chars": name_chars,
        "ref_space_uid": atom_to_token,
        "msa": msa, "has_deletion": torch.zeros(msa_depth, tokens),
        "deletion_value": torch.zeros(msa_depth, tokens), "profile": msa.float().mean(0),
        "deletion_mean": torch.zeros(tokens),
        "template_restype": msa[:1].expand(templates, -1, -1),
        "template_pseudo_beta_mask": torch.ones(templates, tokens),
        "template_backbone_frame_mask": torch.ones(templates, tokens),
        "template_distogram": distogram, "template_unit_vector": unit,
        "token_bonds": torch.zeros(tokens, tokens),
        "token_mask": torch.ones(tokens), "atom_mask": torch.ones(n_atom),
        "start_atom_index": start, "num_atoms_per_token": atoms, "atom_to_token_index": atom_to_token,
        "msa_mask": torch.ones(msa_depth, tokens),
    }
    typed = {k: v.float() if k in _FLOATS else v.int() for k, v in one.items()}
    out = {k: v.unsqueeze(0).expand(b, *v.shape).contiguous() for k, v in typed.items()}
    out["cyclic_mask"] = torch.zeros(b, tokens, dtype=torch.bool)
    out["num_paired_seqs"] = torch.full((b,), max(msa_depth // 4, 1))
    return out


# the features OpenFold3 takes as floats (random_of3_features' dtypes); the rest are integer
_FLOATS = {"ref_pos", "ref_charge", "has_deletion", "deletion_value", "profile", "deletion_mean",
           "template_pseudo_beta_mask", "template_backbone_frame_mask", "template_distogram",
           "template_unit_vector", "token_mask", "atom_mask", "msa_mask"}


def batch(model, spec: dict, b: int, seed: int, device, dtype) -> dict:
    """Seeded features of ``b`` complexes ([inputs] tokens, msa_depth, templates); floats in ``dtype`` but the
    reference conformer's (float32)."""
    import torch

    x = features(b, int(spec["tokens"]), int(spec.get("msa_depth", 4)), int(spec.get("templates", 1)), seed)
    return {k: v.to(device=device, dtype=dtype if not k.startswith("ref_") else torch.float32)
            if v.is_floating_point() else v.to(device) for k, v in x.items()}
