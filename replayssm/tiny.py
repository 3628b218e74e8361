"""The embedded tiny model (``replayssm/assets/tiny``) and the prompts the demo and the drift study give it."""

from __future__ import annotations

from pathlib import Path

TINY_MODEL = Path(__file__).parent / "assets" / "tiny"
TINY_PROMPTS = (
    "import os\nimport sys\n\n\ndef main(",
    "class Parser:\n    def __init__(self, text):\n",
    "    for i in range(",
)
