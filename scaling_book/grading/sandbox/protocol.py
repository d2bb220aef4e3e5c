"""The result protocol between the grading process and a sandboxed child.

The child runs ``RUNNER`` as ``python -I -S -c RUNNER``. It reads one input file, ``inputs.py`` (a
Python literal written by ``inputs_literal``: the source, the function name, the argument lists as
literals, the limits, the uid to drop to and a per-run nonce), deletes it, runs the submission and
reports on exactly one stdout line that starts with the nonce. Values cross as plain JSON (``bool``,
``int``, ``float``, ``str``, ``None``, lists, dicts with string keys): an object with a rigged ``__eq__``
cannot cross the process boundary. ``parse_report`` turns that line into a ``SandboxResult``.
"""

from __future__ import annotations

import json
import signal
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class CallError:
    """One test call that did not return a plain value (it raised, or returned an unsupported type).

    Never equal to any expected value: a test whose value is a ``CallError`` fails.
    """

    message: str


@dataclass(frozen=True)
class SandboxResult:
    """The outcome of one ``run_function`` call.

    ``status``: ``"ok"`` (the runner reported; ``values`` has one entry per argument list, each a plain
    value or a ``CallError``), ``"timeout"`` (wall clock exceeded, everything killed), ``"error"`` (the
    source did not load, the function is missing, the output was malformed or flooded) or
    ``"no_result"`` (the process ended without reporting: ``os._exit``, a signal, a resource limit).
    """

    status: str
    values: list | None
    detail: str
    duration_s: float
    mode: str
    per_call_errors: list[str] = field(default_factory=list)


# --------------------------------------------------------------------------------------------------
# The runner: executed inside the child as ``python -I -S -c RUNNER``. Builtin modules only (``posix``,
# ``resource``; importing ``json`` or ``os`` would cost more than the rest of the run).
# --------------------------------------------------------------------------------------------------

_CORE = r'''
import posix, sys

_ESC = {i: "\\u%04x" % i for i in range(32)}
_ESC[34] = '\\"'
_ESC[92] = "\\\\"

def _enc(v, depth, budget):
    budget[0] -= 1
    if budget[0] < 0 or depth > 32:
        raise ValueError("returned value too large or too deeply nested")
    t = type(v)
    if v is None:
        return "null"
    if t is bool:
        return "true" if v else "false"
    if t is int:
        if v.bit_length() > 4000:
            raise ValueError("returned integer too large")
        return repr(v)
    if t is float:
        if v != v:
            return "NaN"
        if v in (1e999, -1e999):
            return "Infinity" if v > 0 else "-Infinity"
        return repr(v)
    if t is str:
        return '"' + v.translate(_ESC) + '"'
    if t is list or t is tuple:
        return "[" + ",".join([_enc(x, depth + 1, budget) for x in v]) + "]"
    if t is dict:
        parts = []
        for k, x in v.items():
            if type(k) is not str:
                raise TypeError("returned dict with a non-string key")
            parts.append('"' + k.translate(_ESC) + '":' + _enc(x, depth + 1, budget))
        return "{" + ",".join(parts) + "}"
    raise TypeError("returned unsupported type " + repr(t.__name__)[:60])

def _describe(e):
    try:
        return (type(e).__name__ + ": " + str(e))[:300]
    except BaseException:
        return "exception"

def run(spec, out, prepare):
    # Runs the submission of ``spec`` and reports on descriptor ``out``; ``prepare()`` runs after the
    # limits are set and the uid is dropped, just before the submission.
    nonce = spec["nonce"]

    def report(text):
        data = ("\n" + nonce + " " + text + "\n").encode("utf-8", "backslashreplace")
        while data:
            data = data[posix.write(out, data):]

    import resource
    for name, value in spec["limits"].items():
        lim = getattr(resource, name)
        soft, hard = resource.getrlimit(lim)
        if hard != resource.RLIM_INFINITY and hard < value:
            value = hard
        resource.setrlimit(lim, (value, value))
    uid = spec["uid"]
    if uid is not None:
        posix.setgroups([])
        posix.setgid(uid)
        posix.setuid(uid)
    prepare()
    sys.argv = ["submission.py"]
    ns = {"__name__": "submission", "__builtins__": __builtins__}
    source, function, args_list = spec["source"], spec["function"], spec["args"]
    del spec
    try:
        # exec of the text (not compile()): compile() would first build every AST class (~1.5 ms)
        exec(source, ns)
    except BaseException as e:
        report('{"load_error":' + _enc(_describe(e), 0, [10]) + "}")
        return
    fn = ns.get(function)
    if not callable(fn):
        report('{"load_error":' + _enc("the submission does not define a function named "
                                       + repr(function), 0, [10]) + "}")
        return
    results = []
    budget = [100000]
    for args_text in args_list:
        try:
            value = fn(*eval(args_text, {"__builtins__": {}}, {}))
            results.append('{"v":' + _enc(value, 0, budget) + "}")
        except BaseException as e:
            results.append('{"e":' + _enc(_describe(e), 0, [10]) + "}")
    report('{"results":[' + ",".join(results) + "]}")
'''


