"""scaling-book: a verifiers environment built from *How To Scale Your Model*.

`vf-eval scaling-book` imports this package and takes the one `vf.Taskset` subclass, the `vf.Env`
subclass and the `vf.Harness` subclass named in `__all__`. They are loaded on first attribute
access (module `__getattr__`), because importing verifiers takes seconds: `scaling-book build`,
`export` and `history` import this package without ever touching verifiers.
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = ["ScalingBookTaskset", "ScalingBookEnv", "ScalingBookHarness"]

_LAZY = {
    "ScalingBookTaskset": "scaling_book.environment.taskset",
    "ScalingBookEnv": "scaling_book.environment.runtime",
    "ScalingBookHarness": "scaling_book.environment.harness",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
