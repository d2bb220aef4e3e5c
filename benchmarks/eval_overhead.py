"""What a transfer check costs on top of the HTTP requests it sends, as ratios measured in one run.

    uv run python benchmarks/eval_overhead.py [--export build/export] [--concurrency 8]

An instant local OpenAI-compatible server (`tests/fake_openai.py`) runs in its own process, so
the CPU figures below are this process's alone. Against it, in this one process:

- the floor: a bare `httpx.AsyncClient` sending the transfer check's requests (the same system and
  user messages, once per rollout) at the same concurrency;
- `run_transfer_check` (train + held-out, recorded in a throwaway store) with a reply-only policy
  (a reply with no answer block: nothing to grade) at 1, 4 and 16 rollouts per item. The marginal
  client CPU per rollout is the least-squares slope of CPU over rollouts, for both the check and
  the floor; the target is a ratio <= 3x.
- the same check at 4 rollouts per item with the gold policy (every item answered correctly from
  its key, so every code item runs in the sandbox and every formula goes to sympy), interleaved in
  pairs with the same replies defaced (answer tags and code fences broken: the same bytes to carry
  and store, nothing to grade): wall within 10% of the ungraded wall is the target (grading does not
  hold up the requests). The gold replies are longer than the one-line reply of the slope runs (a
  code item's reply is a reference module), so comparing with those would charge the cost of
  carrying longer messages to grading. The machine's busy cores during each (from /proc/stat) say whether
  the two were competing for CPU.

Imports are paid once, before anything is timed. Start-up is reported on its own, with and
without bytecode caches (this machine sets PYTHONDONTWRITEBYTECODE=1, so a fresh `python` compiles
every module it imports; the "with caches" figure uses a throwaway PYTHONPYCACHEPREFIX).

Needs an export (`uv run scaling-book build`).
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))
sys.path.insert(0, str(REPO_ROOT / "tests"))

API_KEY_VAR = "SCALING_BOOK_BENCH_KEY"
HALVES = ("train", "heldout")
REPLY_ONLY = "I would rather not say."


def _serve(export: str, policy_name: str, port_queue) -> None:
    """The server process: the fake endpoint playing `policy_name` until terminated."""
    from fake_openai import FakeOpenAI, Oracle, read_export_rows

    if policy_name == "gold":
        policy = Oracle(read_export_rows(Path(export), "all"))
    elif policy_name == "gold-defaced":
        oracle = Oracle(read_export_rows(Path(export), "all"))

        def policy(messages):
            return deface(oracle(messages))
    else:
        def policy(messages):
            return REPLY_ONLY
    server = FakeOpenAI(policy).start()
    port_queue.put(server.port)
    while True:
        time.sleep(3600)


def deface(reply: str) -> str:
    """The gold reply with its answer block and code fences broken: the same bytes for the client to
    carry and store, nothing for a grader to grade (the floor of the gold policy's wall time)."""
    return reply.replace("<answer>", "<answr>").replace("</answer>", "</answr>").replace("`", "~")


class Server:
    """The fake endpoint in a child process."""

    def __init__(self, export: Path, policy: str) -> None:
        context = multiprocessing.get_context("spawn")
        queue = context.Queue()
        self.process = context.Process(target=_serve, args=(str(export), policy, queue), daemon=True)
        self.process.start()
        self.base_url = f"http://127.0.0.1:{queue.get(timeout=120)}/v1"

    def __enter__(self) -> Server:
        return self

    def __exit__(self, *exc: object) -> None:
        self.process.terminate()
        self.process.join(10)


def _bodies(export: Path, rollouts: int) -> list[dict]:
    """The chat bodies the transfer check sends: one per item and rollout, both halves."""
    from scaling_book.environment.taskset import read_rows

    bodies = []
    for half in HALVES:
        for row in read_rows(half, export):
            body = {"model": "bench", "messages": list(row["prompt"])}
            bodies.extend([body] * rollouts)
    return bodies


async def _bare(base_url: str, bodies: list[dict], concurrency: int) -> None:
    import httpx

    semaphore = asyncio.Semaphore(concurrency)
    async with httpx.AsyncClient(timeout=60, trust_env=False) as client:
        async def one(body: dict) -> None:
            async with semaphore:
                response = await client.post(f"{base_url}/chat/completions", json=body,
                                             headers={"Authorization": "Bearer x"})
                response.raise_for_status()
        await asyncio.gather(*(one(body) for body in bodies))


def machine_busy_s() -> float:
    """CPU seconds the whole machine has spent busy (every core, every process) since boot, from
    /proc/stat (NaN where there is none)."""
    try:
        with open("/proc/stat") as f:
            fields = [int(x) for x in f.readline().split()[1:]]
    except OSError:
        return float("nan")
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
    return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")


LAST_BUSY_CORES = [float("nan")]  # machine-wide busy cores during the last `timed` call


def timed(fn) -> tuple[float, float]:
    """(wall seconds, CPU seconds of this process) of `fn()`; the machine's mean number of busy cores
    meanwhile goes to LAST_BUSY_CORES[0]."""
    wall, cpu, busy = time.perf_counter(), time.process_time(), machine_busy_s()
    fn()
    wall = time.perf_counter() - wall
    LAST_BUSY_CORES[0] = (machine_busy_s() - busy) / wall
    return wall, time.process_time() - cpu


def bare(base_url: str, export: Path, rollouts: int, concurrency: int) -> tuple[float, float]:
    bodies = _bodies(export, rollouts)
    return timed(lambda: asyncio.run(_bare(base_url, bodies, concurrency)))


def check(base_url: str, export: Path, rollouts: int, concurrency: int, db_dir: str) -> tuple[float, float]:
    from rich.console import Console

    from scaling_book.runs.runner import EvalRequest
    from scaling_book.runs.transfer_check import run_transfer_check

    db = f"sqlite:///{db_dir}/bench-{time.monotonic_ns()}.sqlite"
    request = EvalRequest(model="bench", base_url=base_url, api_key_var=API_KEY_VAR, config="train",
                          export_dir=export, rollouts_per_item=rollouts, max_concurrent=concurrency)
    quiet = Console(file=open(os.devnull, "w"))

    def run() -> None:
        result = run_transfer_check(request, db_url=db, console=quiet)
        if result.status != "complete":
            raise SystemExit(f"the transfer check failed: {result.error}")
    return timed(run)


def slope(xs: list[float], ys: list[float]) -> float:
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)