#: The per-submission child: ``python -I -S -c RUNNER`` in the run's work directory, which holds
#: ``inputs.py`` (deleted before the submission runs).
RUNNER = _CORE + r"""
def main():
    with open("inputs.py", encoding="utf-8", errors="surrogatepass") as f:
        spec = eval(f.read(), {"__builtins__": {}}, {})
    out = posix.dup(1)
    null = posix.open("/dev/null", posix.O_WRONLY)
    posix.dup2(null, 1)
    posix.close(null)
    run(spec, out, lambda: posix.unlink("inputs.py"))

main()
"""


def py_literal(value: Any) -> str:
    """A Python literal for a plain-JSON value (the runner evaluates it with no builtins)."""
    if value is None or type(value) is bool or type(value) is int or type(value) is str:
        return repr(value)
    if type(value) is float:
        if value != value:
            return "(1e999-1e999)"
        if value in (float("inf"), float("-inf")):
            return "1e999" if value > 0 else "-1e999"
        return repr(value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(py_literal(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{py_literal(str(k))}: {py_literal(v)}" for k, v in value.items()) + "}"
    raise TypeError(f"test arguments must be plain JSON values, not {type(value).__name__}")


def parse_report(out: bytes, nonce: str, n_calls: int, returncode: int | None, stderr_tail: str,
                  duration: float, mode: str) -> SandboxResult:
    prefix = nonce.encode() + b" "
    lines = [line for line in out.split(b"\n") if line.startswith(prefix)]
    if not lines:
        why = exit_description(returncode)
        tail = f"; stderr: {stderr_tail[-500:]}" if stderr_tail else ""
        return SandboxResult("no_result", None, f"the child exited without reporting ({why}){tail}",
                             duration, mode)
    if len(lines) > 1:
        return SandboxResult("error", None, f"{len(lines)} result lines (expected exactly one)",
                             duration, mode)
    try:
        report: Any = json.loads(lines[0][len(prefix):])
    except (ValueError, RecursionError) as e:  # a forged line can nest 500,000 deep
        return SandboxResult("error", None, f"malformed result line: {e}", duration, mode)
    if not isinstance(report, dict):
        return SandboxResult("error", None, "malformed result line: not an object", duration, mode)
    if "load_error" in report:
        return SandboxResult("error", None, f"submission did not load: {report['load_error']}",
                             duration, mode)
    raw = report.get("results")
    if not isinstance(raw, list):
        return SandboxResult("error", None, "malformed result line: no results", duration, mode)
    values: list = []
    errors: list[str] = []
    for i, entry in enumerate(raw[:n_calls]):
        if isinstance(entry, dict) and "v" in entry:
            values.append(entry["v"])
        elif isinstance(entry, dict) and "e" in entry:
            values.append(CallError(str(entry["e"])[:300]))
            errors.append(f"call {i}: {str(entry['e'])[:300]}")
        else:
            values.append(CallError("malformed entry"))
            errors.append(f"call {i}: malformed entry")
    while len(values) < n_calls:
        values.append(CallError("no value reported"))
        errors.append(f"call {len(values) - 1}: no value reported")
    detail = f"{n_calls} calls, {len(errors)} raised" if errors else f"{n_calls} calls"
    if errors:
        detail += ": " + "; ".join(errors[:3])
    return SandboxResult("ok", values, detail, duration, mode, errors)


def exit_description(returncode: int | None) -> str:
    if returncode is None:
        return "no exit status"
    if returncode < 0:
        try:
            return f"killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"killed by signal {-returncode}"
    return f"exit status {returncode}"
