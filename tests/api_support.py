"""The HTTP API's tests: one real uvicorn server on loopback per test module,
over a database of the module's own (cloned from the migrated template) with
the sim executor, the lanes of docs/operators.md's psql session and five
logins of their own: two operators (alice, bob), a runner and a reader of
testnet, which the API serves, and an operator of mainnet (stranger)."""

from __future__ import annotations

import base64
import itertools
import os
import secrets
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import psycopg
from conftest import create_database, drop_database, dsn_for
from engine import add_lanes, bind, register_sim
from psycopg import sql

from qtg_runner.api.app import ApiConfig
from qtg_runner.api.identity import Database, server_conninfo
from qtg_runner.api.server import Running, serve_in_thread
from qtg_runner.db.logins import create_login

_names = itertools.count()
ONE_NODE = {"nodes": [{"key": "a", "executor": "sim", "config": {"lane": "default"}}]}
SESSION_LANES = ("cctp_fast", "bybit_deposit")
"""The sim lanes the psql session of docs/operators.md (and the OpenAPI example) names."""


@dataclass
class Person:
    login: str
    password: str = field(repr=False)

    @property
    def auth(self) -> tuple[str, str]:
        return (self.login, self.password)

    def basic(self) -> str:
        return "Basic " + base64.b64encode(f"{self.login}:{self.password}".encode()).decode()


@dataclass
class ApiWorld:
    url: str
    dsn: str  # the admin's (superuser) DSN of the module's database
    people: dict[str, Person]
    running: Running

    def client(self, who: str | None = None) -> httpx.Client:
        auth = self.people[who].auth if who else None
        return httpx.Client(base_url=self.url, auth=auth, timeout=30)

    def admin(self) -> psycopg.Connection[Any]:
        return bind(psycopg.connect(self.dsn, autocommit=True))


def api_world(pg_server: str, template_db: str) -> Iterator[ApiWorld]:
    name = f"qtg_api_{os.getpid()}_{next(_names)}"
    create_database(pg_server, name, template_db)
    dsn = dsn_for(pg_server, dbname=name)
    roles = {
        "alice": "qtg_testnet_operator",
        "bob": "qtg_testnet_operator",
        "runner": "qtg_testnet_runner",
        "reader": "qtg_testnet_reader",
        "stranger": "qtg_mainnet_operator",  # a login of the other network
        "owner": "qtg_owner",  # an administrative login: the API serves it nothing
        "root": "qtg_testnet_operator",  # made a superuser below: nor it
    }
    people: dict[str, Person] = {}
    running: Running | None = None
    try:
        with psycopg.connect(dsn, autocommit=True) as admin:
            bind(admin)
            register_sim(admin)
            add_lanes(admin, *SESSION_LANES)
            for person, group in roles.items():
                login = f"{person}_{name}"[:63]
                password = secrets.token_urlsafe(24)
                with admin.transaction():
                    create_login(admin, login, group, password)
                people[person] = Person(login, password)
            admin.execute(
                sql.SQL("ALTER ROLE {} SUPERUSER").format(sql.Identifier(people["root"].login))
            )
        # the page's live frame reloads every second: a test sees a reload in time
        config = ApiConfig(Database(server_conninfo(dsn), "testnet"), live_refresh_s=1)
        running = serve_in_thread(config)
        yield ApiWorld(running.url, dsn, people, running)
    finally:
        if running is not None:
            running.stop()
        drop_database(pg_server, name)
        with psycopg.connect(pg_server, autocommit=True) as admin:
            for person in people.values():
                admin.execute(
                    sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(person.login))
                )


def problem(response: httpx.Response, status: int, code: str | None = None) -> dict[str, Any]:
    """The response is a problem+json with this status (and QT code, its type
    and a hint of what to do)."""
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/problem+json")
    body: dict[str, Any] = response.json()
    assert body["status"] == status
    if code is not None:
        assert (body["code"], body["type"]) == (code, f"/problems/{code}"), body
        assert body["hint"]
    return body
