"""Attacks on the console over HTTP: no token, another principal's token, forged or missing CSRF
tokens, cross-site posts, huge and malformed parameters, path traversal in static files, and a
console without tokens reached under a foreign Host name (DNS rebinding)."""

from __future__ import annotations

import asyncio
import re
import socket
from collections.abc import AsyncIterator
from pathlib import Path
from urllib.parse import urlsplit

import aiohttp
import pytest

from gateway.console.server import CONNECTION_IDLE_S
from gateway.console.sessions import MAX_SESSIONS
from tests.console.gateway_proc import (
    ADMIN_TOKEN,
    APP_TOKEN,
    Gateway,
    fill_dead_letters,
    running,
)

pytestmark = pytest.mark.slow

PAGES = ["/", "/group?topic=orders&group=billing", "/dead-letters",
         "/dead-letters?topic=orders&group=billing", "/message?topic=orders&group=billing&id=x"]
ACTIONS = ["/dead-letters/resend", "/dead-letters/delete", "/dead-letters/purge",
           "/group/purge"]


def _csrf(html: str) -> str:
    match = re.search(r'name="csrf" value="([^"]+)"', html)
    assert match, html[:500]
    return match.group(1)


def _client(gw: Gateway) -> aiohttp.ClientSession:
    """A browser-like client: it keeps cookies (of an IP address too)."""
    return aiohttp.ClientSession(base_url=gw.console, cookie_jar=aiohttp.CookieJar(unsafe=True))


async def _session(gw: Gateway, token: str = ADMIN_TOKEN) -> aiohttp.ClientSession:
    """A browser-like client logged in with `token`."""
    client = _client(gw)
    async with client.get("/login") as r:
        csrf = _csrf(await r.text())
    async with client.post("/login", data={"csrf": csrf, "token": token, "next": "/"},
                           allow_redirects=False) as r:
        assert r.status == 303, await r.text()
    return client


@pytest.fixture
async def admin(gw: Gateway) -> AsyncIterator[aiohttp.ClientSession]:
    client = await _session(gw)
    yield client
    await client.close()


async def _page_csrf(client: aiohttp.ClientSession) -> str:
    async with client.get("/") as r:
        assert r.status == 200
        return _csrf(await r.text())


async def test_without_a_token_every_page_and_action_is_refused(gw: Gateway) -> None:
    fill_dead_letters(gw, "orders", "billing", [(b"keep me", {})])
    async with _client(gw) as client:
        for path in PAGES:
            async with client.get(path, allow_redirects=False) as r:
                assert r.status == 303 and r.headers["Location"].startswith("/login"), path
            async with client.get(path, allow_redirects=False,
                                  headers={"HX-Request": "true"}) as r:
                assert r.status == 401 and r.headers["HX-Redirect"].startswith("/login")
        # Even with a valid CSRF token of an anonymous session, actions need a login.
        async with client.get("/login") as r:
            csrf = _csrf(await r.text())
        for path in ACTIONS:
            async with client.post(path, data={"csrf": csrf, "topic": "orders",
                                               "group": "billing", "confirm": "yes",
                                               "scope": "matching"}) as r:
                assert r.status == 401, path
        async with client.get("/static/console.css") as r:
            assert r.status == 200  # the login page's style sheet
    admin = await _session(gw)
    async with admin, admin.get("/dead-letters?topic=orders&group=billing") as r:
        assert "keep me" in await r.text()


async def test_another_principals_token_cannot_log_in(gw: Gateway) -> None:
    async with _client(gw) as client:
        async with client.get("/login") as r:
            csrf = _csrf(await r.text())
        for token, words in ((APP_TOKEN, "not an admin"), ("wrong", "does not know"),
                             ("", "Enter an admin"), ("x" * 5000, "Enter an admin")):
            async with client.post("/login", data={"csrf": csrf, "token": token},
                                   allow_redirects=False) as r:
                assert r.status == 401 and words in await r.text()
        async with client.get("/", allow_redirects=False) as r:
            assert r.status == 303


async def test_a_token_grpc_cannot_carry_is_refused_and_counted(tmp_path: Path) -> None:
    """A token with a non-ASCII or control character failed the console's check call in
    gRPC's C core ("Illegal header value"): a 500 page, and the login brake never counted it."""
    with running(tmp_path / "data") as gw:
        async with _client(gw) as client:
            async with client.get("/login") as r:
                csrf = _csrf(await r.text())
            statuses = []
            for token in ("é", "a\nb", "a\x00b", "ops\x7f", "ä" * 10, "tab\there", "ü", "\x01",
                          "ß", "ø", "ĳ"):
                async with client.post("/login", data={"csrf": csrf, "token": token},
                                       allow_redirects=False) as r:
                    statuses.append(r.status)
                    if r.status == 401:
                        assert "printable ASCII" in await r.text()
            assert statuses == [401] * 10 + [429]


