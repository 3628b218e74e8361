"""A model folder's checkpoint checked from its safetensors headers alone, before any weight is read: a missing,
unexpected, mis-shaped, integer or doubled tensor, an MTP head that cannot run, or a file that is not a readable
safetensors file is the same error ``load_model`` would raise after reading every weight (minutes for a large
model), raised in the time it takes to read the headers."""

from __future__ import annotations

from pathlib import Path

import torch

from .config import ModelConfig
from .model import HybridLM

_DTYPES = {"F64": torch.float64, "F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16,
           "I64": torch.int64, "I32": torch.int32, "I16": torch.int16, "I8": torch.int8, "U8": torch.uint8,
           "BOOL": torch.bool, "F8_E4M3": torch.float8_e4m3fn, "F8_E5M2": torch.float8_e5m2}  # fmt: skip


def header_tensors(folder: Path) -> dict[str, torch.Tensor]:
    """Every tensor of the folder's ``*.safetensors`` files as a meta tensor of its header's shape and dtype, by
    canonical name, experts stacked (``loader.read_safetensors`` without the data). ``WeightError`` for a file
    that is not a readable safetensors file (a folder so named included) or a tensor found twice."""
    from safetensors import SafetensorError, safe_open

    from .loader import WeightError, collect_tensors

    def read(f: Path) -> dict[str, torch.Tensor]:
        if not f.is_file():
            raise WeightError(f"{f} is not a readable safetensors file: a folder, not a file")
        try:
            with safe_open(str(f), "pt") as header:
                slices = {n: header.get_slice(n) for n in header.keys()}  # noqa: SIM118 (a safe_open has no __iter__)
                shapes = {n: (s.get_shape(), s.get_dtype()) for n, s in slices.items()}
        except (SafetensorError, OSError) as e:  # truncated, corrupt, or not a safetensors file at all
            raise WeightError(f"{f} is not a readable safetensors file: {e}") from None
        return {n: torch.empty(shape, dtype=_DTYPES.get(dt, torch.uint8), device="meta") for n, (shape, dt) in
                shapes.items()}  # fmt: skip

    return collect_tensors(folder, read)


def check_checkpoint(folder, cfg: ModelConfig | None = None, mtp=False) -> None:
    """Raise what ``load_model(folder, mtp=mtp)`` would raise about the checkpoint's tensors (``WeightError``,
    ``MTPUnavailableError``), from the headers alone. ``cfg``: the folder's config, when already read."""
    from .loader import _mtp_config, check_weights

    folder = Path(folder)
    cfg = ModelConfig.from_file(folder) if cfg is None else cfg
    tensors = header_tensors(folder)
    cfg = _mtp_config(cfg, tensors, mtp, folder)
    with torch.device("meta"):
        model = HybridLM(cfg)
    model.tie_weights()
    check_weights(model, tensors, meta_ok=True)
