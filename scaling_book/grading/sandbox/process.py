"""Process control for one submission: start the child, read its output with caps, enforce the wall
clock, and kill everything the run started. The one place in the project that knows about processes;
see ``scaling_book.grading.sandbox`` for the whole contract.
"""

from __future__ import annotations

import os
import re
import secrets
import selectors
import shutil
import signal
import subprocess
import tempfile
import time

from scaling_book.grading.sandbox.isolation import (
    bwrap_command,
    child_python,
    fresh_uid,
    isolation_mode,
    sandbox_seccomp_fd,
)
from scaling_book.grading.sandbox.protocol import (
    RUNNER,
    SandboxResult,
    parse_report,
    py_literal,
)

#: Resource limits applied to every submission (name -> value); bytes, seconds or counts.
LIMITS: dict[str, int] = {
    "RLIMIT_AS": 512 * 1024 * 1024,  # bytes of address space
    "RLIMIT_CPU": 30,  # seconds of CPU time
    "RLIMIT_NOFILE": 64,  # open file descriptors
    "RLIMIT_NPROC": 64,  # processes of the run's uid
    "RLIMIT_FSIZE": 8 * 1024 * 1024,  # bytes per written file
    "RLIMIT_MSGQUEUE": 0,  # bytes of POSIX message queues: none (a queue would outlive the run)
    "RLIMIT_CORE": 0,  # bytes of core dump: none
}

#: Bytes of child stdout read before the run is killed as an output flood.
STDOUT_CAP_BYTES = 1024 * 1024
#: Bytes of child stderr kept (the tail) for the result's ``detail``.
STDERR_KEEP_BYTES = 4096



# --------------------------------------------------------------------------------------------------
# Killing what a run leaves behind
# --------------------------------------------------------------------------------------------------


def _pids() -> list[int]:
    try:
        return [int(name) for name in os.listdir("/proc") if name.isdigit()]
    except OSError:
        return []


def _kill_by(predicate, rounds: int = 50) -> int:
    """SIGKILL every process matching ``predicate(pid)`` until none is left; returns kills sent."""
    me = os.getpid()
    sent = 0
    for _ in range(rounds):
        found = False
        for pid in _pids():
            if pid == me:
                continue
            try:
                if predicate(pid):
                    found = True
                    os.kill(pid, signal.SIGKILL)
                    sent += 1
            except (OSError, ValueError):
                continue
        if not found:
            break
        time.sleep(0.002)
    return sent


def _uid_of(pid: int) -> int:
    return os.stat(f"/proc/{pid}").st_uid


def _has_token(pid: int, token: bytes) -> bool:
    with open(f"/proc/{pid}/environ", "rb") as f:
        return token in f.read()


#: World-writable directories a per-run uid can leave files in (rlimit mode); /dev/shm is memory.
_SHARED_WRITABLE = ("/tmp", "/var/tmp", "/dev/shm")


def _remove_files_of(uid: int) -> None:
    """Delete what the run's uid (fresh, so everything it owns is this run's) left in the shared
    world-writable directories: without this, 8 MB files written to /dev/shm outlive the run in RAM."""
    for directory in _SHARED_WRITABLE:
        try:
            entries = list(os.scandir(directory))
        except OSError:
            continue
        for entry in entries:
            try:
                if entry.stat(follow_symlinks=False).st_uid != uid:
                    continue
                if entry.is_dir(follow_symlinks=False):
                    shutil.rmtree(entry.path, ignore_errors=True)
                else:
                    os.unlink(entry.path)
            except OSError:
                continue


#: Seconds to wait for a run's PID namespace to be torn down after its init was killed (it returns as
#: soon as the kernel has reaped every process in it; the bound only guards against a hung kernel).
NAMESPACE_TEARDOWN_S = 10.0


def sandbox_init_pidfd(info_read: int, bwrap_pid: int, deadline: float) -> int | None:
    """A pidfd of the sandbox's init (PID 1 of the run's PID namespace), from bwrap's ``--info-fd``
    report (``{"child-pid": N, ...}``), or None. Checked to be a child of ``bwrap_pid`` once opened,
    so a recycled pid is never taken for it."""
    data = bytearray()
    with selectors.DefaultSelector() as sel:
        sel.register(info_read, selectors.EVENT_READ)
        while time.monotonic() < deadline:
            if not sel.select(timeout=max(0.0, deadline - time.monotonic())):
                break
            chunk = os.read(info_read, 4096)
            if not chunk:
                break
            data += chunk
    match = re.search(rb'"child-pid"\s*:\s*(\d+)', data)
    if match is None:
        return None
    pid = int(match.group(1))
    try:
        pidfd = os.pidfd_open(pid)
    except OSError:
        return None  # already gone
    try:
        with open(f"/proc/{pid}/status", "rb") as f:
            ppid = next((line.split()[1] for line in f if line.startswith(b"PPid:")), b"")
    except OSError:
        ppid = b""
    if ppid != str(bwrap_pid).encode():
        os.close(pidfd)
        return None
    return pidfd


