"""Whether a run fits the memory of its device, checked before it allocates: an allocation that fails half-way is a
traceback after minutes of work, where the user error is a flag (a batch, a layer count, a model too large) or an
argument (``LLM``'s ``max_slots`` and ``max_len``)."""

from __future__ import annotations

SPARE = 0.8  # of the memory a device has free, the share a run may plan to use (the rest: allocator, temporaries)


def memory_bytes(dev) -> int | None:
    """Memory ``dev`` has for a run: the GPU's free memory, or the machine's (None where it cannot tell)."""
    import os

    import torch

    if dev.type == "cuda":
        return torch.cuda.mem_get_info(dev)[0]
    try:  # MemAvailable counts the page cache the kernel would give back; MemFree does not
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def too_big(need: float, dev) -> str | None:
    """None when ``need`` bytes fit ``dev`` (or its memory is unknown), else "need X GiB, more than this machine can
    spare (Y GiB on DEV)" for the caller's error line."""
    have = memory_bytes(dev)
    if have is None or need <= SPARE * have:
        return None
    return f"need {need / 2**30:.1f} GiB, more than this machine can spare ({have / 2**30:.1f} GiB free on {dev})"


def model_bytes(cfg, dtype) -> int:
    """Bytes of the weights of the model ``cfg`` describes, in ``dtype`` (counted on the meta device: nothing is
    allocated)."""
    import torch

    from .models.model import HybridLM

    with torch.device("meta"):
        model = HybridLM(cfg)
    size = torch.empty(0, dtype=dtype).element_size()
    return sum(p.numel() for p in model.parameters()) * size


def weights_too_big(cfg, dev) -> str | None:
    """``too_big`` for the weights of ``cfg`` in the dtype a run on ``dev`` loads them in (bf16 on a GPU, fp32 on the
    CPU): "its weights in DTYPE need ..." or None."""
    import torch

    dtype = torch.bfloat16 if dev.type == "cuda" else torch.float32
    return weight_bytes_too_big(model_bytes(cfg, dtype), dtype, dev)


def weight_bytes_too_big(nbytes: int, dtype, dev) -> str | None:
    """``too_big`` for ``nbytes`` of weights in ``dtype``: "its weights in DTYPE need ..." or None."""
    big = too_big(nbytes, dev)
    return f"its weights in {str(dtype).removeprefix('torch.')} {big}" if big else None
