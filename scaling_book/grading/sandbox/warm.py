"""The warm sandbox, the grading process's side: one long-lived server per grading thread, inside one
bubblewrap sandbox, that forks a fresh child per submission (``scaling_book.grading.sandbox.server`` is
the program it runs and says what the child gets and what the server cleans up).

A submission in a warm sandbox costs a ``fork`` of an idle interpreter instead of a new sandbox and a
new interpreter. The sandbox is the per-submission one's (``isolation.bwrap_command``): the same
read-only allowlisted root, hidden project tree, no network, private PID and IPC namespaces, dropped
capabilities, rlimits and uid. What submissions share is the sandbox, one after another, never at
once: between two of them every process of the sandbox is killed and ``/tmp`` is emptied.

The sandbox is replaced (its server killed with everything in it; the next submission starts a new
one) after ``MAX_SUBMISSIONS`` submissions, after a timeout or an output flood, and after any anomaly
the server reports (something outlived the cleanup). When a server cannot start, or dies in a way no
submission can cause, the submission runs in a per-submission sandbox instead (``run`` returns None).

``SCALING_BOOK_WARM_SANDBOX=0`` turns warm sandboxes off (every submission then gets its own bwrap).
"""

from __future__ import annotations

import array
import fcntl
import os
import selectors
import signal
import socket
import subprocess
import threading
import time

from scaling_book.grading.sandbox.isolation import (
    sandbox_seccomp_fd,
    warm_bwrap_command,
)
from scaling_book.grading.sandbox.process import read_available, sandbox_init_pidfd
from scaling_book.grading.sandbox.protocol import SandboxResult, parse_report

#: Submissions one server runs before it is replaced.
MAX_SUBMISSIONS = 500
#: Seconds a new server has to say ``ready``.
START_TIMEOUT_S = 20.0
#: Seconds to wait for a killed sandbox's PID namespace to be gone.
TEARDOWN_TIMEOUT_S = 10.0


def warm_enabled() -> bool:
    """Whether submissions in bwrap mode go to a warm sandbox (``SCALING_BOOK_WARM_SANDBOX`` is not
    ``0``/``false``/``no``/``off``)."""
    return os.environ.get("SCALING_BOOK_WARM_SANDBOX", "1").strip().lower() not in ("0", "false", "no", "off")


