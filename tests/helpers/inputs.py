"""Random inputs for the op tests: fresh per call, never zeros.

Numbers are drawn on the generator's device (CPU by default), then moved to ``device``.
"""

import torch


def _where(gen):
    return gen.device if gen is not None else torch.device("cpu")


def make_gdn_inputs(lens, H, HV, K, V, *, dtype=torch.float32, device="cpu", gen=None):
    """Activations for windows of the given lengths plus layer parameters and cu_seqlens."""
    N = sum(lens)

    def r(*shape, s=1.0):
        return (torch.randn(*shape, generator=gen, device=_where(gen)) * s).to(dtype).to(device)

    cu = torch.zeros(len(lens) + 1, dtype=torch.int32)
    cu[1:] = torch.tensor(lens).cumsum(0)
    return dict(
        q=r(N, H, K),
        k=r(N, H, K),
        v=r(N, HV, V),
        a=r(N, HV),
        b=r(N, HV),
        A_log=(torch.rand(HV, generator=gen, device=_where(gen)) * 2 - 1.5).to(device),
        dt_bias=(torch.randn(HV, generator=gen, device=_where(gen)) * 0.5).to(device),
        cu_seqlens=cu.to(device),
    )


def random_state(S, HV, V, K, *, device="cpu", gen=None):
    return (torch.randn(S, HV, V, K, generator=gen, device=_where(gen)) * 0.2).to(device)


def slot_tensor(ids, device="cpu"):
    return torch.tensor(ids, dtype=torch.int32, device=device)
