"""One TLS client context per process for every HTTP client the runner makes.

httpx builds an ``ssl.SSLContext`` for each client it constructs, loading
certifi's CA bundle into it: about 0.8 MB a client. A runner makes one client
per RPC URL per executor, per venue and per Iris check (a dozen and more with
two chains registered), so each is given this process's one context instead,
built once exactly as httpx builds its own (``httpx.create_ssl_context``: the
certifi bundle, or SSL_CERT_FILE / SSL_CERT_DIR when the client trusts the
environment). Verification is unchanged: the same CAs, hostname checks on.
"""

from __future__ import annotations

import functools
import ssl

import httpx


@functools.cache
def client_ssl_context(trust_env: bool = True) -> ssl.SSLContext:
    """The context an httpx client with ``verify=True`` and ``trust_env`` would
    build for itself, built once per process."""
    return httpx.create_ssl_context(trust_env=trust_env)
