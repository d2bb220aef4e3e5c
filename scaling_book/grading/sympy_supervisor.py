"""The formula worker's process control: start, request with a wall-clock bound, kill and replace.

``scaling_book.grading.formula`` owns one ``_Worker``; the worker program is ``sympy_worker.py``.
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

__all__ = ["FORMULA_MEMORY_HEADROOM_BYTES", "FormulaError", "FormulaTimeout"]

#: Bytes of address space the worker may grow by after importing sympy.
FORMULA_MEMORY_HEADROOM_BYTES = 512 * 1024 * 1024


class FormulaError(ValueError):
    """An expression failed to normalise, vet or parse; the message says why."""


class FormulaTimeout(FormulaError):
    """The worker did not answer within the time bound (it has been killed)."""


_WORKER_PATH = Path(__file__).with_name("sympy_worker.py")


class _Worker:
    """One persistent sympy worker process, used under a lock, killed and replaced on overrun."""

    def __init__(self, headroom_bytes: int) -> None:
        self._headroom = headroom_bytes
        self._lock = threading.Lock()
        self._proc: subprocess.Popen | None = None
        self._owner_pid = 0
        self._buf = b""
        self.restarts = 0

    def _start(self) -> None:
        # -P: do not put this directory (which has a code.py) in front of the standard library.
        self._proc = subprocess.Popen(
            [sys.executable, "-P", "-u", str(_WORKER_PATH), str(self._headroom)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
            start_new_session=True, close_fds=True,
        )
        self._owner_pid = os.getpid()
        self._buf = b""
        ready = self._read_line(deadline=time.monotonic() + 120.0)
        if ready is None or not json.loads(ready).get("ready"):
            self._kill()
            raise FormulaError("the formula worker did not start")

    def _alive(self) -> bool:
        return (self._proc is not None and self._proc.poll() is None and self._owner_pid == os.getpid())

    def _kill(self) -> None:
        proc, self._proc = self._proc, None
        if proc is None:
            return
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except OSError:
            pass
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass
        for stream in (proc.stdin, proc.stdout):
            try:
                stream.close()  # type: ignore[union-attr]
            except OSError:
                pass
        self.restarts += 1

    def _read_line(self, deadline: float) -> bytes | None:
        assert self._proc is not None and self._proc.stdout is not None
        fd = self._proc.stdout.fileno()
        while b"\n" not in self._buf:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return None
            ready, _, _ = select.select([fd], [], [], remaining)
            if not ready:
                return None
            chunk = os.read(fd, 65536)
            if not chunk:
                return None
            self._buf += chunk
        line, self._buf = self._buf.split(b"\n", 1)
        return line

    def request(self, payload: dict[str, Any], timeout_s: float) -> dict[str, Any]:
        with self._lock:
            if not self._alive():
                if self._proc is not None:
                    self._kill()
                self._start()
            assert self._proc is not None and self._proc.stdin is not None
            try:
                self._proc.stdin.write((json.dumps(payload) + "\n").encode())
                self._proc.stdin.flush()
            except OSError:
                self._kill()
                raise FormulaError("the formula worker died; it will be restarted") from None
            line = self._read_line(deadline=time.monotonic() + timeout_s)
            if line is None:
                died = self._proc.poll() is not None
                self._kill()
                if died:
                    raise FormulaError("the formula worker died (memory bound?); it will be restarted")
                raise FormulaTimeout(f"formula evaluation exceeded {timeout_s:g} s and was killed")
            return json.loads(line)

    def close(self) -> None:
        with self._lock:
            if self._proc is not None:
                self._kill()


