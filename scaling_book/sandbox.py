"""Running untrusted Python: the one place in the project that knows about processes.

A submission is one Python source text defining one function. ``run_function`` runs it once, in one
fresh process, against every argument list of an item, and returns the values it computed. The child
is given the source and the *arguments only*: it never sees an expected value or a tolerance, so the
only way for a submission to earn a passing grade is to compute the right value. All comparisons happen
in the caller's process (``scaling_book.graders.code``).

What the child gets, in both isolation modes:

- a throwaway working directory, its only writable path, deleted after; the runner reads its one
  input file there (``inputs.py``: the source, the function name, the argument lists, the limits)
  and deletes it before the submission runs;
- ``python -I -S`` (no site-packages, no user site, no environment-driven imports), a minimal
  environment, stdin from ``/dev/null``, its own session and process group;
- ``RLIMIT_AS`` 512 MB, ``RLIMIT_CPU`` 30 s, ``RLIMIT_NOFILE`` 64, ``RLIMIT_NPROC`` 64, ``RLIMIT_FSIZE``
  8 MB, set by the runner on itself before the submission is executed;
- a wall-clock timeout after which the whole process group is killed, and then every stray process
  the run left behind (see below);
- when the caller is root, a fresh unprivileged uid for the run (so ``RLIMIT_NPROC`` is enforced and
  every process of the run can be found and killed afterwards by its uid). The child interpreter is
  this one's base interpreter; in rlimit mode as root, when that interpreter sits where other users
  cannot reach it (e.g. under ``/root``), a system interpreter of the same minor version is used
  instead so that the uid can still be dropped.

The child reports on exactly one stdout line that starts with a per-run random nonce; anything the
submission prints goes to ``/dev/null``; stdout is read with a byte cap. Values are plain JSON
(``bool``, ``int``, ``float``, ``str``, ``None``, lists, dicts with string keys): an object with a rigged
``__eq__`` cannot cross the process boundary.

Isolation modes (``isolation_mode()``):

- ``"bwrap"``: when bubblewrap is installed (Debian/Ubuntu package ``bubblewrap``) and works here, the
  child runs under ``bwrap`` with no network, a read-only root, a private ``/tmp``, a private PID
  namespace (every process of the run dies with it), no capabilities, and the working directory as
  the only writable path. The root is an allowlist, not the host's: the system directories
  (``/usr`` and the ``/bin``, ``/lib``... links into it) and the interpreter's prefix, read-only;
  nothing else of the host exists in it, so a copy of an answer key anywhere else on the machine is
  out of reach. The project tree (seed and exported answer keys), the caller's working directory and
  ``$HOME`` are empty directories. The working directory is a tmpfs of ``WORKDIR_CAP_BYTES`` (with
  bubblewrap 0.7 or later), so a submission cannot fill the host's disk.
- ``"rlimit"``: otherwise, the limits above only. The child runs with the caller's filesystem (it
  can read the seed, and as a non-root caller write your files) and network. When the caller is not
  root, a background process that starts a new session and clears its environment can outlive the
  run; when it is root, the per-run uid catches it, and what that uid left in ``/tmp``, ``/var/tmp``
  and ``/dev/shm`` is deleted after the run.

Set ``SCALING_BOOK_ISOLATION=rlimit`` to force the rlimit mode.
"""

from __future__ import annotations

import functools
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

#: Bytes the work directory can hold under bwrap (it is a tmpfs of this size); in rlimit mode only
#: ``RLIMIT_FSIZE`` bounds each file.
WORKDIR_CAP_BYTES = 16 * 1024 * 1024

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
# The runner: executed inside the child as ``python -I -S -c RUNNER``. Builtin modules only (``posix``,
# ``resource``; importing ``json`` or ``os`` would cost more than the rest of the run).
# --------------------------------------------------------------------------------------------------

