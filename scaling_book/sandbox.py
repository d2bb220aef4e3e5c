"""Running untrusted Python: the one place in the project that knows about processes.

A submission is one Python source text defining one function. ``run_function`` runs it once, in one
fresh process, against every argument list of an item, and returns the values it computed. The child
is given the source and the *arguments only*: it never sees an expected value or a tolerance, so the
only way for a submission to earn a passing grade is to compute the right value. All comparisons happen
in the caller's process (``scaling_book.graders.code``).

What the child gets, in both isolation modes:

- a throwaway working directory (``submission.py``, ``runner.py``, ``inputs.json``), deleted after;
- ``python -I -S`` (no site-packages, no user site, no environment-driven imports), a minimal
  environment, stdin from ``/dev/null``, its own session and process group;
- ``RLIMIT_AS`` 512 MB, ``RLIMIT_CPU`` 30 s, ``RLIMIT_NOFILE`` 64, ``RLIMIT_NPROC`` 64, ``RLIMIT_FSIZE``
  8 MB, set by the runner on itself before the submission is compiled;
- a wall-clock timeout after which the whole process group is killed, and then every stray process
  the run left behind (see below);
- when the caller is root, a fresh unprivileged uid for the run (so ``RLIMIT_NPROC`` is enforced and
  every process of the run can be found and killed afterwards by its uid).

The child reports on exactly one stdout line that starts with a per-run random nonce; anything the
submission prints goes to ``/dev/null``; stdout is read with a byte cap. Values are plain JSON
(``bool``, ``int``, ``float``, ``str``, ``None``, lists, dicts with string keys): an object with a rigged
``__eq__`` cannot cross the process boundary.

Isolation modes (``isolation_mode()``):

- ``"bwrap"``: when bubblewrap is installed (Debian/Ubuntu package ``bubblewrap``) and works here, the
  child runs under ``bwrap`` with no network, a read-only root, a private ``/tmp``, a private PID
  namespace (every process of the run dies with it) and the working directory as the only writable
  path.
- ``"rlimit"``: otherwise, the limits above only. The child runs with the caller's filesystem and
  network. When the caller is not root, a background process that starts a new session and clears
  its environment can outlive the run; when it is root, the per-run uid catches it.

Set ``SCALING_BOOK_ISOLATION=rlimit`` to force the rlimit mode.
"""

from __future__ import annotations

import json
import os
import secrets
import selectors
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = [
    "CallError",
    "SandboxResult",
    "isolation_mode",
    "run_function",
    "LIMITS",
]

#: Resource limits applied to every submission (name -> value); bytes, seconds or counts.
LIMITS: dict[str, int] = {
    "RLIMIT_AS": 512 * 1024 * 1024,  # bytes of address space
    "RLIMIT_CPU": 30,  # seconds of CPU time
    "RLIMIT_NOFILE": 64,  # open file descriptors
    "RLIMIT_NPROC": 64,  # processes of the run's uid
    "RLIMIT_FSIZE": 8 * 1024 * 1024,  # bytes per written file
}

#: Bytes of child stdout read before the run is killed as an output flood.
STDOUT_CAP_BYTES = 1024 * 1024
#: Bytes of child stderr kept (the tail) for the result's ``detail``.
STDERR_KEEP_BYTES = 4096

_UID_BASE = 200_000  # per-run uids are drawn from [_UID_BASE, _UID_BASE + 2**24)


@dataclass(frozen=True)
class CallError:
    """One test call that did not return a plain value (it raised, or returned an unsupported type).

    Never equal to any expected value: a test whose value is a ``CallError`` fails.
    """

    message: str


@dataclass(frozen=True)
class SandboxResult:
    """The outcome of one ``run_function`` call.

    ``status``: ``"ok"`` (the runner reported; ``values`` has one entry per argument list, each a plain
    value or a ``CallError``), ``"timeout"`` (wall clock exceeded, everything killed), ``"error"`` (the
    source did not load, the function is missing, the output was malformed or flooded) or
    ``"no_result"`` (the process ended without reporting: ``os._exit``, a signal, a resource limit).
    """

    status: str
    values: list | None
    detail: str
    duration_s: float
    mode: str
    per_call_errors: list[str] = field(default_factory=list)