async def test_guessing_tokens_is_slowed_down(tmp_path: Path) -> None:
    with running(tmp_path / "data") as gw:
        async with _client(gw) as client:
            async with client.get("/login") as r:
                csrf = _csrf(await r.text())
            statuses = []
            for i in range(12):
                async with client.post("/login", data={"csrf": csrf, "token": f"guess-{i}"},
                                       allow_redirects=False) as r:
                    statuses.append(r.status)
            assert statuses[:10] == [401] * 10 and statuses[10:] == [429, 429]
            async with client.post("/login", data={"csrf": csrf, "token": ADMIN_TOKEN},
                                   allow_redirects=False) as r:
                assert r.status == 429  # even the right token waits out the minute


async def test_anonymous_requests_cannot_push_a_login_out(gw: Gateway) -> None:
    """Every request without a cookie gets a session (the login form's CSRF token). Sessions
    were one pool of MAX_SESSIONS, least recently used first out: anyone who reached the
    console logged every admin out with MAX_SESSIONS cookie-less requests."""
    admin = await _session(gw)
    async with admin:
        async with admin.get("/", allow_redirects=False) as r:
            assert r.status == 200
        connector = aiohttp.TCPConnector(limit=20)
        async with aiohttp.ClientSession(base_url=gw.console, connector=connector,
                                         cookie_jar=aiohttp.DummyCookieJar()) as anonymous:
            async def one() -> None:
                async with anonymous.get("/login") as r:
                    assert r.status == 200
                    await r.read()

            for _ in range(0, MAX_SESSIONS + 100, 200):
                await asyncio.gather(*(one() for _ in range(200)))
        async with admin.get("/", allow_redirects=False) as r:
            assert r.status == 200, r.headers.get("Location")


async def test_actions_need_the_sessions_csrf_token(gw: Gateway,
                                                    admin: aiohttp.ClientSession) -> None:
    fill_dead_letters(gw, "csrf-orders", "csrf", [(b"target", {})])
    form = {"topic": "csrf-orders", "group": "csrf", "scope": "matching", "confirm": "yes"}
    other = await _session(gw)
    async with other:
        foreign = await _page_csrf(other)
    for data in (form, {**form, "csrf": ""}, {**form, "csrf": "forged"},
                 {**form, "csrf": foreign}):
        for path in ACTIONS:
            async with admin.post(path, data=data) as r:
                assert r.status == 403 and "CSRF" in await r.text(), (path, data)
    good = await _page_csrf(admin)
    # The right token from another site (Origin) is refused too.
    async with admin.post("/dead-letters/purge", data={**form, "csrf": good},
                          headers={"Origin": "http://evil.example"}) as r:
        assert r.status == 403
    async with admin.get("/dead-letters?topic=csrf-orders&group=csrf") as r:
        assert "target" in await r.text()  # nothing was changed
    async with admin.post("/dead-letters/purge", data={**form, "csrf": good},
                          allow_redirects=False) as r:
        assert r.status == 303
    async with admin.get("/dead-letters?topic=csrf-orders&group=csrf") as r:
        assert "target" not in await r.text()


async def test_html_in_messages_is_escaped(gw: Gateway, admin: aiohttp.ClientSession) -> None:
    evil = "<script>alert(1)</script>"
    ids = fill_dead_letters(gw, "xss-orders", "xss",
                            [(evil.encode(), {evil: evil, "k": evil})], reason=evil)
    for path in (f"/message?topic=xss-orders&group=xss&id={ids[0]}",
                 "/dead-letters?topic=xss-orders&group=xss", "/group?topic=xss-orders&group=xss",
                 "/"):
        async with admin.get(path) as r:
            html = await r.text()
            assert "<script>alert" not in html, path
            assert r.headers["Content-Security-Policy"].startswith("default-src 'none'")
        if path.startswith(("/message", "/dead-letters")):
            assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html, path


