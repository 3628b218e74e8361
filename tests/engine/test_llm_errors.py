"""LLM's argument errors name the argument; a host drafter's output is checked and its errors name the drafter;
a model folder that cannot be read raises one clear error naming the file."""

import json
import shutil

import numpy as np
import pytest
import torch

from replayssm.engine.llm import LLM, DraftVocabError
from replayssm.models.config import ModelConfig, ModelConfigError
from replayssm.models.loader import WeightError, read_safetensors
from replayssm.tiny import TINY_MODEL

PROMPTS = ["def fib(n):\n    if n < 2:\n        return n\n", "import os\n"]


@pytest.mark.parametrize("drafter", ["mtp", "ngram"])
def test_a_named_drafter_with_window_1_is_refused(drafter):
    with pytest.raises(ValueError, match=f"drafter='{drafter}' needs window >= 2.*got window=1"):
        LLM(TINY_MODEL, drafter=drafter, window=1)


def test_window_is_bounded_as_the_cli_bounds_it():
    with pytest.raises(ValueError, match="window=200: must be from 1 to 64"):
        LLM(TINY_MODEL, window=200)


def test_ring_len_is_bounded_before_the_load(monkeypatch):
    """ring_len=2**40 loaded the model, then failed in the ring cursors with a message naming neither."""
    import replayssm.engine.llm as llm_module

    monkeypatch.setattr(llm_module, "load_model", lambda *a, **k: pytest.fail("the model was loaded"))
    with pytest.raises(ValueError, match="ring_len=1099511627776: must be from 2 \\* window = 8 to 65536"):
        LLM(TINY_MODEL, ring_len=1 << 40)


def test_max_len_is_bounded_by_max_position_embeddings():
    with pytest.raises(ValueError, match="max_len=100000000000: .*max_position_embeddings=4096"):
        LLM(TINY_MODEL, max_len=10**11)


def test_a_file_that_is_not_a_config_is_a_clear_error(tmp_path):
    readme = tmp_path / "README.md"
    readme.write_text("# a model\n")
    with pytest.raises(ModelConfigError, match=r"README.md is not a JSON config.*a model is a folder"):
        LLM(readme)


def _folder(tmp_path, config):
    folder = tmp_path / "m"
    shutil.copytree(TINY_MODEL, folder)
    (folder / "config.json").write_text(json.dumps(config))
    return folder


def test_config_errors_name_the_file_and_the_field(tmp_path):
    cfg = json.loads((TINY_MODEL / "config.json").read_text())
    with pytest.raises(ModelConfigError, match=r"m/config.json: must hold a JSON object, got an array"):
        LLM(_folder(tmp_path, [cfg]))
    shutil.rmtree(tmp_path / "m")
    with pytest.raises(ModelConfigError, match=r"'linear_num_value_heads' must be a positive int, got -4"):
        ModelConfig.from_file(_folder(tmp_path, {**cfg, "linear_num_value_heads": -4}))
    for field, val in (("vocab_size", "259"), ("num_hidden_layers", 0), ("num_experts", -1), ("head_dim", True)):
        with pytest.raises(ModelConfigError, match=f"'{field}' must be"):
            ModelConfig.from_dict({**cfg, field: val})
    with pytest.raises(ModelConfigError, match="layer_types must list 8"):
        ModelConfig.from_dict({**cfg, "layer_types": "linear_attention"})


def test_a_corrupt_safetensors_file_is_a_weight_error(tmp_path):
    folder = tmp_path / "corrupt"
    folder.mkdir()
    (folder / "model.safetensors").write_bytes(b"\x00" * 100)
    with pytest.raises(WeightError, match="model.safetensors is not a readable safetensors file"):
        read_safetensors(folder)


class Fixed:
    """Proposes whatever ``make(context, k)`` returns."""

    def __init__(self, make):
        self.make = make

    def propose(self, context, k):
        return self.make(context, k)


@pytest.fixture(scope="module")
def plain():
    llm = LLM(TINY_MODEL, drafter="none", window=1, max_slots=2, max_len=256)
    return [o.token_ids for o in llm.generate(PROMPTS, 16)]


