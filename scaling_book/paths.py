"""Where the project's folders are: the repository root, seed/, build/ and the export."""

from __future__ import annotations

import os
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
SEED_DIR = REPO_ROOT / "seed"
BUILD_DIR = Path(os.environ.get("SCALING_BOOK_BUILD_DIR", REPO_ROOT / "build"))
EXPORT_ENV_VAR = "SCALING_BOOK_EXPORT"
DEFAULT_EXPORT_DIR = BUILD_DIR / "export"


def export_dir(explicit: str | Path | None = None) -> Path:
    """The export folder: `explicit`, else `$SCALING_BOOK_EXPORT`, else `build/export`."""
    if explicit is not None:
        return Path(explicit)
    return Path(os.environ.get(EXPORT_ENV_VAR) or DEFAULT_EXPORT_DIR)
