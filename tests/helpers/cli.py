"""The CLI's user-error contract, checked the same way by every CLI test file."""


def assert_one_line_error(cap, flag: str, phrase: str) -> str:
    """``cap`` (capsys output) holds exactly one error line (after any model-load progress bars) that names
    ``flag`` and says ``phrase``, and no traceback. Returns the line."""
    lines = [ln for ln in cap.err.strip().splitlines() if ln.strip()]
    progress_bars = [ln for ln in lines[:-1] if ln.startswith("loading ")]  # generate's model load
    assert len(lines) == 1 + len(progress_bars), cap.err
    line = lines[-1]
    assert "error: " in line and flag in line and phrase in line, line
    assert "Traceback" not in cap.err + cap.out
    return line
