"""Grading performance, as ratios measured in one run on one machine.

    uv run python benchmarks/grading.py [--export build/export] [--repeats 30]

Prints:
- code grading: latency per submission (one sandboxed run of all of an item's test cases, visible and
  hidden, compared in-process) divided by a bare `python -I -S -c pass` start of the same interpreter,
  for rlimit mode and, where bubblewrap works, for a per-submission bwrap sandbox (with its floor: the
  same bwrap command running `-c pass`) and for the warm sandbox (target <= 1.0x), and the bwrap
  binary that ran;
- formula grading: median and worst case over the dataset's formula items (gold and a wrong answer
  each) and over hostile inputs; the worst case is bounded by `FORMULA_TIMEOUT_S` plus a worker
  restart;
- numeric grading throughput: numeric and numeric_multi rollouts graded per second.

Needs an export (`uv run scaling-book build`).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))

from scaling_book.grading import formula, grade  # noqa: E402
from scaling_book.grading.sandbox import isolation  # noqa: E402

HOSTILE_FORMULAS = [
    "9**9**9**9", "2**30**5", "floor(10**10**10/T)", "T" + "**T" * 90,
    "(T+D)**(T+D)**(T+D)**(T+D)**(T+D)**(T+D)**(T+D)**(T+D)", "(" * 90 + "T" + ")" * 90 + "**12345678",
    "-" * 500 + "T", "T" * 2000, "__import__('os').system('true')",
]


def load_rows(export: Path) -> list[dict]:
    from scaling_book.environment.taskset import read_rows

    if not (export / "manifest.json").is_file():
        sys.exit(f"no export under {export}: run `uv run scaling-book build` first")
    return read_rows("all", export)  # code items carry their hidden test cases, as the taskset loads them


def bench_code(rows: list[dict], repeats: int) -> None:
    print("code grading (one sandboxed run per submission, all test cases in it)")
    infos = [r["info"] for r in rows if r["info"]["grader"] == "code"]
    # A typical submission: the right function name, arithmetic on its arguments.
    info = next(i for i in infos if i["code_compare"] == "rel")
    tests = json.loads(info["code_tests"])
    n_tests = len(tests) + len(json.loads(info.get("code_hidden_tests") or "[]"))
    n_args = len(tests[0]["args"])
    args = ", ".join(f"a{i}" for i in range(n_args))
    response = f"```python\ndef {info['code_function']}({args}):\n    return 1.5 * a0\n```"
    detected = isolation.isolation_mode()
    # (label, isolation mode, warm sandbox on)
    kinds = [("rlimit", "rlimit", False)]
    if detected == "bwrap":
        kinds += [("bwrap, per-submission sandbox", "bwrap", False), ("bwrap, warm sandbox", "bwrap", True)]
    root = os.geteuid() == 0
    warm_env = os.environ.get("SCALING_BOOK_WARM_SANDBOX")
    bare_s: list[float] = []
    graded: dict[str, list[float]] = {label: [] for label, _, _ in kinds}
    python, _ = isolation.child_python("rlimit", root)
    empty = tempfile.mkdtemp(dir="/tmp")
    ns_s: list[float] = []
    ns_only: list[str] = []
    if detected == "bwrap":
        bwrap_python, drops = isolation.child_python("bwrap", root)
        full = isolation.bwrap_command(empty, bwrap_python, drops)
        ns_only = full[: full.index("--") + 1] + [bwrap_python, "-I", "-S", "-c", "pass"]

    def grade_as(mode: str, warm: bool) -> float:
        isolation._mode_cache = mode  # grade in this mode (rlimit with the opt-in below)
        os.environ["SCALING_BOOK_WARM_SANDBOX"] = "1" if warm else "0"
        start = time.perf_counter()
        grade(info, response, allow_code_execution="unisolated")
        return time.perf_counter() - start

    print("  (the rlimit row opts in to running code without isolation for this measurement only: the"
          " UNISOLATED warning it prints is expected)", flush=True)
    try:
        for _, mode, warm in kinds:  # warm-up: the warm sandbox's server starts here
            grade_as(mode, warm)
        # Interleaved, so that load from other processes hits every measurement alike.
        for _ in range(repeats):
            start = time.perf_counter()
            subprocess.run([python, "-I", "-S", "-c", "pass"], check=True)
            bare_s.append(time.perf_counter() - start)
            if ns_only:
                start = time.perf_counter()
                subprocess.run(ns_only, check=True)
                ns_s.append(time.perf_counter() - start)
            for label, mode, warm in kinds:
                graded[label].append(grade_as(mode, warm))
    finally:
        isolation._mode_cache = detected
        if warm_env is None:
            os.environ.pop("SCALING_BOOK_WARM_SANDBOX", None)
        else:
            os.environ["SCALING_BOOK_WARM_SANDBOX"] = warm_env
    bare = statistics.median(bare_s)
    print(f"  {n_tests} tests per submission ({len(tests)} visible + {n_tests - len(tests)} hidden, item "
          f"{info['item_id']}); bare `{Path(python).name} -I -S -c pass` {bare * 1000:5.1f} ms (median of "
          f"{repeats}, interleaved)")
    for label, mode, warm in kinds:
        per = statistics.median(graded[label])
        target = ("target <= 1.0x" if warm else "no target; its floor, bwrap alone, is below" if mode == "bwrap"
                  else "not a sandbox")
        print(f"  {label:30s}: {per * 1000:6.1f} ms per submission; ratio to bare {per / bare:.2f}x ({target})")
    if ns_s:
        ns = statistics.median(ns_s)
        binary = isolation.bwrap_binary()
        print(f"  floor of a per-submission sandbox: the same bwrap command running `-c pass` alone "
              f"{ns * 1000:5.1f} ms ({ns / bare:.2f}x bare) [{binary.label} at {binary.path}]"
              f"{'; as root, each submission runs under a uid of its own' if root else ''}")


def bench_formula(rows: list[dict]) -> None:
    print(f"formula grading (worker bound {formula.FORMULA_TIMEOUT_S:g} s per request)")
    infos = [r["info"] for r in rows if r["info"]["grader"] == "formula"]
    grade(infos[0], f"<answer>{infos[0]['formula_answer']}</answer>")  # start the worker
    times = []
    for info in infos:
        for answer in (info["formula_answer"], f"({info['formula_answer'].split('>')[0].split('<')[0]}) + 1"):
            start = time.perf_counter()
            grade(info, f"<answer>{answer}</answer>")
            times.append(time.perf_counter() - start)
    print(f"  dataset ({len(times)} gradings): median {statistics.median(times) * 1000:.1f} ms, "
          f"worst {max(times) * 1000:.1f} ms")
    item = {"grader": "formula", "formula_answer": "T/(8*D)", "formula_symbols": ["T", "D"],
            "formula_equivalents": []}
    hostile = []
    for text in HOSTILE_FORMULAS:
        start = time.perf_counter()
        g = grade(item, f"<answer>{text}</answer>")
        hostile.append((time.perf_counter() - start, text, g.reason))
    worst = max(hostile)
    print(f"  hostile ({len(hostile)} inputs): median {statistics.median(t for t, _, _ in hostile) * 1000:.1f} ms, "
          f"worst {worst[0] * 1000:.0f} ms ({worst[1][:24]!r}...: {worst[2][:60]}); "
          f"bound {formula.FORMULA_TIMEOUT_S * 1000:.0f} ms + a worker restart; "
          f"worker restarts {formula.worker_restarts()}")


def bench_numeric(rows: list[dict], seconds: float = 2.0) -> None:
    infos = [r["info"] for r in rows if r["info"]["grader"] in ("numeric", "numeric_multi")]
    responses = [f"Reasoning...\n<answer>{'; '.join(f'{t:.4g}' for t in i['targets'])}</answer>" for i in infos]
    with_units = [f"<answer>{'; '.join(f'{t:.4g} {u}' for t, u in zip(i['targets'], i['units']))}</answer>"
                  for i in infos]
    start = time.perf_counter()
    for info, response, response_u in zip(infos, responses, with_units):  # loads the unit registry once
        grade(info, response)
        grade(info, response_u)
    print(f"numeric grading warm-up (one pass, with and without units; loads the pint registry): "
          f"{time.perf_counter() - start:.2f} s")

    def rate(answers: list[str]) -> float:
        """Rollouts graded per second, grading `answers` over and over for `seconds`."""
        n, start = 0, time.perf_counter()
        while time.perf_counter() - start < seconds:
            for info, response in zip(infos, answers):
                grade(info, response)
            n += len(infos)
        return n / (time.perf_counter() - start)

    print(f"numeric grading: {rate(responses):,.0f} rollouts/s over {len(infos)} numeric and numeric_multi items")
    print(f"numeric grading, every value with its unit: {rate(with_units):,.0f} rollouts/s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--export", type=Path, default=REPO_ROOT / "build" / "export",
                        help="the export to grade items of (default: build/export)")
    parser.add_argument("--repeats", type=int, default=40,
                        help="measurements per code-grading row, interleaved; medians are printed (default: 40)")
    parser.add_argument("--only", choices=["code", "formula", "numeric"], default=None,
                        help="run one benchmark only")
    args = parser.parse_args()
    rows = load_rows(args.export)
    print(f"isolation mode: {isolation.isolation_mode()} ({isolation.isolation_label()}); {len(rows)} items")
    if args.only in (None, "code"):
        bench_code(rows, args.repeats)
    if args.only in (None, "formula"):
        bench_formula(rows)
    if args.only in (None, "numeric"):
        bench_numeric(rows)


if __name__ == "__main__":
    main()
