"""Load a hybrid model from a Hugging Face folder: config.json, *.safetensors, tokenizer.json."""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

import torch

from .config import ModelConfig
from .model import HybridLM

LOAD_DTYPES = (torch.float32, torch.float16, torch.bfloat16)
_IGNORED = (re.compile(r"^model\.visual\."),)
_PER_EXPERT = re.compile(r"^(.+\.mlp\.experts)\.(\d+)\.(gate_proj|up_proj|down_proj)\.weight$")
_MTP_LAYER = re.compile(r"^mtp\.layers\.(\d+)\.")


class WeightError(ValueError):
    """The checkpoint's tensors do not match the model (missing, unexpected, mis-shaped, unusable: not a floating
    point tensor with data), or one is in it twice."""


class MTPUnavailableError(ValueError):
    """The MTP head was asked for, but the checkpoint has none that replayssm can run. ``reason``: what is
    wrong, without the advice (the CLI words its own)."""

    def __init__(self, message: str, reason: str | None = None):
        super().__init__(message)
        self.reason = reason or message


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
        for kind in ("gate_proj", "up_proj", "down_proj"):  # every expert's tensor of a kind has expert 0's shape
            first = experts[0][kind][1].shape
            odd = [f"{n}: {tuple(t.shape)}" for e in range(E) for n, t in [experts[e][kind]] if t.shape != first]
            if odd or len(first) != 2:
                raise WeightError(f"mis-shaped tensors: {'; '.join(odd or [experts[0][kind][0]])} (each expert's "
                                  f"{kind} must be 2-d and shaped like expert 0's, {tuple(first)})")  # fmt: skip
        out[f"{prefix}.gate_up_proj"] = torch.stack(
            [torch.cat([experts[e]["gate_proj"][1], experts[e]["up_proj"][1]], 0) for e in range(E)]
        )
        out[f"{prefix}.down_proj"] = torch.stack([experts[e]["down_proj"][1] for e in range(E)])
    return out


