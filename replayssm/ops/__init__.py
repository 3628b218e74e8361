"""GDN kernels and their PyTorch references (torch and triton; NumPy only in the CPU interpreter's shim).

Every public op dispatches on ``impl``: "auto" (Triton for CUDA tensors, the reference for CPU
tensors, or Triton on CPU when ``REPLAYSSM_IMPL=triton`` with ``TRITON_INTERPRET=1``), "triton",
or "reference" (the environment's ``REPLAYSSM_IMPL`` may only be unset, "auto" or "triton"). Setting
``TRITON_INTERPRET=1`` alone does not make "auto" run the kernels on CPU tensors: it runs them in the interpreter
once ``REPLAYSSM_IMPL=triton`` (or ``impl="triton"``) picks them. Each ``*_reference`` is its op with
``impl="reference"``: the same signature less ``impl``, the same argument checks (nothing is written when one fails)
and the same effects (``ring_mark_folded_reference`` is ``ring_mark_folded``'s and ``ring_reset``'s, with ``reset``).
"""

from .cursors import (
    fold_phase_pays,
    ring_commit,
    ring_commit_reference,
    ring_mark_folded,
    ring_mark_folded_reference,
    ring_reset,
)
from .fold import gdn_exact_fold, gdn_exact_fold_reference
from .fold_ahead import fold_ahead_pays, gdn_fold_ahead, gdn_fold_ahead_reference
from .gating import gdn_gating, gdn_gating_reference
from .recurrent import gdn_recurrent, gdn_recurrent_reference
from .ring import Ring, RingCursors
from .ring_layers import RingLayers
from .shape import GDNShape
from .snapshots import commit_snapshots, commit_snapshots_reference
from .verify import gdn_replay_verify, gdn_replay_verify_reference

__all__ = [
    "GDNShape",
    "Ring",
    "commit_snapshots",
    "commit_snapshots_reference",
    "RingCursors",
    "RingLayers",
    "fold_ahead_pays",
    "fold_phase_pays",
    "gdn_exact_fold",
    "gdn_exact_fold_reference",
    "gdn_fold_ahead",
    "gdn_fold_ahead_reference",
    "gdn_gating",
    "gdn_gating_reference",
    "gdn_recurrent",
    "gdn_recurrent_reference",
    "gdn_replay_verify",
    "gdn_replay_verify_reference",
    "ring_commit",
    "ring_commit_reference",
    "ring_mark_folded",
    "ring_mark_folded_reference",
    "ring_reset",
]
