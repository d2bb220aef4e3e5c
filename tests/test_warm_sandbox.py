"""The warm sandbox: one submission cannot see or affect the next (files, processes, environment, IPC),
the server is out of the submissions' reach, and it is replaced when it should be.

Every cross-submission test runs twice: in the warm sandbox (one server forks both submissions) and
with ``SCALING_BOOK_WARM_SANDBOX=0`` (each submission in a bwrap of its own), where isolation between
submissions is the kernel's. The tests in ``test_sandbox.py`` and ``test_reward_hacking.py`` run against
the warm sandbox, the default in bwrap mode.
"""

from __future__ import annotations

import os
import secrets
import time

import pytest

from scaling_book.grading.sandbox import isolation_mode, run_function, warm

pytestmark = pytest.mark.skipif(isolation_mode() != "bwrap", reason="bubblewrap not available")

WARM = [pytest.param(True, id="warm"), pytest.param(False, id="per-submission")]


def run(src: str, *args):
    r = run_function(src, "f", [list(args)], 20, mode="bwrap")
    assert r.status == "ok", r.detail
    return r.values[0]


def current_box():
    return getattr(warm._local, "box", None)


LIST_TMP = (
    "import os\n"
    "def f():\n"
    "    found = []\n"
    "    for top, dirs, files in os.walk('/tmp'):\n"
    "        found += [os.path.join(top, n) for n in dirs + files]\n"
    "    return [sorted(found), os.getcwd()]\n"
)


@pytest.mark.parametrize("sandbox_kind", WARM, indirect=True)
def test_files_of_one_submission_are_gone_for_the_next(sandbox_kind):
    # /tmp outside the work directory is writable in the warm sandbox (the server empties it) and
    # read-only in a per-submission one.
    planted = (
        "import os\n"
        "def f():\n"
        "    made = []\n"
        "    for path in ['/tmp/planted/deep/er/x', os.path.expanduser('~/y'), 'z', '/tmp/.hidden']:\n"
        "        try:\n"
        "            os.makedirs(os.path.dirname(path) or '.', exist_ok=True)\n"
        "            with open(path, 'w') as fh:\n"
        "                fh.write('left behind')\n"
        "            made.append(path)\n"
        "        except OSError:\n"
        "            pass\n"
        "    try:\n"
        "        os.chmod('/tmp/planted/deep', 0)\n"   # a directory its owner made unreadable
        "        os.symlink('/usr', '/tmp/link')\n"
        "    except OSError:\n"
        "        pass\n"
        "    return len(made)\n"
    )
    fresh, fresh_cwd = run(LIST_TMP)
    assert run(planted) == (4 if sandbox_kind else 2)
    found, cwd = run(LIST_TMP)
    assert cwd.startswith("/tmp/scaling-book-run-") and cwd in found
    # What a fresh submission sees (its own empty work directory, and empty read-only stand-ins for
    # hidden host directories that sit under /tmp), and nothing planted.
    assert [p for p in found if p != cwd] == [p for p in fresh if p != fresh_cwd]


@pytest.mark.parametrize("sandbox_kind", WARM, indirect=True)
def test_hidden_directories_under_tmp_stay_hidden_and_unchanged(sandbox_kind, tmp_path, monkeypatch):
    # The grading process's working directory is hidden from submissions; here it sits under /tmp,
    # inside the tmpfs the warm server empties after each submission.
    monkeypatch.chdir(tmp_path)
    (tmp_path / "answers.md").write_text("expected: 42\n")
    fresh, fresh_cwd = run(LIST_TMP)
    assert str(tmp_path) in fresh and not [p for p in fresh if p.endswith("answers.md")]
    attack = (
        "import os\n"
        "def f(hidden):\n"
        "    done = []\n"
        "    path = hidden\n"
        "    while path != '/tmp':\n"
        "        for name, act in [('chmod', lambda p: os.chmod(p, 0o777)),\n"
        "                          ('plant', lambda p: open(os.path.join(p, 'planted'), 'w').close()),\n"
        "                          ('rename', lambda p: os.rename(p, p + '.moved'))]:\n"
        "            try:\n"
        "                act(path)\n"
        "                done.append(name + ' ' + path)\n"
        "            except OSError:\n"
        "                pass\n"
        "        path = os.path.dirname(path)\n"
        "    return done\n"
    )
    run(attack, str(tmp_path))
    found, cwd = run(LIST_TMP)
    assert [p for p in found if p != cwd] == [p for p in fresh if p != fresh_cwd]