@pytest.mark.parametrize(
    "make",
    [
        lambda c, k: torch.tensor(c[-k:]),  # a 1-d tensor
        lambda c, k: np.array(c[-k:], dtype=np.int64),  # a 1-d NumPy array
        lambda c, k: tuple(c[-k:]),
        lambda c, k: list(c[-2 * k :]),  # longer than k: the first k are used, the rest dropped
        lambda c, k: torch.tensor(c[-2 * k :], dtype=torch.int32),
    ],
    ids=["tensor", "numpy", "tuple", "too-long-list", "too-long-tensor"],
)
def test_proposals_of_any_1d_integer_kind_run_and_output_equals_plain_decode(make, plain):
    llm = LLM(TINY_MODEL, drafter=Fixed(make), window=4, max_slots=2, max_len=256)
    assert [o.token_ids for o in llm.generate(PROMPTS, 16)] == plain


@pytest.mark.parametrize(
    "make, error, message",
    [
        (lambda c, k: None, TypeError, r"Fixed.propose\(\) must return a list of ints .*got NoneType"),
        (lambda c, k: 5, TypeError, r"Fixed.propose\(\) must return a list of ints .*got int"),
        (lambda c, k: {3, 4}, TypeError, r"Fixed.propose\(\) must return a list of ints .*got set"),
        (lambda c, k: (t for t in (3, 4)), TypeError, r"Fixed.propose\(\) must return a list of ints .*got generator"),
        (lambda c, k: torch.zeros(1, k, dtype=torch.long), TypeError, r"must return a list of ints .*2-d Tensor"),
        (lambda c, k: torch.zeros(k), TypeError, r"Fixed.propose\(\) draft token ids must be integers"),
        (lambda c, k: [1.5] * k, TypeError, r"Fixed.propose\(\) draft token ids must be ints"),
        (lambda c, k: torch.full((k,), 10**6), ValueError, r"Fixed.propose\(\) draft token ids .* outside"),
    ],
    ids=["None", "int", "set", "generator", "2-d", "float-tensor", "floats", "out-of-vocab"],
)
def test_a_bad_proposal_names_the_drafter_and_the_llm_stays_usable(make, error, message):
    llm = LLM(TINY_MODEL, drafter=Fixed(make), window=4, max_slots=2, max_len=256)
    with pytest.raises(error, match=message):
        llm.generate(PROMPTS, 4)
    assert llm.runner.num_free == 2


def test_auto_with_window_1_is_plain_decode():
    assert LLM(TINY_MODEL, drafter="auto", window=1, max_len=64).drafter == "none"


def test_draft_vocab_is_for_the_mtp_drafter_within_the_vocabulary():
    """draft_vocab sizes the MTP drafter's head: refused with another drafter, and beyond the vocabulary."""
    with pytest.raises(DraftVocabError, match="draft_vocab=8: only with the MTP drafter, and drafter='ngram'"):
        LLM(TINY_MODEL, drafter="ngram", draft_vocab=8)
    with pytest.raises(DraftVocabError, match="window=1 is plain decode"):
        LLM(TINY_MODEL, window=1, draft_vocab=8)
    with pytest.raises(ValueError, match=r"draft_vocab=100000: a count of at most the model's vocabulary \(259\)"):
        LLM(TINY_MODEL, drafter="mtp", draft_vocab=100_000)
    with pytest.raises(ValueError, match="token ids below it"):
        LLM(TINY_MODEL, drafter="mtp", draft_vocab=[3, 259])


def test_a_refused_draft_vocab_leaves_a_given_model_as_it_was():
    """Checked before the model moves: the caller's HybridLM keeps its dtype when draft_vocab is refused."""
    from replayssm.models.loader import load_model

    model = load_model(TINY_MODEL, dtype=torch.float32, device="cpu")
    for kw in ({"drafter": "ngram", "draft_vocab": 8}, {"drafter": "mtp", "draft_vocab": 10**6}):
        with pytest.raises(DraftVocabError):
            LLM(model, dtype=torch.float64, device="cpu", **kw)
        assert next(model.parameters()).dtype == torch.float32


