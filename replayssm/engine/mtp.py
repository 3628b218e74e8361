"""``MTPDrafter``: drafts a window's T-1 tokens on the device with the model's own MTP head.

Per slot it keeps the last verify step's window tokens and final-norm hidden states, the accepted
count of that step, and a one-layer KV cache for the head's attention, whose entry at position ``t``
is computed from (main hidden at t, token at t+1). At the start of a step (``propose``) it first
catches up on the previous window: one pass over its T rows, with the bonus token put after the last
accepted row, writes the entries of the newly committed positions and drafts the first token from
the last accepted row; then T-2 single-row passes each draft one more token from the head's own
output. Rows past the accepted ones write entries beyond the committed length that nothing reads
before they are overwritten -- the same rollback by length as the main KV cache. Everything is a
device tensor op with shapes fixed by (B, T): the drafting is captured in the runner's CUDA graph
together with the verify.
"""

from __future__ import annotations

import torch

from ..models.model import HybridLM
from ..models.step import Step, StepKind
from ..state.kv import KVCache
from .draft_head import draft_head


class MTPDrafter:
    """``engine.drafter.DeviceDrafter`` with the model's MTP head, over ``num_slots`` slots, window ``window``;
    ``head`` and ``vocab``: the LM head it drafts with and its draft vocabulary (``engine/draft_head.py``)."""

    def __init__(self, model: HybridLM, *, num_slots: int, max_len: int, window: int, head: str = "auto",
                 vocab=None):  # fmt: skip
        if model.mtp is None:
            raise ValueError("the model has no MTP head: load it with load_model(..., mtp=True)")
        if window < 2:
            raise ValueError(f"the MTP drafter needs a window of at least 2 tokens, got {window}")
        p = next(model.parameters())
        mc = model.config
        self.model, self.window = model, window
        self.head = draft_head(model.lm_head, head, vocab)  # picks the draft tokens (engine/draft_head.py)
        self.kv = KVCache(1, num_slots, max_len, mc.num_kv_heads, mc.head_dim, dtype=p.dtype, device=p.device)
        S, dev = num_slots, p.device
        self.hidden = torch.zeros(S + 1, window, mc.hidden_size, dtype=p.dtype, device=dev)  # last window's
        self.tokens = torch.zeros(S + 1, window, dtype=torch.long, device=dev)  # row S: sink for padding
        self.num_accepted = torch.ones(S + 1, dtype=torch.int32, device=dev)

    def _head(self, hidden, ids, step):
        return self.model.mtp(hidden, self.model.model.embed_tokens(ids), step, self.kv)

    def _draft(self, hidden):
        return self.head(hidden)

    @torch.no_grad()
    def prefill(self, slot: int, ids: torch.Tensor, hidden: torch.Tensor) -> None:
        """After the main model's prefill of ``slot``: ids [P] the prompt, hidden [P, D] its final-norm hidden
        states. Writes the cache entries of positions 0..P-2; the last row waits for the first sampled token."""
        P = ids.shape[0]
        s = torch.tensor([slot], dtype=torch.int32, device=ids.device)
        self.kv.reset(s)
        if P > 1:
            rows = self.kv.rows(s)
            start = torch.zeros(1, dtype=torch.long, device=ids.device)
            cu = torch.tensor([0, P - 1], dtype=torch.int32, device=ids.device)
            step = Step(StepKind.PREFILL, s, cu, start, torch.arange(P - 1, device=ids.device), rows, P - 1)
            self._head(hidden[:-1], ids[1:], step)
        self.hidden[slot, 0] = hidden[-1]
        self.tokens[slot, 0] = ids[-1]
        self.num_accepted[slot] = 1
        self.kv.commit(s, torch.tensor([P], dtype=torch.int32, device=ids.device))

    def propose(self, step: Step, last: torch.Tensor) -> torch.Tensor:
        """Inside the step, before the verify: ``step`` is the main model's verify step, last [B] the
        window's first token (the last one emitted). Returns the drafts [B, T-1] (long)."""
        B, T, dev = step.B, self.window, last.device
        rows = step.kv_rows
        n = self.num_accepted[rows].long()  # [B]: accepted rows of the previous window
        base = (step.start - n).clamp_min(0)  # position of the previous window's first row
        j = torch.arange(T, device=dev)
        ids = torch.cat([self.tokens[rows, 1:], last[:, None]], 1)
        ids = torch.where(j[None, :] == (n - 1)[:, None], last[:, None], ids)  # bonus after the last accepted row
        cu = torch.arange(0, B * T + 1, T, dtype=torch.int32, device=dev)
        pos = (base[:, None] + j).reshape(-1)
        catch_up = Step(StepKind.VERIFY, step.slots, cu, base, pos, rows, T, step.contiguous)
        out = self._head(self.hidden[rows].reshape(B * T, -1), ids.reshape(-1), catch_up)
        h = out.view(B, T, -1)[torch.arange(B, device=dev), n - 1]  # [B, D]: the last accepted row
        drafts = [self._draft(h)]
        cu1 = torch.arange(0, B + 1, dtype=torch.int32, device=dev)
        for k in range(1, T - 1):
            pos = step.start + k - 1
            one = Step(StepKind.VERIFY, step.slots, cu1, pos, pos, rows, 1, step.contiguous)
            h = self._head(h, drafts[-1], one)
            drafts.append(self._draft(h))
        return torch.stack(drafts, 1)

    def observe(self, step: Step, window: torch.Tensor, hidden: torch.Tensor) -> None:
        """Inside the step, after the forward: window [B, T'] the tokens run (T' = T for a verify, 1 for a
        plain decode step, which keeps the state consistent), hidden [B*T', D] their final-norm hidden states."""
        rows, n = step.kv_rows, window.shape[1]
        self.tokens[rows, :n] = window
        self.hidden[rows, :n] = hidden.view(step.B, n, -1)

    def commit(self, slots: torch.Tensor, num_accepted: torch.Tensor) -> None:
        """With the runner's commit: the accepted count of every row of the step (on the device)."""
        rows = self.kv.rows(slots)
        self.num_accepted[rows] = torch.where(slots >= 0, num_accepted, 1).to(torch.int32)
        self.kv.commit(slots, num_accepted)

    def commit_counters(self) -> list[torch.Tensor]:
        """What ``commit`` writes, for the runner to put back: its cache's lengths (which it adds to) and the
        accepted counts (which ``propose`` catches up from)."""
        return [self.kv.lens, self.num_accepted]

    def park(self, slots: torch.Tensor) -> dict:
        """The slots' drafter state on the CPU (cache entries, pending window, accepted count)."""
        idx = slots.long()
        return {"kv": self.kv.gather(slots), "hidden": self.hidden[idx].cpu(), "tokens": self.tokens[idx].cpu(),
                "num_accepted": self.num_accepted[idx].cpu()}  # fmt: skip

    def check_parked(self, parked, num_slots: int) -> None:
        """Raise unless ``parked`` is what ``park`` returns for ``num_slots`` slots of this drafter (before anything
        is written: ``ModelRunner.restore`` asks first)."""
        keys = {"kv", "hidden", "tokens", "num_accepted"}
        if not isinstance(parked, dict) or set(parked) != keys:
            got = sorted(parked) if isinstance(parked, dict) else type(parked).__name__
            raise ValueError(f"parked drafter state must be a dict of {sorted(keys)} (from park), got {got}")
        self.kv.check_parked(parked["kv"], num_slots)
        for name, mine in (("hidden", self.hidden), ("tokens", self.tokens), ("num_accepted", self.num_accepted)):
            t, want = parked[name], (num_slots, *mine.shape[1:])
            if not isinstance(t, torch.Tensor) or tuple(t.shape) != want or t.dtype != mine.dtype or t.is_meta:
                got = (tuple(t.shape), t.dtype, t.device) if isinstance(t, torch.Tensor) else type(t).__name__
                raise ValueError(f"parked drafter {name} must be a {want} {mine.dtype} tensor holding data, got {got}")
        n = parked["num_accepted"]
        if bool(((n < 1) | (n > self.tokens.shape[1])).any()):
            raise ValueError(f"parked drafter num_accepted {n.tolist()} outside [1, window={self.tokens.shape[1]}]")

    def unpark(self, slots: torch.Tensor, parked: dict) -> None:
        self.check_parked(parked, slots.shape[0])
        idx = slots.long()
        self.kv.scatter(slots, parked["kv"])
        self.hidden[idx] = parked["hidden"].to(self.hidden.device)
        self.tokens[idx] = parked["tokens"].to(self.tokens.device)
        self.num_accepted[idx] = parked["num_accepted"].to(self.num_accepted.device)
