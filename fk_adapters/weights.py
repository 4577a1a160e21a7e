"""Realistic seeded random checkpoints, written locally (no hub, no engine 'dummy' weights).

Linear and embedding weights ~ N(0, std) with std = initializer_range (0.02 as the
families' own inits); norm weights 1 + N(0, 0.1) (Gemma stores w for 1 + w: N(0, 0.1)),
so a kernel that ignores or mis-indexes the weight changes the logits. Same seed and device
kind, same bytes: baseline and candidate load the very same files.

The Llama, Qwen2 and Gemma families have their layouts written out here. Every other
architecture is built by HF transformers from its config (the model's own seeded init), then
every parameter the init left constant (norm weights, biases, D) is spread out the same way,
and ``save_pretrained`` writes it in the checkpoint's own tensor names. A [model] of another library
(``library = "diffusers"``) is built the same way by that library's loader
(``fk_adapters.engines.transformers.libraries``). A scenario's EAGLE-3 draft head
([speculative.model]) is written beside its target by ``fk_adapters.draft_weights``.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

from fk_adapters import gpu_lock

FAMILIES = {"LlamaForCausalLM": "llama", "MistralForCausalLM": "llama", "Qwen2ForCausalLM": "qwen2",
            "GemmaForCausalLM": "gemma"}


class WeightsError(ValueError):
    pass


def parameter_shapes(config: dict) -> dict[str, tuple[tuple[int, ...], str]]:
    """{tensor name: (shape, kind)} in Hugging Face naming, kind in {linear, norm, bias}."""
    arch = (config.get("architectures") or [""])[0]
    family = FAMILIES.get(arch)
    if family is None:
        raise WeightsError(f"no weight layout for architecture {arch!r} (known: {', '.join(FAMILIES)})")
    h, inter, vocab = config["hidden_size"], config["intermediate_size"], config["vocab_size"]
    heads, kv = config["num_attention_heads"], config.get("num_key_value_heads", config["num_attention_heads"])
    hd = config.get("head_dim") or h // heads
    shapes: dict[str, tuple[tuple[int, ...], str]] = {"model.embed_tokens.weight": ((vocab, h), "linear"),
                                                      "model.norm.weight": ((h,), "norm")}
    if not config.get("tie_word_embeddings", family == "gemma"):
        shapes["lm_head.weight"] = ((vocab, h), "linear")
    for i in range(config["num_hidden_layers"]):
        p = f"model.layers.{i}."
        shapes.update({
            p + "self_attn.q_proj.weight": ((heads * hd, h), "linear"),
            p + "self_attn.k_proj.weight": ((kv * hd, h), "linear"),
            p + "self_attn.v_proj.weight": ((kv * hd, h), "linear"),
            p + "self_attn.o_proj.weight": ((h, heads * hd), "linear"),
            p + "mlp.gate_proj.weight": ((inter, h), "linear"),
            p + "mlp.up_proj.weight": ((inter, h), "linear"),
            p + "mlp.down_proj.weight": ((h, inter), "linear"),
            p + "input_layernorm.weight": ((h,), "norm"),
            p + "post_attention_layernorm.weight": ((h,), "norm"),
        })
        if family == "qwen2":
            for n, size in (("q", heads * hd), ("k", kv * hd), ("v", kv * hd)):
                shapes[p + f"self_attn.{n}_proj.bias"] = ((size,), "bias")
    return shapes


def write_checkpoint(config: dict, out_dir: str, seed: int, dtype: str, device: str = "cpu") -> str:
    """Write config.json + the weights' safetensors into out_dir (reused when already there); return its digest."""
    cfg = dict(config, torch_dtype=dtype)
    generic = (cfg.get("architectures") or [""])[0] not in FAMILIES
    fixes = CHECKPOINT_KEY_FIXES.get(cfg.get("model_type"))
    made_by = [seed] + ([_writer_version(config), device, fixes] if generic
                        else [device] if device != "cpu" else [])  # the bytes depend on these
    key = hashlib.sha256(json.dumps([cfg, *made_by], sort_keys=True).encode()).hexdigest()[:16]
    stamp = os.path.join(out_dir, "fk-weights.json")
    os.makedirs(out_dir, exist_ok=True)
    # one writer a folder: two fk runs sharing a model cache (side by side on a 4-GPU machine) would otherwise both
    # write it, and the first to finish could load a file the other is rewriting
    with gpu_lock.held(out_dir.rstrip(os.sep) + ".lock", say=lambda m: print(m, file=sys.stderr),
                       what="the seeded weights", who="another fk process writing them"):
        if os.path.exists(stamp):
            with open(stamp) as f:
                if json.load(f).get("key") == key:
                    return key
        try:
            if generic:
                write_with_transformers(config, out_dir, seed, dtype, device)
            elif device == "cuda":  # in a child, as the generic writer: this process never holds a CUDA context
                _in_child(["family", cfg, out_dir, seed, dtype, device], None, device)
            else:
                write_family(cfg, out_dir, seed, dtype, device)
        except (OSError, WeightsError, _safetensors_error()) as exc:
            raise _unwritten(out_dir, exc) from exc
        with open(stamp, "w") as f:
            json.dump({"key": key, "seed": seed, "dtype": dtype, **({"writer": _library(config)} if generic else {})},
                      f)
    return key


