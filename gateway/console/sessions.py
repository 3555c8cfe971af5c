"""Console sessions: who is logged in (with which token), each session's CSRF token, the notices
to show after an action, and a brake on guessing tokens at the login form.

Sessions live in memory only: a restarted gateway asks everyone to log in again. A session id
is 256 random bits in an HttpOnly, SameSite=Strict cookie; the token it carries never goes back
to the browser.
"""

from __future__ import annotations

import hmac
import secrets
import time
from collections import OrderedDict, deque
from dataclasses import dataclass, field

COOKIE = "gateway_console"
IDLE_S = 3600.0
"""A session nobody used for this long ends."""
MAX_AGE_S = 12 * 3600.0
"""A session ends this long after login, used or not."""
MAX_SESSIONS = 10_000
"""Sessions kept at once of each kind, before login and logged in; the least recently used of
its kind goes first. Apart, so that anyone (every request without a cookie gets a session, for
the login form's CSRF token) cannot push logged-in sessions out: 10,000 anonymous requests, a
few seconds' work, logged every admin out."""
LOGIN_FAILURES = 10
"""Failed logins one client address may make per `LOGIN_WINDOW_S`; more wait."""
LOGIN_WINDOW_S = 60.0


@dataclass(slots=True)
class Session:
    id: str
    csrf: str
    created: float
    used: float
    token: str = ""
    """The bearer token the person logged in with ("" before login, or without auth)."""
    authenticated: bool = False
    notices: list[tuple[str, str]] = field(default_factory=list)
    """(kind, text) to show on the next page: kind is "ok" or "error"."""

    def check_csrf(self, value: str) -> bool:
        return bool(value) and hmac.compare_digest(self.csrf.encode(), value.encode())

    def notice(self, kind: str, text: str) -> None:
        self.notices.append((kind, text))
        del self.notices[:-5]

    def take_notices(self) -> list[tuple[str, str]]:
        out, self.notices = self.notices, []
        return out


class Sessions:
    def __init__(self, clock: object = time.monotonic) -> None:
        self._clock = clock if callable(clock) else time.monotonic
        self._anonymous: OrderedDict[str, Session] = OrderedDict()
        """Sessions before login (and every session of a console without tokens)."""
        self._logged_in: OrderedDict[str, Session] = OrderedDict()
        self._failures: dict[str, deque[float]] = {}

    def _now(self) -> float:
        return float(self._clock())

    def get(self, session_id: str | None) -> Session | None:
        """The live session with this id, or None (expired ones are dropped)."""
        if not session_id or len(session_id) > 100:
            return None
        pool = self._logged_in if session_id in self._logged_in else self._anonymous
        session = pool.get(session_id)
        if session is None:
            return None
        now = self._now()
        if now - session.used > IDLE_S or now - session.created > MAX_AGE_S:
            pool.pop(session_id, None)
            return None
        session.used = now
        pool.move_to_end(session_id)
        return session

    def new(self) -> Session:
        return self._add(self._anonymous)

    def _add(self, pool: OrderedDict[str, Session]) -> Session:
        now = self._now()
        session = Session(secrets.token_urlsafe(32), secrets.token_urlsafe(32), now, now)
        pool[session.id] = session
        while len(pool) > MAX_SESSIONS:
            pool.popitem(last=False)
        return session

    def login(self, old: Session | None, token: str) -> Session:
        """A new session (new id and CSRF token) for a person who gave a valid token; the
        session they had before login ends."""
        if old is not None:
            self.end(old)
        session = self._add(self._logged_in)
        session.token = token
        session.authenticated = True
        return session

    def end(self, session: Session) -> None:
        self._anonymous.pop(session.id, None)
        self._logged_in.pop(session.id, None)

    def end_token(self, token: str) -> None:
        """End every session that logged in with `token` (the gateway no longer takes it)."""
        for sid in [s.id for s in self._logged_in.values() if s.token == token]:
            self._logged_in.pop(sid, None)

    # ------------------------------------------------------------------ login brake
    def may_try_login(self, client: str) -> bool:
        window = self._failures.get(client)
        if window is None:
            return True
        now = self._now()
        while window and now - window[0] > LOGIN_WINDOW_S:
            window.popleft()
        if not window:
            self._failures.pop(client, None)
        return len(window) < LOGIN_FAILURES

    def login_failed(self, client: str) -> None:
        if len(self._failures) >= MAX_SESSIONS and client not in self._failures:
            self._failures.clear()
        self._failures.setdefault(client, deque()).append(self._now())

    def __len__(self) -> int:
        return len(self._anonymous) + len(self._logged_in)
