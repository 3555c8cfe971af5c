from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class MessagePart(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    MESSAGE_PART_UNSPECIFIED: _ClassVar[MessagePart]
    MESSAGE_PART_READY: _ClassVar[MessagePart]
    MESSAGE_PART_RETRY: _ClassVar[MessagePart]
    MESSAGE_PART_DEAD_LETTER: _ClassVar[MessagePart]
MESSAGE_PART_UNSPECIFIED: MessagePart
MESSAGE_PART_READY: MessagePart
MESSAGE_PART_RETRY: MessagePart
MESSAGE_PART_DEAD_LETTER: MessagePart

class DescribeGroupRequest(_message.Message):
    __slots__ = ("topic", "group")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    GROUP_FIELD_NUMBER: _ClassVar[int]
    topic: str
    group: str
    def __init__(self, topic: _Optional[str] = ..., group: _Optional[str] = ...) -> None: ...

class GroupConsumer(_message.Message):
    __slots__ = ("consumer_id", "unsettled")
    CONSUMER_ID_FIELD_NUMBER: _ClassVar[int]
    UNSETTLED_FIELD_NUMBER: _ClassVar[int]
    consumer_id: str
    unsettled: int
    def __init__(self, consumer_id: _Optional[str] = ..., unsettled: _Optional[int] = ...) -> None: ...

class GroupTotals(_message.Message):
    __slots__ = ("delivered", "committed", "retried", "dead_lettered", "discarded")
    DELIVERED_FIELD_NUMBER: _ClassVar[int]
    COMMITTED_FIELD_NUMBER: _ClassVar[int]
    RETRIED_FIELD_NUMBER: _ClassVar[int]
    DEAD_LETTERED_FIELD_NUMBER: _ClassVar[int]
    DISCARDED_FIELD_NUMBER: _ClassVar[int]
    delivered: int
    committed: int
    retried: int
    dead_lettered: int
    discarded: int
    def __init__(self, delivered: _Optional[int] = ..., committed: _Optional[int] = ..., retried: _Optional[int] = ..., dead_lettered: _Optional[int] = ..., discarded: _Optional[int] = ...) -> None: ...

class DescribeGroupResponse(_message.Message):
    __slots__ = ("ready", "delayed", "inflight", "waiting_retry", "dead_letters", "oldest_ready_ms", "next_retry_ms", "retry_topic", "dead_letter_topic", "policy", "naming", "consumers", "totals", "max_retries", "cannot_remove_exported")
    READY_FIELD_NUMBER: _ClassVar[int]
    DELAYED_FIELD_NUMBER: _ClassVar[int]
    INFLIGHT_FIELD_NUMBER: _ClassVar[int]
    WAITING_RETRY_FIELD_NUMBER: _ClassVar[int]
    DEAD_LETTERS_FIELD_NUMBER: _ClassVar[int]
    OLDEST_READY_MS_FIELD_NUMBER: _ClassVar[int]
    NEXT_RETRY_MS_FIELD_NUMBER: _ClassVar[int]
    RETRY_TOPIC_FIELD_NUMBER: _ClassVar[int]
    DEAD_LETTER_TOPIC_FIELD_NUMBER: _ClassVar[int]
    POLICY_FIELD_NUMBER: _ClassVar[int]
    NAMING_FIELD_NUMBER: _ClassVar[int]
    CONSUMERS_FIELD_NUMBER: _ClassVar[int]
    TOTALS_FIELD_NUMBER: _ClassVar[int]
    MAX_RETRIES_FIELD_NUMBER: _ClassVar[int]
    CANNOT_REMOVE_EXPORTED_FIELD_NUMBER: _ClassVar[int]
    ready: int
    delayed: int
    inflight: int
    waiting_retry: int
    dead_letters: int
    oldest_ready_ms: int
    next_retry_ms: int
    retry_topic: str
    dead_letter_topic: str
    policy: str
    naming: str
    consumers: _containers.RepeatedCompositeFieldContainer[GroupConsumer]
    totals: GroupTotals
    max_retries: int
    cannot_remove_exported: bool
    def __init__(self, ready: _Optional[int] = ..., delayed: _Optional[int] = ..., inflight: _Optional[int] = ..., waiting_retry: _Optional[int] = ..., dead_letters: _Optional[int] = ..., oldest_ready_ms: _Optional[int] = ..., next_retry_ms: _Optional[int] = ..., retry_topic: _Optional[str] = ..., dead_letter_topic: _Optional[str] = ..., policy: _Optional[str] = ..., naming: _Optional[str] = ..., consumers: _Optional[_Iterable[_Union[GroupConsumer, _Mapping]]] = ..., totals: _Optional[_Union[GroupTotals, _Mapping]] = ..., max_retries: _Optional[int] = ..., cannot_remove_exported: _Optional[bool] = ...) -> None: ...

class DeadLetterFilter(_message.Message):
    __slots__ = ("reason", "min_attempt", "max_attempt", "since_ms", "until_ms", "text")
    REASON_FIELD_NUMBER: _ClassVar[int]
    MIN_ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    MAX_ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    SINCE_MS_FIELD_NUMBER: _ClassVar[int]
    UNTIL_MS_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    reason: str
    min_attempt: int
    max_attempt: int
    since_ms: int
    until_ms: int
    text: str
    def __init__(self, reason: _Optional[str] = ..., min_attempt: _Optional[int] = ..., max_attempt: _Optional[int] = ..., since_ms: _Optional[int] = ..., until_ms: _Optional[int] = ..., text: _Optional[str] = ...) -> None: ...

class ListDeadLettersRequest(_message.Message):
    __slots__ = ("topic", "group", "limit", "page_token", "filter")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    GROUP_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    FILTER_FIELD_NUMBER: _ClassVar[int]
    topic: str
    group: str
    limit: int
    page_token: str
    filter: DeadLetterFilter
    def __init__(self, topic: _Optional[str] = ..., group: _Optional[str] = ..., limit: _Optional[int] = ..., page_token: _Optional[str] = ..., filter: _Optional[_Union[DeadLetterFilter, _Mapping]] = ...) -> None: ...

class DeadLetterMessage(_message.Message):
    __slots__ = ("message_id", "original_topic", "body", "properties", "attempt", "reason", "dead_lettered_ms", "position", "key", "tag")
    class PropertiesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    MESSAGE_ID_FIELD_NUMBER: _ClassVar[int]
    ORIGINAL_TOPIC_FIELD_NUMBER: _ClassVar[int]
    BODY_FIELD_NUMBER: _ClassVar[int]
    PROPERTIES_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    DEAD_LETTERED_MS_FIELD_NUMBER: _ClassVar[int]
    POSITION_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    TAG_FIELD_NUMBER: _ClassVar[int]
    message_id: str
    original_topic: str
    body: bytes
    properties: _containers.ScalarMap[str, str]
    attempt: int
    reason: str
    dead_lettered_ms: int
    position: int
    key: str
    tag: str
    def __init__(self, message_id: _Optional[str] = ..., original_topic: _Optional[str] = ..., body: _Optional[bytes] = ..., properties: _Optional[_Mapping[str, str]] = ..., attempt: _Optional[int] = ..., reason: _Optional[str] = ..., dead_lettered_ms: _Optional[int] = ..., position: _Optional[int] = ..., key: _Optional[str] = ..., tag: _Optional[str] = ...) -> None: ...

class ListDeadLettersResponse(_message.Message):
    __slots__ = ("dead_letters", "next_page_token", "scanned")
    DEAD_LETTERS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    SCANNED_FIELD_NUMBER: _ClassVar[int]
    dead_letters: _containers.RepeatedCompositeFieldContainer[DeadLetterMessage]
    next_page_token: str
    scanned: int
    def __init__(self, dead_letters: _Optional[_Iterable[_Union[DeadLetterMessage, _Mapping]]] = ..., next_page_token: _Optional[str] = ..., scanned: _Optional[int] = ...) -> None: ...

class ResendDeadLettersRequest(_message.Message):
    __slots__ = ("topic", "group", "message_ids", "filter")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    GROUP_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_IDS_FIELD_NUMBER: _ClassVar[int]
    FILTER_FIELD_NUMBER: _ClassVar[int]
    topic: str
    group: str
    message_ids: _containers.RepeatedScalarFieldContainer[str]
    filter: DeadLetterFilter
    def __init__(self, topic: _Optional[str] = ..., group: _Optional[str] = ..., message_ids: _Optional[_Iterable[str]] = ..., filter: _Optional[_Union[DeadLetterFilter, _Mapping]] = ...) -> None: ...

class ResendDeadLettersResponse(_message.Message):
    __slots__ = ("resent",)
    RESENT_FIELD_NUMBER: _ClassVar[int]
    resent: int
    def __init__(self, resent: _Optional[int] = ...) -> None: ...

class PurgeRequest(_message.Message):
    __slots__ = ("topic", "group")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    GROUP_FIELD_NUMBER: _ClassVar[int]
    topic: str
    group: str
    def __init__(self, topic: _Optional[str] = ..., group: _Optional[str] = ...) -> None: ...

class PurgeResponse(_message.Message):
    __slots__ = ("purged",)
    PURGED_FIELD_NUMBER: _ClassVar[int]
    purged: int
    def __init__(self, purged: _Optional[int] = ...) -> None: ...

class ListTopicsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListTopicsResponse(_message.Message):
    __slots__ = ("topics",)
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    topics: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, topics: _Optional[_Iterable[str]] = ...) -> None: ...

