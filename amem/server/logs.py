"""Log lines on stderr that never block the server.

A host may start ``amem serve`` with a stderr pipe it never reads. Once the pipe is full
(64 KiB on Linux) a write to it blocks until someone reads, and a handler writing from
the event loop would stop the server with it: no answer, not even to ``ping``. So a
record is formatted where it is logged and queued, and a daemon thread writes the lines.
When the queue is full a line is dropped and counted, and the next line that fits is
preceded by a line saying how many were dropped.

stderr is not made non-blocking instead: its open file is often the host's own stderr,
and the mode would change for the host too.
"""

from __future__ import annotations

import contextlib
import logging
import os
import queue
import threading
import time

MAX_QUEUED_LINES = 1_000
"""Log lines waiting for stderr before more are dropped: room for a burst of warnings
while stderr is read, and a bound (about 2 MB: messages are cut at 2,000 characters) when
it is not."""
CLOSE_SECONDS = 1.0
"""How long closing the handler (at exit) waits for the queued lines to reach stderr: ample
when stderr is read; when it is not, the lines are lost rather than the exit held up."""


class StderrHandler(logging.Handler):
    """Writes formatted records to stderr from a thread; drops and counts what does not fit."""

    def __init__(self, fd: int = 2) -> None:
        super().__init__()
        self._fd = fd
        self._lines: queue.Queue[bytes | None] = queue.Queue(MAX_QUEUED_LINES)
        self._dropped = 0  # changed only under the handler's lock (emit holds it)
        self._writer = threading.Thread(target=self._write_lines, name="amem-stderr", daemon=True)
        self._writer.start()

    def emit(self, record: logging.LogRecord) -> None:
        try:
            text = self.format(record)
            if self._dropped:
                text = f"{self._dropped_notice()}\n{text}"
        except Exception:
            self.handleError(record)
            return
        try:
            self._lines.put_nowait(text.encode(errors="backslashreplace") + b"\n")
        except queue.Full:
            self._dropped += 1
        else:
            self._dropped = 0

    def close(self) -> None:
        """Let the queued lines, and the count of those dropped, reach stderr for up to
        ``CLOSE_SECONDS``; then stop."""
        deadline = time.monotonic() + CLOSE_SECONDS
        self.acquire()
        try:
            with contextlib.suppress(queue.Full):
                if self._dropped:
                    notice = self._dropped_notice().encode() + b"\n"
                    self._lines.put(notice, timeout=CLOSE_SECONDS)
                    self._dropped = 0
                self._lines.put(None, timeout=max(0.0, deadline - time.monotonic()))
                self._writer.join(max(0.0, deadline - time.monotonic()))
        finally:
            self.release()
        super().close()

    def _dropped_notice(self) -> str:
        message = "%d log lines dropped: stderr was full"
        notice = logging.LogRecord(
            "amem", logging.WARNING, __file__, 0, message, (self._dropped,), None
        )
        return self.format(notice)

    def _write_lines(self) -> None:
        while (line := self._lines.get()) is not None:
            view = memoryview(line)
            with contextlib.suppress(OSError):  # stderr closed: nobody to tell
                while view:
                    view = view[os.write(self._fd, view) :]