def _safetensors_error() -> type:
    """The error safetensors raises when a write fails (a full disk among others): not an OSError."""
    try:
        from safetensors import SafetensorError
    except ImportError:
        return OSError
    return SafetensorError


def _unwritten(out_dir: str, exc: Exception) -> WeightsError:
    """The error for a checkpoint whose writing failed, after removing what was written of it (never a valid
    checkpoint: it has no stamp), so a full disk is not kept full for the next scenario."""
    shutil.rmtree(out_dir, ignore_errors=True)
    parent = os.path.dirname(out_dir.rstrip(os.sep)) or "."
    free = shutil.disk_usage(parent).free / 2**20 if os.path.isdir(parent) else float("nan")
    return WeightsError(f"writing the seeded weights to {out_dir} failed, the partial folder removed "
                        f"({free:,.0f} MiB free on its disk now): {exc}")


def write_family(cfg: dict, out_dir: str, seed: int, dtype: str, device: str = "cpu") -> None:
    """The weights of a family fk lays out itself (``parameter_shapes``), drawn on ``device`` (its own generator:
    CPU and CUDA give different bytes, each the same every time), and config.json."""
    import torch
    from safetensors.torch import save_file

    gemma = FAMILIES.get((cfg.get("architectures") or [""])[0]) == "gemma"
    std = cfg.get("initializer_range", 0.02)
    gen = torch.Generator(device=device).manual_seed(seed)
    tensors = {}
    for name, (shape, kind) in parameter_shapes(cfg).items():
        t = torch.randn(shape, generator=gen, dtype=torch.float32, device=device)
        if kind == "norm":  # in place: no second float32 copy of each tensor (same bytes)
            t.mul_(0.1)
            if not gemma:
                t.add_(1.0)
        else:
            t.mul_(std)
        tensors[name] = t.to(getattr(torch, dtype)).cpu().contiguous()
        del t
    save_file(tensors, os.path.join(out_dir, "model.safetensors"), metadata={"format": "pt"})
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(cfg, f, indent=1)


# A PYTHONPATH for building the checkpoints this process's transformers cannot (an engine's site pinning an older
# one, say SGLang 0.5.15's 5.12.1, which has no Kimi-Linear); the rest are built here as ever.
WRITER_PATH_VAR = "FK_WEIGHTS_PYTHONPATH"


def _builds_here(config: dict) -> bool:
    """Whether this process's transformers has the config and the class of the checkpoint."""
    from transformers import CONFIG_MAPPING

    from fk_adapters.model_classes import model_class

    return config.get("model_type") in CONFIG_MAPPING and model_class(config["architectures"][0]) is not None


def _library(config: dict) -> str:
    """The library that builds this checkpoint ([model] library; none: transformers)."""
    return config.get("library") or "transformers"


def _writer_env(config: dict) -> dict | None:
    """The environment of the process that builds this checkpoint elsewhere; None: this one builds it."""
    path = os.environ.get(WRITER_PATH_VAR)
    if not path or _library(config) != "transformers":
        return None
    return dict(os.environ, PYTHONPATH=path) if not _builds_here(config) else None


def _writer_version(config: dict) -> str:
    """What keys a built checkpoint's bytes besides its config and seed: the version of the library that builds it
    (transformers: its version alone, as ever)."""
    library = _library(config)
    if library == "transformers":
        from fk_adapters.model_classes import CLASSES

        own = CLASSES.get((config.get("architectures") or [""])[0])  # fk's own class: its revision too
        return _transformers_version(config) + (f", fk {own.__name__} r{own.REVISION}" if own else "")
    from fk_adapters.engines.transformers import libraries

    return f"{library} {libraries.loader(library).version()}"


