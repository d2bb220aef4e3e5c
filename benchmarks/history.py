"""Run-history queries as the store grows, as ratios measured in one run.

    uv run python benchmarks/history.py [--export build/export] [--rollouts 2] [--sizes 4 200 2000]

One real transfer check (model `M`, step 100, `--rollouts` per item, a policy right on two thirds
of the items) is recorded in a throwaway SQLite store against an instant local server
(`tests/fake_openai.py`). Every other run is an SQL copy of that check's rows: one copy as model `M`
at step 200 with every item's outcome flipped (so README query 2 has items to report), the rest as
other models, until the store holds each of `--sizes` runs (two runs per check; the smallest size
is the real check and its step-200 copy). Every table with a `run_id` column is copied, so the
benchmark follows whatever the schema stores per run.

At each size it times (median of `--repeats`) the README's three queries for model `M`,
`history` (`transfer_history`) and `compare` (`compare_runs`, the two train runs of `M`), and
prints each one's time and the ratio largest size / smallest size (target <= 1.5x).
"""

from __future__ import annotations

import argparse
import hashlib
import os
import re
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))
sys.path.insert(0, str(REPO_ROOT / "tests"))

API_KEY_VAR = "SCALING_BOOK_BENCH_KEY"


def readme_queries() -> list[str]:
    """The three `sqlite3` queries of the README's "Run history in SQL", in order."""
    text = (REPO_ROOT / "README.md").read_text()
    section = text[text.index("## Run history in SQL"):]
    return [q.strip() for q in re.findall(r'sqlite3 -header -column \S+ \\\n\s*"(.*?)"', section, re.S)][:3]


def record_real_check(export: Path, db_url: str, rollouts: int) -> None:
    from fake_openai import FakeOpenAI, Oracle, Wrong, read_export_rows
    from rich.console import Console

    from scaling_book.runs.runner import EvalRequest
    from scaling_book.runs.transfer_check import run_transfer_check

    rows = read_export_rows(export, "all")
    oracle, wrong = Oracle(rows), Wrong(rows)

    def policy(messages):
        row = oracle.row_for(messages)
        right = int(hashlib.sha256(row["id"].encode()).hexdigest()[:4], 16) % 3 != 0
        return (oracle if right else wrong).answer(row)

    os.environ[API_KEY_VAR] = "not-a-real-key"
    with FakeOpenAI(policy) as server:
        request = EvalRequest(model="M", base_url=server.base_url, api_key_var=API_KEY_VAR, config="train",
                              export_dir=export, rollouts_per_item=rollouts, step=100, max_concurrent=8)
        result = run_transfer_check(request, db_url=db_url, console=Console(file=open(os.devnull, "w")))
    if result.status != "complete":
        sys.exit(f"the transfer check failed: {result.error}")


def columns(db: sqlite3.Connection, table: str) -> list[str]:
    return [row[1] for row in db.execute(f"PRAGMA table_info({table})")]


