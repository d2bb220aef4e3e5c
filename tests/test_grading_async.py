"""Grading off the event loop: `grade_async` gives `grade`'s verdicts, and while a submission runs
the loop keeps serving other coroutines."""

from __future__ import annotations

import asyncio
import json
import threading
from concurrent.futures import ThreadPoolExecutor

from scaling_book.grading import grade, grade_async

ADD_ITEM = {
    "grader": "code", "code_function": "add", "code_compare": "exact", "tolerance": None,
    "code_tests": json.dumps([{"args": [2, 3], "expected": 5}, {"args": [10, -4], "expected": 6}]),
    "code_baseline": 0.0,
}

FORMULA_ITEM = {
    "grader": "formula", "formula_answer": "2*B*D/W", "formula_symbols": ["B", "D", "W"],
    "formula_equivalents": [],
}


def submission(body: str) -> str:
    return f"```python\ndef add(a, b):\n{body}\n```"


def test_code_and_formula_verdicts_match_the_blocking_grader():
    responses = [
        (ADD_ITEM, submission("    return a + b")),                 # 5 and 6: right
        (ADD_ITEM, submission("    return a - b")),                 # -1 and 14: wrong
        (ADD_ITEM, "no code here"),
        (FORMULA_ITEM, "<answer>2 B D / W</answer>"),               # the same formula written out
        (FORMULA_ITEM, "<answer>B*D/W</answer>"),                   # half of it
        (FORMULA_ITEM, "<answer>import os</answer>"),
    ]
    with ThreadPoolExecutor(2) as pool:
        async def all_async():
            return await asyncio.gather(*(grade_async(info, text, executor=pool) for info, text in responses))
        graded = asyncio.run(all_async())
    expected_exact = [True, False, False, True, False, False]
    assert [g.exact for g in graded] == expected_exact
    for (info, text), g in zip(responses, graded, strict=True):
        blocking = grade(info, text)
        assert (g.correctness, g.exact, g.formatted, g.extracted) == (
            blocking.correctness, blocking.exact, blocking.formatted, blocking.extracted)


def test_the_loop_serves_other_coroutines_while_a_submission_runs():
    slow = submission("    import time\n    time.sleep(1.0)\n    return a + b")
    finished: list[str] = []

    async def grading():
        g = await grade_async(ADD_ITEM, slow, executor=pool)
        finished.append("grade")
        return g

    async def other():
        await asyncio.sleep(0)
        finished.append("other")

    async def both():
        return await asyncio.gather(grading(), other())

    with ThreadPoolExecutor(1) as pool:
        g, _ = asyncio.run(both())
    assert g.exact
    # blocking the loop for the submission's second would let `other` finish only after the grade
    assert finished == ["other", "grade"]


def test_the_blocking_step_runs_in_the_given_pool():
    threads: list[str] = []
    with ThreadPoolExecutor(1, thread_name_prefix="grading-test") as pool:
        original = pool.submit

        def recording_submit(fn, *args, **kwargs):
            def wrapped(*a, **k):
                threads.append(threading.current_thread().name)
                return fn(*a, **k)
            return original(wrapped, *args, **kwargs)

        pool.submit = recording_submit  # type: ignore[method-assign]
        g = asyncio.run(grade_async(ADD_ITEM, submission("    return a + b"), executor=pool))
    assert g.exact
    assert len(threads) == 1 and threads[0].startswith("grading-test")