def test_the_config_keeps_its_end_tokens_as_a_tuple(tmp_path):
    assert ModelConfig.from_file(TINY_MODEL).eos_token_id == (258,)
    d = json.loads((TINY_MODEL / "config.json").read_text())
    assert ModelConfig.from_dict({**d, "eos_token_id": [258, 3]}).eos_token_id == (258, 3)
    assert ModelConfig.from_dict({k: v for k, v in d.items() if k != "eos_token_id"}).eos_token_id is None


def test_the_api_checks_types_and_ranges_before_it_acts():
    """The fresh-eyes trial's findings: each refused before anything loads, runs or moves, naming the argument."""
    from replayssm.engine.accept import Sampling
    from replayssm.engine.engine import Engine
    from replayssm.engine.runner import RunnerConfig

    for kw, err, msg in (({"device": "tpu"}, ValueError, "device='tpu'"),
                         ({"dtype": "float16"}, ValueError, "dtype='float16'"),
                         ({"load_progress": 5}, TypeError, "load_progress")):  # fmt: skip
        with pytest.raises(err, match=msg):
            LLM(TINY_MODEL, **kw)
    with pytest.raises(ValueError, match="Sampling"):
        Sampling(-1.0)
    assert RunnerConfig(window=np.int64(4)).window == 4 and type(RunnerConfig(window=np.int64(4)).window) is int
    llm = LLM(TINY_MODEL, window=np.int64(4), max_slots=np.int32(2), max_len=128, device="cpu")
    greedy = llm.generate(PROMPTS[0], 6)[0].token_ids
    assert llm.generate(PROMPTS[0], 6, temperature=1e-40)[0].token_ids == greedy  # below 1e-5: greedy
    assert llm.generate(PROMPTS[0], 6, temperature=0.8, seed=np.int64(3))[0].token_ids == llm.generate(
        PROMPTS[0], 6, temperature=0.8, seed=3)[0].token_ids  # fmt: skip
    for kw, err, msg in (({"seed": 2**70}, ValueError, "seed="), ({"ignore_eos": "no"}, TypeError, "ignore_eos")):
        with pytest.raises(err, match=msg):
            llm.generate(PROMPTS[0], 6, **kw)
    runner = llm.runner
    eng = Engine(runner, drafter="none")
    r = eng.add([5, 6, 7], 4)
    for call, msg in ((lambda: eng.run(max_iterations=0), "max_iterations=0"), (lambda: eng.preempt(0), "Request")):
        with pytest.raises(ValueError, match=msg):
            call()
    assert not r.generated and r.slot is None  # nothing ran
    slot = runner.alloc()
    with pytest.raises(TypeError, match="slot must be an int"):
        runner.free(True)
    with pytest.raises(ValueError, match="not an allocated slot"):
        runner.kv_len(99)
    runner.prefill(np.int64(slot), [5, 6, 7])
    with pytest.raises(ValueError, match="already hold tokens; prefill takes fresh slots"):
        runner.prefill(slot, [5, 6, 7])
    assert runner.kv_len(slot) == 3
    free = runner.pool.num_free
    runner.free(np.int64(slot))  # a review found the GDN slot freed, then the KV release refusing the NumPy int
    assert runner.pool.num_free == free + 1 and runner.alloc() == slot  # wholly free again: handed out anew
    runner.free(slot)


def test_a_pool_larger_than_the_device_is_refused_before_the_load(monkeypatch):
    """``max_slots=10**9`` failed in the allocator only after the model had loaded (noticed in earlier sessions)."""
    from replayssm import fit
    from replayssm.engine import llm

    loads = []
    real_load = llm.load_model
    monkeypatch.setattr(llm, "load_model", lambda *a, **k: loads.append(a) or real_load(*a, **k))
    with pytest.raises(ValueError, match=r"max_slots=1000000000, max_len=2048: .* GiB, more than this machine"):
        LLM(TINY_MODEL, max_slots=10**9)
    weights = fit.model_bytes(ModelConfig.from_file(TINY_MODEL), torch.float32)
    with monkeypatch.context() as m:  # 1 MiB to spare beside the weights: two slots of 2,048 positions do not fit
        m.setattr(fit, "memory_bytes", lambda dev: int((weights + (1 << 20)) / fit.SPARE))
        with pytest.raises(ValueError, match=r"max_slots=2, max_len=2048: .*give fewer slots or a shorter max_len"):
            LLM(TINY_MODEL, device="cpu", max_slots=2)
    assert not loads
    assert LLM(TINY_MODEL, max_slots=2, max_len=256).runner is not None and len(loads) == 1


