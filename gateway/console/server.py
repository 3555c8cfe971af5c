"""The console's HTTP server (aiohttp, on the gateway's event loop): sessions, the login form,
security headers, CSRF checks, static files; the pages themselves are in `pages`.

Every page and action needs a logged-in session when the gateway has tokens: a person logs in
with an admin's token, which the console checks by calling the admin API with it. Without
tokens the console (like every listener) listens on loopback only and takes no login, but still
checks CSRF tokens and, against DNS rebinding, that the Host header names a loopback address.
"""

from __future__ import annotations

import ssl
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit

import grpc
import jinja2
from aiohttp import web

from gateway.admin_client import AdminClient
from gateway.console.sessions import COOKIE, IDLE_S, Session, Sessions
from gateway.server.addresses import loopback
from gateway.token_file import printable_ascii

HERE = Path(__file__).parent
STATIC_TYPES = {".js": "text/javascript", ".css": "text/css", ".svg": "image/svg+xml"}
STATIC = {p.name: p for p in sorted((HERE / "static").iterdir()) if p.suffix in STATIC_TYPES}
"""The files /static/ serves, by name: nothing else is ever read."""
MAX_BODY_BYTES = 1 << 20
"""Largest form a browser may post."""
CONNECTION_IDLE_S = 15.0
"""A connection that sends nothing this long (a new one, or between requests) is closed:
aiohttp's default keeps it an hour, so idle connections could pile up until the process ran
out of file descriptors, refusing every listener's clients."""
CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
       "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
SESSION: web.RequestKey[Session] = web.RequestKey("session", Session)
OPEN_PATHS = frozenset({"/login", "/favicon.ico"})


@dataclass(frozen=True, slots=True)
class ConsoleSettings:
    auth: bool
    """The gateway has tokens: log in with an admin's token."""
    tls_cert: str = ""
    tls_key: str = ""
    tls_client_ca: str = ""
    """With a client CA, browsers must present a certificate it signed (mTLS)."""
    refresh_s: int = 5
    """Live parts of pages refresh this often."""