class ListGroupsRequest(_message.Message):
    __slots__ = ("topic", "group")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    GROUP_FIELD_NUMBER: _ClassVar[int]
    topic: str
    group: str
    def __init__(self, topic: _Optional[str] = ..., group: _Optional[str] = ...) -> None: ...

class GroupSummary(_message.Message):
    __slots__ = ("topic", "group", "view")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    GROUP_FIELD_NUMBER: _ClassVar[int]
    VIEW_FIELD_NUMBER: _ClassVar[int]
    topic: str
    group: str
    view: DescribeGroupResponse
    def __init__(self, topic: _Optional[str] = ..., group: _Optional[str] = ..., view: _Optional[_Union[DescribeGroupResponse, _Mapping]] = ...) -> None: ...

class ListGroupsResponse(_message.Message):
    __slots__ = ("groups", "truncated")
    GROUPS_FIELD_NUMBER: _ClassVar[int]
    TRUNCATED_FIELD_NUMBER: _ClassVar[int]
    groups: _containers.RepeatedCompositeFieldContainer[GroupSummary]
    truncated: bool
    def __init__(self, groups: _Optional[_Iterable[_Union[GroupSummary, _Mapping]]] = ..., truncated: _Optional[bool] = ...) -> None: ...

class ListWaitingRetriesRequest(_message.Message):
    __slots__ = ("topic", "group")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    GROUP_FIELD_NUMBER: _ClassVar[int]
    topic: str
    group: str
    def __init__(self, topic: _Optional[str] = ..., group: _Optional[str] = ...) -> None: ...