def _transformers_version(config: dict) -> str:
    """The version of the transformers that builds this checkpoint."""
    env = _writer_env(config)
    if env is None:
        import transformers

        return transformers.__version__
    done = subprocess.run([sys.executable, "-c", "import transformers; print(transformers.__version__)"], env=env,
                          capture_output=True, text=True)
    if done.returncode:
        raise WeightsError(f"{WRITER_PATH_VAR}={env['PYTHONPATH']}: transformers does not import there: "
                           f"{_last_line(done)}")
    return done.stdout.strip()


def _last_line(done: subprocess.CompletedProcess) -> str:
    """A failed child's last line of output: its exception's own line."""
    return ((done.stderr or done.stdout).strip().splitlines() or ["no output"])[-1]


def _hf_config(config: dict):
    from transformers import CONFIG_MAPPING

    from fk_adapters.model_classes import register_model_packages

    model_type = config.get("model_type")
    if model_type not in CONFIG_MAPPING:
        register_model_packages()  # a package's model types enter CONFIG_MAPPING when it is imported
    if model_type not in CONFIG_MAPPING:
        raise WeightsError(f"transformers has no config for model_type {model_type!r}")
    cfg = CONFIG_MAPPING[model_type](**{k: v for k, v in config.items() if k != "model_type"})
    cfg.architectures = list(config["architectures"])
    return cfg


def write_with_transformers(config: dict, out_dir: str, seed: int, dtype: str, device: str = "cpu") -> None:
    """Build the model with transformers, or the library [model] names (seeded), spread its constant parameters,
    save it.

    On ``cuda`` the work runs in a child process, so this one never holds a CUDA context; so does it, with
    $FK_WEIGHTS_PYTHONPATH as its PYTHONPATH, when this process's transformers cannot build the checkpoint."""
    env = _writer_env(config)
    if device != "cuda" and env is None:
        _build_and_save(config, out_dir, seed, dtype, device)
        return
    _in_child(["built", config, out_dir, seed, dtype, device], env, device)


WRITER_TIMEOUT_S = float(os.environ.get("FK_WEIGHTS_TIMEOUT", 1800))


def _in_child(args: list, env: dict | None, device: str) -> None:
    """Run a writer (``args``: its kind, then its arguments) in a child process of this module, killed after
    ``WRITER_TIMEOUT_S``; on a GPU it holds fk's GPU lock, as an engine run does (a writer beside a timed run spoils
    its timings)."""
    import contextlib

    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(args, f)
    lock = gpu_lock.held(gpu_lock.lock_path(env or dict(os.environ))) if device == "cuda" else contextlib.nullcontext()
    try:
        with lock:
            done = subprocess.run([sys.executable, "-m", "fk_adapters.weights", f.name], capture_output=True,
                                  text=True, env=env, timeout=WRITER_TIMEOUT_S)
    except subprocess.TimeoutExpired as exc:
        raise WeightsError(f"writing the weights on {device} took over {WRITER_TIMEOUT_S:.0f} s (FK_WEIGHTS_TIMEOUT);"
                           " the writer was stopped") from exc
    finally:
        os.unlink(f.name)
    if done.returncode:
        raise WeightsError(f"writing the weights on {device} failed: {_last_line(done)[-500:]}")


def spread_constants(model, seed: int, std: float = 0.02) -> None:
    """Spread every 1-D parameter the init left constant (norm weights, biases, D), in place: a norm weight by
    N(0, 0.1), a bias by N(0, std), so a kernel that ignores or mis-indexes one changes the outputs."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            flat = p.reshape(-1)
            if p.ndim == 1 and p.numel() > 1 and bool((flat == flat[0]).all()):
                scale = std if name.endswith("bias") else 0.1
                p.add_((scale * torch.randn(p.shape, generator=gen)).to(p.device, p.dtype))


def _build_and_save(config: dict, out_dir: str, seed: int, dtype: str, device: str) -> None:
    if _library(config) != "transformers":
        from fk_adapters.engines.transformers import libraries

        libraries.loader(_library(config)).build_and_save(config, out_dir, seed, dtype, device)
        return
    import torch
    import transformers

    from fk_adapters.model_classes import model_class

    arch = config["architectures"][0]
    cls = model_class(arch)
    if cls is None:
        raise WeightsError(f"no weight writer for {arch!r}: not a class of transformers {transformers.__version__}")
    cfg = _hf_config(config)
    std = config.get("initializer_range", 0.02)
    torch.manual_seed(seed)
    with torch.device(device):
        model = cls._from_config(cfg, dtype=getattr(torch, dtype))
    spread_constants(model, seed, std)
    model.save_pretrained(out_dir)
    _keep_architecture(out_dir, arch)
    rename_checkpoint_keys(out_dir, CHECKPOINT_KEY_FIXES.get(config.get("model_type"), ()))


def _keep_architecture(out_dir: str, arch: str) -> None:
    """config.json names the checkpoint's architecture, not the class that wrote it (they differ for an alias)."""
    path = os.path.join(out_dir, "config.json")
    with open(path, encoding="utf-8") as f:
        cfg = json.load(f)
    if cfg.get("architectures") != [arch]:
        cfg["architectures"] = [arch]
        with open(path, "w", encoding="utf-8") as f:
            json.dump(cfg, f, indent=1)