class Console:
    """The web console of one gateway; talks to it only through the admin API on `channel`."""

    def __init__(self, settings: ConsoleSettings, channel: grpc.aio.Channel) -> None:
        from gateway.console import pages

        self.settings = settings
        self.channel = channel
        self.sessions = Sessions()
        self.templates = jinja2.Environment(
            loader=jinja2.FileSystemLoader(HERE / "templates"),
            autoescape=True,
            undefined=jinja2.StrictUndefined,
            trim_blocks=True,
            lstrip_blocks=True,
        )
        pages.add_filters(self.templates)
        self.app = web.Application(
            middlewares=[self._headers, self._guard], client_max_size=MAX_BODY_BYTES)
        self.app.router.add_get("/login", self._login_form)
        self.app.router.add_post("/login", self._login)
        self.app.router.add_post("/logout", self._logout)
        self.app.router.add_get("/static/{name}", self._static)
        pages.Pages(self).routes(self.app.router)
        self._runner: web.AppRunner | None = None
        self.port = 0

    # ------------------------------------------------------------------ lifecycle
    async def start(self, host: str, port: int) -> int:
        self._runner = web.AppRunner(self.app, access_log=None, handle_signals=False,
                                     keepalive_timeout=CONNECTION_IDLE_S)
        await self._runner.setup()
        site = web.TCPSite(self._runner, host, port, ssl_context=self._ssl(),
                           reuse_address=True)
        await site.start()
        self.port = int(self._runner.addresses[0][1])
        return self.port

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    def _ssl(self) -> ssl.SSLContext | None:
        s = self.settings
        if not s.tls_cert:
            return None
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(s.tls_cert, s.tls_key)
        if s.tls_client_ca:
            context.load_verify_locations(s.tls_client_ca)
            context.verify_mode = ssl.CERT_REQUIRED
        return context

    # ------------------------------------------------------------------ helpers
    def client(self, request: web.Request) -> AdminClient:
        """The admin API, as the person logged in to this request's session."""
        return AdminClient(self.channel, request[SESSION].token)

    def render(self, request: web.Request, template: str, status: int = 200,
               **context: Any) -> web.Response:
        session = request.get(SESSION)
        page = self.templates.get_template(template).render(
            csrf=session.csrf if session else "",
            logged_in=bool(session and session.authenticated),
            auth=self.settings.auth,
            notices=session.take_notices() if session and not _partial(request) else [],
            refresh_s=self.settings.refresh_s,
            path=request.path,
            **context,
        )
        return web.Response(text=page, status=status, content_type="text/html",
                            charset="utf-8")

    def error(self, request: web.Request, status: int, title: str, text: str) -> web.Response:
        return self.render(request, "error.html", status=status, title=title, text=text)

    # ------------------------------------------------------------------ middlewares
    @web.middleware
    async def _headers(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        try:
            response = await handler(request)
        except web.HTTPException as exc:
            response = exc
        headers = response.headers
        headers["Content-Security-Policy"] = CSP
        headers["X-Content-Type-Options"] = "nosniff"
        headers["X-Frame-Options"] = "DENY"
        headers["Referrer-Policy"] = "same-origin"  # "no-referrer" makes browsers send Origin: null
        headers.setdefault("Cache-Control", "no-store")
        if isinstance(response, web.HTTPException):
            raise response
        return response

    @web.middleware
    async def _guard(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        """Host check, session, login and CSRF, in that order, before any handler."""
        if not self.settings.auth and not _loopback_host(request.host):
            return web.Response(status=421, text="this console answers to loopback names only "
                                "(127.0.0.1, localhost, [::1]) while the gateway has no tokens")
        if request.path.startswith("/static/"):
            return await handler(request)
        session = self.sessions.get(request.cookies.get(COOKIE))
        fresh = session is None
        if session is None:
            session = self.sessions.new()
        request[SESSION] = session
        if request.method == "POST" and not await self._csrf_ok(request, session):
            response: web.StreamResponse = self.error(
                request, 403, "Refused", "This form has expired or did not come from this "
                "console (its CSRF token is missing or wrong). Reload the page and try again.")
        elif (self.settings.auth and not session.authenticated
              and request.path not in OPEN_PATHS):
            response = self._to_login(request)
        elif request.method not in ("GET", "HEAD", "POST"):
            response = web.Response(status=405, text="method not allowed")
        else:
            response = await handler(request)
        if fresh or request.get("new_session"):
            self.set_cookie(response, request[SESSION], request)
        if request.get("end_session"):
            response.del_cookie(COOKIE, path="/")
        return response

    async def _csrf_ok(self, request: web.Request, session: Session) -> bool:
        origin = request.headers.get("Origin")
        if origin is not None and urlsplit(origin).netloc != request.host:
            return False
        sent = request.headers.get("X-CSRF-Token", "")
        if not sent:
            try:
                form = await request.post()
            except ValueError:  # a body over MAX_BODY_BYTES, or one that does not parse
                return False
            value = form.get("csrf", "")
            sent = value if isinstance(value, str) else ""
        return session.check_csrf(sent)

    def _to_login(self, request: web.Request) -> web.StreamResponse:
        if request.method != "GET":
            return self.error(request, 401, "Log in first", "Your session has ended: log in "
                              "again, then repeat what you were doing.")
        target = "/login?next=" + quote(request.path_qs, safe="")
        if _partial(request):
            return web.Response(status=401, headers={"HX-Redirect": target})
        return see_other(target)

    def set_cookie(self, response: web.StreamResponse, session: Session,
                   request: web.Request) -> None:
        response.set_cookie(COOKIE, session.id, httponly=True, samesite="Strict", path="/",
                            secure=request.secure, max_age=int(IDLE_S))

    # ------------------------------------------------------------------ login
    async def _login_form(self, request: web.Request) -> web.StreamResponse:
        if not self.settings.auth or request[SESSION].authenticated:
            return see_other("/")
        return self.render(request, "login.html", next=_safe_next(request.query.get("next")),
                           failure="")

    async def _login(self, request: web.Request) -> web.StreamResponse:
        if not self.settings.auth:
            return see_other("/")
        form = await request.post()
        token = form.get("token", "")
        token = token.strip() if isinstance(token, str) else ""
        target = _safe_next(str(form.get("next", "")))
        peer = request.remote or ""
        if not self.sessions.may_try_login(peer):
            return self.render(request, "login.html", status=429, next=target,
                               failure="Too many failed logins: wait a minute and try again.")
        failure = await self._check_token(token)
        if failure:
            self.sessions.login_failed(peer)
            return self.render(request, "login.html", status=401, next=target,
                               failure=failure)
        session = self.sessions.login(request[SESSION], token)
        request[SESSION] = session
        request["new_session"] = True
        return see_other(target)

    async def _check_token(self, token: str) -> str:
        """Why the token cannot log in ("" when it can): it must be an admin's."""
        if not token or len(token) > 4096:
            return "Enter an admin's token."
        if not printable_ascii(token):
            # gRPC metadata carries printable ASCII only: the call below failed in gRPC's C
            # core (a 500 page), and the login brake never counted the attempt.
            return "A bearer token is one line of printable ASCII characters."
        try:
            await AdminClient(self.channel, token, timeout_s=10).topics()
        except grpc.aio.AioRpcError as exc:
            code = exc.code()
            if code == grpc.StatusCode.UNAUTHENTICATED:
                return "The gateway does not know this token."
            if code == grpc.StatusCode.PERMISSION_DENIED:
                return "This token's principal is not an admin: the console needs admin rights."
            return f"The gateway did not answer ({code.name}); try again."
        return ""

    async def _logout(self, request: web.Request) -> web.StreamResponse:
        self.sessions.end(request[SESSION])
        response = see_other("/login" if self.settings.auth else "/")
        response.del_cookie(COOKIE, path="/")
        return response

    # ------------------------------------------------------------------ static
    async def _static(self, request: web.Request) -> web.StreamResponse:
        path = STATIC.get(request.match_info["name"])
        if path is None:
            raise web.HTTPNotFound(text="no such file")
        return web.Response(body=path.read_bytes(), content_type=STATIC_TYPES[path.suffix],
                            headers={"Cache-Control": "max-age=3600"})


def see_other(target: str) -> web.Response:
    """Go to `target` (a path of this console) with a GET."""
    return web.Response(status=303, headers={"Location": target})


def _partial(request: web.Request) -> bool:
    """A request from the page's script for a part of a page (htmx), not a whole page."""
    return request.headers.get("HX-Request") == "true"


def _safe_next(value: str | None) -> str:
    """Where to go after login: a path of this console only (never another site)."""
    if not value or not value.startswith("/") or value.startswith("//") or "\\" in value:
        return "/"
    if len(value) > 2000 or any(ord(c) < 0x20 for c in value):
        return "/"
    return value


def _loopback_host(host: str) -> bool:
    name = host.rsplit(":", 1)[0] if not host.endswith("]") else host
    return loopback(name.strip("[]").lower())
