import pytest
import torch

from replayssm.ops import commit_snapshots


def test_kernel_matches_reference(device):
    g = torch.Generator().manual_seed(0)
    NL, S, B, T, HV, V, K = 2, 5, 4, 3, 2, 16, 16
    state = torch.randn(NL, S, HV, V, K, generator=g).to(device)
    snaps = torch.randn(NL, B + 1, T, HV, V, K, generator=g).to(device)
    slots = torch.tensor([3, -1, 0, 4], dtype=torch.int32, device=device)
    n = torch.tensor([2, 1, 3, 1], dtype=torch.int32, device=device)
    a, b = state.clone(), state.clone()
    commit_snapshots(a, snaps, slots, n, impl="triton")
    b = b.cpu()
    commit_snapshots(b, snaps.cpu(), slots.cpu(), n.cpu(), impl="reference")
    a, snaps, state = a.cpu(), snaps.cpu(), state.cpu()
    assert torch.equal(a, b)
    for i, (s, m) in enumerate([(3, 2), (0, 3), (4, 1)]):
        assert torch.equal(a[:, s], snaps[:, [0, 2, 3][i], m - 1])
    assert torch.equal(a[:, [1, 2]], state[:, [1, 2]])  # untouched slots


def test_bad_inputs():
    state = torch.zeros(1, 2, 2, 16, 16)
    snaps = torch.zeros(1, 2, 3, 2, 16, 16)
    slots = torch.tensor([0, 1], dtype=torch.int32)
    with pytest.raises(ValueError, match=r"num_accepted holds \[4\], outside \[1, 3\]"):
        commit_snapshots(state, snaps, slots, torch.tensor([1, 4], dtype=torch.int32))
    with pytest.raises(ValueError, match="snapshots must have shape"):
        commit_snapshots(state, snaps[:, :, :, :1].contiguous(), slots, torch.tensor([1, 1], dtype=torch.int32))
    with pytest.raises(ValueError, match=r"ids \[2\] outside"):
        commit_snapshots(state, snaps, torch.tensor([0, 2], dtype=torch.int32), torch.tensor([1, 1], dtype=torch.int32))
