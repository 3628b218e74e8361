"""The memory planner (``replayssm memory``): what a model's per-request state needs on one GPU of a TP group."""

from __future__ import annotations

from ..ops.shape import GDNShape
from .config import ModelConfig

DTYPE_BYTES = {"bf16": 2, "fp16": 2, "fp32": 4}


def plan_memory(cfg: ModelConfig, *, name: str = "", tp: int = 1, T: int = 4, L: int = 16, act_bytes: int = 2,
                u_bytes: int | None = None, budget_bytes: int | None = None, context: int = 0) -> dict:  # fmt: skip
    """Per-request bytes of both backends for one GPU of a TP group, and how many requests fit.

    ``context`` > 0 adds the full-attention KV cache of that many tokens per request (K and V,
    activation dtype). Scratch that scales with running requests (snapshots, conv scratch) is
    counted per request, since every running request needs it at the same time.
    """
    if not isinstance(cfg, ModelConfig):
        raise TypeError(f"cfg must be a ModelConfig, got {type(cfg).__name__}")
    for field, heads in (("linear_num_key_heads", cfg.H), ("linear_num_value_heads", cfg.HV)):
        if heads % tp:
            raise ValueError(f"tp={tp} does not divide {field}={heads}")
    u_bytes = act_bytes if u_bytes is None else u_bytes
    shape = GDNShape(cfg.H // tp, cfg.HV // tp, cfg.K, cfg.V)  # one GPU's share of the heads
    H, HV, K, V, W = shape.H, shape.HV, shape.K, shape.V, cfg.conv_kernel
    C = shape.conv_channels
    layer = {
        "state": shape.state_bytes,
        "conv_state": (W - 1) * C * act_bytes,
        "conv_scratch": (W - 1 + T) * C * act_bytes,
        "ring": L * (H * K * 4 + HV * V * act_bytes + HV * 4 + HV * 4 + HV * V * u_bytes) + HV * max(1, V // 8) * 4,
        "snapshots": T * shape.state_bytes,
    }
    n = len(cfg.gdn_layers)
    kv = len(cfg.attention_layers) * 2 * max(1, cfg.num_kv_heads // tp) * cfg.head_dim * act_bytes * context
    common = n * (layer["state"] + layer["conv_state"] + layer["conv_scratch"]) + kv
    per_request = {"recurrent": common + n * layer["snapshots"], "replay": common + n * layer["ring"] + 5 * 4}
    scratch = {"recurrent": n * layer["snapshots"], "replay": 0}
    out = {"model": name, "tp": tp, "T": T, "L": L, "gdn_layers": n, "H": H, "HV": HV, "K": K, "V": V,
           "conv_channels": C, "per_layer": layer, "kv_cache": kv, "per_request": per_request,
           "speculative_scratch_per_request": scratch}  # fmt: skip
    if budget_bytes is not None:
        fit = {b: budget_bytes // per_request[b] for b in per_request}
        out["budget"] = budget_bytes
        out["requests_fit"] = fit
        out["speculative_scratch_total"] = {b: fit[b] * scratch[b] for b in fit}
        out["ring_total"] = fit["replay"] * (n * layer["ring"] + 20)
    return out


def format_plan(p: dict) -> str:
    lay, n = p["per_layer"], p["gdn_layers"]
    rows = [
        ("state (HV*V*K*4)", lay["state"], lay["state"]),
        ("conv state ((W-1)*C*act)", lay["conv_state"], lay["conv_state"]),
        ("conv scratch ((W-1+T)*C*act)", lay["conv_scratch"], lay["conv_scratch"]),
        ("snapshots (T*HV*V*K*4)", lay["snapshots"], 0),
        ("ring (L*(4*H*K + HV*V*a + 8*HV + HV*V*u) + HV*V/2)", 0, lay["ring"]),
    ]
    w = 46
    heads = f"H={p['H']} HV={p['HV']} K={p['K']} V={p['V']}, conv channels C={p['conv_channels']}"
    lines = [
        f"model {p['model']}  TP {p['tp']}  T={p['T']}  L={p['L']}",
        f"GDN per GPU: {n} layers, {heads}",
        f"{'bytes per request, per GDN layer':<{w}}{'recurrent':>16}{'replay':>16}",
    ]
    lines += [f"  {name:<{w - 2}}{a:>16,}{b:>16,}" for name, a, b in rows]
    rec, rep = (p["per_request"][b] - p["kv_cache"] for b in ("recurrent", "replay"))
    lines.append(f"{'per request, x ' + str(n) + ' layers (+20 B cursors, replay)':<{w}}{rec:>16,}{rep:>16,}")
    if p["kv_cache"]:
        lines.append(f"{'  + full-attention KV cache':<{w}}{p['kv_cache']:>16,}{p['kv_cache']:>16,}")
    lines.append(
        f"{'speculative scratch per request':<{w}}{p['speculative_scratch_per_request']['recurrent']:>16,}{0:>16,}"
    )
    if "budget" in p:
        f = p["requests_fit"]
        lines.append(f"budget {p['budget']:,} B ({p['budget'] / 2**30:.2f} GiB)")
        lines.append(f"{'requests that fit':<{w}}{f['recurrent']:>16,}{f['replay']:>16,}")
        scratch = p["speculative_scratch_total"]["recurrent"]
        label = "speculative scratch at that concurrency"
        lines.append(f"{label:<{w}}{scratch:>16,}{p['ring_total']:>16,}  (replay: ring buffers)")
    return "\n".join(lines)
