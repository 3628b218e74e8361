"""``LLM`` (the Python API) on the GPU: its weights placed on the device, its steps in lockstep with a recurrent
shadow, its memory check against the GPU's real free memory, and a recast of a shared ``HybridLM`` named."""

import pytest
import torch

from replayssm.engine.llm import LLM
from replayssm.models.loader import load_model
from replayssm.tiny import TINY_MODEL

PROMPTS = [[100, 101, 102, 103, 100, 101], [7, 8, 9], [42] * 12]


def test_bf16_replay_keeps_lockstep_with_a_recurrent_shadow_every_step():
    """The default drafter of the embedded model (its MTP head) on CUDA in bf16: the replay pool's committed state
    equals the recurrent shadow's after every step (``generate`` raises at the first difference)."""
    llm = LLM(TINY_MODEL, device="cuda", dtype=torch.bfloat16, shadow_backend="recurrent", max_slots=4, max_len=256)
    assert llm.drafter == "mtp"
    assert next(llm.model.parameters()).device.type == "cuda"
    outs = llm.generate(PROMPTS, 40)
    assert [len(o.token_ids) for o in outs] == [40, 40, 40]
    assert llm.lockstep_checks >= max(o.steps for o in outs) > 0
    assert sum(o.mean_accepted for o in outs) / len(outs) > 1.0  # speculation accepted drafts


def test_fp32_speculative_tokens_equal_plain_decode():
    """In fp32 greedy speculative decoding (MTP drafts, window 4) gives plain decode's tokens."""
    kw = dict(device="cuda", dtype=torch.float32, max_slots=4, max_len=256)
    spec = LLM(TINY_MODEL, **kw).generate(PROMPTS, 48)
    plain = LLM(TINY_MODEL, drafter="none", **kw).generate(PROMPTS, 48)
    assert [o.token_ids for o in spec] == [o.token_ids for o in plain]
    assert all(s.steps < p.steps / 2 for s, p in zip(spec, plain))  # drafts accepted: fewer steps


def test_a_cpu_hybridlm_is_placed_on_the_gpu_and_a_recast_by_another_llm_is_named():
    model = load_model(TINY_MODEL, mtp=True)  # fp32 on the CPU
    first = LLM(model, device="cuda", dtype=torch.bfloat16, max_slots=2, max_len=128)
    assert {(p.device.type, p.dtype) for p in model.parameters()} == {("cuda", torch.bfloat16)}
    want = first.generate(PROMPTS[:1], 16)[0].token_ids
    assert len(want) == 16
    LLM(model, device="cuda", dtype=torch.float32, max_slots=2, max_len=128)  # recasts the shared model in place
    with pytest.raises(RuntimeError, match=r"now torch\.float32 on cuda:0, but this LLM was built for torch\.bfloat16"):
        first.generate(PROMPTS[:1], 16)
    model.to(dtype=torch.bfloat16)  # moved back, the first LLM runs again, with its first tokens
    assert first.generate(PROMPTS[:1], 16)[0].token_ids == want


def test_weights_moved_out_and_back_are_read_where_they_now_live():
    """A .to() round trip gives every weight new memory: the LLM's captured steps read the old one (here kept
    alive, holding the old values) until ``engine()`` sees the move and captures them again."""
    model = load_model(TINY_MODEL, mtp=True, device="cuda", dtype=torch.bfloat16)
    # n-gram drafts: the same tokens give the same windows, so the two runs compared below round alike
    kw = dict(drafter="ngram", device="cuda", dtype=torch.bfloat16, max_slots=2, max_len=128)
    first = LLM(model, **kw)
    before = first.generate(PROMPTS[:2], 24)
    old = [p.detach() for p in model.parameters()]  # the old memory stays allocated: new weights land elsewhere
    model.to(dtype=torch.float32).to(dtype=torch.bfloat16)
    assert all(p.data_ptr() != q.data_ptr() for p, q in zip(model.parameters(), old))
    with torch.no_grad():
        model.lm_head.weight.mul_(-1.0)  # (tied: the embedding too) other greedy tokens
    after = first.generate(PROMPTS[:2], 24)
    fresh = LLM(model, **kw).generate(PROMPTS[:2], 24)
    assert [o.token_ids for o in after] == [o.token_ids for o in fresh]
    assert [o.token_ids for o in after] != [o.token_ids for o in before]


def test_an_engine_taken_before_the_weights_moved_steps_them_where_they_now_live():
    """``Engine`` steps go through the runner, which checks its model's first parameter before each step."""
    model = load_model(TINY_MODEL, mtp=True, device="cuda", dtype=torch.bfloat16)
    kw = dict(drafter="ngram", device="cuda", dtype=torch.bfloat16, max_slots=2, max_len=128)
    first = LLM(model, **kw)
    before = first.generate(PROMPTS[:2], 24)
    eng = first.engine()  # taken before the move
    old = [p.detach() for p in model.parameters()]
    model.to(dtype=torch.float32).to(dtype=torch.bfloat16)
    with torch.no_grad():
        model.lm_head.weight.mul_(-1.0)
    reqs = [eng.add(p, 24) for p in PROMPTS[:2]]
    eng.run()
    fresh = LLM(model, **kw).generate(PROMPTS[:2], 24)
    assert [r.generated for r in reqs] == [o.token_ids for o in fresh] != [o.token_ids for o in before]
    assert len(old) == len(list(model.parameters()))


def test_a_pool_larger_than_the_gpu_is_refused_before_anything_is_allocated():
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    with pytest.raises(ValueError, match=r"^max_slots=1000000, max_len=2048: .*more than this machine can spare"):
        LLM(TINY_MODEL, device="cuda", max_slots=1_000_000, max_len=2048)
    assert torch.cuda.memory_allocated() == before  # nothing loaded or allocated
