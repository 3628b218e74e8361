"""Random-weight models for the GPU benches, built on the CPU at a tiny width."""

import torch

from replayssm.bench.synthetic import random_model
from replayssm.models.config import ModelConfig
from tests.bench.test_e2e_bytes import TINY


def test_random_model_allocates_in_its_dtype_only(monkeypatch):
    """The parameters are already in the requested dtype when the model is given memory (``to_empty``): 27B in fp32
    first would not fit an H100. Every parameter ends in that dtype, drawn (finite, every matrix nonzero), and the
    same seed draws the same weights."""
    at_allocation = []
    real = torch.nn.Module.to_empty

    def spy(self, *args, **kwargs):
        at_allocation.extend(p.dtype for p in self.parameters())
        return real(self, *args, **kwargs)

    monkeypatch.setattr(torch.nn.Module, "to_empty", spy)
    model = random_model(ModelConfig.from_dict(TINY), device="cpu", dtype=torch.float16, seed=3)
    monkeypatch.undo()
    assert at_allocation and set(at_allocation) == {torch.float16}
    params = dict(model.named_parameters())
    assert {p.dtype for p in params.values()} == {torch.float16}
    assert all(torch.isfinite(p).all() for p in params.values())
    mats = [p for p in params.values() if p.dim() >= 2]
    assert mats and all(p.abs().sum() > 0 for p in mats)
    again = random_model(ModelConfig.from_dict(TINY), device="cpu", dtype=torch.float16, seed=3)
    assert all(torch.equal(p, q) for p, q in zip(model.parameters(), again.parameters()))
