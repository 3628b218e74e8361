"""The paged KV cache: page bookkeeping, memory that follows the tokens held, parking rows."""

import pytest
import torch

from replayssm.state import PoolExhaustedError
from replayssm.state.kv import KVCache


def _cache(**kw):
    return KVCache(2, 3, 100, 2, 8, dtype=torch.float32, device="cpu", page_size=16, **kw)


def test_static_pages_are_a_dense_cache():
    kv = _cache()
    assert kv.pages_per_slot == 7 and kv.num_pages == 21
    assert kv.block_table[:3].flatten().tolist() == list(range(21))
    assert (kv.block_table[3] == 21).all()  # the sink row points at the sink page
    kv.reserve([0, 1], [100, 3])  # nothing to do, within max_len
    with pytest.raises(ValueError, match="max_len"):
        kv.reserve([0], [101])


def test_dynamic_pages_follow_the_tokens_held():
    kv = _cache(num_pages=5)
    assert kv.k.shape[1] == 6  # 5 pages + the sink: memory for 80 tokens, not 3 x 100
    kv.reserve([2, 0], [17, 5])
    assert kv.block_table[2, :2].tolist() == [0, 1] and kv.block_table[0, 0] == 2
    assert kv.free_tokens == 2 * 16
    kv.reserve([2], [32])  # already held: nothing new
    assert kv.free_tokens == 2 * 16
    with pytest.raises(PoolExhaustedError, match="3 more pages"):
        kv.reserve([1, 0], [40, 5])  # all or nothing
    assert kv.free_tokens == 2 * 16 and (kv.block_table[1] == 5).all()
    kv.release([2])
    assert (kv.block_table[2] == 5).all() and kv.free_tokens == 4 * 16
    kv.reserve([1], [64])  # released pages are reused
    assert sorted(kv.block_table[1].tolist()[:4]) == [0, 1, 3, 4]


def test_token_index_writes_land_in_the_row_pages():
    kv = _cache(num_pages=6)
    kv.reserve([1], [40])
    idx = kv.token_index(torch.tensor([1, 3]), torch.tensor([15, 16, 33, 0, 1, 2]))  # T=3; row 3 = sink
    pages = kv.block_table[1, :3].tolist()
    assert idx[:3].tolist() == [pages[0] * 16 + 15, pages[1] * 16, pages[2] * 16 + 1]
    assert idx[3:].tolist() == [6 * 16, 6 * 16 + 1, 6 * 16 + 2]


@pytest.mark.parametrize("dynamic", [False, True])
def test_gather_scatter_round_trip(dynamic):
    kv = _cache(num_pages=12 if dynamic else None)
    g = torch.Generator().manual_seed(0)
    kv.reserve([0, 2], [37, 5])
    for layer in range(2):
        for s, n in ((0, 37), (2, 5)):
            idx = kv.token_index(torch.tensor([s]), torch.arange(n))
            kv.write(layer, torch.randn(n, 2, 8, generator=g), torch.randn(n, 2, 8, generator=g), idx)
    kv.commit(torch.tensor([0, 2], dtype=torch.int32), torch.tensor([37, 5], dtype=torch.int32))
    parked = kv.gather(torch.tensor([0, 2], dtype=torch.int32))
    assert parked["k"].shape == (2, 2, 37, 2, 8) and parked["lens"].tolist() == [37, 5]
    other = _cache(num_pages=12 if dynamic else None)
    other.reserve([0], [16])  # the new home's pages are not the old ones
    other.scatter(torch.tensor([1, 0], dtype=torch.int32), parked)
    back = other.gather(torch.tensor([1, 0], dtype=torch.int32))
    for key in ("k", "v", "lens"):
        assert torch.equal(back[key], parked[key])