@pytest.mark.parametrize("sandbox_kind", WARM, indirect=True)
def test_processes_of_one_submission_do_not_outlive_it(sandbox_kind):
    marker = f"{secrets.randbelow(10**6) + 10**6}.25"
    spawner = (
        "import os, subprocess, time\n"
        "def f():\n"
        f"    subprocess.Popen(['sleep', '{marker}'], start_new_session=True)\n"
        "    if os.fork() == 0:\n"   # a detached writer that would plant files for the next submission
        "        os.setsid()\n"
        "        if os.fork() == 0:\n"
        "            while True:\n"
        "                try:\n"
        "                    open('/tmp/from-the-past', 'w').close()\n"
        "                except OSError:\n"
        "                    pass\n"
        "                time.sleep(0.001)\n"
        "        os._exit(0)\n"
        "    time.sleep(0.05)\n"
        "    return os.path.exists('/tmp/from-the-past')\n"
    )
    assert run(spawner) is sandbox_kind   # /tmp is writable in the warm sandbox only
    looker = (
        "import os, time\n"
        "def f():\n"
        "    time.sleep(0.1)\n"
        "    pids = sorted(int(p) for p in os.listdir('/proc') if p.isdigit())\n"
        "    return [pids, os.getpid(), os.path.exists('/tmp/from-the-past')]\n"
    )
    pids, me, planted = run(looker)
    assert not planted
    assert set(pids) <= {1, me}   # nothing but this submission (and the sandbox's PID 1)
    assert not [p for p in os.listdir("/proc") if p.isdigit() and _cmdline_has(p, marker)]


def _cmdline_has(pid: str, marker: str) -> bool:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return marker.encode() in f.read()
    except OSError:
        return False


@pytest.mark.parametrize("sandbox_kind", WARM, indirect=True)
def test_environment_and_interpreter_state_do_not_carry_over(sandbox_kind):
    changer = (
        "import os, sys, builtins, json\n"
        "def f():\n"
        "    os.environ['LEAK'] = 'yes'\n"
        "    os.putenv('LEAK2', 'yes')\n"
        "    builtins.LEAK = 1\n"
        "    builtins.len = lambda x: 0\n"
        "    json.dumps = lambda *a, **k: 'rigged'\n"
        "    sys.modules['math'] = None\n"
        "    os.chdir('/')\n"
        "    return os.umask(0)\n"
    )
    umask_before = run(changer)
    looker = (
        "import os, builtins, json, math\n"
        "def f():\n"
        "    return [sorted(os.environ), hasattr(builtins, 'LEAK'), len('abc'), json.dumps([1]),\n"
        "            math.sqrt(4.0), os.getcwd() == os.environ['HOME'], os.umask(0o22)]\n"
    )
    env, leaked_builtin, length, dumped, root, home_is_cwd, umask = run(looker)
    assert "LEAK" not in env and "LEAK2" not in env
    assert set(env) <= {"PATH", "LANG", "LC_ALL", "HOME", "TMPDIR", "PYTHONHASHSEED", "SCALING_BOOK_RUN", "PWD"}
    assert (leaked_builtin, length, dumped, root, home_is_cwd) == (False, 3, "[1]", 2.0, True)
    assert umask == umask_before


SYSV_SHM = (
    "import ctypes\n"
    "def f(create):\n"
    "    libc = ctypes.CDLL(None, use_errno=True)\n"
    "    libc.shmat.restype = ctypes.c_void_p\n"
    "    key = 0x5b00c\n"
    "    shmid = libc.shmget(key, 4096, (0o1000 | 0o666) if create else 0)\n"   # IPC_CREAT
    "    if shmid < 0:\n"
    "        return 'errno %d' % ctypes.get_errno()\n"
    "    addr = libc.shmat(shmid, None, 0)\n"
    "    if create:\n"
    "        ctypes.memmove(addr, b'secret', 6)\n"
    "        return 'created'\n"
    "    return ctypes.string_at(addr, 6).decode()\n"
)


