"""The demo's and the drills' logins: alice and bob (operators), runner1 (a
runner), made on first use and found again after (their passwords in the
credentials file)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import psycopg

from qtg_runner import credentials
from qtg_runner.config import NetworkMode
from qtg_runner.db import logins

__all__ = ["DemoLogin", "DemoLogins", "demo_login_name", "demo_logins", "ensure_login"]


@dataclass(frozen=True)
class DemoLogin:
    name: str
    dsn: str  # names the credentials file, never a password


@dataclass(frozen=True)
class DemoLogins:
    creator: DemoLogin
    approver: DemoLogin
    runner: DemoLogin


def demo_login_name(person: str, network: NetworkMode) -> str:
    """alice on testnet, alice_mainnet on mainnet: logins are shared by the server's databases."""
    return person if network == "testnet" else f"{person}_{network}"


def demo_logins(admin_dsn: str, network: NetworkMode, passfile: Path) -> DemoLogins:
    """alice and bob (operators) and runner1 (a runner), made when missing."""
    return DemoLogins(
        creator=ensure_login(admin_dsn, "operator", network, "alice", passfile),
        approver=ensure_login(admin_dsn, "operator", network, "bob", passfile),
        runner=ensure_login(admin_dsn, "runner", network, "runner1", passfile),
    )


def ensure_login(
    admin_dsn: str, kind: logins.Kind, network: NetworkMode, person: str, passfile: Path
) -> DemoLogin:
    """The demo's login ``person``: made now, or the one an earlier demo made (its
    password still in the credentials file)."""
    name = demo_login_name(person, network)
    with psycopg.connect(admin_dsn, autocommit=True) as conn:
        existing = {row.name for row in logins.list_logins(conn, logins.group_role(kind, network))}
    if name not in existing:
        return DemoLogin(name, logins.add(admin_dsn, kind, network, name, passfile))
    if credentials.password_for(passfile, admin_dsn, name) is None:
        raise logins.LoginError(
            f"the demo's {kind} login {name} exists but {passfile} holds no password for it: "
            f"remove it (`qtg {kind} remove {name} --network {network}`) and run the demo again"
        )
    return DemoLogin(name, credentials.login_dsn(admin_dsn, name, passfile))
