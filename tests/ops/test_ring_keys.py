"""The ring's keys: raw activations plus one fp32 scale each, from which every reader rebuilds the normalised key
``k^ = k.float() * k_scale`` bitwise (ops/ring.py)."""

import pytest
import torch

from replayssm.ops import Ring, gdn_replay_verify
from replayssm.ops._pinned import l2norm_reference
from tests.helpers.chain import call
from tests.helpers.inputs import make_gdn_inputs, slot_tensor

H, HV, K, V = 2, 4, 16, 32


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_the_verify_stores_raw_keys_whose_rebuilt_norm_is_the_reference_bits(device, dtype):
    """After a verify, ``Ring.k`` holds the window's keys as given, and ``normalised_keys`` is ``l2norm_reference``
    of them bit for bit (reference) or to rounding (kernel: another reduction order of the norm); slots the call
    does not name keep their NaN records."""
    lens, T, L = [3, 2], 4, 8
    x = make_gdn_inputs(lens, H, HV, K, V, dtype=dtype, device=device, gen=torch.Generator().manual_seed(4))
    for impl in ("reference", "triton"):
        ring = Ring.allocate(3, H, HV, K, V, L=L, window=T, dtype=dtype, device=device)
        ckpt = torch.randn(3, HV, V, K, generator=torch.Generator().manual_seed(2)).to(device) * 0.1
        call(gdn_replay_verify, x, checkpoint=ckpt, ring=ring, slots=slot_tensor([2, 0], device), impl=impl)
        cu = x["cu_seqlens"].tolist()
        for i, slot in enumerate([2, 0]):
            toks = slice(cu[i], cu[i + 1])
            pos = list(range(lens[i]))  # an empty ring: base 0, write_pos 0
            assert torch.equal(ring.k[slot][:, pos], x["k"][toks].transpose(0, 1))
            want = l2norm_reference(x["k"][toks].float()).transpose(0, 1)
            got = ring.normalised_keys(slot, pos)
            if impl == "reference":
                assert torch.equal(got, want)
            else:
                assert (got - want).abs().max() < 1e-6
            assert got.dtype == torch.float32 and tuple(got.shape) == (H, lens[i], K)
        assert ring.k[1].isnan().all() and ring.k_scale[1].isnan().all()


def test_a_ring_with_keys_of_another_dtype_or_scales_of_another_shape_cannot_be_built():
    ring = Ring.allocate(3, H, HV, K, V, L=8, window=2, dtype=torch.float16)
    parts = {n: getattr(ring, n) for n in ("k", "k_scale", "v", "g", "beta", "u", "folded")}
    with pytest.raises(TypeError, match="Ring.k and Ring.v hold raw activations of one dtype"):
        Ring(**{**parts, "k": parts["k"].float()}, cursors=ring.cursors)
    with pytest.raises(ValueError, match=r"Ring.k_scale must have shape \(3, 2, 8\)"):
        Ring(**{**parts, "k_scale": parts["k_scale"][:, :, :4].contiguous()}, cursors=ring.cursors)
    with pytest.raises(TypeError, match="Ring.k_scale must have dtype"):
        Ring(**{**parts, "k_scale": parts["k_scale"].half()}, cursors=ring.cursors)
    assert ring.k.dtype == torch.float16 and ring.k_scale.dtype == torch.float32
