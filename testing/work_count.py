"""Work counted, not timed: the lines of chosen modules that a call runs. The same call counts the
same on any machine under any load, so a test can compare two input sizes by it.

    small = lines_run(lambda: step_ingredients(step, names), [ingredients])
    large = lines_run(lambda: step_ingredients(step * 8, names), [ingredients], limit=8 * small)
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable
from types import ModuleType


class _Stop(Exception):
    """Raised from the trace function to end a call past its limit."""


def lines_run(work: Callable[[], object], modules: Iterable[ModuleType], limit: int = 0) -> int:
    """Lines of `modules` that `work()` runs; past `limit` (when given) it is stopped and limit + 1
    returned, so a call that does far too much fails its test fast."""
    files = {module.__file__ for module in modules}
    count = 0

    def line(frame, event, arg):
        nonlocal count
        if event == "line":
            count += 1
            if limit and count > limit:
                raise _Stop
        return line

    def call(frame, event, arg):
        return line if frame.f_code.co_filename in files else None

    previous = sys.gettrace()
    sys.settrace(call)
    try:
        work()
    except _Stop:
        return limit + 1
    finally:
        sys.settrace(previous)
    return count