class AttemptRetries(_message.Message):
    __slots__ = ("attempt", "count", "next_due_ms")
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    NEXT_DUE_MS_FIELD_NUMBER: _ClassVar[int]
    attempt: int
    count: int
    next_due_ms: int
    def __init__(self, attempt: _Optional[int] = ..., count: _Optional[int] = ..., next_due_ms: _Optional[int] = ...) -> None: ...

class ListWaitingRetriesResponse(_message.Message):
    __slots__ = ("by_attempt", "next_due_ms", "total", "complete")
    BY_ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    NEXT_DUE_MS_FIELD_NUMBER: _ClassVar[int]
    TOTAL_FIELD_NUMBER: _ClassVar[int]
    COMPLETE_FIELD_NUMBER: _ClassVar[int]
    by_attempt: _containers.RepeatedCompositeFieldContainer[AttemptRetries]
    next_due_ms: int
    total: int
    complete: bool
    def __init__(self, by_attempt: _Optional[_Iterable[_Union[AttemptRetries, _Mapping]]] = ..., next_due_ms: _Optional[int] = ..., total: _Optional[int] = ..., complete: _Optional[bool] = ...) -> None: ...

class GetDeadLetterRequest(_message.Message):
    __slots__ = ("topic", "group", "message_id")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    GROUP_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_ID_FIELD_NUMBER: _ClassVar[int]
    topic: str
    group: str
    message_id: str
    def __init__(self, topic: _Optional[str] = ..., group: _Optional[str] = ..., message_id: _Optional[str] = ...) -> None: ...

