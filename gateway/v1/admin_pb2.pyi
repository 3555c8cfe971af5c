from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class DescribeGroupRequest(_message.Message):
    __slots__ = ("topic", "group")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    GROUP_FIELD_NUMBER: _ClassVar[int]
    topic: str
    group: str
    def __init__(self, topic: _Optional[str] = ..., group: _Optional[str] = ...) -> None: ...

class DescribeGroupResponse(_message.Message):
    __slots__ = ("ready", "delayed", "inflight", "waiting_retry", "dead_letters", "oldest_ready_ms", "next_retry_ms", "retry_topic", "dead_letter_topic")
    READY_FIELD_NUMBER: _ClassVar[int]
    DELAYED_FIELD_NUMBER: _ClassVar[int]
    INFLIGHT_FIELD_NUMBER: _ClassVar[int]
    WAITING_RETRY_FIELD_NUMBER: _ClassVar[int]
    DEAD_LETTERS_FIELD_NUMBER: _ClassVar[int]
    OLDEST_READY_MS_FIELD_NUMBER: _ClassVar[int]
    NEXT_RETRY_MS_FIELD_NUMBER: _ClassVar[int]
    RETRY_TOPIC_FIELD_NUMBER: _ClassVar[int]
    DEAD_LETTER_TOPIC_FIELD_NUMBER: _ClassVar[int]
    ready: int
    delayed: int
    inflight: int
    waiting_retry: int
    dead_letters: int
    oldest_ready_ms: int
    next_retry_ms: int
    retry_topic: str
    dead_letter_topic: str
    def __init__(self, ready: _Optional[int] = ..., delayed: _Optional[int] = ..., inflight: _Optional[int] = ..., waiting_retry: _Optional[int] = ..., dead_letters: _Optional[int] = ..., oldest_ready_ms: _Optional[int] = ..., next_retry_ms: _Optional[int] = ..., retry_topic: _Optional[str] = ..., dead_letter_topic: _Optional[str] = ...) -> None: ...

class ListDeadLettersRequest(_message.Message):
    __slots__ = ("topic", "group", "limit", "page_token")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    GROUP_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    topic: str
    group: str
    limit: int
    page_token: str
    def __init__(self, topic: _Optional[str] = ..., group: _Optional[str] = ..., limit: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

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
    __slots__ = ("dead_letters", "next_page_token")
    DEAD_LETTERS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    dead_letters: _containers.RepeatedCompositeFieldContainer[DeadLetterMessage]
    next_page_token: str
    def __init__(self, dead_letters: _Optional[_Iterable[_Union[DeadLetterMessage, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class ResendDeadLettersRequest(_message.Message):
    __slots__ = ("topic", "group", "message_ids")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    GROUP_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_IDS_FIELD_NUMBER: _ClassVar[int]
    topic: str
    group: str
    message_ids: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, topic: _Optional[str] = ..., group: _Optional[str] = ..., message_ids: _Optional[_Iterable[str]] = ...) -> None: ...

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