@pytest.mark.parametrize("query", [
    "topic=" + "a" * 300 + "&group=g",
    "topic=orders&group=",
    "topic=%00&group=g",
    "topic=orders&group=billing&min_attempt=-1",
    "topic=orders&group=billing&min_attempt=99999999999",
    "topic=orders&group=billing&min_attempt=5&max_attempt=2",
    "topic=orders&group=billing&min_attempt=%C2%B2",  # "²": a digit to str.isdigit, not int
    "topic=orders&group=billing&max_attempt=%D9%A3",  # an Arabic-Indic 3
    "topic=orders&group=billing&since=yesterday",
    "topic=orders&group=billing&since=2024-02-30T10:00",
    "topic=orders&group=billing&since=1969-12-31T23:59",  # before the epoch: the gateway's 400
    "topic=orders&group=billing&until=0001-01-01T00:00",
    "topic=orders&group=billing&since=2024-05-02T10:00&until=2024-05-01T10:00",
    "topic=orders&group=billing&page=abc",
    "topic=orders&group=billing&page=99999999999999999999",
    "topic=orders&group=billing&text=" + "x" * 300,
])
async def test_malformed_parameters_get_400_naming_the_field(
    admin: aiohttp.ClientSession, query: str
) -> None:
    async with admin.get("/dead-letters?" + query) as r:
        assert r.status == 400, (query, r.status)
        assert "Bad request" in await r.text()


async def test_huge_requests_are_refused(admin: aiohttp.ClientSession) -> None:
    async with admin.get("/dead-letters?topic=" + "a" * 20_000 + "&group=g") as r:
        assert r.status in (400, 414, 431)
    csrf = await _page_csrf(admin)
    async with aiohttp.ClientSession(base_url=str(admin._base_url)) as once, \
            once.post("/dead-letters/resend", data={"csrf": csrf, "topic": "orders",
                                                    "group": "g", "pad": "x" * (2 << 20)}) as r:
        assert r.status in (403, 413)
    fields = [("csrf", csrf), ("topic", "orders"), ("group", "g")]
    ids = [("id", f"m{i}") for i in range(501)]
    async with admin.post("/dead-letters/resend", data=[*fields, *ids]) as r:
        assert r.status == 400 and "at most 500" in await r.text()
    ids = [("id", f"m{i}") for i in range(5000)]
    async with admin.post("/dead-letters/resend", data=[*fields, *ids]) as r:
        assert r.status == 413
    async with admin.get("/") as r:
        assert r.status == 200  # still serving


@pytest.mark.parametrize("path", [
    "/static/../server.py", "/static/..%2fserver.py", "/static/%2e%2e/sessions.py",
    "/static/VENDORED.md", "/static/console.css/..", "/static/.%2e/templates/base.html",
    "/static//etc/passwd", "/static/nothing.js",
])
async def test_static_files_are_a_fixed_list(gw: Gateway, path: str) -> None:
    async with _client(gw) as client, \
            client.get(path, allow_redirects=False) as r:
        body = await r.text()
        assert r.status in (303, 404), (path, r.status)
        assert "import" not in body and "root:" not in body


async def test_without_tokens_only_loopback_host_names(tmp_path: Path) -> None:
    with running(tmp_path / "data", tokens=False) as gw:
        async with _client(gw) as client:
            async with client.get("/group?topic=orders&group=g") as r:
                assert r.status == 200  # no login without tokens
                csrf = _csrf(await r.text())
            async with client.get("/", headers={"Host": "evil.example"}) as r:
                assert r.status == 421
            async with client.post("/dead-letters/purge", data={
                    "topic": "orders", "group": "g", "confirm": "yes"}) as r:
                assert r.status == 403  # CSRF still checked
            async with client.post("/dead-letters/purge", data={
                    "csrf": csrf, "topic": "orders", "group": "g", "confirm": "yes"},
                    allow_redirects=False) as r:
                assert r.status == 303


def test_idle_connections_are_closed(gw: Gateway) -> None:
    """A connection that sends nothing, or never finishes its request, is closed after
    CONNECTION_IDLE_S (aiohttp's default kept it an hour: enough of them would use up the
    process's file descriptors, and every listener's clients would be refused)."""
    address = urlsplit(gw.console)
    silent = socket.create_connection((address.hostname, address.port))
    partial = socket.create_connection((address.hostname, address.port))
    partial.sendall(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n")
    try:
        for sock in (silent, partial):
            sock.settimeout(CONNECTION_IDLE_S + 30)
            assert sock.recv(1) == b""  # closed by the console, not by our timeout
    finally:
        silent.close()
        partial.close()
