"""A tiny OpenAI-compatible chat-completions server for tests, playing a scripted policy.

`FakeOpenAI(policy)` listens on 127.0.0.1 on a free port in a background thread. A policy is a
function from the request's messages (a list of {"role", "content"} dicts) to the reply text, or to
a `Reply` that also sets `finish_reason` ("length" for a reply cut at the token limit),
`reasoning_content`, a null `content`, a delay before answering, or a hang (never answers until the
server stops); it may raise `PolicyError(status)` to answer with an HTTP error instead (401 for a
rejected key). `api_key` makes every route answer 401 to any other bearer token; `served_models` is
the list `GET /v1/models` returns (empty by default: the server does not enumerate its models).
Every request is recorded.

    with FakeOpenAI(policy) as server:
        evaluate(..., base_url=server.base_url, api_key_var="FAKE_KEY")

`Oracle(rows)` answers every exported item correctly from its key (found by the question text
of the user message), and `Wrong(rows)` answers every item incorrectly, both in the answer format
of `scaling_book.grading.prompt.SYSTEM_PROMPT`. Neither imports scaling_book's graders: the answers are
built from the exported `info` fields, and code answers from the reference solutions in `seed/`.
"""

from __future__ import annotations

import json
import re
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent

@dataclass
class Reply:
    """A scripted reply with more than text: `content=None` sends a null content."""

    content: str | None
    finish_reason: str = "stop"
    reasoning_content: str | None = None
    delay_s: float = 0.0
    """Seconds to wait before answering (a slow reply)."""
    hang: bool = False
    """Never answer (until the server stops): a server that accepts and goes silent."""


Policy = Callable[[list[dict[str, Any]]], "str | Reply"]


class PolicyError(Exception):
    """Raised by a policy to answer with HTTP `status` instead of a completion."""

    def __init__(self, status: int, message: str = "scripted failure") -> None:
        super().__init__(message)
        self.status = status


@dataclass
class Request:
    """One request the server received."""

    path: str
    body: dict[str, Any]
    authorization: str | None


@dataclass
class FakeOpenAI:
    """OpenAI-compatible `POST /v1/chat/completions` (plain and streamed) and `GET /v1/models`."""

    policy: Policy
    model: str = "fake-model"
    requests: list[Request] = field(default_factory=list)
    api_key: str | None = None
    served_models: list[str] = field(default_factory=list)
    listen_port: int = 0
    """The port to listen on (0: a free one)."""

    def __post_init__(self) -> None:
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:  # keep test output quiet
                pass

            def _send(self, status: int, payload: bytes, content_type: str) -> None:
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def _json(self, status: int, body: dict[str, Any]) -> None:
                self._send(status, json.dumps(body).encode(), "application/json")

            def _authorized(self) -> bool:
                if server.api_key is None or self.headers.get("Authorization") == f"Bearer {server.api_key}":
                    return True
                self._json(401, {"error": {"message": "Incorrect API key provided", "type": "invalid_request_error",
                                           "code": "invalid_api_key"}})
                return False

            def do_GET(self) -> None:
                if not self._authorized():
                    return
                if self.path.rstrip("/").endswith("/models"):
                    self._json(200, {"object": "list", "data": [
                        {"id": name, "object": "model", "created": 0, "owned_by": "test"}
                        for name in server.served_models]})
                else:
                    self._json(404, {"error": {"message": f"no route {self.path}"}})

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length) or b"{}")
                with server._lock:
                    server.requests.append(Request(self.path, body, self.headers.get("Authorization")))
                if not self._authorized():
                    return
                if not self.path.rstrip("/").endswith("/chat/completions"):
                    self._json(404, {"error": {"message": f"no route {self.path}"}})
                    return
                try:
                    reply = server.policy(body.get("messages") or [])
                except PolicyError as error:
                    self._json(error.status, {"error": {"message": str(error), "type": "test"}})
                    return
                reply = reply if isinstance(reply, Reply) else Reply(reply)
                if reply.hang:
                    server._stopping.wait()
                    self.close_connection = True
                    return
                if reply.delay_s and server._stopping.wait(reply.delay_s):
                    return
                completion = _completion(body.get("model") or server.model, body.get("messages") or [], reply)
                if body.get("stream"):
                    self._send(200, _sse(completion), "text/event-stream")
                else:
                    self._json(200, completion)

        self._server = ThreadingHTTPServer(("127.0.0.1", self.listen_port), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def port(self) -> int:
        return self._server.server_address[1]

    @property
    def base_url(self) -> str:
        """What to pass as the client base URL (OpenAI style, ending in /v1)."""
        return f"http://127.0.0.1:{self.port}/v1"

    def start(self) -> FakeOpenAI:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    def __enter__(self) -> FakeOpenAI:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def completions(self) -> list[Request]:
        """The chat-completion requests received so far."""
        with self._lock:
            return [r for r in self.requests if r.path.rstrip("/").endswith("/chat/completions")]


def _completion(model: str, messages: list[dict[str, Any]], reply: Reply) -> dict[str, Any]:
    prompt_tokens = sum(len(str(m.get("content") or "").split()) for m in messages)
    completion_tokens = len((reply.content or "").split()) + len((reply.reasoning_content or "").split())
    message: dict[str, Any] = {"role": "assistant", "content": reply.content}
    if reply.reasoning_content is not None:
        message["reasoning_content"] = reply.reasoning_content
    return {
        "id": f"chatcmpl-{uuid.uuid4().hex[:12]}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": reply.finish_reason, "logprobs": None}],
        "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                  "total_tokens": prompt_tokens + completion_tokens},
    }