class WarmSandbox:
    """One server in one bwrap sandbox, used by one thread at a time (see the module doc).

    ``key``: what the sandbox's command line depends on (interpreter, uid drop, hidden directories);
    ``served``: submissions run so far; ``alive``: whether the server is still usable.
    """

    def __init__(self, python: str, drop_uid: bool, key: tuple):
        self.python, self.drop_uid, self.key = python, drop_uid, key
        self.served = 0
        self.alive = False
        self.owner_pid = os.getpid()  # a forked grading process must not share this server
        self._proc: subprocess.Popen | None = None
        self._ctl: socket.socket | None = None
        self._init_pidfd: int | None = None

    def start(self) -> bool:
        """Start the server; False (and nothing left running) when it cannot start or say ready."""
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        info_read, info_write = os.pipe()
        filter_fd = sandbox_seccomp_fd()
        try:
            cmd = warm_bwrap_command(self.python, self.drop_uid, theirs.fileno(), filter_fd)
            if cmd is None:
                os.close(info_read)
                return False
            cmd[1:1] = ["--info-fd", str(info_write)]
            env = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8", "PYTHONHASHSEED": "0"}
            self._proc = subprocess.Popen(cmd, env=env, cwd="/", stdin=subprocess.DEVNULL,
                                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                          start_new_session=True, close_fds=True,
                                          pass_fds=(theirs.fileno(), info_write)
                                          + ((filter_fd,) if filter_fd is not None else ()))
        except OSError:
            os.close(info_read)
            return False
        finally:
            theirs.close()
            os.close(info_write)
            if filter_fd is not None:
                os.close(filter_fd)
        self._ctl = ours
        deadline = time.monotonic() + START_TIMEOUT_S
        try:
            self._init_pidfd = sandbox_init_pidfd(info_read, self._proc.pid, deadline)
        finally:
            os.close(info_read)
        ready = b""
        if self._init_pidfd is not None:
            ours.settimeout(max(0.0, deadline - time.monotonic()))
            try:
                ready = ours.recv(64)
            except OSError:
                ready = b""
            ours.settimeout(None)
        if ready != b"ready":
            self.close()
            return False
        self.alive = True
        return True

    def close(self) -> None:
        """Kill the server and everything in its sandbox, and wait until the PID namespace is gone."""
        self.alive = False
        if self._ctl is not None:
            self._ctl.close()
            self._ctl = None
        if self._init_pidfd is not None:
            try:
                signal.pidfd_send_signal(self._init_pidfd, signal.SIGKILL)
            except OSError:
                pass
            with selectors.DefaultSelector() as sel:
                sel.register(self._init_pidfd, selectors.EVENT_READ)
                sel.select(timeout=TEARDOWN_TIMEOUT_S)
            os.close(self._init_pidfd)
            self._init_pidfd = None
        if self._proc is not None:
            try:
                self._proc.kill()
            except OSError:
                pass
            try:
                self._proc.wait(timeout=TEARDOWN_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                pass
            self._proc = None

    def __del__(self) -> None:  # a grading thread ended: its sandbox goes with it
        if self.owner_pid == os.getpid():
            try:
                self.close()
            except Exception:
                pass

    def run(self, inputs: str, nonce: str, n_calls: int, timeout_s: float, start: float,
            stdout_cap: int, stderr_keep: int) -> SandboxResult | None:
        """Run one submission whose runner inputs are the literal ``inputs``; ``start``: the
        ``time.monotonic()`` the wall clock of ``timeout_s`` seconds counts from; ``stdout_cap`` bytes
        of stdout before the run is killed as a flood, ``stderr_keep`` bytes of stderr kept.

        Returns the result, or None when the server failed before or while running it in a way the
        submission cannot cause (the caller then runs it in a per-submission sandbox).
        """
        assert self._ctl is not None and self.alive
        memfd = os.memfd_create("scaling-book-inputs", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        try:
            data = inputs.encode("utf-8", "surrogatepass")
            while data:
                data = data[os.write(memfd, data):]
            os.lseek(memfd, 0, os.SEEK_SET)
            fcntl.fcntl(memfd, fcntl.F_ADD_SEALS,
                        fcntl.F_SEAL_SEAL | fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_WRITE)
            try:
                self._ctl.sendmsg([b"run"], [(socket.SOL_SOCKET, socket.SCM_RIGHTS,
                                              array.array("i", [memfd, out_w, err_w]))])
            except OSError:
                self.close()
                for fd in (out_r, err_r):
                    os.close(fd)
                return None
        finally:
            for fd in (memfd, out_w, err_w):
                os.close(fd)
        out, err = bytearray(), bytearray()
        done: bytes | None = None
        outcome = None  # "timeout" | "flood" | "died"
        ctl_fd = self._ctl.fileno()
        open_fds = {out_r, err_r}
        with selectors.DefaultSelector() as sel:
            for fd in (out_r, err_r):
                os.set_blocking(fd, False)
                sel.register(fd, selectors.EVENT_READ)
            sel.register(ctl_fd, selectors.EVENT_READ)
            deadline = start + timeout_s
            # Until the server says done, then until both pipes are at end of file (every writer is
            # dead by then, so this takes no time).
            while done is None or open_fds:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    outcome = "timeout"
                    break
                for key, _ in sel.select(timeout=remaining):
                    if key.fd == ctl_fd:
                        try:
                            done = self._ctl.recv(64)
                        except OSError:
                            done = b""
                        sel.unregister(ctl_fd)
                        if not done.startswith(b"done "):
                            outcome = "died"
                    elif not read_available(key.fd, out if key.fd == out_r else err,
                                        stdout_cap if key.fd == out_r else None):
                        sel.unregister(key.fd)
                        open_fds.discard(key.fd)
                    if len(err) > stderr_keep:
                        del err[: len(err) - stderr_keep]
                if outcome is None and len(out) > stdout_cap:
                    outcome = "flood"
                if outcome is not None:
                    break
        for fd in (out_r, err_r):
            os.close(fd)
        duration = time.monotonic() - start
        if outcome is not None:
            self.close()
            if outcome == "timeout":
                return SandboxResult("timeout", None, f"killed after the {timeout_s:g} s wall-clock timeout",
                                     duration, "bwrap")
            if outcome == "flood":
                return SandboxResult("error", None, f"stdout exceeded {stdout_cap} bytes; killed", duration,
                                     "bwrap")
            return None
        assert done is not None
        try:
            exit_code, _killed, anomaly = (int(x) for x in done.split()[1:4])
        except ValueError:
            self.close()
            return None
        self.served += 1
        if anomaly or self.served >= MAX_SUBMISSIONS:
            self.close()
        stderr_tail = bytes(err[-stderr_keep:]).decode("utf-8", "replace").strip()
        return parse_report(bytes(out), nonce, n_calls, exit_code, stderr_tail, duration, "bwrap")


_local = threading.local()
_start_failed = False


def warm_sandbox(python: str, drop_uid: bool) -> WarmSandbox | None:
    """This thread's warm sandbox for ``python`` and ``drop_uid``, started when needed; None when warm
    sandboxes are off or cannot start here (then they are not tried again in this process)."""
    global _start_failed
    if _start_failed or not warm_enabled():
        return None
    key = (python, drop_uid, os.getcwd(), os.environ.get("HOME", ""), os.environ.get("SCALING_BOOK_EXPORT", ""))
    box: WarmSandbox | None = getattr(_local, "box", None)
    if box is not None and box.owner_pid != os.getpid():
        box = None  # inherited through fork: the parent process owns that server
    if box is not None and box.alive and box.key == key:
        return box
    if box is not None:
        box.close()
    box = WarmSandbox(python, drop_uid, key)
    if not box.start():
        _start_failed = True
        _local.box = None
        return None
    _local.box = box
    return box


def close_this_thread() -> None:
    """Close this thread's warm sandbox, if any (a new one starts with the next submission)."""
    box = getattr(_local, "box", None)
    if box is not None:
        box.close()
        _local.box = None