# --------------------------------------------------------------------------------------------------
# The runner: executed inside the child as ``python -I -S runner.py``. Standard library only.
# --------------------------------------------------------------------------------------------------

_RUNNER = r'''
import os, sys

def _plain(v, depth=0, budget=[20000]):
    budget[0] -= 1
    if budget[0] < 0 or depth > 32:
        raise ValueError("returned value too large or too deeply nested")
    t = type(v)
    if v is None or t is bool or t is str:
        return v
    if t is int:
        if v.bit_length() > 4000:
            raise ValueError("returned integer too large")
        return v
    if t is float:
        return v
    if t is list or t is tuple:
        return [_plain(x, depth + 1) for x in v]
    if t is dict:
        out = {}
        for k, x in v.items():
            if type(k) is not str:
                raise TypeError("returned dict with a non-string key")
            out[k] = _plain(x, depth + 1)
        return out
    raise TypeError("returned unsupported type " + repr(t.__name__)[:60])

def _describe(e):
    try:
        return (type(e).__name__ + ": " + str(e))[:300]
    except BaseException:
        return "exception"

def main():
    import json
    with open("nonce") as f:
        nonce = f.read().strip()
    with open("inputs.json") as f:
        spec = json.load(f)
    with open("submission.py", encoding="utf-8", errors="replace") as f:
        source = f.read()
    out = os.dup(1)
    null = os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, 1)
    os.close(null)

    def report(obj):
        data = (nonce + " " + json.dumps(obj, allow_nan=True) + "\n").encode()
        data = b"\n" + data
        while data:
            n = os.write(out, data)
            data = data[n:]

    import resource
    for name, value in spec["limits"].items():
        lim = getattr(resource, name)
        soft, hard = resource.getrlimit(lim)
        if hard != resource.RLIM_INFINITY and hard < value:
            value = hard
        resource.setrlimit(lim, (value, value))
    uid = spec.get("uid")
    if uid is not None:
        os.setgroups([])
        os.setgid(uid)
        os.setuid(uid)
    os.unlink("nonce")
    sys.argv = ["submission.py"]
    ns = {"__name__": "submission", "__builtins__": __builtins__}
    try:
        code = compile(source, "submission.py", "exec")
        exec(code, ns)
    except BaseException as e:
        report({"load_error": _describe(e)})
        return
    fn = ns.get(spec["function"])
    if not callable(fn):
        report({"load_error": "the submission does not define a function named " + repr(spec["function"])})
        return
    results = []
    for args_json in spec["args"]:
        try:
            value = fn(*json.loads(args_json))
            results.append({"v": _plain(value)})
        except BaseException as e:
            results.append({"e": _describe(e)})
    report({"results": results})

main()
'''


# --------------------------------------------------------------------------------------------------
# Mode detection and the command line
# --------------------------------------------------------------------------------------------------

_mode_lock = threading.Lock()
_mode_cache: str | None = None


def _base_python() -> str:
    """The interpreter the child runs: the base interpreter of this one (no venv indirection)."""
    return getattr(sys, "_base_executable", None) or sys.executable


def _others_can_reach(path: str) -> bool:
    """Whether a user other than the owner can traverse to and read ``path`` (every ancestor o+x)."""
    p = Path(path).resolve()
    for parent in [*reversed(p.parents)]:
        try:
            if not os.stat(parent).st_mode & stat.S_IXOTH:
                return False
        except OSError:
            return False
    try:
        return bool(os.stat(p).st_mode & stat.S_IROTH)
    except OSError:
        return False


def _top_unreachable_ancestor(path: str) -> str | None:
    """The outermost ancestor directory of ``path`` that others cannot traverse, or None."""
    p = Path(path).resolve()
    for parent in [*reversed(p.parents)]:
        try:
            if not os.stat(parent).st_mode & stat.S_IXOTH:
                return str(parent)
        except OSError:
            return str(parent)
    return None


