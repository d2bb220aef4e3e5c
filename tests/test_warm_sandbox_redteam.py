"""Red-team tests of the warm sandbox (issue 17): what one submission can do to a later one in the same
sandbox, to the server, or to its own grade.

Each test asserts the secure outcome. Several attacks need the submission to share the server's uid,
i.e. a grading process that is NOT root (as root every submission runs under a fresh uid and they are
refused by the kernel): run this file as an ordinary user to exercise them.
"""

from __future__ import annotations

import os

import pytest
from test_warm_sandbox import WARM, run

from scaling_book.grading.sandbox import isolation_mode, warm

pytestmark = pytest.mark.skipif(isolation_mode() != "bwrap", reason="bubblewrap not available")


# --------------------------------------------------------------------------------------------------
# Scheduling and resource limits of the server, which every later child inherits
# --------------------------------------------------------------------------------------------------

OWN_LIMITS = (
    "import os, resource\n"
    "def f():\n"
    "    limits = [list(resource.getrlimit(getattr(resource, n))) for n in sorted(dir(resource))\n"
    "              if n.startswith('RLIMIT_')]\n"
    "    return [limits, os.getpriority(os.PRIO_PROCESS, 0), os.sched_getscheduler(0),\n"
    "            sorted(os.sched_getaffinity(0))]\n"
)

DEGRADE_PID_1 = (
    "import os, resource\n"
    "def f():\n"
    "    done = []\n"
    "    for name, value in (('RLIMIT_AS', 40 << 20), ('RLIMIT_STACK', 1 << 16), ('RLIMIT_CPU', 1),\n"
    "                        ('RLIMIT_NOFILE', 16), ('RLIMIT_CORE', 0)):\n"
    "        try:\n"
    "            resource.prlimit(1, getattr(resource, name), (value, value))\n"
    "            done.append(name)\n"
    "        except OSError:\n"
    "            pass\n"
    "    for name, call in (('nice', lambda: os.setpriority(os.PRIO_PROCESS, 1, 19)),\n"
    "                       ('affinity', lambda: os.sched_setaffinity(1, {min(os.sched_getaffinity(1))})),\n"
    "                       ('idle', lambda: os.sched_setscheduler(1, os.SCHED_IDLE, os.sched_param(0)))):\n"
    "        try:\n"
    "            call()\n"
    "            done.append(name)\n"
    "        except OSError:\n"
    "            pass\n"
    "    return done\n"
)


@pytest.mark.parametrize("sandbox_kind", WARM, indirect=True)
def test_a_submission_cannot_lower_the_limits_or_priority_of_the_next(sandbox_kind):
    # As a non-root grader the submission shares the server's uid, so prlimit(2), setpriority(2),
    # sched_setaffinity(2) and sched_setscheduler(2) on PID 1 are allowed; every later child would
    # inherit a 40 MB address space, nice 19, SCHED_IDLE... and fail or time out.
    fresh = run(OWN_LIMITS)
    run(DEGRADE_PID_1)
    assert run(OWN_LIMITS) == fresh
    assert run("def f():\n    return len(bytearray(100 << 20))\n") == 100 << 20


# --------------------------------------------------------------------------------------------------
# Signals to the server
# --------------------------------------------------------------------------------------------------

def test_sigint_to_the_server_neither_kills_it_nor_runs_the_submission_twice(monkeypatch):
    # PID 1 of a namespace only receives the signals it handles, and Python handles SIGINT: a
    # KeyboardInterrupt would end the server, and the grading process would then run the submission a
    # second time in a per-submission sandbox (with a fresh wall clock).
    monkeypatch.setenv("SCALING_BOOK_WARM_SANDBOX", "1")
    warm.close_this_thread()
    assert run("def f():\n    return 1\n") == 1
    box = warm._local.box
    attack = (
        "import os, signal, time\n"
        "def f():\n"
        "    try:\n"
        "        os.kill(1, signal.SIGINT)\n"
        "    except OSError:\n"
        "        pass\n"
        "    time.sleep(0.3)\n"
        "    with open('/proc/1/comm') as fh:\n"
        "        return fh.read().strip()\n"   # the server's name; bwrap's in a per-submission sandbox
    )
    assert run(attack).startswith("python")
    assert box.alive and warm._local.box is box and box.served == 2
    # and a submission still gets a KeyboardInterrupt from its own SIGINT, as in a fresh interpreter
    own = (
        "import os, signal\n"
        "def f():\n"
        "    try:\n"
        "        os.kill(os.getpid(), signal.SIGINT)\n"
        "        return 'no interrupt'\n"
        "    except KeyboardInterrupt:\n"
        "        return 'interrupted'\n"
    )
    assert run(own) == "interrupted"


