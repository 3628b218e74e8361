"""Training pieces of the embedded model's MTP head (used by ``train_tiny.py --mtp-only`` and after main training).

The main model is frozen. Training sequences are stdlib training-file text (a 128-byte prompt at a
random line start) followed by the main model's own greedy continuation, and plain training text;
the head is distilled towards the main model's next-token distributions, unrolled ``passes`` draft
steps deep with the attention pattern the drafter sees at inference (see ``unrolled_logits``).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from replayssm.engine.engine import Engine
from replayssm.engine.runner import ModelRunner, RunnerConfig
from replayssm.engine.spec import NgramDrafter
from replayssm.models.step import Step, StepKind


@torch.no_grad()
def main_hidden(model, ids: torch.Tensor) -> torch.Tensor:
    """Final-norm hidden states [B, L, D] of the frozen main model over B whole sequences [B, L]."""
    B, L = ids.shape
    runner = ModelRunner(model, RunnerConfig(backend="recurrent", max_slots=B, max_len=L + 4, window=1))
    slots = runner.pool.alloc(B)
    step = Step.build(StepKind.PREFILL, slots, L, runner.kv)
    return model.hidden(ids.reshape(-1), step, runner.pool, runner.kv).view(B, L, -1)


def line_starts(ids: torch.Tensor, n: int, length: int, gen: torch.Generator) -> list[int]:
    """n random offsets into ``ids`` just after a newline, leaving ``length`` tokens after them."""
    out = []
    while len(out) < n:
        s = int(torch.randint(1, len(ids) - length - 1, (1,), generator=gen))
        while s < len(ids) - length - 1 and int(ids[s - 1]) != 10:
            s += 1
        if s < len(ids) - length - 1 and not (ids[s : s + length] >= 256).any():  # no <eos> inside
            out.append(s)
    return out


def greedy_sequences(model, prompts: list[list[int]], new_tokens: int, batch: int = 64) -> torch.Tensor:
    """[N, P + new_tokens]: each prompt followed by the main model's greedy continuation (speculative
    decoding with n-gram drafts, which gives exactly the greedy tokens)."""
    rows = []
    for i in range(0, len(prompts), batch):
        chunk = prompts[i : i + batch]
        runner = ModelRunner(model, RunnerConfig(backend="recurrent", max_slots=len(chunk),
                                                 max_len=len(chunk[0]) + new_tokens + 8, window=4))  # fmt: skip
        eng = Engine(runner, drafter="ngram")
        reqs = [eng.add(p, new_tokens) for p in chunk]
        eng.run()
        rows += [r.prompt + r.generated for r in reqs]
    return torch.tensor(rows, dtype=torch.long)


def unrolled_logits(head, embed, lm_head, hidden: torch.Tensor, ids: torch.Tensor, passes: int) -> list[torch.Tensor]:
    """The head's draft logits for every chain start, ``passes`` draft steps deep, teacher-forced.

    hidden [B, L, D]: the main model's final-norm hidden states; ids [B, L]. Chain t (0..L-2) starts
    from (hidden[t], ids[t+1]) at position t; its pass k (1-based) reads the pass k-1 output and ids[t+k]
    at position t+k-1 and predicts ids[t+k+1]. Pass k attends to the pass-1 entries of positions <= t
    (what the drafter's cache holds for the committed tokens) and to its own chain's entries of passes
    2..k -- exactly what the drafter attends to when it drafts the k-th token after position t. Returns
    ``passes`` tensors [B, L-1, vocab]; rows with t + k > L - 1 read a clamped token and are garbage.
    """
    B, L, D = hidden.shape
    layer = head.layers[0]
    attn = layer.self_attn
    nH, nKV, hd = attn.nH, attn.nKV, attn.hd
    t = torch.arange(L - 1, device=ids.device)
    causal = t[None, :] <= t[:, None]  # [query t, key s]: s <= t
    keys, vals, out, cur = [], [], [], hidden[:, :-1]
    for k in range(1, passes + 1):
        tok = ids[:, (t + k).clamp(max=L - 1)]
        r = head.fuse(cur, embed(tok))  # [B, L-1, D]
        q, kk, v, gate = attn.project(layer.input_layernorm(r).reshape(-1, D), (t + k - 1).repeat(B))
        q = q.view(B, L - 1, nKV, nH // nKV, hd)
        keys.append(kk.view(B, L - 1, nKV, hd))
        vals.append(v.view(B, L - 1, nKV, hd))
        scores = [torch.einsum("btgrd,bsgd->bgrts", q, keys[0]).masked_fill(~causal, float("-inf"))]
        scores += [torch.einsum("btgrd,btgd->bgrt", q, kj)[..., None] for kj in keys[1:]]
        p = torch.softmax(torch.cat(scores, -1) * hd**-0.5, -1)  # [B, nKV, rep, L-1, L-1 + k-1]
        o = torch.einsum("bgrts,bsgd->btgrd", p[..., : L - 1], vals[0])
        for j, vj in enumerate(vals[1:]):
            o = o + p[..., L - 1 + j].permute(0, 3, 1, 2)[..., None] * vj[:, :, :, None, :]
        r = r.reshape(-1, D) + attn.output(o.reshape(B * (L - 1), nH * hd), gate)
        r = r + layer.mlp(layer.post_attention_layernorm(r))  # rows flattened: the MoE MLP takes [N, D]
        cur = head.norm(r).view(B, L - 1, D)
        out.append(lm_head(cur))
    return out


def distill_loss(logits: list[torch.Tensor], teacher: torch.Tensor, weights) -> tuple[torch.Tensor, list[float]]:
    """Soft cross-entropy of pass k against the main model's distribution at t + k; teacher [B, L, vocab] logits."""
    L = teacher.shape[1]
    total, parts = 0.0, []
    for k, (lg, w) in enumerate(zip(logits, weights), start=1):
        n = L - 1 - k + 1  # chains t <= L-1-k
        target = torch.softmax(teacher[:, k : k + n].float(), -1)
        loss = -(target * F.log_softmax(lg[:, :n].float(), -1)).sum(-1).mean()
        total = total + w * loss
        parts.append(loss.item())
    return total, parts


@torch.no_grad()
def acceptance(head, model, hidden: torch.Tensor, ids: torch.Tensor, start: int, window: int) -> dict:
    """Mean accepted length per step (window T) if a step started at each position c >= ``start`` of the
    greedy sequences ``ids``: MTP drafts (chain t = c - 1) and n-gram drafts, against the greedy tokens."""
    lg = unrolled_logits(head, model.model.embed_tokens, model.lm_head, hidden, ids, window - 1)
    drafts = torch.stack([x.argmax(-1) for x in lg], -1)  # [B, L-1, T-1]: chain t's drafts
    B, L = ids.shape
    mtp, ngram, ng = [], [], NgramDrafter()
    for b in range(B):
        seq = ids[b].tolist()
        for c in range(start, L - window + 1):
            truth = seq[c + 1 : c + window]
            d = drafts[b, c - 1].tolist()
            mtp.append(1 + _leading(d, truth))
            ngram.append(1 + _leading(ng.propose(seq[: c + 1], window - 1), truth))
    return {"mtp": sum(mtp) / len(mtp), "ngram": sum(ngram) / len(ngram), "positions": len(mtp)}


def _leading(drafts: list[int], truth: list[int]) -> int:
    n = 0
    while n < len(drafts) and n < len(truth) and drafts[n] == truth[n]:
        n += 1
    return n
