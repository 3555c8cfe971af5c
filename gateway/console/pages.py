"""The console's pages and actions: overview, a group, dead letters, one message; resend,
delete and purge. Each reads or changes the gateway through the admin API only, as the person
logged in (`Console.client`)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode

import grpc
import jinja2
from aiohttp import web

from gateway.console import forms, views
from gateway.console.server import SESSION, see_other
from gateway.console.views import plural
from gateway.preview import duration, iso_ms, preview

if TYPE_CHECKING:
    from gateway.console.server import Console

PAGE_SIZE = 50
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
_STATUS = {
    grpc.StatusCode.INVALID_ARGUMENT: (400, "Refused by the gateway"),
    grpc.StatusCode.NOT_FOUND: (404, "Not found"),
    grpc.StatusCode.PERMISSION_DENIED: (403, "Not allowed"),
    grpc.StatusCode.UNAVAILABLE: (503, "The gateway is not serving"),
    grpc.StatusCode.DEADLINE_EXCEEDED: (504, "The gateway did not answer in time"),
}


def add_filters(env: jinja2.Environment) -> None:
    env.filters["ms"] = iso_ms
    env.filters["dur"] = duration
    env.filters["rate"] = views.rate_text
    env.filters["due"] = views.in_text
    env.filters["query"] = lambda params: urlencode(params)


class Pages:
    def __init__(self, console: Console) -> None:
        self.console = console
        self.rates = views.Rates()

    def routes(self, router: web.UrlDispatcher) -> None:
        for path, handler in (("/", self.overview), ("/group", self.group),
                              ("/dead-letters", self.dead_letters), ("/message", self.message)):
            router.add_get(path, self._guarded(handler))
        for path, handler in (("/dead-letters/resend", self.resend),
                              ("/dead-letters/delete", self.delete),
                              ("/dead-letters/purge", self.purge_dead),
                              ("/group/purge", self.purge_group)):
            router.add_post(path, self._guarded(handler))

    def _guarded(self, handler: Handler) -> Handler:
        """Bad input and the gateway's refusals as pages a person can read."""
        console = self.console

        async def run(request: web.Request) -> web.StreamResponse:
            try:
                return await handler(request)
            except forms.BadInput as exc:
                return console.error(request, 400, "Bad request", str(exc))
            except grpc.aio.AioRpcError as exc:
                code = exc.code()
                if code == grpc.StatusCode.UNAUTHENTICATED:
                    session = request[SESSION]
                    console.sessions.end_token(session.token)
                    request["end_session"] = True
                    return console.error(request, 401, "Log in again",
                                         "The gateway no longer takes your token.")
                status, title = _STATUS.get(code, (502, "The gateway failed"))
                return console.error(request, status, title,
                                     f"{code.name}: {exc.details() or 'no details'}")

        return run

    def _render(self, request: web.Request, template: str, **context: Any) -> web.Response:
        return self.console.render(request, template, **context)

    # ----------------------------------------------------------------------- pages
    async def overview(self, request: web.Request) -> web.StreamResponse:
        response = await self.console.client(request).groups()
        rows = []
        for g in response.groups:
            rate = self.rates.sample(g.topic, g.group, g.view.totals)
            rows.append({"topic": g.topic, "group": g.group, "view": g.view,
                         "rates": rate or (None, None, None)})
        listed = response.groups
        totals = {
            "groups": len(listed),
            "inflight": sum(g.view.inflight for g in listed),
            "waiting": sum(g.view.waiting_retry for g in listed),
            "dead": sum(g.view.dead_letters for g in listed),
        }
        template = "_overview_live.html" if _fragment(request) else "overview.html"
        return self._render(request, template, rows=rows, totals=totals,
                            truncated=response.truncated)

    async def group(self, request: web.Request) -> web.StreamResponse:
        topic, group = forms.name(request.query, "topic"), forms.name(request.query, "group")
        client = self.console.client(request)
        view = await client.describe(topic, group)
        waiting = await client.waiting_retries(topic, group)
        template = "_group_live.html" if _fragment(request) else "group.html"
        return self._render(request, template, topic=topic, group=group, view=view,
                            waiting=waiting, bars=views.bars(waiting.by_attempt),
                            here={"topic": topic, "group": group})

    async def dead_letters(self, request: web.Request) -> web.StreamResponse:
        query = request.query
        client = self.console.client(request)
        if not query.get("topic") and not query.get("group"):
            listed = await client.groups()
            having = [g for g in listed.groups if g.view.dead_letters]
            return self._render(request, "dead_letter_groups.html", groups=having)
        scope = forms.scope(query)
        token = forms.page_token(query)
        view = await client.describe(scope.topic, scope.group)
        if _fragment(request):
            return self._render(request, "_dead_count.html", view=view, scope=scope)
        page = await client.dead_letters(scope.topic, scope.group, limit=PAGE_SIZE,
                                         page_token=token,
                                         where=scope.where if scope.filtered else None)
        rows = [{"m": m, "body": _body_line(m.body)} for m in page.dead_letters]
        return self._render(request, "dead_letters.html", scope=scope, view=view, rows=rows,
                            next_token=page.next_page_token, scanned=page.scanned,
                            first_page=not token, here=scope.query())

    async def message(self, request: web.Request) -> web.StreamResponse:
        query = request.query
        topic, group = forms.name(query, "topic"), forms.name(query, "group")
        message_id = forms.name(query, "id")
        client = self.console.client(request)
        letter = None
        try:
            letter = await client.dead_letter(topic, group, message_id)
        except grpc.aio.AioRpcError as exc:
            if exc.code() != grpc.StatusCode.NOT_FOUND:
                raise
        timeline = await client.timeline(topic, group, message_id)
        shown = preview(letter.body) if letter is not None else None
        props = sorted(letter.properties.items()) if letter is not None else []
        return self._render(
            request, "message.html", topic=topic, group=group, message_id=message_id,
            letter=letter, shown=shown, props=props, timeline=timeline,
            steps=views.timeline(timeline.events), summary=views.summary(timeline.events),
            here={"topic": topic, "group": group})

    # --------------------------------------------------------------------- actions
    async def _form(self, request: web.Request) -> tuple[dict[str, str], list[str]]:
        form = await request.post()
        values = {k: v for k, v in form.items() if isinstance(v, str) and k != "id"}
        ids = [v for v in form.getall("id", []) if isinstance(v, str)]
        return values, ids

    def _confirm(self, request: web.Request, values: dict[str, str], ids: list[str],
                 question: str, button: str, back: str) -> web.Response:
        hidden = [(k, v) for k, v in values.items() if k not in ("csrf", "confirm")]
        hidden += [("id", i) for i in ids]
        return self._render(request, "confirm.html", question=question, button=button,
                            action=request.path, hidden=hidden, back=back)

    def _done(self, request: web.Request, text: str, back: str) -> web.Response:
        request[SESSION].notice("ok", text)
        return see_other(back)

    async def resend(self, request: web.Request) -> web.StreamResponse:
        values, ids = await self._form(request)
        scope = forms.scope(values)
        ids = forms.selected(ids)
        back = _back(values, scope)
        client = self.console.client(request)
        if values.get("scope") == "matching":
            if values.get("confirm") != "yes":
                what = "every dead letter" + (" that matches the filter" if scope.filtered
                                              else "")
                return self._confirm(request, values, [], f"Resend {what} of group "
                                     f"{scope.group} on {scope.topic} to the original topic?",
                                     "Resend them", back)
            count = await client.resend(scope.topic, scope.group, [],
                                        scope.where if scope.filtered else None)
        else:
            if not ids:
                raise forms.BadInput("id", "", "tick at least one dead letter")
            count = await client.resend(scope.topic, scope.group, ids)
        text = f"Resent {plural(count, 'message')} to the original topic."
        return self._done(request, text, back)

    async def delete(self, request: web.Request) -> web.StreamResponse:
        values, ids = await self._form(request)
        scope = forms.scope(values)
        ids = forms.selected(ids)
        back = _back(values, scope)
        if not ids:
            raise forms.BadInput("id", "", "tick at least one dead letter")
        if values.get("confirm") != "yes":
            return self._confirm(request, values, ids,
                                 f"Delete {plural(len(ids), 'dead letter')} of group "
                                 f"{scope.group} on {scope.topic}? They cannot be resent "
                                 "afterwards.", "Delete", back)
        count = await self.console.client(request).delete(scope.topic, scope.group, ids)
        return self._done(request, f"Deleted {plural(count, 'dead letter')}.",
                          _back({}, scope) if values.get("from") == "message" else back)

    async def purge_dead(self, request: web.Request) -> web.StreamResponse:
        values, _ = await self._form(request)
        scope = forms.scope(values)
        back = _back(values, scope)
        client = self.console.client(request)
        if values.get("confirm") != "yes":
            view = await client.describe(scope.topic, scope.group)
            what = ("the dead letters that match the filter" if scope.filtered
                    else f"all {plural(view.dead_letters, 'dead letter')}")
            return self._confirm(request, values, [], f"Purge {what} of group {scope.group} "
                                 f"on {scope.topic}? They are deleted and cannot be resent.",
                                 "Purge", back)
        count = await client.delete(scope.topic, scope.group, [],
                                    scope.where if scope.filtered else None, everything=True)
        return self._done(request, f"Purged {plural(count, 'dead letter')}.", back)

    async def purge_group(self, request: web.Request) -> web.StreamResponse:
        values, _ = await self._form(request)
        topic, group = forms.name(values, "topic"), forms.name(values, "group")
        back = "/group?" + urlencode({"topic": topic, "group": group})
        client = self.console.client(request)
        if values.get("confirm") != "yes":
            view = await client.describe(topic, group)
            waiting = view.ready + view.delayed + view.waiting_retry
            return self._confirm(request, values, [],
                                 f"Drop the {plural(waiting, 'message')} of group {group} "
                                 f"on {topic} that wait for delivery (ready, delayed, "
                                 "waiting retry)? Dead letters are kept.", "Drop them", back)
        count = await client.purge(topic, group)
        return self._done(request, f"Dropped {plural(count, 'waiting message')}.", back)


def _fragment(request: web.Request) -> bool:
    return request.query.get("fragment") == "live"


def _back(values: dict[str, str], scope: forms.Scope) -> str:
    """The page an action returns to: the message page it came from, else the list."""
    if values.get("from") == "message" and values.get("message"):
        message = forms.name(values, "message")
        return "/message?" + urlencode({"topic": scope.topic, "group": scope.group,
                                        "id": message})
    return "/dead-letters?" + urlencode(scope.query())


def _body_line(body: bytes) -> str:
    shown = preview(body)
    if shown.kind == "binary":
        return f"{shown.size} bytes of binary"
    if shown.kind == "empty":
        return "(empty)"
    text = " ".join(body[:300].decode("utf-8", "replace").split())
    return text if len(text) <= 80 else text[:79] + "…"