class GetDeadLetterResponse(_message.Message):
    __slots__ = ("dead_letter",)
    DEAD_LETTER_FIELD_NUMBER: _ClassVar[int]
    dead_letter: DeadLetterMessage
    def __init__(self, dead_letter: _Optional[_Union[DeadLetterMessage, _Mapping]] = ...) -> None: ...

class GetTimelineRequest(_message.Message):
    __slots__ = ("topic", "group", "message_id")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    GROUP_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_ID_FIELD_NUMBER: _ClassVar[int]
    topic: str
    group: str
    message_id: str
    def __init__(self, topic: _Optional[str] = ..., group: _Optional[str] = ..., message_id: _Optional[str] = ...) -> None: ...

class TimelineEvent(_message.Message):
    __slots__ = ("ts_ms", "from_state", "to_state", "attempt", "delay_ms", "reason", "destination")
    TS_MS_FIELD_NUMBER: _ClassVar[int]
    FROM_STATE_FIELD_NUMBER: _ClassVar[int]
    TO_STATE_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    DELAY_MS_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    DESTINATION_FIELD_NUMBER: _ClassVar[int]
    ts_ms: int
    from_state: str
    to_state: str
    attempt: int
    delay_ms: int
    reason: str
    destination: str
    def __init__(self, ts_ms: _Optional[int] = ..., from_state: _Optional[str] = ..., to_state: _Optional[str] = ..., attempt: _Optional[int] = ..., delay_ms: _Optional[int] = ..., reason: _Optional[str] = ..., destination: _Optional[str] = ...) -> None: ...

class GetTimelineResponse(_message.Message):
    __slots__ = ("events", "source", "complete")
    EVENTS_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    COMPLETE_FIELD_NUMBER: _ClassVar[int]
    events: _containers.RepeatedCompositeFieldContainer[TimelineEvent]
    source: str
    complete: bool
    def __init__(self, events: _Optional[_Iterable[_Union[TimelineEvent, _Mapping]]] = ..., source: _Optional[str] = ..., complete: _Optional[bool] = ...) -> None: ...

class DeleteDeadLettersRequest(_message.Message):
    __slots__ = ("topic", "group", "message_ids", "filter", "all")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    GROUP_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_IDS_FIELD_NUMBER: _ClassVar[int]
    FILTER_FIELD_NUMBER: _ClassVar[int]
    ALL_FIELD_NUMBER: _ClassVar[int]
    topic: str
    group: str
    message_ids: _containers.RepeatedScalarFieldContainer[str]
    filter: DeadLetterFilter
    all: bool
    def __init__(self, topic: _Optional[str] = ..., group: _Optional[str] = ..., message_ids: _Optional[_Iterable[str]] = ..., filter: _Optional[_Union[DeadLetterFilter, _Mapping]] = ..., all: _Optional[bool] = ...) -> None: ...

class DeleteDeadLettersResponse(_message.Message):
    __slots__ = ("deleted",)
    DELETED_FIELD_NUMBER: _ClassVar[int]
    deleted: int
    def __init__(self, deleted: _Optional[int] = ...) -> None: ...