_RUNNER = r'''
import posix, sys

_ESC = {i: "\\u%04x" % i for i in range(32)}
_ESC[34] = '\\"'
_ESC[92] = "\\\\"

def _enc(v, depth, budget):
    budget[0] -= 1
    if budget[0] < 0 or depth > 32:
        raise ValueError("returned value too large or too deeply nested")
    t = type(v)
    if v is None:
        return "null"
    if t is bool:
        return "true" if v else "false"
    if t is int:
        if v.bit_length() > 4000:
            raise ValueError("returned integer too large")
        return repr(v)
    if t is float:
        if v != v:
            return "NaN"
        if v in (1e999, -1e999):
            return "Infinity" if v > 0 else "-Infinity"
        return repr(v)
    if t is str:
        return '"' + v.translate(_ESC) + '"'
    if t is list or t is tuple:
        return "[" + ",".join([_enc(x, depth + 1, budget) for x in v]) + "]"
    if t is dict:
        parts = []
        for k, x in v.items():
            if type(k) is not str:
                raise TypeError("returned dict with a non-string key")
            parts.append('"' + k.translate(_ESC) + '":' + _enc(x, depth + 1, budget))
        return "{" + ",".join(parts) + "}"
    raise TypeError("returned unsupported type " + repr(t.__name__)[:60])

def _describe(e):
    try:
        return (type(e).__name__ + ": " + str(e))[:300]
    except BaseException:
        return "exception"

def main():
    with open("inputs.py", encoding="utf-8", errors="surrogatepass") as f:
        spec = eval(f.read(), {"__builtins__": {}}, {})
    nonce = spec["nonce"]
    out = posix.dup(1)
    null = posix.open("/dev/null", posix.O_WRONLY)
    posix.dup2(null, 1)
    posix.close(null)

    def report(text):
        data = ("\n" + nonce + " " + text + "\n").encode("utf-8", "backslashreplace")
        while data:
            data = data[posix.write(out, data):]

    import resource
    for name, value in spec["limits"].items():
        lim = getattr(resource, name)
        soft, hard = resource.getrlimit(lim)
        if hard != resource.RLIM_INFINITY and hard < value:
            value = hard
        resource.setrlimit(lim, (value, value))
    uid = spec["uid"]
    if uid is not None:
        posix.setgroups([])
        posix.setgid(uid)
        posix.setuid(uid)
    posix.unlink("inputs.py")
    sys.argv = ["submission.py"]
    ns = {"__name__": "submission", "__builtins__": __builtins__}
    source, function, args_list = spec["source"], spec["function"], spec["args"]
    del spec
    try:
        # exec of the text (not compile()): compile() would first build every AST class (~1.5 ms)
        exec(source, ns)
    except BaseException as e:
        report('{"load_error":' + _enc(_describe(e), 0, [10]) + "}")
        return
    fn = ns.get(function)
    if not callable(fn):
        report('{"load_error":' + _enc("the submission does not define a function named "
                                       + repr(function), 0, [10]) + "}")
        return
    results = []
    budget = [100000]
    for args_text in args_list:
        try:
            value = fn(*eval(args_text, {"__builtins__": {}}, {}))
            results.append('{"v":' + _enc(value, 0, budget) + "}")
        except BaseException as e:
            results.append('{"e":' + _enc(_describe(e), 0, [10]) + "}")
    report('{"results":[' + ",".join(results) + "]}")

main()
'''


