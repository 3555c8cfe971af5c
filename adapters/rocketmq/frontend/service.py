"""`apache.rocketmq.v2.MessagingService` served on the gateway's engine.

Thin by design: authenticate, check (`validation`, one place for every request value), decode,
call the engine, encode. Errors become in-band RocketMQ statuses (what the SDK reads; `edge`
turns a `GatewayError` a method raises into one); only authentication failures, undecodable
requests and unsupported RPCs end the call with a gRPC status.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import replace
from typing import Any

import grpc
from rocketmq.grpc_protocol import definition_pb2, service_pb2, service_pb2_grpc

from adapters.rocketmq.dialect import DEFAULT_SUSPEND_MS
from gateway.core.selector import MessageSelector
from gateway.engine.api import (
    SettleAction,
    SettleGuard,
    Settlement,
    SettleResult,
    SubscriptionSpec,
)
from gateway.engine.port import EnginePort
from gateway.errors import FailedPrecondition, GatewayError, PermissionDenied, Unauthenticated
from gateway.limits import StreamSlots, message_size

from . import codec, sending, topology, transactions
from .auth import Authenticator, header_text
from .renewer import Renewer
from .settings import ORDERLY_UNLIMITED_ATTEMPTS, FrontendSettings
from .validation import TAGS, Limits, RequestChecks

Code = definition_pb2.Code

POLICY_SIMPLE = "rocketmq-simple"
POLICY_PUSH = "rocketmq"
POLICY_ORDERLY = "rocketmq-orderly"
MAX_WAIT_MS = 60_000
"""Longest long poll the engine accepts."""


CLIENT_ID_HEADER = "x-mq-client-id"
REFUSED_READ_S = 1.0
"""How long a stream without valid credentials waits for the client's first frame before it is
refused (a first frame that does not decode is refused for that)."""


class MessagingService(service_pb2_grpc.MessagingServiceServicer):  # type: ignore[misc]
    """The RocketMQ 5 proxy surface the official SDKs talk to."""

    def __init__(
        self,
        engine: EnginePort,
        settings: FrontendSettings,
        now_s: Callable[[], float] = time.time,
        stream_slots: StreamSlots | None = None,
    ) -> None:
        self._engine = engine
        self._settings = settings
        self._stream_slots = stream_slots if stream_slots is not None else StreamSlots()
        self._auth = Authenticator(settings.credentials, settings.clock_skew_s, now_s)
        self._renewer = Renewer(
            engine,
            settings.push_invisible_ms,
            settings.push_consume_timeout_ms,
            settings.renew_interval_ms,
        )
        limits = Limits(settings.max_body_size)
        self._checks = RequestChecks(limits, engine.now_ms)
        self.transactions = transactions.TransactionDesk(
            engine, settings.transaction_check, lambda: settings.advertised_endpoint,
            shared=settings.permissions is not None)

    # --- helpers -------------------------------------------------------------------------

    async def _authenticate_stream(self, requests: AsyncIterator[Any], context: Any) -> str:
        """`_authenticate` for a client stream, whose first frame is read (briefly) before
        refusing the call: one that does not decode gets INVALID_ARGUMENT (`edge` aborts), what
        a unary request's bytes get before its credentials are looked at. The wait takes one
        of the server's `StreamSlots`; when all are taken the call is refused at once, so
        streams without credentials cannot hold every call the server takes."""
        try:
            self._auth.check(context.invocation_metadata() or ())
        except Unauthenticated:
            if self._stream_slots.take():
                try:
                    await asyncio.wait_for(anext(aiter(requests), None), REFUSED_READ_S)
                except grpc.aio.AbortError:  # the first frame did not decode
                    raise
                except Exception:  # a client that does not send, or has gone: refused anyway
                    pass
                finally:
                    self._stream_slots.give()
        return await self._authenticate(context)

    def refusal(self, metadata: Any) -> str | None:
        """Why a call with this metadata is refused UNAUTHENTICATED (None: it is not)."""
        try:
            self._auth.check(metadata or ())
        except Unauthenticated as error:
            return codec.cut(error.message)
        return None

    async def _authenticate(self, context: Any) -> str:
        """Client id of an authenticated call; aborts with UNAUTHENTICATED otherwise."""
        try:
            self._auth.check(context.invocation_metadata() or ())
        except Unauthenticated as error:
            await context.abort(grpc.StatusCode.UNAUTHENTICATED, codec.cut(error.message))
        try:
            return header_text(context.invocation_metadata() or (), CLIENT_ID_HEADER) or ""
        except ValueError as error:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(error))
            raise  # pragma: no cover - abort raises

    async def _admit(self, request: Any, context: Any) -> str:
        """Authenticate the call, then check every value of its request (raises `Rejected`)."""
        client_id = await self._authenticate(context)
        self._checks.check(request)
        return client_id

    def _principal(self, context: Any) -> Any:
        """The principal of the call's access key, or None when permissions are off."""
        permissions = self._settings.permissions
        if permissions is None:
            return None
        access_key = self._auth.check(context.invocation_metadata() or ())
        principal = permissions.by_access_key.get(access_key)
        if principal is None:
            raise PermissionDenied(f"access key {access_key!r} has no permissions")
        return principal

    def _check_publish(self, context: Any, topic: str) -> str:
        """Raise unless the caller may publish to `topic`; the name of its principal ("" when
        permissions are off), whose share of new topics a new one takes."""
        permissions = self._settings.permissions
        if permissions is None:
            return ""
        principal = self._principal(context)
        permissions.checks.check_publish(principal, topic)
        return str(getattr(principal, "name", ""))

    def _may_publish(self, context: Any, topic: str) -> bool:
        """Whether the caller may publish to `topic` (and so be asked about its transactions)."""
        try:
            self._check_publish(context, topic)
        except GatewayError:
            return False
        return True

    def _check_consume(self, context: Any, topic: str, group: str) -> str:
        """Raise unless the caller may consume; the name of its principal ("" when permissions
        are off), whose `max_groups_per_principal` a group it makes counts against."""
        permissions = self._settings.permissions
        if permissions is None:
            return ""
        principal = self._principal(context)
        permissions.checks.check_consume(principal, topic, group)
        return str(getattr(principal, "name", ""))

    def _settle_guard(self, context: Any) -> SettleGuard | None:
        """The caller's check for settling a delivery (None when permissions are off)."""
        permissions = self._settings.permissions
        if permissions is None:
            return None
        try:
            return permissions.checks.settle_guard(self._principal(context))
        except PermissionDenied as error:
            denied = error

        def refuse(topic: str, group: str) -> None:
            raise denied

        return refuse

    def _request_guard(self, context: Any, request: Any) -> SettleGuard:
        """The caller's check for settling, after the check that each delivery is one of the
        request's group and topic: a receipt handle settles only a delivery of the group and
        topic it was received under, as a RocketMQ broker finds it by them."""
        topic, group = codec.store_name(request.topic), codec.store_name(request.group)
        access = self._settle_guard(context)

        def guard(of_topic: str, of_group: str) -> None:
            if of_topic != topic or of_group != group:
                raise FailedPrecondition(
                    f"receipt handle is not one of group {group!r} on topic {topic!r}"
                )
            if access is not None:
                access(of_topic, of_group)

        return guard

    def _renewal_owner(self, context: Any, client_id: str) -> str:
        """Whose push deliveries these are: the client id under the caller's access key, so
        that one principal's NotifyClientTermination cannot end another's renewals."""
        if not self._auth.enabled:
            return client_id
        return f"{self._auth.check(context.invocation_metadata() or ())}/{client_id}"

    def _endpoints(self, requested: Any) -> Any:
        return topology.endpoints_for(self._settings.advertised_endpoint, requested)

    def _spec(self, request: Any, kind: str, client_id: str) -> SubscriptionSpec:
        group = codec.store_name(request.group)
        expression = request.filter_expression
        settings = self._settings
        options: dict[str, str] = {}
        if kind == codec.PUSH and group in settings.fifo_groups:
            policy = POLICY_ORDERLY
            if settings.orderly_max_delivery_attempts != ORDERLY_UNLIMITED_ATTEMPTS:
                options["max_retries"] = str(settings.orderly_max_delivery_attempts - 1)
            if settings.orderly_suspend_ms != DEFAULT_SUSPEND_MS:
                options["suspend_ms"] = str(settings.orderly_suspend_ms)
        else:
            policy = POLICY_PUSH if kind == codec.PUSH else POLICY_SIMPLE
            if settings.max_delivery_attempts is not None:
                options["max_retries"] = str(settings.max_delivery_attempts - 1)
            if group in settings.fifo_groups:  # a simple consumer: FIFO per message group
                options["ordered"] = "true"
        return SubscriptionSpec(
            topic=codec.store_name(request.message_queue.topic),
            group=group,
            policy=policy,
            options=options,
            consumer_id=client_id,
            **_filters(expression),
        )

    def _wait_ms(self, request: Any, context: Any) -> int:
        if request.HasField("long_polling_timeout"):
            wait_ms = codec.to_ms(request.long_polling_timeout)
        else:
            wait_ms = self._settings.long_polling_timeout_s * 1000
        remaining_s = context.time_remaining()
        if remaining_s is not None:
            wait_ms = min(wait_ms, int(remaining_s * 1000) - self._settings.deadline_margin_ms)
        return max(0, min(wait_ms, MAX_WAIT_MS))

    # --- routes, heartbeats, settings ----------------------------------------------------

    async def QueryRoute(self, request: Any, context: Any) -> Any:
        await self._admit(request, context)
        queue = topology.message_queue(request.topic, self._endpoints(request.endpoints))
        return service_pb2.QueryRouteResponse(status=codec.status(), message_queues=[queue])

    async def QueryAssignment(self, request: Any, context: Any) -> Any:
        await self._admit(request, context)
        queue = topology.message_queue(request.topic, self._endpoints(request.endpoints))
        assignment = definition_pb2.Assignment(message_queue=queue)
        return service_pb2.QueryAssignmentResponse(status=codec.status(), assignments=[assignment])

    async def Heartbeat(self, request: Any, context: Any) -> Any:
        await self._admit(request, context)
        return service_pb2.HeartbeatResponse(status=codec.status())

    async def NotifyClientTermination(self, request: Any, context: Any) -> Any:
        client_id = await self._admit(request, context)
        if client_id:
            self._renewer.forget_client(self._renewal_owner(context, client_id))
        return service_pb2.NotifyClientTerminationResponse(status=codec.status())

    async def Telemetry(
        self, request_iterator: AsyncIterator[Any], context: Any
    ) -> AsyncIterator[Any]:
        await self._authenticate_stream(request_iterator, context)
        # Replies and the checker's RecoverOrphanedTransactionCommands share one outbox.
        outbox: asyncio.Queue[Any] = asyncio.Queue(transactions.OUTBOX)
        reader = asyncio.create_task(self._telemetry_reader(request_iterator, context, outbox))
        try:
            while True:
                item = await outbox.get()
                if item is None:
                    break
                yield item
            await reader  # its error, if it ended with one
        finally:
            self.transactions.drop_producer(outbox)
            reader.cancel()

    async def _telemetry_reader(
        self, request_iterator: AsyncIterator[Any], context: Any, outbox: asyncio.Queue[Any]
    ) -> None:
        try:
            async for command in request_iterator:
                self._checks.check(command)
                if not command.HasField("settings"):
                    continue
                client = command.settings
                if client.client_type in topology.PRODUCERS:
                    topics = [t for t in map(codec.store_name, client.publishing.topics)
                              if self._may_publish(context, t)]
                    self.transactions.add_producer(topics, outbox)
                reply = topology.settings_reply(
                    client, self._settings, self._endpoints(client.access_point)
                )
                await outbox.put(service_pb2.TelemetryCommand(status=codec.status(),
                                                              settings=reply))
        finally:
            with contextlib.suppress(asyncio.QueueFull):
                outbox.put_nowait(None)

    # --- publishing ----------------------------------------------------------------------

    async def SendMessage(self, request: Any, context: Any) -> Any:
        try:
            await self._admit(request, context)
            messages = sending.out_messages(request, self._engine.now_ms(),
                                            self._engine.config.max_message_bytes)
            halves = self._halves(request, messages)
            if halves:
                await self.transactions.wake()
            owner = str(getattr(self._principal(context), "name", "")) if halves else ""
            with self.transactions.open.opening(owner, {i: len(messages[i].body)
                                                        for i in halves}) as opening:
                response = await sending.publish(
                    self._engine, request, messages,
                    lambda topic: self._check_publish(context, topic), halves)
                self.transactions.expect(opening.stored(response.entries))
        except GatewayError as error:
            return sending.refused(request, error)
        return response

    @staticmethod
    def _halves(request: Any, messages: list[Any]) -> dict[int, int]:
        """Turn the transactional messages of `request` into half messages: their indexes and
        the bytes each grew by."""
        halves = {}
        for index, message in enumerate(request.messages):
            props = message.system_properties
            if props.message_type == definition_pb2.MessageType.TRANSACTION:
                half = transactions.half_message(
                    messages[index], message.topic, transactions.recovery_ms(props),
                    f"messages[{index}]")
                halves[index] = message_size(half) - message_size(messages[index])
                messages[index] = half
        return halves

    async def EndTransaction(self, request: Any, context: Any) -> Any:
        try:
            await self._admit(request, context)
            topic = codec.store_name(request.topic)
            owner = self._check_publish(context, topic)
            await self.transactions.wake()
            await self.transactions.end(topic, request.message_id, request.transaction_id,
                                        request.resolution, owner)
        except GatewayError as error:
            return service_pb2.EndTransactionResponse(status=codec.error_status(error))
        return service_pb2.EndTransactionResponse(status=codec.status())

    # --- consuming -----------------------------------------------------------------------

    async def ReceiveMessage(self, request: Any, context: Any) -> AsyncIterator[Any]:
        kind = codec.PUSH if request.auto_renew else codec.SIMPLE
        try:
            client_id = await self._admit(request, context)
            spec = self._spec(request, kind, client_id)
            spec = replace(spec, owner=self._check_consume(context, spec.topic, spec.group))
            if kind == codec.PUSH:
                # Push policies have a fixed delivery timeout; the gateway renews it.
                invisible_ms = None
                shown_ms = self._engine.policy_for(spec).delivery_timeout_ms or 0
            else:
                invisible_ms = shown_ms = codec.to_ms(request.invisible_duration)
            batch = request.batch_size or 1
            deliveries = await self._engine.receive(
                spec, batch, invisible_ms, self._wait_ms(request, context)
            )
        except GatewayError as error:
            yield service_pb2.ReceiveMessageResponse(status=codec.error_status(error))
            return
        if not deliveries:
            yield service_pb2.ReceiveMessageResponse(
                status=codec.status(Code.MESSAGE_NOT_FOUND, "no new message")
            )
            return
        if kind == codec.PUSH:
            owner = self._renewal_owner(context, client_id)
            for delivery in deliveries:
                self._renewer.track(delivery.receipt, owner, delivery.deadline_ms)
        now_ms = self._engine.now_ms()
        yield service_pb2.ReceiveMessageResponse(status=codec.status())
        stamp = service_pb2.ReceiveMessageResponse()
        codec.set_to_ms(stamp.delivery_timestamp, now_ms)
        yield stamp
        host = self._settings.advertised_endpoint
        for delivery in deliveries:
            message = codec.sdk_message(delivery, request.message_queue.topic, kind, shown_ms, host)
            yield service_pb2.ReceiveMessageResponse(message=message)

    async def AckMessage(self, request: Any, context: Any) -> Any:
        await self._admit(request, context)
        results = await self._renewer.settle(
            [e.receipt_handle for e in request.entries],
            lambda _, receipt: Settlement(receipt, SettleAction.ACK),
            self._request_guard(context, request),
        )
        response = service_pb2.AckMessageResponse()
        statuses = []
        for entry, result in zip(request.entries, results, strict=True):
            item = _result_status(result)
            statuses.append(item)
            response.entries.add(
                message_id=entry.message_id, receipt_handle=entry.receipt_handle, status=item
            )
        response.status.CopyFrom(codec.overall(statuses))
        return response

    async def ChangeInvisibleDuration(self, request: Any, context: Any) -> Any:
        await self._admit(request, context)
        invisible_ms = codec.to_ms(request.invisible_duration)

        def make(kind: str, receipt: str) -> Settlement:
            if kind == codec.PUSH:
                # The push consumer's RECONSUME_LATER: the policy's back-off applies.
                return Settlement(receipt, SettleAction.FAIL, reason="push listener failed")
            return Settlement(receipt, SettleAction.EXTEND, invisible_ms=invisible_ms)

        (result,) = await self._renewer.settle([request.receipt_handle], make,
                                               self._request_guard(context, request))
        handle = request.receipt_handle
        if result.ok and result.new_receipt:
            handle = codec.wrap_receipt(codec.SIMPLE, result.new_receipt)
        return service_pb2.ChangeInvisibleDurationResponse(
            status=_result_status(result), receipt_handle=handle
        )

    async def ForwardMessageToDeadLetterQueue(self, request: Any, context: Any) -> Any:
        await self._admit(request, context)
        reason = (
            f"forwarded by the client after delivery {request.delivery_attempt} "
            f"of {request.max_delivery_attempts}"
        )
        (result,) = await self._renewer.settle(
            [request.receipt_handle],
            lambda _, receipt: Settlement(receipt, SettleAction.DEAD_LETTER, reason=reason),
            self._request_guard(context, request),
        )
        return service_pb2.ForwardMessageToDeadLetterQueueResponse(status=_result_status(result))

    async def start(self) -> None:
        """Start the transaction checker (after the engine started)."""
        await self.transactions.start()

    async def close(self) -> None:
        """Stop renewing push deliveries and checking transactions (before the engine
        closes)."""
        await self.transactions.stop()
        await self._renewer.close()

    # --- not offered ---------------------------------------------------------------------

    async def _unsupported(self, context: Any, name: str) -> None:
        await self._authenticate(context)
        await context.abort(
            grpc.StatusCode.UNIMPLEMENTED,
            f"{name} is not supported by the retry gateway's RocketMQ front end",
        )

    async def PullMessage(self, request: Any, context: Any) -> AsyncIterator[Any]:
        await self._unsupported(context, "PullMessage")
        yield service_pb2.PullMessageResponse()  # pragma: no cover - abort raises

    async def UpdateOffset(self, request: Any, context: Any) -> Any:
        await self._unsupported(context, "UpdateOffset")

    async def GetOffset(self, request: Any, context: Any) -> Any:
        await self._unsupported(context, "GetOffset")

    async def QueryOffset(self, request: Any, context: Any) -> Any:
        await self._unsupported(context, "QueryOffset")

    async def RecallMessage(self, request: Any, context: Any) -> Any:
        await self._unsupported(context, "RecallMessage")

    async def SyncLiteSubscription(self, request: Any, context: Any) -> Any:
        await self._unsupported(context, "SyncLiteSubscription (lite topics)")


def _result_status(result: SettleResult) -> Any:
    if result.ok:
        return codec.status()
    return codec.status(codec.rocketmq_code(result.error_code), result.error or result.error_code)


def _filters(expression: Any) -> dict[str, Any]:
    """The tag filter or the selector of a (validated) filter expression."""
    if expression.type == definition_pb2.FilterType.SQL:
        return {"selector": MessageSelector.compile(expression.expression, TAGS)}
    return {"tag_filter": expression.expression.strip()}
