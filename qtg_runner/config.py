"""Runner settings, read once from the environment.

QTG_DATABASE_URL      the DSN of whoever runs the command (any PostgreSQL 15+):
                      the admin's for `qtg db`, `qtg operator|runner add|list|remove`
                      and `qtg executors register`; a runner login's for `qtg run`
                      and `qtg worker` (they refuse any other); an operator's for
                      `qtg movement` and `qtg status`. `qtg db url --login NAME`
                      prints a login's DSN (password in the credentials file, never
                      in the DSN); `--as NAME` on run, worker, movement and status
                      logs in as NAME on the same server instead.
                      Unset: the embedded server, as its superuser.
QTG_DATA_DIR          data directory of the embedded server (default:
                      $XDG_DATA_HOME/qtg/pg18, i.e. ~/.local/share/qtg/pg18; as root
                      /var/lib/qtg/pg18, since the server then runs as a system user
                      that must be able to reach it).
QTG_CREDENTIALS_FILE  the credentials file: the generated passwords of the logins
                      `qtg operator|runner add` made, in libpq's pgpass format, mode
                      0600 (`--as NAME` and `qtg db url --login NAME` read it).
                      Default: the embedded server's own credentials file, beside
                      its data directory (<data dir>.pgpass, e.g.
                      ~/.local/share/qtg/pg18.pgpass, which also holds its generated
                      superuser password) when QTG_DATABASE_URL is unset, else
                      $XDG_CONFIG_HOME/qtg/pgpass (~/.config/qtg/pgpass).
QTG_NETWORK_MODE      mainnet | testnet (default testnet): the network a process is bound to.
QTG_WORKERS_ENABLED   true | false (default false): with false nothing advances
                      (MG_WORKERS_ENABLED, the seed's name, is read when it is unset).
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


ROOT_DATA_DIR = Path("/var/lib/qtg/pg18")
"""The embedded server's data directory when run as root: PostgreSQL then runs as a
system user, which must be able to traverse every parent (root's home is not)."""


@dataclass(frozen=True)
class Settings:
    database_url: str | None
    data_dir: Path
    network_mode: NetworkMode
    workers_enabled: bool
    credentials_file: Path


def default_data_dir(env: Mapping[str, str]) -> Path:
    """Data directory of the embedded server: per user, XDG style; as root, under /var/lib."""
    if os.geteuid() == 0:
        return ROOT_DATA_DIR
    xdg = env.get("XDG_DATA_HOME", "").strip()
    base = Path(xdg) if xdg and Path(xdg).is_absolute() else Path.home() / ".local" / "share"
    return base / "qtg" / "pg18"


def embedded_credentials_file(data_dir: Path) -> Path:
    """The embedded server's credentials file: beside its data directory."""
    return data_dir.with_name(data_dir.name + ".pgpass")


def default_credentials_file(
    env: Mapping[str, str], database_url: str | None, data_dir: Path
) -> Path:
    """Where the generated passwords go when QTG_CREDENTIALS_FILE is unset."""
    if database_url is None:
        return embedded_credentials_file(data_dir)
    xdg = env.get("XDG_CONFIG_HOME", "").strip()
    base = Path(xdg) if xdg and Path(xdg).is_absolute() else Path.home() / ".config"
    return base / "qtg" / "pgpass"


def _parse_bool(name: str, raw: str) -> bool:
    value = raw.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise ConfigError(f"{name}={raw!r} is not a boolean (use true or false)")


def _workers_enabled(e: Mapping[str, str]) -> bool:
    """The workers' gate: QTG_WORKERS_ENABLED, else the seed's MG_WORKERS_ENABLED,
    else off. Both set and saying different things is an error, not a guess."""
    ours = e.get("QTG_WORKERS_ENABLED")
    seeds = e.get("MG_WORKERS_ENABLED")
    if (
        ours is not None
        and seeds is not None
        and _parse_bool("QTG_WORKERS_ENABLED", ours) != _parse_bool("MG_WORKERS_ENABLED", seeds)
    ):
        raise ConfigError(
            f"QTG_WORKERS_ENABLED={ours!r} and MG_WORKERS_ENABLED={seeds!r} disagree: "
            "set one of them"
        )
    if ours is not None:
        return _parse_bool("QTG_WORKERS_ENABLED", ours)
    return _parse_bool("MG_WORKERS_ENABLED", seeds if seeds is not None else "false")


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
    credentials_raw = e.get("QTG_CREDENTIALS_FILE", "").strip()
    credentials = (
        Path(credentials_raw).expanduser().absolute()
        if credentials_raw
        else default_credentials_file(e, url, data_dir)
    )
    return Settings(
        database_url=url,
        data_dir=data_dir,
        network_mode=_parse_network(e.get("QTG_NETWORK_MODE", "testnet")),
        workers_enabled=_workers_enabled(e),
        credentials_file=credentials,
    )