def _cleanup(proc: subprocess.Popen, uid: int | None, token: str, mode: str, init_pidfd: int | None) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except OSError:
        pass
    if mode == "bwrap":
        # bwrap exits as soon as the submission's process does, while the namespace's init lives on
        # with any background processes (until --die-with-parent's signal reaches it, asynchronously).
        # Kill the init ourselves and wait until its pidfd reports the exit: the kernel reaps every
        # other process of the namespace before its init can exit, so then nothing of the run is left.
        if init_pidfd is not None:
            try:
                signal.pidfd_send_signal(init_pidfd, signal.SIGKILL)
            except OSError:
                pass  # already exited
            with selectors.DefaultSelector() as sel:
                sel.register(init_pidfd, selectors.EVENT_READ)
                sel.select(timeout=NAMESPACE_TEARDOWN_S)
    elif uid is not None:
        _kill_by(lambda pid: _uid_of(pid) == uid)
        _remove_files_of(uid)
    else:
        needle = f"SCALING_BOOK_RUN={token}".encode()
        _kill_by(lambda pid: _has_token(pid, needle))
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


# --------------------------------------------------------------------------------------------------
# run_function
# --------------------------------------------------------------------------------------------------


def read_available(fd: int, into: bytearray, cap: int | None) -> bool:
    """Read what is available on a non-blocking fd. Returns False on EOF."""
    while True:
        try:
            chunk = os.read(fd, 65536)
        except BlockingIOError:
            return True
        except OSError:
            return False
        if not chunk:
            return False
        into += chunk
        if cap is not None and len(into) > cap:
            return True


