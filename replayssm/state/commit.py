"""How a ``GDNStatePool`` step ends: ``commit`` keeps part of it, ``abort`` drops it, and either may meet a commit
that failed part-way (a failed launch, an interrupt after some of its writes).

A commit writes, in order: the replay ring's cursors (``ring_commit``) or the recurrent state from the step's
snapshots (``commit_snapshots``), then every layer's conv state (``conv_commit``); the step then ends, and a replay
pool may fold ahead (``gdn_fold_ahead``). With validation on, the host notes the commit as begun before its first
write (``StepInFlight.committing``), with what it needs to undo or repeat it:

- ``commit`` again with the same counts finishes it exactly as one call would have: the saved ring cursors are put
  back first (``ring_commit`` moves them relative to where they were); the other writes only copy, so they can run
  twice. A fold ahead that failed after the step ended is owed: the same commit again runs it (its markers keep a
  block from folding twice), and any other call lets the next verify fold those rows, as usual.
- ``abort`` rolls a begun commit back where it can: a replay row's cursors come back from the copy, its conv state
  from the step's conv scratch (whose first ``W - 1`` rows per batch row are the conv state the step started from);
  a recurrent row whose state ``commit_snapshots`` may have overwritten is lost (``torn``, returned), as the rows
  of an aborted in-place decode are. After a commit that took the step and then failed to fold ahead, nothing can
  be dropped any more: ``abort`` of those rows returns them lost.
- ``GDNStatePool.step_in_flight`` tells a caller that saw a commit raise whether the pool took the step.

With validation off (CUDA graphs) nothing on the host tells how far a call got; the caller answers for it.
"""

from __future__ import annotations

import torch

from ..ops import fold_phase_pays, gdn_fold_ahead, ring_commit
from ..ops.conv import conv_commit
from ..ops.snapshots import commit_snapshots
from .lifecycle import SlotError

CURSOR_NAMES = ("write_pos", "base", "flush", "pending", "epoch")


def commit(pool, slots: torch.Tensor, num_accepted: torch.Tensor, ids: list[int]) -> None:
    """``GDNStatePool.commit`` (its docstring), after ``pool`` checked ``slots`` (``ids``: their host copy, with
    validation on) and the tensor ``num_accepted``."""
    cfg, replay = pool.cfg, pool.cfg.backend == "replay"
    kind, st, tr = pool._kind, None, pool.tracker
    if cfg.validate:
        if tr.step is None and tr.ahead_owed is not None and tr.ahead_owed == (ids, num_accepted.tolist()):
            _fold_ahead(pool, slots)  # the commit itself had finished
            return
        st, counts = tr.check_commit(ids, num_accepted)
        kind = st.kind
    ahead = pool._folds_ahead(slots, kind)
    phase = replay and fold_phase_pays(slots.shape[0], cfg.HV, cfg.window, pool.device)  # (environment switches)
    if st is not None:
        if st.committing is None:
            if replay:  # the live rows' cursors (host ids: no read back)
                idx = torch.tensor([s for s in ids if s >= 0], dtype=torch.long, device=pool.device)
                st.saved = (idx, torch.stack([getattr(pool.cursors, n)[idx] for n in CURSOR_NAMES]))
            st.committing = tuple(counts)  # from here on a failure leaves the commit begun
        elif replay:
            _put_back_cursors(pool, st)
    if replay:
        ring_commit(pool.cursors, slots, num_accepted, fold_phase=phase, validate=False, impl=cfg.impl)
    elif kind == "verify":  # decode updated the state in place; verify left snapshots to pick from
        if st is not None:
            st.wrote_state = True
        commit_snapshots(pool.checkpoint, pool.snapshots, slots, num_accepted, validate=False, impl=cfg.impl)
    conv_commit(pool.conv_state, pool.conv_scratch, slots, num_accepted, impl=cfg.impl, validate=False)
    if st is not None and ahead:
        tr.ahead_owed = (ids, counts)  # (cleared by the fold, or when the next step begins)
    tr.end_step()
    if ahead:  # the step is committed by now; a fold that fails here is owed (module docstring)
        _fold_ahead(pool, slots)


def _fold_ahead(pool, slots: torch.Tensor) -> None:
    gdn_fold_ahead(pool.checkpoint, pool.ring_layers, slots, validate=False, impl=pool.cfg.impl)
    pool.tracker.ahead_owed = None


def _put_back_cursors(pool, st) -> None:
    idx, old = st.saved
    for n, row in zip(CURSOR_NAMES, old):
        getattr(pool.cursors, n)[idx] = row


def abort(pool, slots: torch.Tensor, ids: list[int]) -> list[int]:
    """``GDNStatePool.abort`` (its docstring) after ``pool`` checked ``slots`` (``ids``: their host copy, with
    validation on)."""
    cfg, replay = pool.cfg, pool.cfg.backend == "replay"
    torn, tr = [], pool.tracker
    if cfg.validate:
        st = tr.step
        if st is None and tr.ahead_owed is not None and tr.ahead_owed[0] == ids:
            # its commit took the step (only the fold ahead failed): it cannot be dropped, so its rows are lost
            tr.ahead_owed = None
            tr.torn.update(s for s in ids if s >= 0)
            return [s for s in ids if s >= 0]
        if st is None:
            return []
        if tuple(ids) != st.rows:
            raise SlotError(f"abort must name exactly the rows of the step in flight, {list(st.rows)}, got {ids}")
        if not replay and st.ssm and (st.kind == "decode" or st.wrote_state):
            torn = st.live
        if st.committing is not None:  # roll the begun commit back (module docstring)
            if replay:
                _put_back_cursors(pool, st)
            rows = [i for i, s in enumerate(ids) if s >= 0]  # (host ids: no read back)
            dev = pool.device
            pool.conv_state[:, torch.tensor(st.live, device=dev)] = pool.conv_scratch[
                :, torch.tensor(rows, device=dev), : cfg.conv_kernel - 1
            ]
    elif not replay and pool._kind == "decode":
        torn = [s for s in slots.tolist() if s >= 0]
    # a verify that succeeded (ssm; a begun commit implies every layer's), or failed after it may have written
    # (failed), may have folded some layers; a step with neither (only conv_update ran, or a verify refused its
    # arguments) folded nothing: no fold then
    ran = not cfg.validate or bool(st.ssm) or st.failed
    if replay and ran:  # the flushing rows, in every layer; then no row keeps the step's window
        gdn_fold_ahead(pool.checkpoint, pool.ring_layers, slots, validate=False, impl=cfg.impl)
        pool.cursors.pending[slots[slots >= 0].long()] = 0
    pool.tracker.end_step()
    pool.tracker.torn.update(torn)
    return torn