def test_the_pool_check_counts_the_weights_still_to_load(monkeypatch):
    """The pool check used the memory free before the weights load: a pool that fit beside nothing passed, then the
    allocation failed after the load. Weights that alone do not fit name the model; weights that fit alone but not
    with the pool name max_slots and max_len, with both sizes."""
    from replayssm import fit
    from replayssm.engine import llm

    cfg = ModelConfig.from_file(TINY_MODEL)
    weights = fit.model_bytes(cfg, torch.float32)
    loads = []
    real_load = llm.load_model
    monkeypatch.setattr(llm, "load_model", lambda *a, **k: loads.append(a) or real_load(*a, **k))
    with monkeypatch.context() as m:  # room for 90% of the weights: the model itself is refused
        m.setattr(fit, "memory_bytes", lambda dev: int(weights * 0.9 / fit.SPARE))
        with pytest.raises(ValueError, match=r"^model: its weights in float32 need .* GiB, more than this machine"):
            LLM(TINY_MODEL, device="cpu", max_slots=1, max_len=64)
    pool_only = {}
    real_too_big = fit.too_big
    with monkeypatch.context() as m:  # room for the weights and not much more: the pool beside them is refused
        m.setattr(fit, "memory_bytes", lambda dev: int(weights * 1.0001 / fit.SPARE))
        m.setattr(fit, "too_big", lambda need, dev: pool_only.setdefault(need, real_too_big(need, dev)))
        with pytest.raises(ValueError, match=r"max_slots=4, max_len=256: .* with the model's weights \(.* GiB\) need"):
            LLM(TINY_MODEL, device="cpu", max_slots=4, max_len=256)
    assert sorted(pool_only)[0] == weights and len(pool_only) == 2  # the weights alone, then weights + pool
    assert not loads


def test_the_pool_check_counts_what_moving_a_model_adds(monkeypatch):
    """A ``HybridLM``: parameters elsewhere count whole, parameters already on the device count by what their cast
    adds (a review found a bf16 model cast to fp32 in place counted as 0, a model partly elsewhere counted whole)."""
    from replayssm import fit
    from replayssm.models.model import HybridLM

    cfg = ModelConfig.from_file(TINY_MODEL)
    w32 = fit.model_bytes(cfg, torch.float32)
    with torch.device("meta"):
        meta = HybridLM(cfg)
    with monkeypatch.context() as m:  # on the meta device: all of it is still to be placed
        m.setattr(fit, "memory_bytes", lambda dev: int(w32 * 0.5 / fit.SPARE))
        with pytest.raises(ValueError, match=r"^model: its weights in float32 need"):
            LLM(meta, device="cpu", dtype=torch.float32, max_slots=1, max_len=64)
    assert all(p.device.type == "meta" for p in meta.parameters())  # refused before it moved
    half = llm_load(TINY_MODEL, torch.float16)
    with monkeypatch.context() as m:  # room for 40% of the fp32 weights: the fp16 -> fp32 cast adds 50%
        m.setattr(fit, "memory_bytes", lambda dev: int(w32 * 0.4 / fit.SPARE))
        with pytest.raises(ValueError, match=r"^model: its weights in float32 need"):
            LLM(half, device="cpu", dtype=torch.float32, max_slots=1, max_len=64)
        assert LLM(half, device="cpu", dtype=torch.float16, max_slots=1, max_len=64).runner is not None  # no cast
    part = llm_load(TINY_MODEL, torch.float32)
    moved = sum(p.numel() for p in part.model.norm.parameters()) * 4
    part.model.norm.to("meta")  # one module elsewhere: only its bytes are to be placed
    with monkeypatch.context() as m:
        seen = []
        m.setattr(fit, "too_big", lambda need, dev: seen.append(need))
        with pytest.raises(NotImplementedError):  # (moving a meta tensor fails after the check: nothing to copy)
            LLM(part, device="cpu", dtype=torch.float32, max_slots=1, max_len=64)
    assert seen[0] == moved


def llm_load(folder, dtype):
    from replayssm.models.loader import load_model

    return load_model(folder, dtype=dtype, device="cpu")
