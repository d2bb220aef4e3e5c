"""A single-turn chat harness that runs in-process: one chat completion per rollout.

verifiers' built-in `null` harness installs a chat program with uv in the rollout's runtime
(network, seconds per rollout) to do what this does in one HTTP request. Here the harness sends
the task's system prompt and question to the rollout's interception endpoint
(`POST {endpoint}/chat/completions`, bearer = the rollout secret) and returns. The interception
server forwards the request to the model endpoint the run was given, imposes the run's model and
sampling settings, and records the reply on the trace, which is what the taskset scores.
Nothing is installed, nothing runs in the runtime, and no other host is contacted. Every rollout
on one event loop posts through the same HTTP client (its connection pool, TLS context and
transport are built once), closed by `close_clients()` when the env stops serving. The client is
aiohttp's (the library verifiers' interception server runs on): a POST costs about a third of the
client CPU of httpx's (0.8 vs 2.7 ms against the same local server, measured for issue 17).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import random
import ssl
import weakref

import aiohttp
import verifiers.v1 as vf
from verifiers.v1.dialects.chat import message_to_wire

RETRY_STATUS_CODES = frozenset({408, 409, 429, 500, 502, 503, 504})
"""Statuses worth a second try (the OpenAI SDK's retry set); anything else fails the rollout."""

RETRY_COUNT_HEADER = "x-stainless-retry-count"
"""The interception server's replay guard keys on this header (the OpenAI SDK's retry marker):
a retried request that already committed a turn is answered from the record, not re-sampled."""


@functools.cache
def _tls_context() -> ssl.SSLContext:
    """One TLS context for every rollout: building one loads the CA bundle (~80 ms), which a client
    would otherwise do for itself, i.e. per rollout, even for a plain-http local endpoint."""
    return ssl.create_default_context()


_CLIENTS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, aiohttp.ClientSession] = weakref.WeakKeyDictionary()
"""The shared client of each running event loop (a client cannot outlive or change its loop)."""


def _client() -> aiohttp.ClientSession:
    """This event loop's shared client, made on first use. No cap on connections: the run's
    concurrency (`max_concurrent`, verifiers' slots) is what bounds the requests in flight."""
    loop = asyncio.get_running_loop()
    client = _CLIENTS.get(loop)
    if client is None or client.closed:
        client = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0, ssl=_tls_context()),
                                       trust_env=False)
        _CLIENTS[loop] = client
    return client


async def close_clients() -> None:
    """Close the running event loop's shared client, if it has one (the next rollout makes a new one)."""
    client = _CLIENTS.pop(asyncio.get_running_loop(), None)
    if client is not None:
        await client.close()


class ScalingBookHarnessConfig(vf.HarnessConfig):
    """Knobs of the single-turn chat harness."""

    max_retries: int = 2
    """Extra attempts after a transport error or a retryable status (408/409/429/5xx)."""
    connect_timeout_s: float = 10.0
    """Seconds to connect to the interception endpoint (a local server, so short)."""


class ScalingBookHarness(vf.Harness[ScalingBookHarnessConfig]):
    """Posts the task's messages as one chat completion to the interception endpoint."""

    APPENDS_SYSTEM_PROMPT = True  # the system prompt goes out as its own system message
    SUPPORTS_RESUME = False  # single turn: no user follow-ups
    SUPPORTS_MCP = False  # no tools
    EXECUTES_CODE = False  # the model gets no execution; grading runs in the taskset
    NEEDS_CONTAINER = False  # nothing runs in the runtime at all

    async def launch(
        self,
        ctx: vf.ModelContext,
        trace: vf.Trace,
        runtime: vf.Runtime,
        endpoint: str,
        secret: str,
        mcp_urls: dict[str, str],
        data: vf.TaskData,
    ) -> vf.ProgramResult:
        system_prompt, prompt = self.resolve_prompt(data)
        messages: list[dict] = []
        if system_prompt:
            messages.append({"role": "system", "content": system_prompt})
        if isinstance(prompt, str):
            messages.append({"role": "user", "content": prompt})
        elif prompt is not None:
            messages.extend(message_to_wire(message) for message in prompt)
        # The interception server overrides `model` and the sampling knobs with the run's.
        body = {"model": ctx.model, "messages": messages}
        await self._post(f"{endpoint.rstrip('/')}/chat/completions", body, secret)
        return vf.ProgramResult(exit_code=0, stdout="", stderr="")

    async def _post(self, url: str, body: dict, secret: str) -> None:
        """POST `body` with retries; the reply itself is read off the trace, not from here.
        Errors are plain exceptions: verifiers files them under the harness boundary, or under
        the provider when the interception server recorded the upstream failure behind them."""
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=self.config.connect_timeout_s)
        headers = {"Authorization": f"Bearer {secret}"}
        # The loop's shared client (not closed here: `close_clients()` does when serving stops).
        async with contextlib.nullcontext(_client()) as client:
            for attempt in range(self.config.max_retries + 1):
                if attempt:
                    headers[RETRY_COUNT_HEADER] = str(attempt)
                last = attempt == self.config.max_retries
                try:
                    async with client.post(url, json=body, headers=headers, timeout=timeout) as response:
                        payload = await response.read()   # read whole, so the connection is reused
                        status = response.status
                except (aiohttp.ClientConnectionError, aiohttp.ClientPayloadError, asyncio.TimeoutError) as error:
                    if last:
                        raise ConnectionError(
                            f"could not reach the interception endpoint {url}: {error!r}"
                        ) from error
                else:
                    if status < 400:
                        return
                    if last or status not in RETRY_STATUS_CODES:
                        raise RuntimeError(f"chat completion failed with HTTP {status}: "
                                           f"{payload[:2000].decode(errors='replace')}")
                await asyncio.sleep(min(0.5 * 2**attempt, 8.0) * (0.5 + random.random()))


__all__ = ["ScalingBookHarness", "ScalingBookHarnessConfig", "close_clients"]