# model_type -> (pattern, replacement) on saved tensor names, where transformers saves a layout the
# checkpoints (and so the engines) do not use. Kimi-Linear: transformers writes the dense first layer's
# MLP under block_sparse_moe, the checkpoint and vLLM have it under mlp.
CHECKPOINT_KEY_FIXES = {
    "kimi_linear": ((r"^(.*layers\.\d+)\.block_sparse_moe\.(gate_proj|up_proj|down_proj)\.", r"\1.mlp.\2."),),
}


def rename_checkpoint_keys(out_dir: str, fixes) -> int:
    """Rename tensors of the safetensors files in out_dir (and the shard index); return how many."""
    from safetensors import safe_open
    from safetensors.torch import save_file

    if not fixes:
        return 0

    def fixed(name):
        for pattern, repl in fixes:
            name = re.sub(pattern, repl, name)
        return name

    renamed = {}
    for fname in sorted(os.listdir(out_dir)):
        if not fname.endswith(".safetensors"):
            continue
        path = os.path.join(out_dir, fname)
        with safe_open(path, "pt") as f:
            names = list(f.keys())
            if all(fixed(n) == n for n in names):
                continue
            meta = f.metadata()
            tensors = {fixed(n): f.get_tensor(n) for n in names}
        renamed.update({n: fixed(n) for n in names if fixed(n) != n})
        save_file(tensors, path, metadata=meta)
    index = os.path.join(out_dir, "model.safetensors.index.json")
    if renamed and os.path.exists(index):
        with open(index) as f:
            idx = json.load(f)
        idx["weight_map"] = {fixed(k): v for k, v in idx["weight_map"].items()}
        with open(index, "w") as f:
            json.dump(idx, f, indent=1)
    return len(renamed)


def scenario_checkpoint(sc, cache_root: str, echo=lambda _msg: None) -> tuple[str, str]:
    """A scenario's seeded checkpoint under ``cache_root``: (its absolute directory, its digest).

    A scenario with a ``[speculative.model]`` (an EAGLE-3 head) also gets its draft in ``<directory>/draft``,
    and the digest covers both. ``echo`` hears when the writing starts and how long it took."""
    echo(f"{sc.name}: writing seeded weights")
    t0 = time.perf_counter()
    model_dir = os.path.abspath(os.path.join(cache_root, f"{sc.name}-{sc.dtype}"))
    try:
        key = write_checkpoint(sc.model, model_dir, sc.seed, sc.dtype, _writer_device(sc))
    except ImportError as exc:  # the model's library lacks a dependency here: this scenario fails, not the run
        raise WeightsError(f"{_library(sc.model)} does not import: {import_failure(exc)}") from exc
    draft = (sc.extra.get("speculative") or {}).get("model")
    if draft:
        from fk_adapters import draft_weights

        try:
            draft_key = draft_weights.write_eagle3(draft, draft_weights.draft_dir(model_dir), sc.seed, sc.dtype)
        except draft_weights.DraftError as exc:
            raise WeightsError(f"{sc.name}: [speculative.model]: {exc}") from exc
        key = hashlib.sha256(f"{key}+{draft_key}".encode()).hexdigest()[:16]
    echo(f"{sc.name}: seeded weights ready in {time.perf_counter() - t0:.0f} s")
    return model_dir, key


def import_failure(exc: ImportError) -> str:
    """``exc``'s message and the file whose import statement raised it (a library's own missing dependency)."""
    import traceback

    frames = traceback.extract_tb(exc.__traceback__)
    outside = [f for f in frames if "importlib" not in f.filename]
    return f"{exc}" + (f" (imported by {outside[-1].filename}:{outside[-1].lineno})" if outside else "")


def _writer_device(sc) -> str:
    """Big models are built on the GPU when the scenario is for one and one is here."""
    if sc.device != "cuda":
        return "cpu"
    try:
        import torch

        return "cuda" if torch.cuda.is_available() else "cpu"
    except ImportError:
        return "cpu"


if __name__ == "__main__":  # the child of _in_child
    with open(sys.argv[1]) as f:
        _kind, *_args = json.load(f)
    (write_family if _kind == "family" else _build_and_save)(*_args)
