"""Closing the engine's trace on every shutdown path the engine process can see.

vLLM's engine core ends in one of these ways, and each must end the trace with `trace_closed`
(a trace without it is truncated for refinement):

- engine shutdown (`Scheduler.shutdown`, also what vLLM runs after SIGTERM / SIGINT when it
  is given time to: the API server's `--shutdown-timeout`): reason `engine_shutdown`, or the
  signal that started it (`SIGTERM`, `SIGINT`), recorded by a handler chained in front of
  whatever handler the process had;
- a signal that reached vLLM's engine-core handler (which always stops the engine: it serves
  what is in flight, then tears down): `engine_stopping()` turns true and the callbacks given
  to `on_engine_stop` run right after vLLM's handler, so the scheduler closes the trace with the
  signal's name as soon as the engine has no request left (at once when it is idle), before
  vLLM's teardown (worker exit, garbage collection, or the fatal-error path a worker killed by
  the same Ctrl-C sends it down), which can outlast the server's shutdown timeout;
- a signal whose previous handling was the default (an in-process engine): the handler
  records the signal and raises `SystemExit`, so the interpreter unwinds and `atexit` closes
  the trace with the signal's name;
- interpreter exit with the trace still open: `atexit`.

A SIGKILL (vLLM's API server sends one right after SIGTERM when `--shutdown-timeout` is 0)
cannot be seen: that trace stays truncated, which refinement reports as inconclusive.
The handlers record and re-dispatch; the only thing they write is the early close of an idle
engine, on the engine's own thread (the one the handler interrupts) and only while it is
outside the binding (`ClaimArbiter.stop_when_idle`).
"""

from __future__ import annotations

import atexit
import signal
import threading
import weakref
from types import FrameType
from typing import Any, Protocol

from kvclaims.spec.trace import CloseReason

_SIGNALS: dict[int, CloseReason] = {
    signal.SIGTERM: CloseReason.SIGTERM,
    signal.SIGINT: CloseReason.SIGINT,
}
ENGINE_CORE_MODULE = "vllm.v1.engine.core"
"""Where vLLM's engine-core process defines its termination handler (`run_engine_core`)."""


class Closable(Protocol):
    def close(self, reason: CloseReason = CloseReason.closed) -> None: ...


class _Watch:
    """The process-wide record: open sinks (weakly held) and the signal seen, if any."""

    def __init__(self) -> None:
        self.sinks: weakref.WeakSet[Any] = weakref.WeakSet()
        self.signal: CloseReason | None = None
        self.engine_stopping = False
        self.stoppers: list[weakref.WeakMethod[Any]] = []
        self.installed = False


_WATCH = _Watch()


def guard(sink: Closable) -> None:
    """Close `sink` at interpreter exit if nobody closed it before, and record termination
    signals (installed once per process; signal handlers only from the main thread)."""
    _WATCH.sinks.add(sink)
    if _WATCH.installed:
        return
    _WATCH.installed = True
    atexit.register(_close_open_sinks)
    if threading.current_thread() is threading.main_thread():
        for number in _SIGNALS:
            previous = signal.getsignal(number)
            signal.signal(number, _chained(previous))


def reason(default: CloseReason) -> CloseReason:
    """The reason to write when closing now: the termination signal seen, else `default`."""
    return _WATCH.signal or default


def engine_stopping() -> bool:
    """Whether a termination signal reached vLLM's engine-core handler: the engine then serves
    nothing new, and once it is idle nothing more happens to its claims."""
    return _WATCH.engine_stopping


def on_engine_stop(callback: Any) -> None:
    """Call the bound method `callback` (weakly held) from the termination-signal handler, after
    vLLM's, when the signal reached vLLM's engine-core handler. It runs on the engine's thread
    between two of its bytecodes: it must do nothing unless that thread is outside the
    binding."""
    live = [reference for reference in _WATCH.stoppers if reference() is not None]
    _WATCH.stoppers = [*live, weakref.WeakMethod(callback)]  # replaced whole: the handler iterates


def _chained(previous: Any) -> Any:
    stops_engine = getattr(previous, "__module__", None) == ENGINE_CORE_MODULE

    def handler(number: int, frame: FrameType | None) -> None:
        # The first signal is the one that started the shutdown (Ctrl-C reaches every process
        # of the group; vLLM's API server then sends the engine core SIGTERM as well).
        _WATCH.signal = _WATCH.signal or _SIGNALS[number]
        _WATCH.engine_stopping |= stops_engine
        if callable(previous):
            previous(number, frame)
        elif previous == signal.SIG_DFL:
            raise SystemExit(128 + number)
        if stops_engine:
            for reference in list(_WATCH.stoppers):
                stopper = reference()
                if stopper is None:
                    continue
                try:
                    stopper()
                except Exception:  # the engine's own shutdown still closes the trace
                    pass

    return handler


def _close_open_sinks() -> None:
    for sink in list(_WATCH.sinks):
        sink.close(reason(CloseReason.atexit))
