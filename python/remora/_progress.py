"""``progress=`` on long calls: ``False`` (nothing), ``True`` (a bar on stderr: tqdm's when it is
installed, else one line redrawn in place on a terminal and a line every few seconds
elsewhere), or a callable that gets each step as a dict.

What a step holds depends on the call (see each call's docstring); every step has ``done`` and
``total`` (None when the total is not known), which is what the bar shows.
"""
from __future__ import annotations

import importlib
import sys
import time
from typing import Any, Callable, Dict, Optional, Union

ProgressArg = Union[bool, Callable[[Dict[str, Any]], Any]]

# A plain line at most this often when stderr is not a terminal (logs, CI, notebooks).
_LINE_EVERY_S = 5.0


class _Bar:
    """The bar ``progress=True`` draws."""

    def __init__(self, what: str, total: Optional[int]) -> None:
        self.what, self.total, self.done = what, total, 0
        self.start = time.monotonic()
        self.last = 0.0
        self.tqdm: Any = None
        try:
            # Optional (the bar a notebook user knows), so looked up at run time only.
            tqdm = importlib.import_module("tqdm")
            self.tqdm = tqdm.tqdm(total=total, desc=what, unit="")
        except ImportError:
            self.tty = sys.stderr.isatty()

    def update(self, done: int, total: Optional[int], extra: str) -> None:
        if total is not None:
            self.total = total
        if self.tqdm is not None:
            self.tqdm.total = self.total
            self.tqdm.update(done - self.done)
            if extra:
                self.tqdm.set_postfix_str(extra, refresh=False)
            self.done = done
            return
        self.done = done
        now = time.monotonic()
        if not self.tty and now - self.last < _LINE_EVERY_S:
            return
        self.last = now
        of = f"/{self.total}" if self.total is not None else ""
        line = f"{self.what}: {done}{of} in {now - self.start:.1f} s{'; ' + extra if extra else ''}"
        sys.stderr.write(("\r" + line + "\x1b[K") if self.tty else line + "\n")
        sys.stderr.flush()

    def close(self) -> None:
        if self.tqdm is not None:
            self.tqdm.close()
        elif self.tty:
            sys.stderr.write("\n")
            sys.stderr.flush()


class Progress:
    """Turns a ``progress=`` argument into one ``step(**fields)`` call per step and a ``close()``;
    an exception from a callable stops the calls and is kept in ``failed`` for the caller to
    raise once its work has ended."""

    def __init__(self, progress: ProgressArg, what: str, total: Optional[int] = None) -> None:
        if isinstance(progress, bool):
            self.call: Optional[Callable[[Dict[str, Any]], Any]] = None
            self.bar: Optional[_Bar] = _Bar(what, total) if progress else None
        elif callable(progress):
            self.call, self.bar = progress, None
        else:
            raise TypeError(f"progress must be a bool or a callable, not {type(progress).__name__}")
        self.failed: Optional[BaseException] = None

    @property
    def active(self) -> bool:
        return self.bar is not None or self.call is not None

    def step(self, done: int, total: Optional[int], extra: str = "", **fields: Any) -> None:
        if self.bar is not None:
            self.bar.update(done, total, extra)
        elif self.call is not None and self.failed is None:
            try:
                self.call({"done": done, "total": total, **fields})
            except Exception as e:  # kept: raised by the caller when its work has ended
                self.failed = e

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None
