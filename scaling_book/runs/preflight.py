"""One cheap request before the first rollout: is the endpoint there, does it take the key, does it
serve the model?

`GET {base_url}/models` answers all three on OpenAI-compatible servers (vLLM, SGLang, hosted APIs):
a refused or timed-out connection, a 401/403, or a model list without the model fails in seconds
with one `EndpointError` line. A server without `/models` (404/405) is asked for a one-token chat
completion instead, which a wrong key or an unknown model also refuses.
"""

from __future__ import annotations

import os

import httpx

PREFLIGHT_TIMEOUT_S = 15.0
"""Seconds the check may take (connect and read), at most the run's request timeout."""


class EndpointError(Exception):
    """The endpoint cannot serve the run; the message is one line naming the cause and the endpoint."""


def check_endpoint_serves(base_url: str, api_key_var: str, model: str,
                          timeout_s: float = PREFLIGHT_TIMEOUT_S) -> None:
    """Raise `EndpointError` unless `base_url` is reachable, accepts the key in `api_key_var`, and
    serves `model`."""
    root = base_url.rstrip("/")
    key = os.environ.get(api_key_var) or "EMPTY"
    headers = {"Authorization": f"Bearer {key}"}
    try:
        with httpx.Client(timeout=httpx.Timeout(timeout_s), trust_env=False, headers=headers) as client:
            response = client.get(f"{root}/models")
            if response.status_code in (404, 405):
                response = client.post(f"{root}/chat/completions", json={
                    "model": model, "max_tokens": 1, "messages": [{"role": "user", "content": "ping"}]})
                _refuse(response, base_url, api_key_var, model)
                return
            _refuse(response, base_url, api_key_var, model)
            served = _model_ids(response)
    except httpx.ConnectError as exc:
        raise EndpointError(f"cannot connect to {base_url}: {_cause(exc)}") from None
    except httpx.TimeoutException:
        raise EndpointError(f"{base_url} did not answer within {timeout_s:.0f} s") from None
    except httpx.HTTPError as exc:
        raise EndpointError(f"request to {base_url} failed: {type(exc).__name__}: {_cause(exc)}") from None
    if served and model not in served:
        shown = ", ".join(sorted(served)[:10]) + (" ..." if len(served) > 10 else "")
        raise EndpointError(f"model {model!r} is not served by {base_url}; it serves: {shown}")


def _refuse(response: httpx.Response, base_url: str, api_key_var: str, model: str) -> None:
    status = response.status_code
    if status in (401, 403):
        raise EndpointError(f"{base_url} refused the API key from ${api_key_var} (HTTP {status}): "
                            f"{_message(response)}")
    if status == 404 or (status == 400 and "model" in _message(response).lower()):
        raise EndpointError(f"model {model!r} is not served by {base_url} (HTTP {status}): {_message(response)}")
    if status >= 400:
        raise EndpointError(f"{base_url} answered HTTP {status}: {_message(response)}")


def _model_ids(response: httpx.Response) -> set[str]:
    try:
        return {str(entry["id"]) for entry in response.json().get("data") or [] if "id" in entry}
    except (ValueError, AttributeError, TypeError):
        return set()


def _message(response: httpx.Response) -> str:
    try:
        body = response.json()
        error = body.get("error", body) if isinstance(body, dict) else body
        text = error.get("message", error) if isinstance(error, dict) else error
        return str(text)[:200]
    except ValueError:
        return response.text[:200].strip() or "(empty body)"


def _cause(exc: BaseException) -> str:
    while exc.__cause__ is not None or exc.__context__ is not None:
        exc = exc.__cause__ or exc.__context__
    return str(exc) or type(exc).__name__
