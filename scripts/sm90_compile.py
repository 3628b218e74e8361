"""Compile the verify's kernels (``verify_prep`` then the main kernel, or the main kernel alone where the verify
runs in one launch) for an H200 (sm_90) on a machine without a GPU; report registers, stack (spills)
and shared memory, and optionally write their SASS (a development tool: docs/kernels.md, "On the CPU").
``REPLAYSSM_VERIFY_ONE_LAUNCH=0`` / ``=1`` compiles either way of the verify; ``REPLAYSSM_VERIFY_PDL=0`` / ``=1``
forces the one-launch kernel's programmatic dependent launch off / on (by default: one-wave batches, as the op).

    python scripts/sm90_compile.py [--T 4] [--L 16] [--B 256] [--sass DIR]

The kernels are compiled exactly as ``gdn_replay_verify`` would launch them on a 132-SM H200 at the Qwen3.5-122B TP1
geometry (launch shapes, tensor-core choice, register cap), through a stand-in Triton driver that reports an sm_90
target; nothing is run. Triton's own ptxas and cuobjdump (bundled with its wheel) do the work.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile

os.environ.pop("TRITON_INTERPRET", None)

import torch  # noqa: E402
import triton  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.runtime import driver as _driver  # noqa: E402


class _Sm90Driver:
    """Just enough of a Triton driver to compile (never launch) for sm_90."""

    def __init__(self):
        from triton.backends.nvidia.driver import CudaUtils  # noqa: F401  (import check only)

    def get_current_target(self):
        return GPUTarget("cuda", 90, 32)

    def get_current_device(self):
        return 0

    def get_current_stream(self, device=None):
        return 0

    def get_active_torch_device(self):
        return torch.device("cpu")

    def get_device_interface(self):
        return torch.cuda

    def get_benchmarker(self):
        raise RuntimeError("no GPU")


_driver.set_active(_Sm90Driver())

from replayssm.ops import _common, fold_ahead, launch, verify, verify_launch  # noqa: E402

COMPILED: dict[str, object] = {}


def _capture(name, kern):
    class _Grid:
        def __getitem__(self, grid):
            def run(*args, **kwargs):
                COMPILED[name] = kern.warmup(*args, grid=grid, **kwargs)

            return run

    return _Grid()


def _usage(kernel) -> dict:
    cubin = kernel.asm["cubin"]
    with tempfile.NamedTemporaryFile(suffix=".cubin", delete=False) as f:
        f.write(cubin)
    tools = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin")
    out = subprocess.run([os.path.join(tools, "cuobjdump"), "--dump-resource-usage", f.name],
                         capture_output=True, text=True).stdout  # fmt: skip
    regs = re.search(r"REG:(\d+)", out)
    stack = re.search(r"STACK:(\d+)", out)
    local = re.search(r"LOCAL:(\d+)", out)
    return {
        "registers": int(regs.group(1)) if regs else None,
        "stack": int(stack.group(1)) if stack else None,
        "local": int(local.group(1)) if local else None,
        "shared": kernel.metadata.shared,
        "cubin": f.name,
    }


def sass(kernel) -> str:
    u = _usage(kernel)
    tools = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin")
    return subprocess.run([os.path.join(tools, "cuobjdump"), "--dump-sass", u["cubin"]], capture_output=True,
                          text=True).stdout  # fmt: skip


def compile_verify(T: int, L: int, B: int, H=16, HV=64, K=128, V=128, dtype=torch.bfloat16):
    from replayssm.ops.ring import Ring

    _common.use_triton = lambda impl, *t: True  # CPU tensors, real kernels
    verify.use_triton = _common.use_triton
    launch.sm_count = lambda device: 132
    verify_launch.many_waves = lambda programs, device: (  # as on a CUDA device (it answers False on the CPU)
        programs >= verify_launch.MANY_WAVES * verify_launch.ONE_LAUNCH_PER_SM * 132
    )
    verify_launch.use_tensor_cores = lambda device: os.environ.get("REPLAYSSM_VERIFY_TC", "1") != "0"
    pdl = os.environ.get("REPLAYSSM_VERIFY_PDL", "")  # as verify_launch.use_pdl decides on an sm_90 device
    verify_launch.use_pdl = lambda programs, device: (
        pdl == "1" or (pdl == "" and programs < verify_launch.ONE_LAUNCH_PER_SM * 132)
    )
    verify._window_prep_kernel = _capture("prep", verify._window_prep_kernel)
    verify._gdn_replay_verify_kernel = _capture("verify", verify._gdn_replay_verify_kernel)
    verify_launch.MAXNREG = {"maxnreg": 128}
    N = B * T
    q = torch.randn(N, H, K, dtype=dtype)
    k = torch.randn(N, H, K, dtype=dtype)
    v = torch.randn(N, HV, V, dtype=dtype)
    a = torch.randn(N, HV, dtype=dtype)
    b = torch.randn(N, HV, dtype=dtype)
    ring = Ring.allocate(B, H=H, HV=HV, K=K, V=V, L=L, window=T, dtype=dtype)
    ckpt = torch.zeros(B, HV, V, K)
    slots = torch.arange(B, dtype=torch.int32)
    cu = torch.arange(0, N + 1, T, dtype=torch.int32)
    verify.gdn_replay_verify(q, k, v, a, b, A_log=torch.zeros(HV), dt_bias=torch.zeros(HV), checkpoint=ckpt,
                             ring=ring, slots=slots, cu_seqlens=cu, validate=False)  # fmt: skip


def compile_fold_ahead(T: int, L: int, B: int, layers=8, H=16, HV=64, K=128, V=128, dtype=torch.bfloat16):
    """``gdn_fold_ahead`` over ``layers`` layers at the same geometry (``--fold-ahead``)."""
    from replayssm.ops.ring_layers import RingLayers

    _common.use_triton = lambda impl, *t: True
    fold_ahead.use_triton = _common.use_triton
    launch.sm_count = lambda device: 132
    fold_ahead._fold_ahead_kernel = _capture("fold_ahead", fold_ahead._fold_ahead_kernel)
    fold_ahead._ring_mark_folded_kernel = _capture("mark", fold_ahead._ring_mark_folded_kernel)
    rings = RingLayers.allocate(layers, B, H, HV, K, V, L=L, window=T, dtype=dtype)
    ckpt = torch.zeros(layers, B, HV, V, K)
    fold_ahead.gdn_fold_ahead(ckpt, rings, torch.arange(B, dtype=torch.int32), validate=False)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--T", type=int, default=4)
    p.add_argument("--L", type=int, default=16)
    p.add_argument("--B", type=int, default=256)
    p.add_argument("--sass", default=None, help="folder to write <kernel>.sass into")
    p.add_argument("--fold-ahead", action="store_true", help="also compile gdn_fold_ahead's kernel")
    p.add_argument("--layers", type=int, default=8, help="layers of the fold-ahead compile")
    args = p.parse_args(argv)
    compile_verify(args.T, args.L, args.B)
    if args.fold_ahead:
        compile_fold_ahead(args.T, args.L, args.B, layers=args.layers)
    for name, kern in COMPILED.items():
        u = _usage(kern)
        print(f"{name:10s} regs {u['registers']} stack {u['stack']} local {u['local']} shared {u['shared']}")
        if args.sass:
            os.makedirs(args.sass, exist_ok=True)
            with open(os.path.join(args.sass, f"{name}.sass"), "w") as f:
                f.write(sass(kern))
    return 0


if __name__ == "__main__":
    sys.exit(main())