def _py_literal(value: Any) -> str:
    """A Python literal for a plain-JSON value (the runner evaluates it with no builtins)."""
    if value is None or type(value) is bool or type(value) is int or type(value) is str:
        return repr(value)
    if type(value) is float:
        if value != value:
            return "(1e999-1e999)"
        if value in (float("inf"), float("-inf")):
            return "1e999" if value > 0 else "-1e999"
        return repr(value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_py_literal(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{_py_literal(str(k))}: {_py_literal(v)}" for k, v in value.items()) + "}"
    raise TypeError(f"test arguments must be plain JSON values, not {type(value).__name__}")


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


def _hidden_paths(prefix: str, drop_uid: bool, cwd: str, home: str, export: str) -> list[str]:
    """Directories replaced by an empty tmpfs under bwrap: the project tree (where the seed and the
    exported answer keys live), the grading process's working directory, ``$HOME``, an export folder
    named by ``$SCALING_BOOK_EXPORT``, and (when the child drops to another uid) the outermost
    directory on the interpreter's path that other users cannot traverse (e.g. ``/root``)."""
    candidates = [str(Path(__file__).resolve().parent.parent), cwd, home, export]
    if drop_uid:
        candidates.append(_top_unreachable_ancestor(prefix) or "")
    system = {"/", "/usr", "/bin", "/lib", "/lib64", "/lib32", "/sbin", "/etc", "/dev", "/proc", "/sys", "/tmp",
              "/var", "/opt", "/usr/local", "/usr/lib", "/usr/bin"}
    paths = []
    for c in candidates:
        if not c:
            continue
        try:
            real = str(Path(c).resolve())
        except OSError:
            continue
        if real in system or not os.path.isdir(real):
            continue
        paths.append(real)
    # outermost first; drop paths nested in another hidden path
    paths = sorted(set(paths), key=lambda p: len(Path(p).parts))
    kept: list[str] = []
    for p in paths:
        if not any(Path(p).is_relative_to(k) for k in kept):
            kept.append(p)
    return kept


def _bwrap_command(workdir: str, python: str, drop_uid: bool, inputs_fd: int | None = None) -> list[str]:
    """The bwrap command line for one run in ``workdir``. ``inputs_fd``: an open descriptor of the run's
    ``inputs.py``, copied into the sandbox's work directory (the caller passes it to the child)."""
    head, tail = _bwrap_parts(python, drop_uid, os.getcwd(), os.environ.get("HOME", ""),
                              os.environ.get("SCALING_BOOK_EXPORT", ""))
    if _bwrap_has_size():
        # A fresh tmpfs of WORKDIR_CAP_BYTES at the work directory's path, holding a copy of inputs.py:
        # the child cannot fill the host's disk (RLIMIT_FSIZE bounds one file, not how many).
        work = ["--size", str(WORKDIR_CAP_BYTES), "--perms", "0777", "--tmpfs", workdir]
        if inputs_fd is not None:
            work += ["--perms", "0644", "--file", str(inputs_fd), os.path.join(workdir, "inputs.py")]
    else:  # bubblewrap < 0.7 cannot size a tmpfs: bind the host directory (bounded per file only)
        work = ["--bind", workdir, workdir]
    return [*head, *work, "--chdir", workdir, *tail]


@functools.lru_cache(maxsize=1)
def _bwrap_has_size() -> bool:
    """Whether this bubblewrap can cap a tmpfs's size (``--size``, bubblewrap 0.7 and later)."""
    try:
        r = subprocess.run([shutil.which("bwrap") or "bwrap", "--help"], stdin=subprocess.DEVNULL,
                           capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.SubprocessError):
        return False
    return "--size" in r.stdout + r.stderr


#: System directories the child sees, read-only, under bwrap (symbolic links are recreated as links).
#: Nothing else of the host's filesystem is mounted: not the project tree, not $HOME, not a copy of
#: the answer key someone left in /srv or another checkout.
_SYSTEM_PATHS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc/ld.so.cache",
                 "/nix/store")


@functools.lru_cache(maxsize=16)
def _bwrap_parts(python: str, drop_uid: bool, cwd: str, home: str, export: str) -> tuple[tuple, tuple]:
    """The bwrap arguments before and after the work directory's mount (cached: they only depend on
    the interpreter, the uid drop and the directories hidden from the child)."""
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
    # An allowlist, not "--ro-bind / /": system directories and the interpreter's prefix, read-only.
    bound: list[str] = []
    for path in _SYSTEM_PATHS:
        if os.path.islink(path):
            cmd += ["--symlink", os.readlink(path), path]
        elif os.path.exists(path):
            cmd += ["--ro-bind", path, path]
            bound.append(path)
    prefix = str(Path(python).resolve().parent.parent)
    hidden = _hidden_paths(prefix, drop_uid, cwd, home, export)
    in_prefix = [h for h in hidden if Path(h).is_relative_to(prefix)]

    def empty_dir(path: str) -> list[str]:
        # an empty tmpfs (made read-only at the end), on a traversable path
        out = [arg for parent in reversed(Path(path).parents) if len(parent.parts) > 1
               for arg in ("--perms", "0755", "--dir", str(parent))]
        return out + ["--perms", "0755", "--tmpfs", path]

    cmd += ["--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp"]
    for h in hidden:
        if h not in in_prefix:
            cmd += empty_dir(h)
    if not any(Path(prefix).is_relative_to(b) for b in bound):
        # recreate the path to it with traversable directories (e.g. /root is 0700 on the host)
        for parent in reversed(Path(prefix).parents):
            if len(parent.parts) > 1:
                cmd += ["--perms", "0755", "--dir", str(parent)]
        cmd += ["--ro-bind", prefix, prefix]
    for h in in_prefix:  # a package installed into the interpreter's own site-packages
        cmd += ["--perms", "0755", "--tmpfs", h]
    remount = ["/tmp", "/dev", *hidden]
    tail = []
    for path in remount:  # after the work directory's tmpfs is mounted inside /tmp
        tail += ["--remount-ro", path]
    tail += ["--remount-ro", "/"]
    if root:
        tail += ["--cap-drop", "ALL"]
        if drop_uid:
            tail += ["--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"]
    tail += ["--", python, "-I", "-S", "-c", _RUNNER]
    return tuple(cmd), tuple(tail)


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


