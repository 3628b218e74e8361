"""The memory planner (``replayssm memory``): what a model's per-request state needs on one GPU of a TP group."""

from __future__ import annotations

import math

from ..ops._validate import check_count
from ..ops.ring import MARK_ROWS, check_ring_geometry, ring_length_for
from ..ops.shape import GDNShape
from .config import ModelConfig

DTYPE_BYTES = {"bf16": 2, "fp16": 2, "fp32": 4}
CURSOR_BYTES = 5 * 4  # a replay slot's ring cursors: write_pos, base, flush, pending, epoch (int32 each)


def plan_memory(cfg: ModelConfig, *, name: str = "", tp: int = 1, T: int = 4, L: int | None = None, act_bytes: int = 2,
                u_bytes: int | None = None, budget_bytes: int | None = None, context: int = 0) -> dict:  # fmt: skip
    """Per-request bytes of both backends for one GPU of a TP group, and how many requests fit.

    ``context`` > 0 adds the full-attention KV cache of that many tokens per request (K and V,
    activation dtype). Scratch that scales with running requests (snapshots, conv scratch) is
    counted per request, since every running request needs it at the same time. ``L``: the ring length, taken as
    given (a power of two >= 2T, as ``PoolConfig.ring_len``); None derives it, ``ring_length_for(T)``.

    ``scratch_per_request``: what each backend keeps beyond the checkpoint and conv state -- the recurrent
    backend's per-token state snapshots of a verify window (none at T=1: plain decoding updates the state in
    place), ReplaySSM's ring of per-token inputs and its cursors (the replay backend decodes through its ring
    at T=1 too). ``scratch_total``: that times the requests that fit.
    """
    if not isinstance(cfg, ModelConfig):
        raise TypeError(f"cfg must be a ModelConfig, got {type(cfg).__name__}")
    for arg, val, least in (("tp", tp, 1), ("T", T, 1), ("context", context, 0)):
        check_count(arg, val, least)
    for arg, val in (("act_bytes", act_bytes), ("u_bytes", u_bytes)):
        if val is not None and (isinstance(val, bool) or val not in (1, 2, 4)):
            raise ValueError(f"{arg} must be 1, 2 or 4 (bytes of an activation), got {val!r}")
    if budget_bytes is not None and (isinstance(budget_bytes, bool) or not isinstance(budget_bytes, (int, float))
                                     or not math.isfinite(budget_bytes) or budget_bytes <= 0):  # fmt: skip
        raise ValueError(f"budget_bytes must be None or a finite number > 0, got {budget_bytes!r}")
    if not cfg.gdn_layers:
        raise ValueError("cfg has no GDN (linear_attention) layer: nothing to plan")
    for field, heads in (("linear_num_key_heads", cfg.H), ("linear_num_value_heads", cfg.HV)):
        if heads % tp:
            raise ValueError(f"tp={tp} does not divide {field}={heads}")
    u_bytes = act_bytes if u_bytes is None else u_bytes
    if L is None:
        L = ring_length_for(T)
    check_ring_geometry(L, T)
    shape = GDNShape(cfg.H // tp, cfg.HV // tp, cfg.K, cfg.V)  # one GPU's share of the heads
    H, HV, K, V, W = shape.H, shape.HV, shape.K, shape.V, cfg.conv_kernel
    C = shape.conv_channels
    layer = {
        "state": shape.state_bytes,
        "conv_state": (W - 1) * C * act_bytes,
        "conv_scratch": (W - 1 + T) * C * act_bytes,
        "ring": L * (H * K * 4 + HV * V * act_bytes + HV * 4 + HV * 4 + HV * V * u_bytes)
        + HV * max(1, V // MARK_ROWS) * 4,
        "snapshots": T * shape.state_bytes if T > 1 else 0,  # T=1: plain decoding, in place
    }
    n = len(cfg.gdn_layers)
    kv = len(cfg.attention_layers) * 2 * max(1, cfg.num_kv_heads // tp) * cfg.head_dim * act_bytes * context
    common = n * (layer["state"] + layer["conv_state"] + layer["conv_scratch"]) + kv
    scratch = {"recurrent": n * layer["snapshots"], "replay": n * layer["ring"] + CURSOR_BYTES}
    per_request = {b: common + scratch[b] for b in scratch}
    out = {"model": name, "tp": tp, "window": T, "ring_len": L, "gdn_layers": n, "H": H, "HV": HV, "K": K, "V": V,
           "conv_channels": C, "per_layer": layer, "kv_cache": kv, "per_request": per_request,
           "scratch_per_request": scratch}  # fmt: skip
    if budget_bytes is not None:
        fit = {b: budget_bytes // per_request[b] for b in per_request}
        out["budget"] = budget_bytes
        out["requests_fit"] = fit
        out["scratch_total"] = {b: fit[b] * scratch[b] for b in fit}
    return out


def format_plan(p: dict) -> str:
    lay, n = p["per_layer"], p["gdn_layers"]
    rows = [
        ("bytes per request, per GDN layer", "recurrent", "replay"),
        ("  state (HV*V*K*4)", lay["state"], lay["state"]),
        ("  conv state ((W-1)*C*act)", lay["conv_state"], lay["conv_state"]),
        ("  conv scratch ((W-1+T)*C*act)", lay["conv_scratch"], lay["conv_scratch"]),
        ("  snapshots (T*HV*V*K*4; none at T=1)", lay["snapshots"], 0),
        ("  ring (L*(4*H*K + HV*V*a + 8*HV + HV*V*u) + HV*V)", 0, lay["ring"]),  # + fold markers: int32 per 4 rows
    ]
    rec, rep = (p["per_request"][b] - p["kv_cache"] for b in ("recurrent", "replay"))
    scratch = p["scratch_per_request"]
    rows.append((f"per request, x {n} layers (+{CURSOR_BYTES} B ring cursors)", rec, rep))
    rows.append(("  of it snapshots (recurrent) / ring (replay)", scratch["recurrent"], scratch["replay"]))
    if p["kv_cache"]:
        rows.append(("+ full-attention KV cache per request", p["kv_cache"], p["kv_cache"]))
        rows.append(("= per request, with the KV cache", p["per_request"]["recurrent"], p["per_request"]["replay"]))
    if "budget" in p:
        f, total = p["requests_fit"], p["scratch_total"]
        rows.append((f"requests that fit in {p['budget']:,} B ({p['budget'] / 2**30:.2f} GiB)", f["recurrent"],
                     f["replay"]))  # fmt: skip
        rows.append(("  their snapshots (recurrent) / rings (replay)", total["recurrent"], total["replay"]))
    cell = lambda v: v if isinstance(v, str) else f"{v:,}"
    w = max(len(r[0]) for r in rows) + 2
    c = max(16, *(len(cell(v)) + 2 for r in rows for v in r[1:]))
    heads = f"H={p['H']} HV={p['HV']} K={p['K']} V={p['V']}, conv channels C={p['conv_channels']}"
    title = f"model {p['model']}  TP {p['tp']}  T={p['window']}  L={p['ring_len']}"
    lines = [title, f"GDN per GPU: {n} layers, {heads}"]
    lines += [f"{name:<{w}}{cell(a):>{c}}{cell(b):>{c}}" for name, a, b in rows]
    if p["window"] == 1:
        lines += ["T=1 is plain decoding: the recurrent backend updates its state in place (no snapshots);",
                  "the replay backend decodes through its ring"]  # fmt: skip
    return "\n".join(lines)
