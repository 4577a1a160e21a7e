"""torchrec's DLRM in the transformers host: ``[model] library = "torchrec"``, ``class = "DLRM_DCN"`` (DLRM with a
low-rank DCNv2 interaction, ``torchrec.models.dlrm``, the model of MLPerf's DLRMv2) and its sizes:
``num_dense_features``, ``embedding_dim``, ``num_embeddings_per_feature`` (one table per sparse feature),
``multi_hot_sizes`` (ids per bag), ``dense_arch_layer_sizes``, ``over_arch_layer_sizes``, ``dcn_num_layers``,
``dcn_low_rank_dim``; optional ``max_rows_per_table`` caps every table's rows (a feature's ids fall in its capped
table, as MLPerf's ``max_ind_range`` folds them).

The model is torchrec's own: an ``EmbeddingBagCollection`` of ``nn.EmbeddingBag`` tables (sum pooling, one table
``t_cat_<i>`` for feature ``cat_<i>`` as in torchrec's dlrm_v2 example), the dense and over MLPs of ``nn.Linear``
(fk's ``gemm`` slot) and the DCNv2 cross layers (raw parameters, stock). The checkpoint is its seeded state dict
beside the sizes (``state_dict``): torchrec's own init, the tables then redrawn N(0, 1/dim), a looked-up vector of
about unit norm (its init, uniform in +-sqrt(1/rows), leaves a 1M-row table's vectors near 0: the sparse half of a
sample would barely reach the logit, and flat outputs hide wrong kernels), then every constant parameter spread (the
cross layers' zero biases). No Criteo data: one item is one sample's click logit, its dense features drawn N(0, 1)
from the seed, each sparse feature a bag of ``multi_hot_sizes[i]`` ids uniform in its table. A call takes plain
tensors and builds torchrec's ``KeyedJaggedTensor`` inside it. torchrec, fbgemm-gpu (its import, no fbgemm op runs
in this forward) and their imports come from fk's side site (``side_site``).
"""
from __future__ import annotations

import types

from fk_adapters.engines.transformers.libraries import LibraryError, side_site, state_dict

CLASS = "DLRM_DCN"
SIZES = ("num_dense_features", "embedding_dim", "num_embeddings_per_feature", "multi_hot_sizes",
         "dense_arch_layer_sizes", "over_arch_layer_sizes", "dcn_num_layers", "dcn_low_rank_dim")


def version() -> str:
    side_site.on_path()
    from importlib.metadata import version as dist_version

    return dist_version("torchrec")


def table_rows(config: dict) -> list[int]:
    """Each sparse feature's table rows: ``num_embeddings_per_feature``, capped at ``max_rows_per_table``."""
    cap = config.get("max_rows_per_table")
    return [min(int(n), int(cap)) if cap else int(n) for n in config["num_embeddings_per_feature"]]


def _check(config: dict) -> None:
    if config.get("class", CLASS) != CLASS:
        raise LibraryError(f"fk serves torchrec's DLRM_DCN only, not {config['class']!r}")
    missing = [k for k in SIZES if k not in config]
    if missing:
        raise LibraryError(f"a torchrec DLRM_DCN [model] lacks {', '.join(missing)}")
    if len(config["multi_hot_sizes"]) != len(config["num_embeddings_per_feature"]):
        raise LibraryError("multi_hot_sizes and num_embeddings_per_feature must have one entry per sparse feature")
    if config["dense_arch_layer_sizes"][-1] != config["embedding_dim"]:
        raise LibraryError("the dense arch's last layer must be embedding_dim wide (DLRM stacks it with the tables)")


def _build(config: dict):
    _check(config)
    side_site.on_path()
    from torchrec.models.dlrm import DLRM_DCN
    from torchrec.modules.embedding_configs import EmbeddingBagConfig
    from torchrec.modules.embedding_modules import EmbeddingBagCollection

    tables = [EmbeddingBagConfig(name=f"t_cat_{i}", embedding_dim=int(config["embedding_dim"]), num_embeddings=rows,
                                 feature_names=[f"cat_{i}"]) for i, rows in enumerate(table_rows(config))]
    return DLRM_DCN(embedding_bag_collection=EmbeddingBagCollection(tables=tables),
                    dense_in_features=int(config["num_dense_features"]),
                    dense_arch_layer_sizes=list(config["dense_arch_layer_sizes"]),
                    over_arch_layer_sizes=list(config["over_arch_layer_sizes"]),
                    dcn_num_layers=int(config["dcn_num_layers"]), dcn_low_rank_dim=int(config["dcn_low_rank_dim"]))


def build_and_save(config: dict, out_dir: str, seed: int, dtype: str, device: str) -> None:
    """torchrec's own seeded init on the CPU (the same tables on every device), tables at unit scale, constants
    spread, saved with the sizes."""
    state_dict.seeded_save(lambda: _unit_tables(_build(config), int(config["embedding_dim"])), out_dir, seed, dtype,
                           dict(config, seed=seed))


def _unit_tables(model, dim: int):
    """Every table entry N(0, 1/dim): a looked-up vector of about unit norm, as the dense arch's output."""
    import torch

    with torch.no_grad():
        for table in model.sparse_arch.embedding_bag_collection.embedding_bags.values():
            table.weight.normal_(0.0, dim ** -0.5)
    return model


def load(job: dict, device: str):
    """DLRM_DCN built from the checkpoint's sizes with its state dict, in the job's dtype."""
    import torch

    cfg = state_dict.config(job["model_dir"])
    model = state_dict.load_into(_build(cfg), job["model_dir"])
    return _clicks(model.to(device=device, dtype=getattr(torch, job["dtype"])).eval(), cfg)


def _clicks(model, cfg: dict):
    """One call = DLRM_DCN's forward over the batch's samples (a module, torchrec's model its submodule: the host
    routes slots into it); the sparse ids come as one flat tensor with their bag lengths, feature by feature."""
    import torch

    keys = [f"cat_{i}" for i in range(len(cfg["num_embeddings_per_feature"]))]

    class DLRMClicks(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.model = model
            self.config = types.SimpleNamespace(**cfg)  # what the host reads of a model's config

        def forward(self, dense_features, sparse_values, sparse_lengths):
            from torchrec.sparse.jagged_tensor import KeyedJaggedTensor

            kjt = KeyedJaggedTensor.from_lengths_sync(keys=keys, values=sparse_values, lengths=sparse_lengths)
            return self.model(dense_features=dense_features, sparse_features=kjt)

    return DLRMClicks()


def batch(model, spec: dict, b: int, seed: int, device, dtype) -> dict:
    """``b`` seeded samples (drawn on the CPU: the same on every device): ``dense_features`` [b, num_dense] N(0, 1);
    per feature i, ``b`` bags of ``multi_hot_sizes[i]`` ids uniform in its table's rows, flattened feature-major
    (``sparse_values``) with their lengths (``sparse_lengths`` [num_sparse * b])."""
    import torch

    cfg = vars(model.config)
    gen = torch.Generator().manual_seed(seed)
    dense = torch.randn(b, int(cfg["num_dense_features"]), generator=gen)
    hots = [int(h) for h in cfg["multi_hot_sizes"]]
    ids = [torch.randint(0, rows, (b * h,), generator=gen) for rows, h in zip(table_rows(cfg), hots)]
    lengths = torch.tensor(hots).repeat_interleave(b)
    return {"dense_features": dense.to(device=device, dtype=dtype), "sparse_values": torch.cat(ids).to(device),
            "sparse_lengths": lengths.to(device)}
