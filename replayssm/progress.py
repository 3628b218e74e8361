"""Progress bars (tqdm) on stderr, shared by the command line and the benchmarks; no torch import."""

from __future__ import annotations

import functools
import sys

LOG_INTERVAL = 30.0  # seconds between redraws when stderr is not a terminal (a log file)


def progress(total: int | None, desc: str, unit: str = "tok", *, unit_scale: bool = False):
    """A progress bar with an ETA on stderr. When stderr is not a terminal (a log file) it is redrawn at most
    every 30 s (and when it closes) instead of every 0.1 s: a new description or postfix waits for the next
    redraw, and ``bar.write`` prints its line without redrawing the bar."""
    from tqdm import tqdm

    kw = dict(total=total, desc=desc, unit=unit, unit_scale=unit_scale, file=sys.stderr, dynamic_ncols=True)
    if sys.stderr.isatty():
        return tqdm(mininterval=0.1, **kw)
    return _log_bar_class()(mininterval=LOG_INTERVAL, maxinterval=LOG_INTERVAL, **kw)


@functools.cache
def _log_bar_class():
    from tqdm import tqdm

    class LogBar(tqdm):
        """tqdm throttles ``update``; these three redraw at once by default, so in a log they would add a line
        each: here they wait for the next throttled redraw."""

        def set_description(self, desc=None, refresh=True):
            super().set_description(desc, refresh=False)

        def set_postfix_str(self, s="", refresh=True):
            super().set_postfix_str(s, refresh=False)

        def set_postfix(self, ordered_dict=None, refresh=True, **kwargs):
            super().set_postfix(ordered_dict, refresh=False, **kwargs)

        def write(self, s, file=None, end="\n", nolock=False):  # an instance method: no clear + redraw of the bar
            out = file if file is not None else sys.stdout
            out.write(s + end)
            out.flush()

    return LogBar