def _sse(completion: dict[str, Any]) -> bytes:
    base = {k: completion[k] for k in ("id", "created", "model")} | {"object": "chat.completion.chunk"}
    choice = completion["choices"][0]
    delta = {"role": "assistant", **choice["message"]}
    chunks = [
        base | {"choices": [{"index": 0, "delta": delta, "finish_reason": None}]},
        base | {"choices": [{"index": 0, "delta": {}, "finish_reason": choice["finish_reason"]}]},
        base | {"choices": [], "usage": completion["usage"]},
    ]
    return b"".join(f"data: {json.dumps(c)}\n\n".encode() for c in chunks) + b"data: [DONE]\n\n"


# --- scripted policies over the exported items --------------------------------------------------

def user_text(messages: list[dict[str, Any]]) -> str:
    """The text of the last user message."""
    for message in reversed(messages):
        if message.get("role") == "user":
            content = message.get("content")
            if isinstance(content, list):  # content parts
                return "".join(part.get("text", "") for part in content if isinstance(part, dict))
            return str(content or "")
    raise PolicyError(400, "no user message")


class ItemPolicy:
    """Base of the policies that look an item up by its question text."""

    def __init__(self, rows: list[dict[str, Any]]) -> None:
        self.by_question = {row["question"]: row for row in rows}

    def row_for(self, messages: list[dict[str, Any]]) -> dict[str, Any]:
        question = user_text(messages)
        row = self.by_question.get(question)
        if row is None and "\n\n" in question:   # instructions folded into the user message
            row = next((r for q, r in self.by_question.items() if question.endswith("\n\n" + q)), None)
        if row is None:
            raise PolicyError(400, f"unknown question: {question[:80]!r}")
        return row

    def __call__(self, messages: list[dict[str, Any]]) -> str:
        return self.answer(self.row_for(messages))

    def answer(self, row: dict[str, Any]) -> str:
        raise NotImplementedError


def final_answer(text: str) -> str:
    """A response whose final answer block carries `text`: the last `<answer>...</answer>` block,
    the format the system prompt asks for."""
    return f"Working through the arithmetic step by step.\n\n<answer>{text}</answer>"