def _can_drop_to_fresh_uid(command: list[str]) -> bool:
    """Whether a root caller can run ``command`` under a fresh unprivileged uid here (not so in some
    containers, whose root cannot set arbitrary uids, nor for an interpreter under ``/root``)."""
    uid = _fresh_uid()
    try:
        r = subprocess.run(command, user=uid, group=uid, extra_groups=[],
                           stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                           timeout=20, cwd="/")
    except (OSError, subprocess.SubprocessError):
        return False
    return r.returncode == 0


@functools.lru_cache(maxsize=8)
def _child_python(mode: str, root: bool) -> tuple[str, bool]:
    """(interpreter, drop_uid). As root, the child drops to a fresh uid when it can still run."""
    python = _base_python()
    if not root:
        return python, False
    if mode == "bwrap":
        # bwrap re-exposes an unreachable interpreter prefix; only the uid change itself is probed
        return python, _can_drop_to_fresh_uid([shutil.which("true") or "/bin/true"])
    if _others_can_reach(python) and _can_drop_to_fresh_uid([python, "-I", "-S", "-c", "pass"]):
        return python, True
    # rlimit mode as root with an interpreter others cannot reach (e.g. under /root): prefer a
    # system interpreter of the same version, so the child can still drop privileges.
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    for directory in ("/usr/local/bin", "/usr/bin", "/bin"):
        candidate = os.path.join(directory, version)
        if (os.path.isfile(candidate) and _others_can_reach(candidate)
                and _can_drop_to_fresh_uid([candidate, "-I", "-S", "-c", "pass"])):
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


def _cleanup(proc: subprocess.Popen, uid: int | None, token: str, mode: str) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except OSError:
        pass
    if mode == "bwrap":
        pass  # the run's PID namespace dies with its first process: nothing can outlive it
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


def _fresh_uid() -> int:
    """A uid for one run, drawn at random from 2**24 unused ids (no passwd entry needed)."""
    return _UID_BASE + secrets.randbelow(2**24)


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

    # Under bwrap the work directory must sit directly in /tmp (which the sandbox replaces).
    workdir = tempfile.mkdtemp(prefix="scaling-book-run-",
                               dir="/tmp" if mode == "bwrap" and os.path.isdir("/tmp") else None)
    start = time.monotonic()
    proc: subprocess.Popen | None = None
    try:
        spec = {
            "function": function_name,
            "args": [_py_literal(list(args)) for args in args_list],
            "limits": LIMITS,
            "uid": uid,
            "nonce": nonce,
            "source": source,
        }
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
        inputs_fd = None
        if mode == "bwrap":
            inputs_fd = os.open(inputs, os.O_RDONLY)
            cmd = _bwrap_command(workdir, python, drop_uid, inputs_fd)
        else:
            cmd = [python, "-I", "-S", "-c", _RUNNER]
        try:
            proc = subprocess.Popen(cmd, cwd=workdir, env=env, stdin=subprocess.DEVNULL,
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                    start_new_session=True, close_fds=True,
                                    pass_fds=() if inputs_fd is None else (inputs_fd,))
        except OSError as e:
            return SandboxResult("error", None, f"could not start the child: {e}",
                                 time.monotonic() - start, mode)
        finally:
            if inputs_fd is not None:
                os.close(inputs_fd)

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
            _cleanup(proc, uid, token, mode)
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
    except (ValueError, RecursionError) as e:  # a forged line can nest 500,000 deep
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
