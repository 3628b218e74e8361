"""The end tokens where config.json names none: generation_config.json's ``eos_token_id`` (a first-hour trial of the
thirty-third session: ``ignore_eos=False`` then ran to ``max_new_tokens`` without a word)."""

import json
import shutil

import pytest

from replayssm.engine.llm import LLM
from replayssm.models.config import ModelConfig, ModelConfigError
from replayssm.tiny import TINY_MODEL


def _folder(tmp_path, eos_in_config, generation):
    folder = tmp_path / "m"
    shutil.copytree(TINY_MODEL, folder)
    cfg = json.loads((folder / "config.json").read_text())
    if eos_in_config is None:
        cfg.pop("eos_token_id", None)
    else:
        cfg["eos_token_id"] = eos_in_config
    (folder / "config.json").write_text(json.dumps(cfg))
    if generation is None:
        (folder / "generation_config.json").unlink()
    else:
        (folder / "generation_config.json").write_text(
            generation if isinstance(generation, str) else json.dumps(generation)
        )
    return folder


def test_generation_config_names_the_end_tokens_when_config_json_does_not(tmp_path):
    assert ModelConfig.from_file(_folder(tmp_path, None, {"eos_token_id": [3, 7]})).eos_token_id == (3, 7)


def test_config_json_wins_where_both_name_them(tmp_path):
    assert ModelConfig.from_file(_folder(tmp_path, 5, {"eos_token_id": [3, 7]})).eos_token_id == (5,)


@pytest.mark.parametrize("generation, said", [
    ("{not json", r"generation_config.json is not JSON"),
    ([1, 2], r"generation_config.json: must hold a JSON object, got an array"),
    ({"eos_token_id": 10**6}, r"generation_config.json: eos_token_id must be a token id or a list of them"),
])  # fmt: skip
def test_a_bad_generation_config_is_named(tmp_path, generation, said):
    with pytest.raises(ModelConfigError, match=said):
        ModelConfig.from_file(_folder(tmp_path, None, generation))


def test_no_end_token_anywhere_warns_when_generation_should_stop_at_one(tmp_path):
    folder = _folder(tmp_path, None, None)
    assert ModelConfig.from_file(folder).eos_token_id is None
    llm = LLM(folder, device="cpu", max_slots=1, max_len=64)
    with pytest.warns(UserWarning, match=r"ignore_eos=False: the model names no end-of-sequence token"):
        out = llm.generate([[100, 101]], 5, ignore_eos=False)
    assert len(out[0].token_ids) == 5
