"""LLM's arguments, from a first-hour trial of the Python API (thirty-third session): each case was a traceback from
inside the library or an error about something the user had not passed."""

import json
import shutil

import pytest
import torch

from replayssm.engine.llm import LLM, DraftVocabError
from replayssm.models.loader import MTPUnavailableError
from replayssm.tiny import TINY_MODEL

from .test_llm_errors import _folder


@pytest.mark.parametrize("model", [None, 123, [TINY_MODEL]])
def test_a_model_that_is_neither_a_folder_nor_a_hybridlm_is_named(model):
    """LLM(None) was pathlib's TypeError (expected str, bytes or os.PathLike object)."""
    with pytest.raises(TypeError, match=r"^model must be a model folder \(a str or a Path\) or a HybridLM, got "):
        LLM(model)


def test_drafter_none_decodes_plainly_whatever_window_and_ring_len_say():
    """ring_len=2 was refused against the default window 4 that drafter='none' then dropped."""
    llm = LLM(TINY_MODEL, drafter="none", ring_len=2, device="cpu", max_slots=1, max_len=64)
    assert llm.runner_config.window == 1 and llm.runner_config.ring_len == 2
    plain = LLM(TINY_MODEL, drafter="none", window=1, device="cpu", max_slots=1, max_len=64)
    prompt = [[100, 101, 102]]
    assert llm.generate(prompt, 6)[0].token_ids == plain.generate(prompt, 6)[0].token_ids


def test_the_default_max_len_follows_a_smaller_model_limit(tmp_path):
    """The default max_len=2048 was refused for a model with max_position_embeddings below it."""
    cfg = json.loads((TINY_MODEL / "config.json").read_text())
    cfg["max_position_embeddings"] = 100
    llm = LLM(_folder(tmp_path, cfg), device="cpu", max_slots=1)
    assert llm.runner_config.max_len == 100
    with pytest.raises(ValueError, match=r"max_len=200: must be at most the model's max_position_embeddings=100"):
        LLM(_folder(tmp_path / "b", cfg), device="cpu", max_len=200)


def test_a_negative_draft_id_is_named_as_such():
    """It said the ids were outside [0, 9223372036854775807)."""
    with pytest.raises(ValueError, match=r"^draft_vocab holds negative token ids: min -1$"):
        LLM(TINY_MODEL, draft_vocab=[-1])


@pytest.mark.parametrize("device", [False, ""])
def test_a_device_that_is_not_a_device_is_refused(device):
    """device=False or '' ran on the default device as if none had been given."""
    with pytest.raises(ValueError, match=r"must be cpu, cuda or cuda:N"):
        LLM(TINY_MODEL, device=device)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal of a GPU this machine lacks")
def test_device_zero_is_not_taken_for_no_device():
    """device=0 ran on the CPU of a machine without a GPU, as if none had been given; torch takes 0 for the first
    accelerator, which this machine lacks."""
    with pytest.raises(ValueError, match=r"^device=0: "):
        LLM(TINY_MODEL, device=0)


def test_encode_and_decode_check_what_they_are_given():
    """encode(None) was the tokenizer library's TypeError; decode([1000]) returned '' for an id past the vocabulary,
    which generate refuses."""
    llm = LLM(TINY_MODEL, device="cpu", max_slots=1, max_len=64)
    with pytest.raises(TypeError, match=r"^encode takes a str, got NoneType$"):
        llm.encode(None)
    with pytest.raises(ValueError, match=r"decode's ids \[1000\] are outside the vocabulary \[0, "):
        llm.decode([1000])
    with pytest.raises(TypeError, match=r"^decode takes token ids, got str$"):
        llm.decode("abc")
    ids = llm.encode("def f():")
    assert llm.decode(ids) == llm.decode(torch.tensor(ids)) == "def f():"


def test_an_llm_whose_model_another_llm_recast_says_so():
    """Two LLMs over one HybridLM, the second in another dtype: the first failed inside the state pool (conv_state
    must be a torch.float32 tensor...), since building an LLM casts the model in place."""
    from replayssm.models.loader import load_model

    model = load_model(TINY_MODEL, dtype=torch.float32, device="cpu")
    first = LLM(model, device="cpu", max_slots=1, max_len=64)
    want = first.generate([[100, 101, 102]], 4)[0].token_ids
    LLM(model, device="cpu", dtype=torch.float16, max_slots=1, max_len=64)
    with pytest.raises(RuntimeError, match=r"weights are now torch.float16 on cpu, but this LLM was built for "
                                           r"torch.float32 on cpu .*move them back"):  # fmt: skip
        first.generate([[100, 101, 102]], 4)
    model.to(torch.float32)
    assert first.generate([[100, 101, 102]], 4)[0].token_ids == want


def test_a_folder_without_an_mtp_head_refuses_draft_vocab_before_loading(tmp_path, monkeypatch):
    """A folder's MTP head was known only once its weights had loaded, so drafter='auto' refused draft_vocab after
    the load (a docs audit, thirty-fourth session); the safetensors headers tell it first."""
    from safetensors.torch import load_file, save_file

    import replayssm.engine.llm as llm_module

    folder = tmp_path / "nomtp"
    shutil.copytree(TINY_MODEL, folder)
    tensors = load_file(str(folder / "model.safetensors"))
    save_file({n: t for n, t in tensors.items() if not n.startswith("mtp.")}, str(folder / "model.safetensors"))
    with pytest.raises(MTPUnavailableError, match=r"has no usable MTP head"):  # (the load's header check)
        LLM(folder, drafter="mtp", draft_vocab=100, device="cpu")

    def no_load(*args, **kwargs):
        raise AssertionError("the model was loaded before draft_vocab was refused")

    monkeypatch.setattr(llm_module, "load_model", no_load)
    want = r"^draft_vocab=100: only with the MTP drafter, and drafter='auto' drafts without the model's MTP head"
    with pytest.raises(DraftVocabError, match=want):
        LLM(folder, draft_vocab=100, device="cpu")