class RenameDestinationsRequest(_message.Message):
    __slots__ = ("topic", "group", "from_naming", "to_naming", "dry_run")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    GROUP_FIELD_NUMBER: _ClassVar[int]
    FROM_NAMING_FIELD_NUMBER: _ClassVar[int]
    TO_NAMING_FIELD_NUMBER: _ClassVar[int]
    DRY_RUN_FIELD_NUMBER: _ClassVar[int]
    topic: str
    group: str
    from_naming: str
    to_naming: str
    dry_run: bool
    def __init__(self, topic: _Optional[str] = ..., group: _Optional[str] = ..., from_naming: _Optional[str] = ..., to_naming: _Optional[str] = ..., dry_run: _Optional[bool] = ...) -> None: ...

class RenameDestinationsResponse(_message.Message):
    __slots__ = ("retry_from", "retry_to", "dead_letter_from", "dead_letter_to", "retries", "dead_letters", "left", "more")
    RETRY_FROM_FIELD_NUMBER: _ClassVar[int]
    RETRY_TO_FIELD_NUMBER: _ClassVar[int]
    DEAD_LETTER_FROM_FIELD_NUMBER: _ClassVar[int]
    DEAD_LETTER_TO_FIELD_NUMBER: _ClassVar[int]
    RETRIES_FIELD_NUMBER: _ClassVar[int]
    DEAD_LETTERS_FIELD_NUMBER: _ClassVar[int]
    LEFT_FIELD_NUMBER: _ClassVar[int]
    MORE_FIELD_NUMBER: _ClassVar[int]
    retry_from: str
    retry_to: str
    dead_letter_from: str
    dead_letter_to: str
    retries: int
    dead_letters: int
    left: int
    more: bool
    def __init__(self, retry_from: _Optional[str] = ..., retry_to: _Optional[str] = ..., dead_letter_from: _Optional[str] = ..., dead_letter_to: _Optional[str] = ..., retries: _Optional[int] = ..., dead_letters: _Optional[int] = ..., left: _Optional[int] = ..., more: _Optional[bool] = ...) -> None: ...

class ExportMessagesRequest(_message.Message):
    __slots__ = ("topic", "group", "part", "page_token", "limit", "naming")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    GROUP_FIELD_NUMBER: _ClassVar[int]
    PART_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    NAMING_FIELD_NUMBER: _ClassVar[int]
    topic: str
    group: str
    part: MessagePart
    page_token: str
    limit: int
    naming: str
    def __init__(self, topic: _Optional[str] = ..., group: _Optional[str] = ..., part: _Optional[_Union[MessagePart, str]] = ..., page_token: _Optional[str] = ..., limit: _Optional[int] = ..., naming: _Optional[str] = ...) -> None: ...

class MovedMessage(_message.Message):
    __slots__ = ("message_id", "body", "properties", "key", "tag", "deliver_at_ms", "attempt", "retries", "position", "part", "source_key", "first_delivery")
    class PropertiesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    MESSAGE_ID_FIELD_NUMBER: _ClassVar[int]
    BODY_FIELD_NUMBER: _ClassVar[int]
    PROPERTIES_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    TAG_FIELD_NUMBER: _ClassVar[int]
    DELIVER_AT_MS_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    RETRIES_FIELD_NUMBER: _ClassVar[int]
    POSITION_FIELD_NUMBER: _ClassVar[int]
    PART_FIELD_NUMBER: _ClassVar[int]
    SOURCE_KEY_FIELD_NUMBER: _ClassVar[int]
    FIRST_DELIVERY_FIELD_NUMBER: _ClassVar[int]
    message_id: str
    body: bytes
    properties: _containers.ScalarMap[str, str]
    key: str
    tag: str
    deliver_at_ms: int
    attempt: int
    retries: int
    position: int
    part: MessagePart
    source_key: str
    first_delivery: bool
    def __init__(self, message_id: _Optional[str] = ..., body: _Optional[bytes] = ..., properties: _Optional[_Mapping[str, str]] = ..., key: _Optional[str] = ..., tag: _Optional[str] = ..., deliver_at_ms: _Optional[int] = ..., attempt: _Optional[int] = ..., retries: _Optional[int] = ..., position: _Optional[int] = ..., part: _Optional[_Union[MessagePart, str]] = ..., source_key: _Optional[str] = ..., first_delivery: _Optional[bool] = ...) -> None: ...