def _bwrap_command(workdir: str, python: str, drop_uid: bool) -> list[str]:
    root = os.geteuid() == 0
    cmd = [
        shutil.which("bwrap") or "bwrap",
        "--die-with-parent",
        "--new-session",
        "--unshare-net",
        "--unshare-pid",
        "--unshare-ipc",
        "--unshare-uts",
        "--unshare-cgroup-try",
    ]
    if not root:
        cmd.append("--unshare-user")
    cmd += ["--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp"]
    if drop_uid:
        prefix = str(Path(python).resolve().parent.parent)
        hidden = _top_unreachable_ancestor(prefix)
        if hidden is not None:
            cmd += ["--tmpfs", hidden, "--ro-bind", prefix, prefix]
    cmd += ["--bind", workdir, workdir, "--chdir", workdir]
    if root:
        cmd += ["--cap-drop", "ALL"]
        if drop_uid:
            cmd += ["--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"]
    cmd += ["--", python, "-I", "-S", "runner.py"]
    return cmd


def _probe_bwrap() -> bool:
    if not shutil.which("bwrap"):
        return False
    workdir = tempfile.mkdtemp(prefix="scaling-book-probe-")
    try:
        cmd = _bwrap_command(workdir, _base_python(), drop_uid=False)
        cmd = cmd[: cmd.index("--") + 1] + [_base_python(), "-I", "-S", "-c", "pass"]
        r = subprocess.run(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL, timeout=20)
        return r.returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def isolation_mode() -> str:
    """``"bwrap"`` if bubblewrap is installed and works on this machine, else ``"rlimit"``.

    Probed once per process. ``SCALING_BOOK_ISOLATION=rlimit`` forces the rlimit mode.
    """
    global _mode_cache
    with _mode_lock:
        if _mode_cache is None:
            forced = os.environ.get("SCALING_BOOK_ISOLATION", "").strip().lower()
            if forced == "rlimit":
                _mode_cache = "rlimit"
            else:
                _mode_cache = "bwrap" if _probe_bwrap() else "rlimit"
        return _mode_cache


def _child_python(mode: str, root: bool) -> tuple[str, bool]:
    """(interpreter, drop_uid). As root, the child drops to a fresh uid when it can still run."""
    python = _base_python()
    if not root:
        return python, False
    if mode == "bwrap" or _others_can_reach(python):
        return python, True
    # rlimit mode as root with an interpreter others cannot reach (e.g. under /root): prefer a
    # system interpreter of the same version, so the child can still drop privileges.
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    for directory in ("/usr/local/bin", "/usr/bin", "/bin"):
        candidate = os.path.join(directory, version)
        if os.path.isfile(candidate) and _others_can_reach(candidate):
            return candidate, True
    return python, False


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


def _cleanup(proc: subprocess.Popen, uid: int | None, token: str) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except OSError:
        pass
    if uid is not None:
        _kill_by(lambda pid: _uid_of(pid) == uid)
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


def _fresh_uid() -> int:
    while True:
        uid = _UID_BASE + secrets.randbelow(2**24)
        if not any(_safe_uid(pid) == uid for pid in _pids()):
            return uid


def _safe_uid(pid: int) -> int | None:
    try:
        return _uid_of(pid)
    except OSError:
        return None