# --------------------------------------------------------------------------------------------------
# Kernel state that outlives processes: TCP TIME_WAIT, keyrings
# --------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("sandbox_kind", WARM, indirect=True)
def test_loopback_connections_of_one_submission_are_not_seen_by_the_next(sandbox_kind):
    # A closed TCP connection stays in TIME_WAIT for 60 s in the sandbox's network namespace; its
    # port numbers, listed in /proc/net/tcp, are a message to every later submission.
    talker = (
        "import socket\n"
        "def f():\n"
        "    server = socket.socket()\n"
        "    server.bind(('127.0.0.1', 0))\n"
        "    server.listen()\n"
        "    client = socket.create_connection(server.getsockname())\n"
        "    accepted, _ = server.accept()\n"
        "    client.close()\n"
        "    accepted.close()\n"
        "    server.close()\n"
        "    return server.getsockname()[1] if False else 'talked'\n"
    )
    listener = (
        "def f():\n"
        "    rows = []\n"
        "    for name in ('/proc/net/tcp', '/proc/net/tcp6'):\n"
        "        try:\n"
        "            with open(name) as fh:\n"
        "                rows += fh.read().splitlines()[1:]\n"
        "        except OSError:\n"
        "            pass\n"
        "    return rows\n"
    )
    assert run(talker) == "talked"
    assert run(listener) == []


KEYCTL = {"x86_64": (248, 250), "aarch64": (217, 219)}.get(os.uname().machine)


@pytest.mark.skipif(KEYCTL is None, reason="syscall numbers known for x86_64 and aarch64 only")
@pytest.mark.parametrize("sandbox_kind", WARM, indirect=True)
def test_a_key_left_in_a_keyring_does_not_reach_the_next_submission(sandbox_kind):
    # add_key(2) into the session keyring (inherited from the server, or from the grading process),
    # readable by anyone, would let the next submission find it in /proc/keys and read it with
    # keyctl(2): every sandbox refuses the keyring system calls (grading/sandbox/seccomp.py).
    add_key, keyctl = KEYCTL
    plant = (
        "import ctypes\n"
        "def f(note):\n"
        "    note = note.encode()\n"
        "    libc = ctypes.CDLL(None, use_errno=True)\n"
        f"    key = libc.syscall({add_key}, b'user', b'scaling-book-rt17', note, len(note), -3)\n"
        f"    libc.syscall({keyctl}, 5, key, 0x3f3f3f3f)\n"   # KEYCTL_SETPERM: all to everyone
        "    return key > 0\n"
    )
    look = (
        "import ctypes\n"
        "def f():\n"
        "    libc = ctypes.CDLL(None, use_errno=True)\n"
        "    found = []\n"
        "    try:\n"
        "        lines = open('/proc/keys').read().splitlines()\n"
        "    except OSError:\n"
        "        lines = []\n"
        "    for line in lines:\n"
        "        if 'scaling-book-rt17' in line:\n"
        "            buf = ctypes.create_string_buffer(64)\n"
        f"            n = libc.syscall({keyctl}, 11, int(line.split()[0], 16), buf, 64)\n"  # KEYCTL_READ
        "            found.append(buf.raw[:max(n, 0)].decode() or line)\n"
        "    return found\n"
    )
    assert run(plant, "from the past") is False   # the seccomp filter refuses add_key (EPERM)
    assert run(look) == []
