"""Read ahead in a second process: a reader's own work (decoding, auditing) runs beside the
check instead of before it, on a second CPU.

`ReadAhead(produce, item_type)` forks a child that runs the iterator `produce()` and sends
each item down a pipe (msgpack, length-prefixed); iterating the `ReadAhead` yields the items
here, decoded into `item_type`. The child only ever runs `produce` and exits with `os._exit`
(no atexit, no inherited buffers flushed); it never imports, so a lock another thread held at
the fork could not stop it, and it forks only when this process runs one thread anyway.

The parent trusts no more than it would trust the same code run in-process, and relies on
nothing the child did not finish: a frame is yielded only when it arrived whole, and whatever
ends the child (its iterator's end, an exception in it, a kill) simply ends the iteration. The
caller then goes on itself from the last item it received, so an early end costs time, never a
verdict; a child that could not be started (no process or descriptor left) gives no items.
`close` (also on leaving a `with` block, however it is left) kills the child if it is still
running and reaps it: a checker that stops at a violation does not wait for the rest.

`available()` says whether this process may read ahead: Linux (where a fork without exec is
safe for such a child; macOS, for one, warns against it), at least two CPUs to run on, one
thread in this process, and `KVCLAIMS_READ_AHEAD` not set to `0`.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from typing import IO, Any, Generic, TypeVar

import msgspec

Item = TypeVar("Item")

ENVIRONMENT = "KVCLAIMS_READ_AHEAD"
"""Set to `0` to read in this process only."""

MAX_FRAME_BYTES = 1 << 26
"""A frame larger than this (64 MiB; a 64 KiB chunk's events take about 50 KiB) ends the read
ahead: the parent never allocates by a length it did not expect."""

PIPE_BYTES = 1 << 20
"""The pipe's capacity, asked for on Linux (the default 64 KiB makes the child wait often)."""

_LENGTH = 4


def available() -> bool:
    """Whether this process may fork a reader: see the module docstring."""
    if os.environ.get(ENVIRONMENT) == "0" or not sys.platform.startswith("linux"):
        return False
    return len(os.sched_getaffinity(0)) >= 2 and threading.active_count() == 1


class ReadAhead(Generic[Item]):
    """The items of `produce()`, made in a forked child process (see the module docstring)."""

    def __init__(self, produce: Callable[[], Iterator[Any]], item_type: type[Item]) -> None:
        self._decode = msgspec.msgpack.Decoder(item_type).decode
        self._pipe: IO[bytes] | None = None
        self._running = False
        self._pid = -1
        try:
            read_end, write_end = os.pipe()
        except OSError:  # no descriptor left: no child, no items (the caller reads itself)
            return
        _widen(write_end)
        try:
            self._pid = os.fork()
        except OSError:  # no process left: as above
            os.close(read_end)
            os.close(write_end)
            return
        if self._pid == 0:  # the child: never returns
            os.close(read_end)
            _serve(produce, write_end)
        os.close(write_end)
        self._pipe = open(read_end, "rb", buffering=PIPE_BYTES)  # closed by close()
        self._running = True

    def __iter__(self) -> Iterator[Item]:
        if self._pipe is None:
            return
        read = self._pipe.read
        while True:
            head = read(_LENGTH)
            if len(head) < _LENGTH:
                return
            size = int.from_bytes(head, "little")
            if size > MAX_FRAME_BYTES:
                return
            frame = read(size)
            if len(frame) < size:  # the child ended mid-frame: the frame never happened
                return
            yield self._decode(frame)

    def close(self) -> None:
        """Stop the child if it still runs, reap it, close the pipe (idempotent)."""
        if self._running:
            self._running = False
            try:
                os.kill(self._pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            try:
                os.waitpid(self._pid, 0)
            except ChildProcessError:  # reaped by the system already (SIGCHLD ignored)
                pass
            if self._pipe is not None:
                self._pipe.close()

    def __enter__(self) -> ReadAhead[Item]:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _serve(produce: Callable[[], Iterator[Any]], write_end: int) -> None:
    """The child's whole life: send every item, then exit without running anything else."""
    status = 1
    try:
        encode = msgspec.msgpack.Encoder().encode
        for item in produce():
            frame = encode(item)
            _write_all(write_end, len(frame).to_bytes(_LENGTH, "little") + frame)
        status = 0
    except BaseException:  # any end of the child is the parent's cue to go on
        pass
    finally:
        os._exit(status)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _widen(fd: int) -> None:
    try:
        import fcntl  # Linux's F_SETPIPE_SZ; elsewhere the default pipe is kept

        fcntl.fcntl(fd, fcntl.F_SETPIPE_SZ, PIPE_BYTES)
    except (ImportError, AttributeError, OSError):
        pass