def startup() -> dict[str, float]:
    """Seconds to import the transfer-check path in a fresh interpreter, without and with caches."""
    code = "import verifiers.v1, scaling_book.runs.transfer_check, scaling_book.environment.taskset"
    out = {}
    base = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    with tempfile.TemporaryDirectory() as prefix:
        for label, env in (
            ("no bytecode caches", {**base, "PYTHONDONTWRITEBYTECODE": "1", "PYTHONPYCACHEPREFIX": prefix + "/none"}),
            ("warming caches", {**base, "PYTHONPYCACHEPREFIX": prefix + "/warm"}),
            ("bytecode caches present", {**base, "PYTHONPYCACHEPREFIX": prefix + "/warm"}),
        ):
            start = time.perf_counter()
            subprocess.run([sys.executable, "-c", code], env=env, check=True, cwd=REPO_ROOT)
            out[label] = time.perf_counter() - start
    del out["warming caches"]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--export", type=Path, default=REPO_ROOT / "build" / "export")
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--rollouts", type=int, nargs="+", default=[1, 4, 16])
    parser.add_argument("--pairs", type=int, default=3, help="gold/reply-only pairs at 4 rollouts per item")
    args = parser.parse_args()
    if not (args.export / "manifest.json").is_file():
        sys.exit(f"no export under {args.export}: run `uv run scaling-book build` first")
    os.environ[API_KEY_VAR] = "not-a-real-key"
    print(f"bytecode caches: PYTHONDONTWRITEBYTECODE={os.environ.get('PYTHONDONTWRITEBYTECODE', '')!r} "
          "(timed sections run after every import, so they do not depend on it)")
    for label, seconds in startup().items():
        print(f"start-up, import of the transfer-check path, {label}: {seconds:.2f} s")

    with tempfile.TemporaryDirectory() as db_dir:
        with Server(args.export, "reply") as server:
            check(server.base_url, args.export, 1, args.concurrency, db_dir)   # imports, warm-up
            bare(server.base_url, args.export, 1, args.concurrency)
            n_items = len(_bodies(args.export, 1))
            rows = []
            for r in args.rollouts:
                b = bare(server.base_url, args.export, r, args.concurrency)
                c = check(server.base_url, args.export, r, args.concurrency, db_dir)
                rows.append((r, b, c))
                print(f"{r:>3} rollouts/item ({r * n_items} rollouts): check {c[0]:.2f} s wall, {c[1]:.2f} s CPU;"
                      f" bare client {b[0]:.2f} s wall, {b[1]:.2f} s CPU; ratio wall {c[0] / b[0]:.1f}x,"
                      f" CPU {c[1] / b[1]:.1f}x")
            counts = [r * n_items for r, _, _ in rows]
            check_slope = slope(counts, [c[1] for _, _, c in rows])
            bare_slope = slope(counts, [b[1] for _, b, _ in rows])
            reply_wall = next((c[0] for r, _, c in rows if r == 4), None)
        ratio = check_slope / bare_slope
        print(f"marginal client CPU per rollout: check {1000 * check_slope:.2f} ms, bare {1000 * bare_slope:.2f} ms:"
              f" {ratio:.1f}x (target <= 3x: {'met' if ratio <= 3 else 'missed'})")
        if reply_wall is None:
            return
        # Gold policy against the same replies defaced (nothing graded), interleaved in pairs (load
        # hits both alike), medians.
        gold, reply, busy_gold, busy_reply = [], [], [], []
        with Server(args.export, "gold") as gold_server, Server(args.export, "gold-defaced") as reply_server:
            check(gold_server.base_url, args.export, 1, args.concurrency, db_dir)  # sandboxes and sympy warm
            for _ in range(args.pairs):
                reply.append(check(reply_server.base_url, args.export, 4, args.concurrency, db_dir)[0])
                busy_reply.append(LAST_BUSY_CORES[0])
                gold.append(check(gold_server.base_url, args.export, 4, args.concurrency, db_dir)[0])
                busy_gold.append(LAST_BUSY_CORES[0])
        ratio = statistics.median(g / r for g, r in zip(gold, reply))
        print(f"4 rollouts/item, gold policy vs the same replies defaced (ungraded), {args.pairs} interleaved"
              f" pairs: median wall"
              f" {statistics.median(gold):.2f} s vs {statistics.median(reply):.2f} s, paired ratio {ratio:.2f}x"
              f" (target <= 1.10x: {'met' if ratio <= 1.10 else 'missed'}); machine busy"
              f" {statistics.median(busy_gold):.2f} vs {statistics.median(busy_reply):.2f} of"
              f" {os.cpu_count()} cores (the grading process, the local server, sandboxes, the sympy worker)")

if __name__ == "__main__":
    main()
