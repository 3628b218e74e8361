"""Paged KV cache of the full-attention layers, with speculative truncation.

``k``, ``v``: [attention layers, P + 1, page, nKV, hd]; page P is a sink that padding rows (and unassigned
table entries) point at, so a padded CUDA-graph batch never touches a live slot. ``block_table`` [S + 1,
pages_per_slot] int32 lists each slot's pages (row S, the sink row of padding, points only at the sink).
``lens`` [S + 1] int32 holds each slot's committed length on the device: a verify step writes its whole window
after ``lens`` and ``commit`` advances ``lens`` by the accepted count, so rejected entries are simply
overwritten later.

Two ways to hand out pages. Static (``num_pages=None``, the default): every slot owns ``pages_per_slot`` pages
for life, like a dense cache, and nothing is ever reserved. Dynamic (``num_pages=n``): the memory holds ``n``
pages shared by all slots and follows the tokens actually held; the host reserves pages before a step
(``reserve``: at most a few page ids written into the table, no read back) and gives them back with
``release``. Either way attention reads only the pages a row holds (``ops.paged_attention``).
"""

from __future__ import annotations

import torch

from ..ops._common import use_triton
from ..ops._ints import is_int
from ..ops._validate import check_count
from ..ops.paged_attention import MIN_PAGE_SIZE, paged_attention
from .lifecycle import PoolExhaustedError

PAGE_SIZE = 64


