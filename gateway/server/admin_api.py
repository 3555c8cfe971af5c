"""The gateway.v1 Admin service over the engine's admin verbs (`gateway.engine.port.AdminPort`).

Besides the engine it reads the transition totals (`gateway.server.totals`) and, when the gateway
runs with telemetry, message timelines from the spool (`gateway.server.timeline`).
"""

from __future__ import annotations

from typing import Any, TypeAlias

from gateway.engine.api import DeadLetterFilter, DeadLetterView, GroupView, Scans
from gateway.engine.port import EngineQueries
from gateway.errors import NotFound
from gateway.server import validate
from gateway.server.admin_move import MoveCalls, fitting
from gateway.server.timeline import SpoolTimeline, TimelineEvent
from gateway.server.totals import GroupTotals
from gateway.v1 import admin_pb2, admin_pb2_grpc

Ctx: TypeAlias = Any  # grpc.aio.ServicerContext
MAX_GROUPS = 1000
"""Most groups ListGroups describes."""


class AdminService(MoveCalls, admin_pb2_grpc.AdminServicer):
    def __init__(
        self,
        engine: EngineQueries,
        totals: GroupTotals | None = None,
        timeline: SpoolTimeline | None = None,
        max_message_bytes: int = 4 * 1024 * 1024,
    ) -> None:
        self.admin = engine.admin
        self.max_message_bytes = max_message_bytes
        """The largest message ImportMessages stores (the gateway's `max_message_bytes`)."""
        self.totals = totals or GroupTotals()
        self.timeline = timeline

    def _group(self, topic: str, group: str, view: GroupView) -> admin_pb2.DescribeGroupResponse:
        counts = self.totals.totals(topic, group)
        return admin_pb2.DescribeGroupResponse(
            ready=view.ready,
            delayed=view.delayed,
            inflight=view.inflight,
            waiting_retry=view.waiting_retry,
            dead_letters=view.dead_letters,
            oldest_ready_ms=view.oldest_ready_ms,
            next_retry_ms=view.next_retry_ms,
            retry_topic=view.retry_topic,
            dead_letter_topic=view.dead_letter_topic,
            policy=view.policy,
            naming=view.naming,
            max_retries=view.max_retries,
            cannot_remove_exported=not view.removes_exported,
            consumers=[admin_pb2.GroupConsumer(consumer_id=c.consumer_id, unsettled=c.unsettled)
                       for c in view.consumers],
            totals=admin_pb2.GroupTotals(
                delivered=counts["INFLIGHT"],
                committed=counts["COMMITTED"],
                retried=counts["WAITING_RETRY"],
                dead_lettered=counts["DEAD_LETTERED"],
                discarded=counts["DISCARDED"],
            ),
        )

    async def DescribeGroup(self, request: admin_pb2.DescribeGroupRequest, context: Ctx) -> Any:
        validate.group(request)
        view = await self.admin.describe(request.topic, request.group)
        return self._group(request.topic, request.group, view)

    async def ListGroups(self, request: admin_pb2.ListGroupsRequest, context: Ctx) -> Any:
        validate.list_groups(request)
        pairs = [(topic, group) for topic, group in await self.admin.groups(self.totals.groups())
                 if request.topic in ("", topic) and request.group in ("", group)]
        response = admin_pb2.ListGroupsResponse(truncated=len(pairs) > MAX_GROUPS)
        scans: Scans = {}
        for topic, group in pairs[:MAX_GROUPS]:
            view = await self.admin.describe(topic, group, scans)
            response.groups.append(admin_pb2.GroupSummary(
                topic=topic, group=group, view=self._group(topic, group, view)))
        return response

    async def ListWaitingRetries(
        self, request: admin_pb2.ListWaitingRetriesRequest, context: Ctx
    ) -> Any:
        validate.group(request)
        waiting = await self.admin.waiting_retries(request.topic, request.group)
        return admin_pb2.ListWaitingRetriesResponse(
            by_attempt=[admin_pb2.AttemptRetries(attempt=b.attempt, count=b.count,
                                                 next_due_ms=b.next_due_ms)
                        for b in waiting.by_attempt],
            next_due_ms=waiting.next_due_ms,
            total=waiting.total,
            complete=waiting.complete,
        )

    async def ListDeadLetters(
        self, request: admin_pb2.ListDeadLettersRequest, context: Ctx
    ) -> Any:
        limit, after = validate.list_dead_letters(request)
        page = await self.admin.dead_letters(request.topic, request.group, limit, after,
                                             _filter(request.filter))
        kept = fitting([v.message for v in page.views])
        next_after = page.next_after
        if kept < len(page.views):  # the rest on the next page
            next_after = page.views[kept - 1].message.lease.position
        return admin_pb2.ListDeadLettersResponse(
            dead_letters=[_dead_letter(v) for v in page.views[:kept]],
            next_page_token=str(next_after) if next_after >= 0 else "",
            scanned=page.scanned,
        )

    async def GetDeadLetter(self, request: admin_pb2.GetDeadLetterRequest, context: Ctx) -> Any:
        validate.one_message(request)
        view = await self.admin.dead_letter(request.topic, request.group, request.message_id)
        return admin_pb2.GetDeadLetterResponse(dead_letter=_dead_letter(view))

    async def GetTimeline(self, request: admin_pb2.GetTimelineRequest, context: Ctx) -> Any:
        validate.one_message(request)
        topic, group, message_id = request.topic, request.group, request.message_id
        if self.timeline is not None:
            events = await self.timeline.events(topic, group, message_id)
            if events:
                return admin_pb2.GetTimelineResponse(
                    events=[_event(e) for e in events], source="telemetry",
                    complete=self.timeline.complete)
        try:
            view = await self.admin.dead_letter(topic, group, message_id)
        except NotFound:
            return admin_pb2.GetTimelineResponse(source="", complete=False)
        event = admin_pb2.TimelineEvent(
            ts_ms=view.dead_lettered_ms, from_state="INFLIGHT", to_state="DEAD_LETTERED",
            attempt=view.message.attempt, reason=view.reason,
            destination=view.message.topic)
        return admin_pb2.GetTimelineResponse(events=[event], source="dead letter",
                                             complete=False)

    async def ResendDeadLetters(
        self, request: admin_pb2.ResendDeadLettersRequest, context: Ctx
    ) -> Any:
        validate.resend(request)
        count = await self.admin.resend(request.topic, request.group, list(request.message_ids),
                                        _filter(request.filter))
        return admin_pb2.ResendDeadLettersResponse(resent=count)

    async def DeleteDeadLetters(
        self, request: admin_pb2.DeleteDeadLettersRequest, context: Ctx
    ) -> Any:
        validate.delete(request)
        count = await self.admin.delete(request.topic, request.group, list(request.message_ids),
                                        _filter(request.filter))
        return admin_pb2.DeleteDeadLettersResponse(deleted=count)

    async def Purge(self, request: admin_pb2.PurgeRequest, context: Ctx) -> Any:
        validate.group(request)
        return admin_pb2.PurgeResponse(
            purged=await self.admin.purge(request.topic, request.group)
        )

    async def ListTopics(self, request: admin_pb2.ListTopicsRequest, context: Ctx) -> Any:
        return admin_pb2.ListTopicsResponse(topics=sorted(await self.admin.topics()))


def _filter(where: admin_pb2.DeadLetterFilter) -> DeadLetterFilter:
    return DeadLetterFilter(
        reason=where.reason, min_attempt=where.min_attempt, max_attempt=where.max_attempt,
        since_ms=where.since_ms, until_ms=where.until_ms, text=where.text,
    )


def _dead_letter(v: DeadLetterView) -> admin_pb2.DeadLetterMessage:
    return admin_pb2.DeadLetterMessage(
        message_id=v.message.message_id,
        original_topic=v.original_topic,
        body=v.message.body,
        properties=v.properties,
        attempt=v.message.attempt,
        reason=v.reason,
        dead_lettered_ms=v.dead_lettered_ms,
        position=v.message.lease.position,
        key=v.message.key,
        tag=v.message.tag,
    )


def _event(e: TimelineEvent) -> admin_pb2.TimelineEvent:
    return admin_pb2.TimelineEvent(
        ts_ms=e.ts_ms, from_state=e.from_state, to_state=e.to_state, attempt=e.attempt,
        delay_ms=e.delay_ms, reason=e.reason, destination=e.destination,
    )
