"""The benchmarks still run against the current API (they are scripts, not tests, and once crashed for
weeks on a renamed argument). Timings are not asserted here: the scripts print ratios."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

from scaling_book.paths import REPO_ROOT


def test_the_history_benchmark_runs_and_prints_every_ratio(built) -> None:
    r = subprocess.run([sys.executable, str(REPO_ROOT / "benchmarks" / "history.py"), "--export",
                        str(built["export_dir"]), "--sizes", "4", "6", "--repeats", "1", "--rollouts", "1"],
                       capture_output=True, text=True, timeout=600, cwd=REPO_ROOT)
    assert r.returncode == 0, r.stderr[-2000:]
    ratios = [line for line in r.stdout.splitlines() if line.startswith("  ") and "x " in line]
    assert [line.split(":")[0].strip() for line in ratios] == [
        "README query 1", "README query 2", "README query 3", "history (transfer_history)",
        "compare (compare_runs)"]


def test_the_eval_overhead_benchmark_checks_and_floor_run(built, monkeypatch) -> None:
    benchmarks, tests = str(REPO_ROOT / "benchmarks"), str(REPO_ROOT / "tests")
    monkeypatch.syspath_prepend(benchmarks)
    # the local server runs in a spawned process, which imports the benchmark module by name
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([benchmarks, tests, os.environ.get("PYTHONPATH", "")]))
    import eval_overhead

    monkeypatch.setenv(eval_overhead.API_KEY_VAR, "not-a-real-key")
    export = Path(built["export_dir"])
    with tempfile.TemporaryDirectory() as db_dir, eval_overhead.Server(export, "gold-defaced") as server:
        wall, cpu = eval_overhead.check(server.base_url, export, 1, 8, db_dir)
        bare_wall, bare_cpu = eval_overhead.bare(server.base_url, export, 1, 8)
    assert wall > 0 and cpu > 0 and bare_wall > 0 and bare_cpu > 0
    assert eval_overhead.LAST_BUSY_CORES[0] >= 0


def test_defacing_leaves_nothing_to_grade() -> None:
    sys.path.insert(0, str(REPO_ROOT / "benchmarks"))
    try:
        from eval_overhead import deface
    finally:
        sys.path.remove(str(REPO_ROOT / "benchmarks"))
    from scaling_book.grading.extract import extract_answer, extract_code

    gold = "Working.\n\n<answer>625</answer>\n\n```python\ndef f(x):\n    return x\n```"
    defaced = deface(gold)
    assert len(defaced) == len(gold) - 2 and extract_answer(defaced) is None and extract_code(defaced) is None
