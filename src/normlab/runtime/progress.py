"""Progress bars for long work, drawn on the terminal and never in a notebook's output.

Inside a papermill kernel, `sys.stdout`/`sys.stderr` are captured into the
executed notebook (and so into the rendered book), while `sys.__stderr__` is
the kernel process's own stderr, inherited from the terminal that ran
`make book`. Bars go there. Worker processes of `normlab.runtime.parallel` set
NORMLAB_NO_PROGRESS so that only the parent's bar counts finished runs.
"""

from __future__ import annotations

import os
import sys


def progress_disabled() -> bool:
    return os.environ.get("NORMLAB_NO_PROGRESS", "") not in ("", "0")


def terminal_progress(iterable=None, **kwargs):
    """`tqdm` on the terminal's stderr; a pass-through when tqdm is absent or progress is disabled."""
    try:
        from tqdm import tqdm
    except ImportError:  # the core install has no tqdm; the bar is a convenience, not a requirement
        return _NoBar(iterable)
    stream = sys.__stderr__ or sys.stderr
    kwargs.setdefault("disable", progress_disabled() or stream is None)
    kwargs.setdefault("dynamic_ncols", True)
    return tqdm(iterable, file=stream, **kwargs)


class _NoBar:
    def __init__(self, iterable=None):
        self.iterable = iterable

    def __iter__(self):
        return iter(self.iterable)

    def update(self, n: int = 1) -> None:
        pass

    def set_postfix(self, *args, **kwargs) -> None:
        pass

    def close(self) -> None:
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()