class ExportMessagesResponse(_message.Message):
    __slots__ = ("messages", "next_page_token", "source_topic")
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    SOURCE_TOPIC_FIELD_NUMBER: _ClassVar[int]
    messages: _containers.RepeatedCompositeFieldContainer[MovedMessage]
    next_page_token: str
    source_topic: str
    def __init__(self, messages: _Optional[_Iterable[_Union[MovedMessage, _Mapping]]] = ..., next_page_token: _Optional[str] = ..., source_topic: _Optional[str] = ...) -> None: ...

class RemoveExportedRequest(_message.Message):
    __slots__ = ("topic", "group", "part", "positions", "naming")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    GROUP_FIELD_NUMBER: _ClassVar[int]
    PART_FIELD_NUMBER: _ClassVar[int]
    POSITIONS_FIELD_NUMBER: _ClassVar[int]
    NAMING_FIELD_NUMBER: _ClassVar[int]
    topic: str
    group: str
    part: MessagePart
    positions: _containers.RepeatedScalarFieldContainer[int]
    naming: str
    def __init__(self, topic: _Optional[str] = ..., group: _Optional[str] = ..., part: _Optional[_Union[MessagePart, str]] = ..., positions: _Optional[_Iterable[int]] = ..., naming: _Optional[str] = ...) -> None: ...

class RemoveExportedResponse(_message.Message):
    __slots__ = ("removed",)
    REMOVED_FIELD_NUMBER: _ClassVar[int]
    removed: int
    def __init__(self, removed: _Optional[int] = ...) -> None: ...

class ImportMessagesRequest(_message.Message):
    __slots__ = ("topic", "group", "ledger", "naming", "messages", "source_retry_topic", "source_dead_letter_topic", "earlier_ledgers")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    GROUP_FIELD_NUMBER: _ClassVar[int]
    LEDGER_FIELD_NUMBER: _ClassVar[int]
    NAMING_FIELD_NUMBER: _ClassVar[int]
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    SOURCE_RETRY_TOPIC_FIELD_NUMBER: _ClassVar[int]
    SOURCE_DEAD_LETTER_TOPIC_FIELD_NUMBER: _ClassVar[int]
    EARLIER_LEDGERS_FIELD_NUMBER: _ClassVar[int]
    topic: str
    group: str
    ledger: str
    naming: str
    messages: _containers.RepeatedCompositeFieldContainer[MovedMessage]
    source_retry_topic: str
    source_dead_letter_topic: str
    earlier_ledgers: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, topic: _Optional[str] = ..., group: _Optional[str] = ..., ledger: _Optional[str] = ..., naming: _Optional[str] = ..., messages: _Optional[_Iterable[_Union[MovedMessage, _Mapping]]] = ..., source_retry_topic: _Optional[str] = ..., source_dead_letter_topic: _Optional[str] = ..., earlier_ledgers: _Optional[_Iterable[str]] = ...) -> None: ...

class ImportMessagesResponse(_message.Message):
    __slots__ = ("stored", "skipped", "retry_topic", "dead_letter_topic")
    STORED_FIELD_NUMBER: _ClassVar[int]
    SKIPPED_FIELD_NUMBER: _ClassVar[int]
    RETRY_TOPIC_FIELD_NUMBER: _ClassVar[int]
    DEAD_LETTER_TOPIC_FIELD_NUMBER: _ClassVar[int]
    stored: int
    skipped: int
    retry_topic: str
    dead_letter_topic: str
    def __init__(self, stored: _Optional[int] = ..., skipped: _Optional[int] = ..., retry_topic: _Optional[str] = ..., dead_letter_topic: _Optional[str] = ...) -> None: ...