def code_answer(source: str) -> str:
    """A response whose code is its last fenced python block (the code answer format)."""
    return f"Here is the implementation.\n\n```python\n{source.rstrip()}\n```"


_REFERENCE = re.compile(r"^(?P<function>\w+) \(reference solution in seed/(?P<module>[\w/.-]+\.py)\)$")


def reference_source(row: dict[str, Any]) -> str:
    """The reference solution of a code item, bound to the name the task asks for: the whole
    reference module (helpers included) followed by `task_name = reference_name`."""
    match = _REFERENCE.match(row["answer"].strip())
    if match is None:
        raise ValueError(f"{row['id']}: cannot find the reference solution from answer {row['answer']!r}")
    source = (REPO_ROOT / "seed" / match["module"]).read_text(encoding="utf-8")
    function = row["info"]["code_function"]
    if function != match["function"]:
        source += f"\n\n{function} = {match['function']}\n"
    return source


class Oracle(ItemPolicy):
    """Answers every item correctly from its key."""

    def answer(self, row: dict[str, Any]) -> str:
        info = row["info"]
        grader = info["grader"]
        if grader in ("numeric", "numeric_multi"):
            return final_answer("; ".join(repr(float(v)) for v in info["targets"]))
        if grader == "mcq":
            return final_answer(info["answer_letter"])
        if grader == "formula":
            return final_answer(info["formula_answer"])
        if grader == "code":
            return code_answer(reference_source(row))
        raise PolicyError(400, f"unknown grader {grader!r}")


class Wrong(ItemPolicy):
    """Answers every item wrongly, but in the right format: numbers 1000x off, another letter,
    a constant for a formula, and a code submission that returns None."""

    def answer(self, row: dict[str, Any]) -> str:
        info = row["info"]
        grader = info["grader"]
        if grader in ("numeric", "numeric_multi"):
            return final_answer("; ".join(repr(float(v) * 1000.0 + 1.0) for v in info["targets"]))
        if grader == "mcq":
            letters = sorted(json.loads(info["choices"]))
            return final_answer(next(letter for letter in letters if letter != info["answer_letter"]))
        if grader == "formula":
            return final_answer("123457")
        if grader == "code":
            return code_answer(f"def {info['code_function']}(*args, **kwargs):\n    return None\n")
        raise PolicyError(400, f"unknown grader {grader!r}")


def read_export_rows(export: Path, config: str) -> list[dict[str, Any]]:
    """The exported rows of one config, read straight from its parquet files."""
    import pyarrow.parquet as pq

    rows: list[dict[str, Any]] = []
    for file in sorted((export / config).glob("*.parquet")):
        rows.extend(pq.read_table(file).to_pylist())
    return rows


def main() -> None:
    """Serve a scripted policy until interrupted, to try `eval`, `transfer-check` and the run history
    without a model: `uv run python tests/fake_openai.py --policy gold --port 8000`."""
    import argparse
    import time

    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("--policy", choices=["gold", "wrong"], default="gold",
                        help="gold: every item answered from its key; wrong: every item answered wrongly in "
                             "the right format (default: gold)")
    parser.add_argument("--port", type=int, default=8000, help="port on 127.0.0.1 (default: 8000)")
    parser.add_argument("--export", type=Path, default=Path(__file__).resolve().parent.parent / "build" / "export",
                        help="the export the items come from (default: build/export)")
    args = parser.parse_args()
    if not (args.export / "all").is_dir():
        raise SystemExit(f"no export under {args.export}: run `uv run scaling-book build` first")
    rows = read_export_rows(args.export, "all") + read_export_rows(args.export, "train_variants") + \
        read_export_rows(args.export, "heldout_variants")
    policy = (Oracle if args.policy == "gold" else Wrong)(rows)
    server = FakeOpenAI(policy, listen_port=args.port).start()
    print(f"scripted {args.policy} policy at {server.base_url} (any model name, any API key); Ctrl-C stops it",
          flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        server.stop()


if __name__ == "__main__":
    main()
