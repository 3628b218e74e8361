"""Progress bars in a log file (stderr not a terminal): redrawn at most every 30 s, as docs/cli.md says."""

import io
import sys

from replayssm import progress as progress_module
from replayssm.progress import progress


class Stream(io.StringIO):
    def __init__(self, tty: bool):
        super().__init__()
        self.tty = tty

    def isatty(self) -> bool:
        return self.tty


def _run(monkeypatch, tty: bool) -> tuple[list[str], str]:
    err, out = Stream(tty), io.StringIO()
    monkeypatch.setattr(sys, "stderr", err)
    monkeypatch.setattr(sys, "stdout", out)
    with progress(300, "run") as bar:
        for i in range(300):  # what drift and bench kernels do: new phase/postfix, a line per point, one step
            bar.set_description(f"phase {i % 3}")
            bar.set_postfix_str(f"T={i}")
            bar.write(f"point {i}")
            bar.update()
    return [s for s in err.getvalue().replace("\n", "\r").split("\r") if s.strip()], out.getvalue()


def test_not_a_terminal_redraws_only_at_start_and_end(monkeypatch):
    draws, out = _run(monkeypatch, tty=False)
    assert len(draws) <= 2, draws
    assert "300/300" in draws[-1] and "phase 2" in draws[-1]
    assert out.splitlines() == [f"point {i}" for i in range(300)]
    bar = progress(1, "x")
    assert bar.mininterval == bar.maxinterval == progress_module.LOG_INTERVAL == 30
    bar.close()


def test_a_terminal_keeps_the_live_bar(monkeypatch):
    draws, out = _run(monkeypatch, tty=True)
    assert len(draws) > 2 and out.count("point") == 300


def test_the_demo_bar_reaches_its_total():
    """Every generated token is counted, the tokens of each run's last (draining) step too: the bar ends full."""
    import torch

    from replayssm.demo import ModelDemo

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        demo = ModelDemo(max_new_tokens=4, device="cpu")
        counted = []
        demo.run(progress=counted.append)
    finally:
        torch.set_num_threads(threads)
    assert sum(counted) == demo.total_tokens and min(counted) >= 0
