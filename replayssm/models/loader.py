"""Load a hybrid model from a Hugging Face folder: config.json, *.safetensors, tokenizer.json."""

from __future__ import annotations

import re
from pathlib import Path

import torch

from .config import ModelConfig
from .model import HybridLM

_IGNORED = (re.compile(r"^mtp\."), re.compile(r"^model\.visual\."))
_PER_EXPERT = re.compile(r"^(.+\.mlp\.experts)\.(\d+)\.(gate_proj|up_proj|down_proj)\.weight$")


class WeightError(ValueError):
    """The checkpoint's tensors do not match the model (missing, unexpected or mis-shaped)."""


def _canonical(name: str) -> str | None:
    name = name.replace("model.language_model.", "model.", 1)
    return None if any(p.match(name) for p in _IGNORED) else name


def _stack_experts(tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Per-expert tensors (experts.{e}.gate_proj/up_proj/down_proj.weight, as in the published checkpoints) ->
    the model's stacked ones (experts.gate_up_proj [E, 2I, D], experts.down_proj [E, D, I]). Checkpoints saved
    with the stacked names already pass through; an incomplete set of experts is left as it is, for the strict
    loader to name."""
    out, groups = {}, {}
    for name, t in tensors.items():
        m = _PER_EXPERT.match(name)
        if m:
            prefix, e, kind = m.groups()
            groups.setdefault(prefix, {}).setdefault(int(e), {})[kind] = (name, t)
        else:
            out[name] = t
    for prefix, experts in groups.items():
        E = max(experts) + 1
        if len(experts) != E or any(len(k) != 3 for k in experts.values()):
            out.update({n: t for k in experts.values() for n, t in k.values()})
            continue
        out[f"{prefix}.gate_up_proj"] = torch.stack(
            [torch.cat([experts[e]["gate_proj"][1], experts[e]["up_proj"][1]], 0) for e in range(E)]
        )
        out[f"{prefix}.down_proj"] = torch.stack([experts[e]["down_proj"][1] for e in range(E)])
    return out


def read_safetensors(folder: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    files = sorted(folder.glob("*.safetensors"))
    if not files:
        raise FileNotFoundError(f"no *.safetensors in {folder}")
    tensors = {}
    for f in files:
        for name, t in load_file(str(f)).items():
            c = _canonical(name)
            if c is not None:
                tensors[c] = t
    return _stack_experts(tensors)


def load_weights(model: HybridLM, tensors: dict[str, torch.Tensor]) -> None:
    """Copy ``tensors`` into ``model``; raise ``WeightError`` naming every missing, extra or mis-shaped tensor."""
    params = dict(model.named_parameters(remove_duplicate=False))
    expected = {n for n in params if not (model.config.tie_word_embeddings and n == "lm_head.weight")}
    missing = sorted(expected - tensors.keys())
    extra = sorted(tensors.keys() - params.keys())
    shape = sorted(f"{n}: checkpoint {tuple(tensors[n].shape)}, model {tuple(params[n].shape)}"
                   for n in expected & tensors.keys() if tuple(tensors[n].shape) != tuple(params[n].shape))  # fmt: skip
    problems = []
    if missing:
        problems.append(f"missing tensors: {', '.join(missing)}")
    if extra:
        problems.append(f"unexpected tensors: {', '.join(extra)}")
    if shape:
        problems.append(f"mis-shaped tensors: {'; '.join(shape)}")
    if problems:
        raise WeightError("; ".join(problems))
    with torch.no_grad():
        for n in expected:
            params[n].copy_(tensors[n])


def load_model(path: str | Path, *, dtype: torch.dtype = torch.float32, device="cpu") -> HybridLM:
    folder = Path(path)
    cfg = ModelConfig.from_file(folder)
    with torch.device("meta"):
        model = HybridLM(cfg)
    model = model.to_empty(device="cpu")
    model.tie_weights()
    load_weights(model, read_safetensors(folder))
    return model.to(device=device, dtype=dtype).eval()


def load_tokenizer(path: str | Path):
    from tokenizers import Tokenizer

    f = Path(path)
    f = f / "tokenizer.json" if f.is_dir() else f
    if not f.is_file():
        raise FileNotFoundError(f"no tokenizer.json at {f}")
    return Tokenizer.from_file(str(f))
