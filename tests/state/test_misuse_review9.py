"""A ninth misuse review (2026-12-05, thirtieth session), the pool's and the token checks' part: each test failed
before its fix."""

import pytest
import torch

from replayssm.engine.checks import check_token_ids
from tests.helpers import pools
from tests.helpers.pools import Weights, device_state, inputs, same


@pytest.mark.parametrize("backend", ["replay", "recurrent"])
def test_conv_update_names_the_input_on_the_wrong_device(backend):
    """An x on another device than the pool was reported as "weight must be on meta, got cpu"."""
    p = pools.pool(backend)
    p.alloc(2)
    w = Weights(p.cfg, 1)
    x = inputs(p.cfg, [3, 2], torch.Generator().manual_seed(2))
    before = device_state(p, scratch=True)
    with pytest.raises(ValueError, match=r"^x must be on cpu, got meta$"):
        pools.conv(p, w, 0, [0, 1], {**x, "x": x["x"].to("meta")})
    assert same(before, device_state(p, scratch=True))


def test_meta_token_ids_are_refused_by_name():
    """A meta tensor of token ids reached torch.nonzero: NotImplementedError naming nothing."""
    with pytest.raises(ValueError, match=r"token ids must be on the CPU or the model's device, got a meta tensor"):
        check_token_ids(torch.zeros(3, dtype=torch.long, device="meta"), 256)
