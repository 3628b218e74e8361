"""replayssm's models against Hugging Face transformers (pure-PyTorch path: fla made unimportable)."""

import pytest
import torch

from replayssm.engine.llm import LLM
from replayssm.models.loader import load_model
from replayssm.models.step import Step, StepKind
from tests.helpers.hf_tiny import build
from tests.helpers.model_state import fresh_state

KINDS = ["qwen3_next", "qwen3_5_text", "qwen3_5_moe_text"]
# fp32 on both sides; the two implementations differ only in summation order (chunked vs recurrent
# delta rule, matmul blocking), which stays below 1e-4 on logits of magnitude ~3.
LOGIT_BOUND = 1e-4


@pytest.fixture(scope="module", params=KINDS)
def tiny(request, tmp_path_factory):
    path = tmp_path_factory.mktemp(request.param)
    hf = build(request.param, path, seed=KINDS.index(request.param))
    return request.param, path, hf


def test_prefill_and_decode_logits(tiny):
    kind, path, hf = tiny
    model = load_model(path)
    pool, kv = fresh_state(model, slots=2)
    ids = torch.randint(3, 256, (23,), generator=torch.Generator().manual_seed(0))
    slot = pool.alloc(1)
    with torch.no_grad():
        ours = model(ids[:16], Step.build(StepKind.PREFILL, slot, 16, kv), pool, kv)
        kv.commit(slot, torch.tensor([16], dtype=torch.int32))
        out = hf(ids[None, :16], use_cache=True)
        assert (ours - out.logits[0]).abs().max() < LOGIT_BOUND
        cache = out.past_key_values if getattr(out, "past_key_values", None) is not None else out.cache
        for t in range(16, 23):  # step-by-step decode through the pool (recurrent kernel path for T=1)
            step = Step.build(StepKind.DECODE, slot, 1, kv)
            o = model(ids[t : t + 1], step, pool, kv)
            one = torch.ones(1, dtype=torch.int32)
            pool.commit(slot, one)
            kv.commit(slot, one)
            out = hf(ids[None, t : t + 1], past_key_values=cache, use_cache=True)
            cache = out.past_key_values if getattr(out, "past_key_values", None) is not None else out.cache
            assert (o[0] - out.logits[0, -1]).abs().max() < LOGIT_BOUND, f"{kind}: decode step {t}"


def test_greedy_generation_matches_hf(tiny):
    kind, path, hf = tiny
    prompt = torch.randint(3, 256, (9,), generator=torch.Generator().manual_seed(1)).tolist()
    with torch.no_grad():
        ref = hf.generate(torch.tensor([prompt]), attention_mask=torch.ones(1, 9, dtype=torch.long),
                          max_new_tokens=64, do_sample=False)[0, 9:].tolist()  # fmt: skip
    out = LLM(path, backend="replay", drafter="none", max_len=128).generate([prompt], max_new_tokens=64)[0]
    assert out.token_ids == ref