@pytest.mark.parametrize("sandbox_kind", WARM, indirect=True)
def test_system_v_ipc_objects_do_not_reach_the_next_submission(sandbox_kind):
    assert run(SYSV_SHM, True) == "created"
    assert run(SYSV_SHM, False) == "errno 2"   # ENOENT: the next one finds no such segment


@pytest.mark.parametrize("sandbox_kind", WARM, indirect=True)
def test_posix_message_queues_are_refused(sandbox_kind):
    src = (
        "import ctypes, ctypes.util\n"
        "def f():\n"
        "    rt = ctypes.CDLL(ctypes.util.find_library('rt') or 'librt.so.1', use_errno=True)\n"
        "    fd = rt.mq_open(b'/scaling-book-leak', 0o100 | 0o2, 0o600, None)\n"   # O_CREAT | O_RDWR
        "    return 'opened' if fd >= 0 else 'refused'\n"
    )
    assert run(src) == "refused"


def test_the_server_is_out_of_the_submissions_reach(monkeypatch):
    monkeypatch.setenv("SCALING_BOOK_WARM_SANDBOX", "1")
    warm.close_this_thread()
    attack = (
        "import os, signal, ctypes\n"
        "def f():\n"
        "    out = []\n"
        "    for sig in (signal.SIGKILL, signal.SIGSTOP, signal.SIGTERM):\n"
        "        try:\n"
        "            os.kill(1, sig)\n"
        "        except OSError as e:\n"
        "            out.append(type(e).__name__)\n"
        "    for name in ('environ', 'mem', 'maps'):\n"
        "        try:\n"
        "            open('/proc/1/' + name, 'rb').read(1)\n"
        "            out.append('read ' + name)\n"
        "        except OSError as e:\n"
        "            out.append(type(e).__name__)\n"
        "    libc = ctypes.CDLL(None, use_errno=True)\n"
        "    out.append(libc.ptrace(16, 1, None, None))\n"   # PTRACE_ATTACH to the server
        "    return out\n"
    )
    run("def f():\n    return 0\n")
    box = current_box()
    assert box is not None and box.alive
    outcome = run(attack)
    assert not [o for o in outcome if isinstance(o, str) and o.startswith("read ")], outcome
    assert outcome[-1] == -1   # ptrace refused
    assert run("def f(a, b):\n    return a * b\n", 6, 7) == 42
    assert current_box() is box and box.alive and box.served == 3   # the same server served all three


def test_the_sandbox_is_replaced_after_a_timeout_and_after_max_submissions(monkeypatch):
    monkeypatch.setenv("SCALING_BOOK_WARM_SANDBOX", "1")
    monkeypatch.setattr(warm, "MAX_SUBMISSIONS", 2)
    warm.close_this_thread()
    double = "def f(x):\n    return 2 * x\n"
    assert run(double, 1) == 2
    first = current_box()
    assert run(double, 2) == 4
    assert not first.alive   # replaced after its second submission
    assert run(double, 3) == 6
    second = current_box()
    assert second is not first and second.alive
    start = time.monotonic()
    r = run_function("def f():\n    while True:\n        pass\n", "f", [[]], 1, mode="bwrap")
    assert r.status == "timeout" and time.monotonic() - start < 1 + 8
    assert not second.alive
    assert run(double, 4) == 8 and current_box() is not second


def test_each_submission_runs_as_a_uid_of_its_own_when_the_grader_is_root(monkeypatch):
    if os.geteuid() != 0:
        pytest.skip("only a root caller drops submissions to fresh uids")
    monkeypatch.setenv("SCALING_BOOK_WARM_SANDBOX", "1")
    src = "import os\ndef f():\n    return [os.getuid(), os.geteuid(), os.getgid()]\n"
    first, second = run(src), run(src)
    assert first[0] == first[1] == first[2] and first[0] >= 200_000
    assert second[0] >= 200_000 and second[0] != first[0]
