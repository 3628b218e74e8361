"""Which of SGLang's files each release's peers load, and what those files may import (data only).

A release lists the wheel members to extract (each pinned by its sha256, so a run says exactly which
code it timed), the functions the peers call, and the ``from sglang... import name`` lines those
files contain. Every such import is *bound*: either to another extracted file of the same release
(``FILE``) or to one of replayssm's host queries in ``host.py`` (``HOST``), or declared ``ABSENT`` (it
sits in a function no peer calls, and raises ImportError if it ever runs); any other import makes the
loader refuse the file.
"""

from __future__ import annotations

from dataclasses import dataclass, field

HOST = "host"  # bound to replayssm.bench.peers.sglang.host.<name>
FILE = "file"  # bound to the attribute of another extracted member of the release
ABSENT = "absent"  # an import inside a function the peers never call: allowed in the file, fails if run

_FLA_16 = "sglang/kernels/ops/attention/fla/"
_LINEAR_23 = "sglang/kernels/ops/attention/linear/"
_SPEC_16, _SPEC_23 = _FLA_16 + "gdn_replayssm_spec_decode.py", _LINEAR_23 + "gdn_replayssm_spec_decode.py"
_RECURRENT_16 = _FLA_16 + "fused_sigmoid_gating_recurrent.py"
_RECURRENT_23 = _LINEAR_23 + "fused_sigmoid_gating_recurrent.py"
_RING_16 = _FLA_16 + "fused_recurrent_linear_replayssm.py"
_RING_23 = _LINEAR_23 + "fused_recurrent_linear_replayssm.py"
_PACKED_DECODE = "sglang/kernels/ops/attention/fla/fused_recurrent.py"
_SCATTER = "sglang/kernels/ops/mamba/mamba_state_scatter_triton.py"
_PTR_TABLE = "sglang/kernels/ops/memory/ptr_table.py"


# fla/fused_recurrent.py (the packed decode) takes ``exp`` from fla/op.py and the ``input_guard`` decorator
# of its autograd functions from fla/utils.py
_FLA_OP_UTILS = {
    ("sglang.kernels.ops.attention.fla.op", "exp"): HOST,
    ("sglang.kernels.ops.attention.fla.utils", "input_guard"): HOST,
}


@dataclass(frozen=True)
class Release:
    """One SGLang release: ``files`` {wheel member: sha256 or None (unpinned)}, ``exports`` {peer name:
    (member, attribute)}, ``bound`` {(module, name): HOST or FILE} for the files' sglang imports."""

    version: str
    files: dict[str, str | None]
    exports: dict[str, tuple[str, str]]
    bound: dict[tuple[str, str], str] = field(default_factory=dict)

    @property
    def folder(self) -> str:
        """Name of the release's folder under the peers root."""
        return f"sglang-{self.version}"


def module_of(member: str) -> str:
    """``sglang/a/b.py`` -> ``sglang.a.b`` (the name SGLang's own imports use)."""
    return member.removesuffix(".py").replace("/", ".")


V0_5_16 = Release(
    version="0.5.16",
    files={
        _SPEC_16: "3a0a126bc79d56f43e12c8d6a8b657fd643f7f0d77acfad2f73d15a419684bb5",
        _RECURRENT_16: "deb3951a1d2e9e7e9e85fea28aa283a71132e97dbe967107e02383062babe899",
        _RING_16: "a8824a71ab49fde1f070c325c89603e6198928bdcb2238f2d6e9ef8fb7247f62",
        _SCATTER: "762816438faeeba88ad370317e64082faebacc5895efb3963ede9647f26eda5a",
        _PACKED_DECODE: "579c6e3e009450f619af8ae774da45c1f3f9b479a62253589c1c6d940355a587",
    },
    exports={
        "gdn_replayssm_spec_decode": (_SPEC_16, "gdn_replayssm_spec_decode"),
        "commit_gdn_replayssm_spec": (_SPEC_16, "commit_gdn_replayssm_spec"),
        # SGLang's own launcher of its exact-fold kernel: materialises the committed state for the gate
        "launch_gdn_exact_fold": (_SPEC_16, "_launch_gdn_exact_fold"),
        "fused_sigmoid_gating_delta_rule_update": (
            _RECURRENT_16,
            "fused_sigmoid_gating_delta_rule_update",
        ),
        "fused_recurrent_gdn_replayssm_decode": (
            _RING_16,
            "fused_recurrent_gdn_replayssm_decode",
        ),
        "fused_mamba_state_scatter_with_mask": (_SCATTER, "fused_mamba_state_scatter_with_mask"),
        "packed_decode": (_PACKED_DECODE, "fused_recurrent_gated_delta_rule_packed_decode"),
    },
    bound=_FLA_OP_UTILS,
)

V0_5_23 = Release(
    version="0.5.23",
    files={
        _SPEC_23: "71a49ecdef3f598263a2681839ba03106f95dba7b0e6bdba3d0496c7da830bc6",
        _RECURRENT_23: "d2668b1104f4cc394d27694d4054f87ea1d8d209114230cdc56cfe12c039f873",
        _RING_23: "a8824a71ab49fde1f070c325c89603e6198928bdcb2238f2d6e9ef8fb7247f62",
        _SCATTER: "47989f7434e7f7f06892fb7005306a003e49bf850916085775c56f12629b4784",
        _PTR_TABLE: "bb82f378cab8d6c3adef26224d49206a5151c3ced1f883204d4d2b2f0982d5f2",
        _PACKED_DECODE: "d322d80e6e639fc002c3f3dc4f5eafc5a49c9d4d1ee20470e432ccb6b85b245c",
    },
    exports={
        "gdn_replayssm_spec_decode": (_SPEC_23, "gdn_replayssm_spec_decode"),
        "commit_gdn_replayssm_spec": (_SPEC_23, "commit_gdn_replayssm_spec"),
        "commit_gdn_replayssm_circular": (
            _SPEC_23,
            "commit_gdn_replayssm_circular",
        ),
        "fused_sigmoid_gating_delta_rule_update": (
            _RECURRENT_23,
            "fused_sigmoid_gating_delta_rule_update",
        ),
        "fused_recurrent_gdn_replayssm_decode": (
            _RING_23,
            "fused_recurrent_gdn_replayssm_decode",
        ),
        "fused_mamba_state_scatter_with_mask": (_SCATTER, "fused_mamba_state_scatter_with_mask"),
        "packed_decode": (_PACKED_DECODE, "fused_recurrent_gated_delta_rule_packed_decode"),
    },
    bound={
        **_FLA_OP_UTILS,
        ("sglang.kernels.ops.attention", "kda_packed_decode"): ABSENT,  # KDA-only CUDA path of fused_recurrent.py
        ("sglang.kernels.ops.attention.fla.utils", "is_tf32_supported"): HOST,
        ("sglang.kernels.jit.utils", "is_arch_support_pdl"): HOST,
        ("sglang.srt.utils", "get_device_sm"): HOST,
        ("sglang.srt.utils", "is_cuda"): HOST,
        ("sglang.srt.utils", "is_gfx95_supported"): HOST,
        ("sglang.srt.utils", "is_hip"): HOST,
        ("sglang.srt.utils", "is_sm90_supported"): HOST,
        ("sglang.srt.utils.common", "get_device_core_count"): HOST,
        (module_of(_PTR_TABLE), "make_ptr_table"): FILE,
    },
)

RELEASES: dict[str, Release] = {r.version: r for r in (V0_5_16, V0_5_23)}