def read_safetensors(folder: Path, progress=None) -> dict[str, torch.Tensor]:
    """Every tensor of the folder's ``*.safetensors`` files, by canonical name; ``progress(nbytes)`` after each file.
    A name found twice (two shards, or two spellings of one tensor) is a ``WeightError`` naming both files."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    def read(f: Path) -> dict[str, torch.Tensor]:
        try:
            return load_file(str(f))
        except SafetensorError as e:  # truncated, corrupt, or not a safetensors file at all
            raise WeightError(f"{f} is not a readable safetensors file: {e}") from None

    return collect_tensors(folder, read, progress)


def collect_tensors(folder: Path, read, progress=None) -> dict[str, torch.Tensor]:
    """``read(file)`` ({name: tensor}) of every ``*.safetensors`` file of ``folder``, by canonical name, experts
    stacked; ``progress(nbytes)`` after each file. A name found twice (two shards, or two spellings of one tensor) is
    a ``WeightError`` naming both files."""
    files = sorted(folder.glob("*.safetensors"))
    if not files:
        raise FileNotFoundError(f"no *.safetensors in {folder}")
    tensors, origin = {}, {}
    for f in files:
        for name, t in read(f).items():
            c = _canonical(name)
            if c is not None:
                if c in tensors:  # two shards (or two spellings) of one tensor: neither may silently win
                    raise WeightError(f"{c} is in the checkpoint twice: {origin[c]} and {f.name} ({name})")
                tensors[c], origin[c] = t, f.name
        if progress is not None:
            progress(f.stat().st_size)
    return _stack_experts(tensors)


def load_weights(model: HybridLM, tensors: dict[str, torch.Tensor]) -> None:
    """Copy ``tensors`` into ``model``; raise ``WeightError`` naming every missing, extra, mis-shaped or unusable
    (not a floating-point tensor with data) tensor, before anything is copied."""
    expected = check_weights(model, tensors)
    params = dict(model.named_parameters(remove_duplicate=False))
    with torch.no_grad():
        for n in expected:
            params[n].copy_(tensors[n])


def check_weights(model: HybridLM, tensors: dict[str, torch.Tensor], *, meta_ok: bool = False) -> set[str]:
    """``WeightError`` naming every missing, extra, mis-shaped or unusable tensor of ``tensors`` for ``model``
    (``meta_ok``: meta tensors stand for a checkpoint's headers, ``checkpoint.check_checkpoint``); else the names
    to copy."""
    params = dict(model.named_parameters(remove_duplicate=False))
    expected = {n for n in params if not (model.config.tie_word_embeddings and n == "lm_head.weight")}
    missing = sorted(expected - tensors.keys())
    extra = sorted(tensors.keys() - params.keys())
    kind = sorted(f"{n}: {_kind(tensors[n], meta_ok)}" for n in expected & tensors.keys()
                  if _kind(tensors[n], meta_ok))  # fmt: skip
    shape = sorted(f"{n}: checkpoint {tuple(tensors[n].shape)}, model {tuple(params[n].shape)}"
                   for n in expected & tensors.keys() - {k.split(':')[0] for k in kind}
                   if tuple(tensors[n].shape) != tuple(params[n].shape))  # fmt: skip
    problems = [f"unusable tensors: {'; '.join(kind)}"] if kind else []
    if missing:
        problems.append(f"missing tensors: {', '.join(missing)}")
    if extra:
        problems.append(f"unexpected tensors: {', '.join(extra)}")
    if shape:
        problems.append(f"mis-shaped tensors: {'; '.join(shape)}")
    if problems:
        raise WeightError("; ".join(problems))
    return expected


def _kind(t, meta_ok: bool = False) -> str | None:
    """Why ``t`` cannot be copied into a floating-point parameter (nothing is copied then), or None."""
    if not isinstance(t, torch.Tensor):
        return f"a {type(t).__name__}, not a tensor"
    if t.is_meta and not meta_ok:
        return "a meta tensor (no data)"
    if not t.dtype.is_floating_point:
        return f"dtype {t.dtype} (weights are floating point)"
    return None


def _mtp_problem(cfg: ModelConfig, names: list[str]) -> str | None:
    """Why a checkpoint whose ``mtp.*`` tensors are ``names`` has no MTP head replayssm can run (None: it has one)."""
    layers = cfg.mtp_num_hidden_layers
    if names and layers == 0:  # config.json without the field: count the checkpoint's layers
        layers = max((int(m.group(1)) + 1 for n in names if (m := _MTP_LAYER.match(n))), default=1)
    if not names:
        return f"no mtp.* tensors in its safetensors (config mtp_num_hidden_layers={cfg.mtp_num_hidden_layers})"
    if layers != 1:
        return f"{layers} MTP layers; replayssm runs MTP heads of exactly one layer"
    return None


def mtp_head_problem(folder) -> str | None:
    """What ``load_model(mtp=True)`` would find wrong with the folder's MTP head (None: it has one it can run), from
    config.json and the safetensors headers alone, before any weight is read. An unreadable file gives None: the
    load names it."""
    from safetensors import SafetensorError, safe_open

    folder = Path(folder)
    names = []
    try:
        cfg = ModelConfig.from_file(folder)
        for f in sorted(folder.glob("*.safetensors")):
            with safe_open(str(f), "pt") as header:
                names += [c for n in header.keys() if (c := _canonical(n)) and c.startswith("mtp.")]  # noqa: SIM118
    except (OSError, ValueError, SafetensorError):
        return None
    return _mtp_problem(cfg, names)


def _mtp_config(cfg: ModelConfig, tensors: dict[str, torch.Tensor], mtp, folder: Path) -> ModelConfig:
    """The config to build: with ``mtp_num_hidden_layers`` kept (MTP loaded) or 0 (``mtp.*`` dropped)."""
    names = [n for n in tensors if n.startswith("mtp.")]
    problem = _mtp_problem(cfg, names)
    if mtp is False or (mtp == "auto" and problem):
        for n in names:
            del tensors[n]
        return replace(cfg, mtp_num_hidden_layers=0)
    if problem:
        reason = f"{folder} has no usable MTP head: {problem}"
        raise MTPUnavailableError(f"{reason}; use drafter='ngram' (or 'auto')", reason=reason)
    return replace(cfg, mtp_num_hidden_layers=1)


def load_model(path: str | Path, *, dtype: torch.dtype | None = torch.float32, device="cpu", mtp=False,
               progress=None) -> HybridLM:  # fmt: skip
    """Build and load the model of a Hugging Face folder.

    ``mtp``: False ignores the ``mtp.*`` tensors; True loads the MTP head (``MTPUnavailableError`` when the
    checkpoint has none); "auto" loads it when the checkpoint has ``mtp.*`` tensors. A loaded head is
    checked as strictly as the rest: every missing, unexpected or mis-shaped ``mtp.*`` tensor is named.
    ``progress(nbytes)`` is called as each weight file has been read.
    """
    if not (mtp is True or mtp is False or mtp == "auto"):
        raise ValueError(f"mtp must be True, False or 'auto', got {mtp!r}")
    dtype = torch.float32 if dtype is None else dtype
    if dtype not in LOAD_DTYPES:
        raise ValueError(f"dtype must be one of {LOAD_DTYPES}, got {dtype!r}")
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError, ValueError) as e:
        raise ValueError(f"device {device!r} is not a device: {e}") from None
    if dev.type == "meta":
        raise ValueError(f"device {device!r}: a meta tensor holds no data")
    gpus = torch.cuda.device_count() if dev.type == "cuda" else 0
    if dev.type == "cuda" and (gpus == 0 or (dev.index or 0) >= gpus):
        raise ValueError(f"device {device!r}: this machine has {gpus} CUDA GPU(s)")
    if progress is not None and not callable(progress):
        raise TypeError(f"progress must be None or a callable taking a byte count, got {progress!r}")
    folder = Path(path)
    if not folder.is_dir():
        raise FileNotFoundError(f"{folder} is not a model folder (config.json, *.safetensors)")
    cfg = ModelConfig.from_file(folder)
    try:
        cfg.check_buildable()  # before reading any weight
    except ValueError as e:
        raise type(e)(f"{folder / 'config.json'}: {str(e).removeprefix('config.json ')}") from None
    from .checkpoint import check_checkpoint

    check_checkpoint(folder, cfg, mtp)  # the headers alone, before any weight is read
    tensors = read_safetensors(folder, progress)
    cfg = _mtp_config(cfg, tensors, mtp, folder)
    with torch.device("meta"):
        model = HybridLM(cfg)
    model = model.to_empty(device="cpu")
    model.tie_weights()
    load_weights(model, tensors)
    return model.to(device=device, dtype=dtype).eval()


def load_tokenizer(path: str | Path):
    from tokenizers import Tokenizer

    f = Path(path)
    f = f / "tokenizer.json" if f.is_dir() else f
    if not f.is_file():
        raise FileNotFoundError(f"no tokenizer.json at {f}")
    try:
        return Tokenizer.from_file(str(f))
    except Exception as e:  # the tokenizers package raises a bare Exception for a file it cannot parse
        raise ValueError(f"{f} is not a tokenizer file the tokenizers package can read ({e})") from None