def _read_available(fd: int, into: bytearray, cap: int | None) -> bool:
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
    ``"bwrap"`` or ``"rlimit"`` (default: ``isolation_mode()``). Never raises for anything the
    submission does; the outcome is in ``status`` and ``detail``.
    """
    mode = mode or isolation_mode()
    if mode not in ("bwrap", "rlimit"):
        raise ValueError(f"unknown isolation mode {mode!r}; expected 'bwrap' or 'rlimit'")
    root = os.geteuid() == 0
    python, drop_uid = _child_python(mode, root)
    uid = _fresh_uid() if drop_uid else None
    token = secrets.token_hex(12)
    nonce = secrets.token_hex(16)

    workdir = tempfile.mkdtemp(prefix="scaling-book-run-")
    start = time.monotonic()
    proc: subprocess.Popen | None = None
    try:
        spec = {
            "function": function_name,
            "args": [json.dumps(list(args)) for args in args_list],
            "limits": LIMITS,
            "uid": uid,
        }
        files = {"runner.py": _RUNNER, "submission.py": source, "inputs.json": json.dumps(spec),
                 "nonce": nonce}
        for name, text in files.items():
            with open(os.path.join(workdir, name), "w", encoding="utf-8", errors="surrogatepass") as f:
                f.write(text)
        if uid is not None:
            # The directory and files belong to the run's uid; the runner starts as a capability-less
            # root under bwrap, so it must be able to traverse the directory and read the files.
            for name in files:
                os.chown(os.path.join(workdir, name), uid, uid)
                os.chmod(os.path.join(workdir, name), 0o644)
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
        if mode == "bwrap":
            cmd = _bwrap_command(workdir, python, drop_uid)
        else:
            cmd = [python, "-I", "-S", "runner.py"]
        try:
            proc = subprocess.Popen(cmd, cwd=workdir, env=env, stdin=subprocess.DEVNULL,
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                    start_new_session=True, close_fds=True)
        except OSError as e:
            return SandboxResult("error", None, f"could not start the child: {e}",
                                 time.monotonic() - start, mode)

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
                        if not _read_available(fd, out, STDOUT_CAP_BYTES):
                            sel.unregister(fd)
                            open_fds.discard(fd)
                    elif fd == err_fd:
                        if not _read_available(fd, err, None):
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
                    _read_available(out_fd, out, STDOUT_CAP_BYTES)
                if err_fd in open_fds:
                    _read_available(err_fd, err, None)
                if len(out) > STDOUT_CAP_BYTES:
                    flooded = True
        finally:
            sel.close()
            if pidfd is not None:
                os.close(pidfd)
            _cleanup(proc, uid, token)
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
        return _parse_report(bytes(out), nonce, len(args_list), proc.returncode, stderr_tail,
                             duration, mode)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def _parse_report(out: bytes, nonce: str, n_calls: int, returncode: int | None, stderr_tail: str,
                  duration: float, mode: str) -> SandboxResult:
    prefix = nonce.encode() + b" "
    lines = [line for line in out.split(b"\n") if line.startswith(prefix)]
    if not lines:
        why = _exit_description(returncode)
        tail = f"; stderr: {stderr_tail[-500:]}" if stderr_tail else ""
        return SandboxResult("no_result", None, f"the child exited without reporting ({why}){tail}",
                             duration, mode)
    if len(lines) > 1:
        return SandboxResult("error", None, f"{len(lines)} result lines (expected exactly one)",
                             duration, mode)
    try:
        report: Any = json.loads(lines[0][len(prefix):])
    except ValueError as e:
        return SandboxResult("error", None, f"malformed result line: {e}", duration, mode)
    if not isinstance(report, dict):
        return SandboxResult("error", None, "malformed result line: not an object", duration, mode)
    if "load_error" in report:
        return SandboxResult("error", None, f"submission did not load: {report['load_error']}",
                             duration, mode)
    raw = report.get("results")
    if not isinstance(raw, list):
        return SandboxResult("error", None, "malformed result line: no results", duration, mode)
    values: list = []
    errors: list[str] = []
    for i, entry in enumerate(raw[:n_calls]):
        if isinstance(entry, dict) and "v" in entry:
            values.append(entry["v"])
        elif isinstance(entry, dict) and "e" in entry:
            values.append(CallError(str(entry["e"])[:300]))
            errors.append(f"call {i}: {str(entry['e'])[:300]}")
        else:
            values.append(CallError("malformed entry"))
            errors.append(f"call {i}: malformed entry")
    while len(values) < n_calls:
        values.append(CallError("no value reported"))
        errors.append(f"call {len(values) - 1}: no value reported")
    detail = f"{n_calls} calls, {len(errors)} raised" if errors else f"{n_calls} calls"
    if errors:
        detail += ": " + "; ".join(errors[:3])
    return SandboxResult("ok", values, detail, duration, mode, errors)


def _exit_description(returncode: int | None) -> str:
    if returncode is None:
        return "no exit status"
    if returncode < 0:
        try:
            return f"killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"killed by signal {-returncode}"
    return f"exit status {returncode}"
