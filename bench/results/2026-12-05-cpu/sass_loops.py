"""Instruction counts of every loop in an sm_90 SASS dump (``scripts/sm90_compile.py --sass DIR``): the instructions
from a backward branch's target to the branch, with the most common opcodes.

    python3 sass_loops.py DIR/verify.sass
"""

import collections
import re
import sys
from pathlib import Path


def loops(text: str) -> list[tuple[int, int, collections.Counter]]:
    ins = []
    for line in text.splitlines():
        m = re.match(r"\s*/\*([0-9a-f]{4,})\*/\s+(.*?);", line)
        if m:
            ins.append((int(m.group(1), 16), m.group(2).strip()))
    where = {a: i for i, (a, _) in enumerate(ins)}
    out = []
    for i, (a, t) in enumerate(ins):
        m = re.search(r"BRA.*?0x([0-9a-f]+)", t)
        if m and int(m.group(1), 16) < a and int(m.group(1), 16) in where:
            body = ins[where[int(m.group(1), 16)] : i + 1]
            ops = collections.Counter(re.sub(r"^@!?U?P\w+\s+", "", x).split()[0].split(".")[0] for _, x in body)
            out.append((int(m.group(1), 16), a, ops))
    return out


if __name__ == "__main__":
    for start, end, ops in loops(Path(sys.argv[1]).read_text()):
        print(f"loop {start:#x}-{end:#x}: {sum(ops.values())} instructions", dict(ops.most_common(12)))
