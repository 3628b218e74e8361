"""The embedded tiny model (``replayssm/assets/tiny``) and the prompts the demo and the drift study give it."""

from __future__ import annotations

import json
from pathlib import Path

TINY_MODEL = Path(__file__).parent / "assets" / "tiny"
TINY_PROMPTS = (
    "import os\nimport sys\n\n\ndef main(",
    "class Parser:\n    def __init__(self, text):\n",
    "    for i in range(",
)


def heldout_prompts(model_dir=TINY_MODEL) -> list[dict]:
    """``{"file", "line", "text"}`` prompts shipped with the model (``heldout_prompts.json``): windows of stdlib
    source files that neither the model nor its MTP head was trained on (written by ``scripts/train_tiny.py``)."""
    f = Path(model_dir) / "heldout_prompts.json"
    return json.loads(f.read_text()) if f.is_file() else []