class KVCache:
    def __init__(self, num_layers: int, num_slots: int, max_len: int, num_kv_heads: int, head_dim: int, *, dtype,
                 device, page_size: int = PAGE_SIZE, num_pages: int | None = None):  # fmt: skip
        sizes = dict(num_layers=num_layers, num_slots=num_slots, max_len=max_len, num_kv_heads=num_kv_heads,
                     head_dim=head_dim, page_size=page_size)  # fmt: skip
        for name, val in sizes.items():
            check_count(name, val, 0 if name == "num_layers" else 1)  # (a model may have no attention layer)
        if num_pages is not None:
            check_count("num_pages", num_pages, 1)
        if page_size & (page_size - 1):
            raise ValueError(f"page_size must be a power of two, got {page_size}")
        if num_layers and page_size < MIN_PAGE_SIZE and use_triton("auto", torch.empty(0, device=device)):
            raise ValueError(f"page_size={page_size}: the paged attention kernel, which runs on "
                             f"{torch.device(device)}, needs a power of two >= {MIN_PAGE_SIZE}")  # fmt: skip
        self.page_size, self.pages_per_slot = page_size, -(-max_len // page_size)
        self.dynamic = num_pages is not None
        P = num_pages if self.dynamic else num_slots * self.pages_per_slot
        if P < 1:
            raise ValueError(f"num_pages must be >= 1, got {num_pages}")
        self.num_pages = P
        shape = (num_layers, P + 1, page_size, num_kv_heads, head_dim)
        # zeros, not empty: attention masks unread keys by score, and a NaN in a masked page would still leak
        self.k = torch.zeros(shape, dtype=dtype, device=device)
        self.v = torch.zeros(shape, dtype=dtype, device=device)
        self.block_table = torch.full((num_slots + 1, self.pages_per_slot), P, dtype=torch.int32, device=device)
        if not self.dynamic:
            self.block_table[:num_slots] = torch.arange(P, dtype=torch.int32, device=device).view(num_slots, -1)
        self.lens = torch.zeros(num_slots + 1, dtype=torch.int32, device=device)
        self.num_slots, self.max_len = num_slots, max_len
        self._free = list(range(P - 1, -1, -1))  # dynamic: pop() hands out 0, 1, 2, ...
        self._pages: list[list[int]] = [[] for _ in range(num_slots)]

    @property
    def nbytes(self) -> int:
        return 2 * self.k.numel() * self.k.element_size()

    @property
    def free_tokens(self) -> int:
        """Tokens that unreserved pages can still hold (dynamic); every slot's ``max_len`` is its own (static)."""
        return len(self._free) * self.page_size if self.dynamic else self.num_slots * self.max_len

    def pages_for(self, num_tokens: int) -> int:
        """Pages that hold ``num_tokens`` tokens."""
        return -(-num_tokens // self.page_size)

    @property
    def free_pages(self) -> int:
        """Pages no slot holds (dynamic); a static cache gives every slot its own, so none is ever short: its
        ``num_pages``."""
        return len(self._free) if self.dynamic else self.num_pages

    def pages_held(self, slot: int) -> int:
        """Pages ``slot`` holds (dynamic; a static slot holds its ``max_len``: ``pages_per_slot``)."""
        return len(self._pages[slot]) if self.dynamic else self.pages_per_slot

    def mark(self) -> tuple | None:
        """The page bookkeeping now, for ``give_back`` (None for a static cache: nothing to give back)."""
        return ([len(p) for p in self._pages], list(self._free)) if self.dynamic else None

    def give_back(self, mark: tuple | None) -> None:
        """Give back every page reserved since ``mark`` (a step that reserved pages and then failed), so that the
        free pages, their order and every slot's table are as they were then; pages released since (a slot freed
        meanwhile) stay free, handed out first."""
        if mark is None:
            return
        counts, free = mark
        cells = [s * self.pages_per_slot + i for s, n in enumerate(counts) for i in range(n, len(self._pages[s]))]
        for s, n in enumerate(counts):
            del self._pages[s][n:]
        held = {p for pages in self._pages for p in pages}
        was_free = set(free)
        released = [p for p in self._free if p not in was_free and p not in held]
        self._free = [p for p in free if p not in held] + released
        if cells:
            self.block_table.view(-1)[self._ids(cells)] = self.num_pages

    def pages_needed(self, slots: list[int], lengths: list[int]) -> int:
        """The pages ``reserve(slots, lengths)`` would take from the free ones (0 for a static cache); lengths
        past ``max_len`` count as ``max_len``. Host bookkeeping only."""
        if not self.dynamic:
            return 0
        return sum(max(0, self.pages_for(min(n, self.max_len)) - len(self._pages[s])) for s, n in zip(slots, lengths))

    def rows(self, slots: torch.Tensor) -> torch.Tensor:
        """KV rows of a batch: the slot, or the sink row for padding (-1)."""
        return torch.where(slots >= 0, slots, self.num_slots).long()

    def reserve(self, slots: list[int], lengths: list[int]) -> None:
        """Make sure slot ``slots[i]`` has pages for ``lengths[i]`` tokens (host bookkeeping; new page ids are
        written into the table in one copy). ``slots``: distinct ids in [0, num_slots) (no padding: a padding row
        reads the sink and holds nothing); ``lengths``: as many ints in [0, max_len]. Raises before anything
        changes when they are not, or do not fit."""
        slots = self._check_ids("slots", slots)
        if isinstance(lengths, (str, bytes)) or not hasattr(lengths, "__len__") or len(lengths) != len(slots):
            raise ValueError(f"lengths must list one length per slot ({len(slots)}), got {lengths!r:.80}")
        lengths = [check_count("lengths", n, 0) for n in lengths]
        over = [(s, n) for s, n in zip(slots, lengths) if n > self.max_len]
        if over:  # (a runner reserves a slot's committed tokens + the next window, or + pad_kv's n + a window)
            raise ValueError(f"slots {[s for s, _ in over]} would need {[n for _, n in over]} KV positions (lengths), "
                             f"past max_len={self.max_len}")  # fmt: skip
        if not self.dynamic:
            return
        need = [(s, self.pages_for(n) - len(self._pages[s])) for s, n in zip(slots, lengths)]
        self._check_free_pages(sum(max(0, k) for _, k in need))
        cells, pages = [], []
        for s, k in need:
            for _ in range(k):
                page = self._free.pop()
                cells.append(s * self.pages_per_slot + len(self._pages[s]))
                self._pages[s].append(page)
                pages.append(page)
        if cells:
            self.block_table.view(-1)[self._ids(cells)] = self._ids(pages, torch.int32)

    def _check_free_pages(self, total: int) -> None:
        if total > len(self._free):
            raise PoolExhaustedError(f"the KV cache needs {total} more pages of {self.page_size} tokens, "
                                     f"{len(self._free)} of {self.num_pages} are free")  # fmt: skip

    def check_room(self, lengths: list[int]) -> None:
        """Raise what ``reserve`` would raise for slots that hold no pages yet (fresh ones) and these lengths."""
        if self.dynamic:
            self._check_free_pages(sum(self.pages_for(int(n)) for n in lengths))

    def _check_ids(self, name: str, slots) -> list[int]:
        """``slots`` as Python ints (NumPy integers taken as the ints they are): distinct ids in [0, num_slots)."""
        if isinstance(slots, (str, bytes)) or not hasattr(slots, "__len__"):
            raise ValueError(f"{name} must be a list of slot ids, got {slots!r:.80}")
        for s in slots:
            if not is_int(s) or not 0 <= s < self.num_slots:
                raise ValueError(f"{name} holds {s!r}: KV slot ids are ints in [0, {self.num_slots})")
        ids = [int(s) for s in slots]
        if len(set(ids)) != len(ids):
            raise ValueError(f"{name} names a slot twice: {ids}")
        return ids

    def release(self, slots: list[int]) -> None:
        """Give the pages of ``slots`` (distinct ids in [0, num_slots)) back (dynamic); their table rows point at
        the sink again."""
        slots = self._check_ids("slots", slots)
        if not self.dynamic:
            return
        for s in slots:
            self._free.extend(reversed(self._pages[s]))
            self._pages[s] = []
        if slots:
            self.block_table[self._ids(slots)] = self.num_pages

    def _ids(self, values: list[int], dtype=torch.int64) -> torch.Tensor:
        """``values`` on the table's device without waiting for it: a pinned copy, sent non-blocking (a step may
        be in flight, docs/engine.md; the host allocator keeps the pinned block until the copy is done)."""
        t = torch.tensor(values, dtype=dtype)
        if self.block_table.device.type != "cuda":
            return t
        return t.pin_memory().to(self.block_table.device, non_blocking=True)

    def commit(self, slots: torch.Tensor, num_accepted: torch.Tensor) -> None:
        """Advance the committed length of each live row by its accepted count, on the device (graph-capturable,
        so unchecked: ``reserve`` checked the lengths before the step)."""
        rows = self.rows(slots)
        self.lens.index_add_(0, rows, torch.where(slots >= 0, num_accepted, 0).to(torch.int32))
        self.lens.narrow(0, self.num_slots, 1).zero_()  # the padding row; graph-safe (no host scalar copy)

    def reset(self, slots: torch.Tensor) -> None:
        self.lens[slots.long()] = 0

    def token_index(self, rows: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """Flat cache index [B*T] (into [(P + 1) * page]) of each new token: rows [B] int64, positions [B*T]."""
        B = rows.shape[0]
        row_of = rows[:, None].expand(B, positions.shape[0] // max(1, B)).reshape(-1)
        page = self.block_table[row_of, (positions // self.page_size).clamp(max=self.pages_per_slot - 1)]
        return page.long() * self.page_size + positions % self.page_size

    def write(self, layer: int, k: torch.Tensor, v: torch.Tensor, index: torch.Tensor) -> None:
        """Store the step's keys and values [N, nKV, hd] of attention layer ``layer`` at ``index`` [N] (from
        ``token_index``)."""
        ck, cv = self.flat(layer)
        ck.index_copy_(0, index, k)
        cv.index_copy_(0, index, v)

    def flat(self, layer: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Attention layer ``layer``'s key and value caches as [pages * page_size, nKV, hd] views: the rows that
        ``token_index`` positions address (for kernels that write the cache themselves)."""
        ck, cv = self.k[layer], self.v[layer]
        return ck.view(-1, *ck.shape[2:]), cv.view(-1, *cv.shape[2:])

    def attend(self, layer: int, q: torch.Tensor, rows: torch.Tensor, start: torch.Tensor, *, T: int,
               scale: float, gate: torch.Tensor | None = None) -> torch.Tensor:  # fmt: skip
        """Causal attention of windows of T queries q [B*T, nH, hd] over rows' cached keys (committed past
        ``start`` [B] + the window, written first with ``write``); rows [B] int64; ``gate`` [B*T, nH, hd]: the
        output gate applied inside (``paged_attention``; its values unchecked: the indices are this cache's own).
        Returns [B*T, nH, hd]."""
        return paged_attention(q.contiguous(), self.k[layer], self.v[layer], self.block_table, rows, start, T=T,
                               scale=scale, gate=gate, validate=False)  # fmt: skip

    def _dense(self, cache: torch.Tensor, slot: int, n: int) -> torch.Tensor:
        pages = self.block_table[slot, : self.pages_for(n)].long()
        return cache[:, pages].flatten(1, 2)[:, :n]  # [NL, n, nKV, hd]

    def gather(self, slots: torch.Tensor) -> dict:
        """The committed entries of ``slots`` on the CPU: k, v [NL, n, max len, nKV, hd], lens [n] int32."""
        lens = self.lens[slots.long()].cpu()
        n = int(lens.max()) if lens.numel() else 0
        k = self.k.new_zeros(self.k.shape[0], len(lens), n, *self.k.shape[3:])
        v = torch.zeros_like(k)
        for i, (s, m) in enumerate(zip(slots.tolist(), lens.tolist())):
            k[:, i, :m], v[:, i, :m] = self._dense(self.k, s, m), self._dense(self.v, s, m)
        return {"k": k.cpu(), "v": v.cpu(), "lens": lens}

    def check_parked(self, data, num_slots: int) -> None:
        """Raise unless ``data`` is what ``gather`` returns for ``num_slots`` slots of a cache of this layout."""
        if not isinstance(data, dict) or set(data) != {"k", "v", "lens"}:
            raise ValueError(f"parked KV rows must be a dict with k, v, lens (from gather), got {type(data).__name__}")
        NL, _, _, nKV, hd = self.k.shape
        lens = data["lens"]
        if not isinstance(lens, torch.Tensor) or lens.dtype != torch.int32 or tuple(lens.shape) != (num_slots,):
            raise ValueError(f"parked KV lens must be a ({num_slots},) int32 tensor, got {lens!r:.80}")
        n = int(lens.max()) if num_slots else 0
        if int(lens.min()) < 0 or n > self.max_len:
            raise ValueError(f"parked KV lengths {lens.tolist()} are outside [0, max_len={self.max_len}]")
        for name in ("k", "v"):
            t = data[name]
            want = (NL, num_slots, n, nKV, hd)
            if not isinstance(t, torch.Tensor) or tuple(t.shape) != want or t.dtype != self.k.dtype:
                got = (tuple(t.shape), t.dtype) if isinstance(t, torch.Tensor) else type(t).__name__
                raise ValueError(f"parked KV {name} must be a {want} {self.k.dtype} tensor, got {got}")
            if t.is_meta:
                raise ValueError(f"parked KV {name} is on the meta device: it holds no entries to restore")

    def scatter(self, slots: torch.Tensor, data: dict) -> None:
        """Put ``gather``'s entries into ``slots`` (reserving their pages first). Checks ``data`` and the pages
        it needs before anything is written."""
        self.check_parked(data, slots.shape[0])
        ids, lens = slots.tolist(), data["lens"].tolist()
        self._check_ids("slots", ids)
        self.reserve(ids, lens)
        for i, (s, m) in enumerate(zip(ids, lens)):
            idx = self.token_index(torch.tensor([s], device=self.lens.device), torch.arange(m, device=self.lens.device))
            self.k.flatten(1, 2)[:, idx] = data["k"][:, i, :m].to(self.k.device)
            self.v.flatten(1, 2)[:, idx] = data["v"][:, i, :m].to(self.v.device)
        self.lens[slots.long()] = data["lens"].to(self.lens.device)