def copy_check(db: sqlite3.Connection, check_id: int, model: str, step: int, flip: bool) -> None:
    """Copy transfer check `check_id`, its runs and every per-run row, as `model` at `step`."""
    check_cols = [c for c in columns(db, "transfer_checks") if c != "id"]
    select = ", ".join({"model": ":model", "step": ":step"}.get(c, c) for c in check_cols)
    db.execute(f"INSERT INTO transfer_checks ({', '.join(check_cols)}) SELECT {select} FROM transfer_checks "
               "WHERE id = :id", {"model": model, "step": step, "id": check_id})
    new_check = db.execute("SELECT last_insert_rowid()").fetchone()[0]
    run_cols = [c for c in columns(db, "eval_runs") if c != "id"]
    per_run = [t for (t,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
               if "run_id" in columns(db, t)]
    for (run_id,) in db.execute("SELECT id FROM eval_runs WHERE transfer_check_id = ? ORDER BY id",
                                (check_id,)).fetchall():
        select = ", ".join({"model": ":model", "step": ":step", "transfer_check_id": ":check"}.get(c, c)
                           for c in run_cols)
        db.execute(f"INSERT INTO eval_runs ({', '.join(run_cols)}) SELECT {select} FROM eval_runs WHERE id = :id",
                   {"model": model, "step": step, "check": new_check, "id": run_id})
        new_run = db.execute("SELECT last_insert_rowid()").fetchone()[0]
        for table in per_run:
            cols = [c for c in columns(db, table) if c != "id"]
            flips = {"exact": "1 - exact", "mean_exact": "1.0 - mean_exact"} if flip else {}
            select = ", ".join(":run" if c == "run_id" else flips.get(c, c) for c in cols)
            db.execute(f"INSERT INTO {table} ({', '.join(cols)}) SELECT {select} FROM {table} WHERE run_id = :old",
                       {"run": new_run, "old": run_id})


def grow_to(db: sqlite3.Connection, runs: int) -> None:
    """Add copies of check 1 under other models until the store holds `runs` runs."""
    have = db.execute("SELECT COUNT(*) FROM eval_runs").fetchone()[0]
    copy = have // 2
    while have < runs:
        copy_check(db, 1, f"other-{copy % 50}", 100 * (copy // 50 + 1), flip=copy % 2 == 1)
        have += 2
        copy += 1
    db.commit()


def median_ms(fn, repeats: int) -> float:
    fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return 1000 * statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--export", type=Path, default=REPO_ROOT / "build" / "export")
    parser.add_argument("--rollouts", type=int, default=2)
    parser.add_argument("--sizes", type=int, nargs="+", default=[4, 200, 2000])
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    if not (args.export / "manifest.json").is_file():
        sys.exit(f"no export under {args.export}: run `uv run scaling-book build` first")
    from scaling_book.runs.compare import compare_runs
    from scaling_book.runs.history import transfer_history
    from scaling_book.store import make_engine, make_session_factory

    queries = readme_queries()
    assert len(queries) == 3, "the README's history queries were not found"
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "history.sqlite"
        url = f"sqlite:///{path}"
        record_real_check(args.export, url, args.rollouts)
        db = sqlite3.connect(path)
        copy_check(db, 1, "M", 200, flip=True)
        db.commit()
        train_a, train_b = [r for (r,) in db.execute(
            "SELECT id FROM eval_runs WHERE model = 'M' AND config = 'train' ORDER BY id")]
        engine = make_engine(url)
        factory = make_session_factory(engine)
        measured: dict[str, list[float]] = {}
        for size in sorted(args.sizes):
            grow_to(db, size)
            n_runs, n_rollouts = db.execute("SELECT COUNT(DISTINCT run_id), COUNT(*) FROM rollout_results").fetchone()
            figures = {}
            for number, sql in enumerate(queries, 1):
                found = len(db.execute(sql).fetchall())
                figures[f"README query {number} ({found} rows)"] = median_ms(lambda: db.execute(sql).fetchall(),
                                                                              args.repeats)
            figures["history (transfer_history)"] = median_ms(lambda: transfer_history(factory, "M"), args.repeats)
            figures["compare (compare_runs)"] = median_ms(lambda: compare_runs(factory, train_a, train_b),
                                                          args.repeats)
            print(f"{n_runs} runs, {n_rollouts} rollouts: "
                  + "; ".join(f"{name} {ms:.3f} ms" for name, ms in figures.items()))
            for name, ms in figures.items():
                measured.setdefault(re.sub(r" \(\d+ rows\)", "", name), []).append(ms)
        engine.dispose()
        db.close()
    low, high = min(args.sizes), max(args.sizes)
    print(f"ratio {high}-run / {low}-run (target <= 1.5x):")
    for name, values in measured.items():
        ratio = values[-1] / values[0]
        print(f"  {name}: {values[0]:.3f} -> {values[-1]:.3f} ms, {ratio:.2f}x {'met' if ratio <= 1.5 else 'missed'}")


if __name__ == "__main__":
    main()