def run_function(source: str, function_name: str, args_list: list[list], timeout_s: float,
                 *, mode: str | None = None) -> SandboxResult:
    """Run ``source`` once in a fresh child and call ``function_name(*args)`` for every args list.

    ``args_list``: plain-JSON argument lists, one per test case. ``timeout_s``: wall-clock seconds for
    the whole run (all calls), after which everything the run started is killed. ``mode``: force
    ``"bwrap"`` or ``"rlimit"`` (default: ``isolation_mode()``). In bwrap mode the run goes to this
    thread's warm sandbox (``scaling_book.grading.sandbox.warm``) unless warm sandboxes are off or
    cannot start here, then to a sandbox of its own. Never raises for anything the submission does;
    the outcome is in ``status`` and ``detail``.
    """
    mode = mode or isolation_mode()
    if mode not in ("bwrap", "rlimit"):
        raise ValueError(f"unknown isolation mode {mode!r}; expected 'bwrap' or 'rlimit'")
    root = os.geteuid() == 0
    python, drop_uid = child_python(mode, root)
    uid = fresh_uid() if drop_uid else None
    token = secrets.token_hex(12)
    nonce = secrets.token_hex(16)

    # Under bwrap the work directory must sit directly in /tmp (which the sandbox replaces).
    workdir = tempfile.mkdtemp(prefix="scaling-book-run-",
                               dir="/tmp" if mode == "bwrap" and os.path.isdir("/tmp") else None)
    start = time.monotonic()
    proc: subprocess.Popen | None = None
    try:
        spec = {
            "function": function_name,
            "args": [py_literal(list(args)) for args in args_list],
            "limits": LIMITS,
            "uid": uid,
            "nonce": nonce,
            "source": source,
            "workdir": workdir,
        }
        if mode == "bwrap":
            from scaling_book.grading.sandbox.warm import warm_sandbox

            box = warm_sandbox(python, drop_uid)
            if box is not None:
                result = box.run(repr(spec), nonce, len(args_list), timeout_s, start,
                                 STDOUT_CAP_BYTES, STDERR_KEEP_BYTES)
                if result is not None:
                    return result
                start = time.monotonic()  # the server failed, not the submission: a sandbox of its own
        inputs = os.path.join(workdir, "inputs.py")
        with open(inputs, "w", encoding="utf-8", errors="surrogatepass") as f:
            f.write(repr(spec))
        if uid is not None:
            # The directory and file belong to the run's uid; under bwrap the runner starts as a
            # capability-less root, so it must be able to traverse the directory and read the file.
            os.chown(inputs, uid, uid)
            os.chmod(inputs, 0o644)
            os.chown(workdir, uid, uid)
            os.chmod(workdir, 0o711)
        env = {
            "PATH": "/usr/bin:/bin",
            "LANG": "C.UTF-8",
            "LC_ALL": "C.UTF-8",
            "HOME": workdir,
            "TMPDIR": workdir,
            "PYTHONHASHSEED": "0",
            "SCALING_BOOK_RUN": token,
        }
        inputs_fd = info_read = info_write = filter_fd = None
        pass_fds: tuple[int, ...] = ()
        if mode == "bwrap":
            inputs_fd = os.open(inputs, os.O_RDONLY)
            info_read, info_write = os.pipe()
            filter_fd = sandbox_seccomp_fd()
            cmd = bwrap_command(workdir, python, drop_uid, inputs_fd, filter_fd)
            cmd[1:1] = ["--info-fd", str(info_write)]
            pass_fds = (inputs_fd, info_write) + ((filter_fd,) if filter_fd is not None else ())
        else:
            cmd = [python, "-I", "-S", "-c", RUNNER]
        try:
            proc = subprocess.Popen(cmd, cwd=workdir, env=env, stdin=subprocess.DEVNULL,
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                    start_new_session=True, close_fds=True, pass_fds=pass_fds)
        except OSError as e:
            if info_read is not None:
                os.close(info_read)
            return SandboxResult("error", None, f"could not start the child: {e}",
                                 time.monotonic() - start, mode)
        finally:
            for fd in (inputs_fd, info_write, filter_fd):
                if fd is not None:
                    os.close(fd)
        init_pidfd = None
        if info_read is not None:
            try:
                init_pidfd = sandbox_init_pidfd(info_read, proc.pid, start + timeout_s)
            finally:
                os.close(info_read)

        out, err = bytearray(), bytearray()
        timed_out = flooded = False
        sel = selectors.DefaultSelector()
        for stream in (proc.stdout, proc.stderr):
            assert stream is not None
            os.set_blocking(stream.fileno(), False)
            sel.register(stream.fileno(), selectors.EVENT_READ)
        pidfd = None
        try:
            pidfd = os.pidfd_open(proc.pid)
            sel.register(pidfd, selectors.EVENT_READ)
        except (AttributeError, OSError):
            pidfd = None
        out_fd, err_fd = proc.stdout.fileno(), proc.stderr.fileno()
        open_fds = {out_fd, err_fd}
        deadline = start + timeout_s
        try:
            while True:
                if proc.poll() is not None:
                    break
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    timed_out = True
                    break
                wait = remaining if pidfd is not None else min(remaining, 0.01)
                for key, _ in sel.select(timeout=wait):
                    fd = key.fd
                    if fd == out_fd:
                        if not read_available(fd, out, STDOUT_CAP_BYTES):
                            sel.unregister(fd)
                            open_fds.discard(fd)
                    elif fd == err_fd:
                        if not read_available(fd, err, None):
                            sel.unregister(fd)
                            open_fds.discard(fd)
                        if len(err) > STDERR_KEEP_BYTES:
                            del err[: len(err) - STDERR_KEEP_BYTES]
                if len(out) > STDOUT_CAP_BYTES:
                    flooded = True
                    break
            if not timed_out and not flooded:
                # The child has exited: take what is buffered (a background process may still
                # hold the pipe open, so do not wait for EOF).
                if out_fd in open_fds:
                    read_available(out_fd, out, STDOUT_CAP_BYTES)
                if err_fd in open_fds:
                    read_available(err_fd, err, None)
                if len(out) > STDOUT_CAP_BYTES:
                    flooded = True
        finally:
            sel.close()
            if pidfd is not None:
                os.close(pidfd)
            _cleanup(proc, uid, token, mode, init_pidfd)
            if init_pidfd is not None:
                os.close(init_pidfd)
            proc.stdout.close()
            proc.stderr.close()
        duration = time.monotonic() - start
        stderr_tail = bytes(err[-STDERR_KEEP_BYTES:]).decode("utf-8", "replace").strip()
        if timed_out:
            return SandboxResult("timeout", None, f"killed after the {timeout_s:g} s wall-clock timeout",
                                 duration, mode)
        if flooded:
            return SandboxResult("error", None,
                                 f"stdout exceeded {STDOUT_CAP_BYTES} bytes; killed", duration, mode)
        return parse_report(bytes(out), nonce, len(args_list), proc.returncode, stderr_tail,
                             duration, mode)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
