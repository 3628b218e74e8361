import pytest

from tests.helpers.hf_tiny import build


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory):
    path = tmp_path_factory.mktemp("tiny_qwen3_5")
    build("qwen3_5_text", path, seed=5)
    return path
