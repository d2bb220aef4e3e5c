"""The program a warm sandbox runs: one long-lived server, PID 1 of its bubblewrap sandbox, that forks a
fresh child per submission (``scaling_book.grading.sandbox.warm`` is the grading process's side).

``python -I -S -c SERVER CTL_FD``: ``CTL_FD`` is an ``AF_UNIX``/``SOCK_SEQPACKET`` socket to the grading
process. The server makes itself non-dumpable (no ptrace and no ``/proc/1/mem`` for its children),
says ``ready`` and then serves one submission at a time:

1. it receives ``run`` with three descriptors: a sealed memfd holding the submission's inputs (the same
   literal ``inputs.py`` holds for a per-submission child: source, function, argument lists, limits,
   uid, nonce, work directory), and the write ends of the child's stdout and stderr pipes, which the
   grading process reads itself. The server never reads the inputs: a later child, a copy of its
   memory, holds nothing of an earlier submission;
2. it forks. The child starts its own session, reads the inputs, points stdin and the submission's
   ``print`` at ``/dev/null``, closes every other descriptor, sets the rlimits, drops to the run's uid,
   creates its work directory on the sandbox's tmpfs (``/tmp``, ``WORKDIR_CAP_BYTES``), sets ``HOME`` and
   ``TMPDIR`` to it and runs the submission with the per-submission runner's code (``protocol._CORE``);
3. when the child has exited, the server kills every other process of the sandbox (``kill(-1,
   SIGKILL)`` from PID 1 reaches all of them; orphans are its children, so it reaps them all), deletes
   everything under ``/tmp`` but what the sandbox itself put there (the empty read-only stand-ins for
   hidden host directories that sit under ``/tmp``, and the directories leading to them, which must
   be unchanged), looks for System V IPC objects (the one kernel state of the sandbox that
   outlives processes and files; POSIX queues are refused by ``RLIMIT_MSGQUEUE`` 0) and answers ``done
   EXIT LEFT ANOMALY``: the child's exit code, the processes it had to kill, and 1 when something
   outlived the cleanup (IPC objects, an undeletable or huge tree), after which the grading process
   replaces the sandbox.

As PID 1 of its PID namespace the server cannot be killed or stopped by anything inside it (the kernel
drops signals to a namespace's init that it has no handler for).
"""

from __future__ import annotations

from scaling_book.grading.sandbox.protocol import _CORE

#: Most entries the server deletes under /tmp after one submission; more is an anomaly (the grading
#: process then replaces the whole sandbox, whose tmpfs the kernel frees at once).
WIPE_MAX_ENTRIES = 10_000

