"""A venue's API key file, as the exchange executors read it: JSON
``{"api_key": ..., "api_secret": ...}``, mode 0600 or stricter (`qtg world
up` writes the local exchange's so). One open to others, unreadable or
malformed is refused with what to do, never with the secret."""

from __future__ import annotations

import json
from pathlib import Path

from qtg_runner.chains.errors import ChainError

__all__ = ["load_api_key"]


def load_api_key(path: Path | str) -> tuple[str, str]:
    """(api key, api secret) from a key file; refused when it is open to others."""
    p = Path(path)
    try:
        mode = p.stat().st_mode & 0o777
        raw = json.loads(p.read_text())
        pair = (str(raw["api_key"]), str(raw["api_secret"]))
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ChainError(
            f"the Bybit key file {p} is missing or unreadable ({type(exc).__name__}): "
            "`qtg world up` makes it"
        ) from None
    if mode & 0o077:
        raise ChainError(
            f"the Bybit key file {p} is open to others (mode {mode:04o}): `chmod 600 {p}`"
        )
    if not all(pair):
        raise ChainError(f"the Bybit key file {p} has an empty key or secret")
    return pair
