"""Runner settings, read once from the environment.

QTG_DATABASE_URL     PostgreSQL to use (any 15+). Unset: the embedded server.
QTG_DATA_DIR         data directory of the embedded server
                     (default: $XDG_DATA_HOME/qtg/pg18, i.e. ~/.local/share/qtg/pg18).
QTG_NETWORK_MODE     mainnet | testnet (default testnet): the network a runner is bound to.
MG_WORKERS_ENABLED   true | false (default false): with false nothing advances.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

NetworkMode = Literal["mainnet", "testnet"]
NETWORK_MODES: tuple[NetworkMode, ...] = ("mainnet", "testnet")

_TRUE = frozenset({"1", "true", "yes", "on"})
_FALSE = frozenset({"0", "false", "no", "off", ""})


class ConfigError(ValueError):
    """A setting in the environment has a value the runner cannot use."""


@dataclass(frozen=True)
class Settings:
    database_url: str | None
    data_dir: Path
    network_mode: NetworkMode
    workers_enabled: bool


def default_data_dir(env: Mapping[str, str]) -> Path:
    """Per-user data directory of the embedded server, XDG style."""
    xdg = env.get("XDG_DATA_HOME", "").strip()
    base = Path(xdg) if xdg and Path(xdg).is_absolute() else Path.home() / ".local" / "share"
    return base / "qtg" / "pg18"


def _parse_bool(name: str, raw: str) -> bool:
    value = raw.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise ConfigError(f"{name}={raw!r} is not a boolean (use true or false)")


def _parse_network(raw: str) -> NetworkMode:
    value = raw.strip().lower()
    if value not in NETWORK_MODES:
        raise ConfigError(
            f"QTG_NETWORK_MODE={raw!r} is not a network (use one of: {', '.join(NETWORK_MODES)})"
        )
    return value


def load_settings(env: Mapping[str, str] | None = None) -> Settings:
    """Read the settings from ``env`` (default: the process environment)."""
    e: Mapping[str, str] = os.environ if env is None else env
    url = e.get("QTG_DATABASE_URL", "").strip() or None
    data_dir_raw = e.get("QTG_DATA_DIR", "").strip()
    data_dir = Path(data_dir_raw).expanduser().resolve() if data_dir_raw else default_data_dir(e)
    return Settings(
        database_url=url,
        data_dir=data_dir,
        network_mode=_parse_network(e.get("QTG_NETWORK_MODE", "testnet")),
        workers_enabled=_parse_bool("MG_WORKERS_ENABLED", e.get("MG_WORKERS_ENABLED", "false")),
    )