SERVER = _CORE + r'''
import _signal
import _socket
import ctypes
import resource  # imported once here; the runner's own import in each child then costs nothing

_libc = ctypes.CDLL(None, use_errno=True)
_WIPE_MAX = %(wipe_max)d


def _child(spec_fd, out_fd, err_fd):
    posix.setsid()
    _signal.signal(_signal.SIGINT, _signal.default_int_handler)  # as in a fresh interpreter
    chunks = []
    while True:
        chunk = posix.read(spec_fd, 1 << 16)
        if not chunk:
            break
        chunks.append(chunk)
    spec = eval(b"".join(chunks).decode("utf-8", "surrogatepass"), {"__builtins__": {}}, {})
    null = posix.open("/dev/null", posix.O_RDWR)
    posix.dup2(null, 0)
    posix.dup2(null, 1)
    posix.dup2(err_fd, 2)
    posix.dup2(out_fd, 3)
    posix.closerange(4, 1 << 20)
    _libc.prctl(4, 1, 0, 0, 0)  # PR_SET_DUMPABLE: the submission's processes are ordinary ones
    out = 3
    workdir = spec["workdir"]

    def prepare():
        posix.mkdir(workdir, 0o700)
        posix.chdir(workdir)
        for key in (b"HOME", b"TMPDIR"):
            posix.putenv(key, workdir.encode())
            posix.environ[key] = workdir.encode()

    run(spec, out, prepare)
    # Leave as an interpreter leaves: wait for non-daemon threads, then the exit handlers.
    if "threading" in sys.modules:
        sys.modules["threading"]._shutdown()
    import atexit
    atexit._run_exitfuncs()


def _kill_all():
    # kill(-1) from PID 1: every other process of the namespace. They are all this process's
    # descendants, and orphans come to PID 1, so waiting until there is no child reaps them all.
    killed = 0
    try:
        posix.kill(-1, 9)
    except OSError:
        pass
    while True:
        try:
            posix.waitpid(-1, 0)
        except ChildProcessError:
            break
        except InterruptedError:
            continue
        killed += 1
    others = [p for p in posix.listdir("/proc") if p.isdigit() and p != "1"]
    return killed, len(others)


def _snapshot(top):
    # What the sandbox put under ``top`` before any submission: the empty read-only stand-ins for
    # hidden host directories and the directories leading to them. path -> (device, inode, mode, uid).
    found, stack = {}, [top]
    while stack:
        path = stack.pop()
        for entry in posix.scandir(path):
            st = entry.stat(follow_symlinks=False)
            found[entry.path] = (st.st_dev, st.st_ino, st.st_mode, st.st_uid)
            if entry.is_dir(follow_symlinks=False) and st.st_dev == _TOP_DEV:
                stack.append(entry.path)
    return found


def _wipe(top):
    # Delete everything under ``top`` that is not in _SKELETON, without following links or entering
    # another file system; then check the skeleton is as it was. False when something could not be
    # deleted, there was more than _WIPE_MAX to delete, or the skeleton changed.
    stack, dirs, seen = [top], [], 0
    while stack:
        path = stack.pop()
        try:
            entries = list(posix.scandir(path))
        except PermissionError:
            try:
                posix.chmod(path, 0o700)
                entries = list(posix.scandir(path))
            except OSError:
                return False
        except OSError:
            return False
        for entry in entries:
            seen += 1
            if seen > _WIPE_MAX:
                return False
            child = entry.path
            try:
                if child in _SKELETON:
                    if entry.stat(follow_symlinks=False).st_dev == _TOP_DEV:
                        stack.append(child)  # a directory leading to a stand-in: empty it, keep it
                elif entry.is_dir(follow_symlinks=False):
                    stack.append(child)
                    dirs.append(child)
                else:
                    posix.unlink(child)
            except OSError:
                return False
    for path in reversed(dirs):
        try:
            posix.rmdir(path)
        except OSError:
            return False
    for path, before in _SKELETON.items():
        try:
            st = posix.lstat(path)
        except OSError:
            return False
        if (st.st_dev, st.st_ino, st.st_mode, st.st_uid) != before:
            return False
    return True


def _ipc_objects():
    count = 0
    for kind in ("shm", "msg", "sem"):
        try:
            with open("/proc/sysvipc/" + kind, "rb") as f:
                count += max(0, len(f.read().splitlines()) - 1)
        except OSError:
            count += 1
    return count


def _tcp_sockets():
    # Sockets that outlive their processes in the sandbox's network namespace (TIME_WAIT, FIN_WAIT):
    # their addresses would be a message to the next submission. /proc/net/sockstat counts them for
    # this namespace ("TCP: inuse N orphan N tw N ..."); /proc/net/tcp would walk the host's whole
    # connection table (~20 ms).
    count = 0
    for name, fields in (("/proc/net/sockstat", (b"inuse", b"tw")), ("/proc/net/sockstat6", (b"inuse",))):
        try:
            with open(name, "rb") as f:
                lines = f.read().splitlines()
        except FileNotFoundError:
            continue  # no IPv6 here
        except OSError:
            return 1
        for line in lines:
            words = line.split()
            if words[:1] in ([b"TCP:"], [b"TCP6:"]):
                count += sum(int(words[i + 1]) for i in range(1, len(words) - 1, 2) if words[i] in fields)
    return count


def _scheduling():
    # What every child inherits from the server and a process of the same uid can change with
    # prlimit(2), setpriority(2), sched_setaffinity(2), sched_setscheduler(2) (a non-root grader: the
    # children share the server's uid). A child cannot undo a lowered hard limit or a raised nice.
    limits = tuple(resource.getrlimit(getattr(resource, n)) for n in sorted(dir(resource))
                   if n.startswith("RLIMIT_"))
    return (limits, posix.getpriority(posix.PRIO_PROCESS, 0), posix.sched_getscheduler(0),
            posix.sched_getparam(0).sched_priority, sorted(posix.sched_getaffinity(0)))


_TOP_DEV = posix.lstat("/tmp").st_dev
_SKELETON = _snapshot("/tmp")


def serve(ctl_fd):
    _libc.prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE 0: no ptrace of the server, no /proc/1/mem
    # PID 1 only receives the signals it handles: with SIGINT ignored (Python's KeyboardInterrupt
    # handler otherwise) nothing in the sandbox can signal the server.
    _signal.signal(_signal.SIGINT, _signal.SIG_IGN)
    scheduling = _scheduling()
    posix.chdir("/")
    ctl = _socket.socket(fileno=ctl_fd)
    ctl.send(b"ready")
    while True:
        try:
            msg, ancillary, _, _ = ctl.recvmsg(64, _socket.CMSG_SPACE(3 * 4))
        except OSError:
            return
        fds = []
        for level, kind, data in ancillary:
            if level == _socket.SOL_SOCKET and kind == _socket.SCM_RIGHTS:
                fds += [int.from_bytes(data[i:i + 4], sys.byteorder, signed=True)
                        for i in range(0, len(data) - len(data) %% 4, 4)]
        if msg != b"run" or len(fds) != 3:
            return  # the grading process closed the socket, or a malformed request: exit
        pid = posix.fork()
        if pid == 0:
            code = 70
            try:
                ctl.close()
                _child(*fds)
                code = 0
            except SystemExit:
                code = 0
            except BaseException as e:
                try:
                    posix.write(2, ("runner: " + _describe(e)).encode("utf-8", "replace"))
                except BaseException:
                    pass
            finally:
                posix._exit(code)
        for fd in fds:
            posix.close(fd)
        while True:
            try:
                _, status = posix.waitpid(pid, 0)
                break
            except InterruptedError:
                continue
        killed, left = _kill_all()
        wiped = _wipe("/tmp")
        anomaly = int(left > 0 or not wiped or _ipc_objects() > 0 or _tcp_sockets() > 0
                      or _scheduling() != scheduling)
        ctl.send(b"done %%d %%d %%d" %% (posix.waitstatus_to_exitcode(status), killed, anomaly))


serve(int(sys.argv[1]))
''' % {"wipe_max": WIPE_MAX_ENTRIES}
