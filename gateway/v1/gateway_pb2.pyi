from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ConsumerType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    CONSUMER_TYPE_SHARED: _ClassVar[ConsumerType]
    CONSUMER_TYPE_KEY_SHARED: _ClassVar[ConsumerType]
    CONSUMER_TYPE_EXCLUSIVE: _ClassVar[ConsumerType]
    CONSUMER_TYPE_FAILOVER: _ClassVar[ConsumerType]
CONSUMER_TYPE_SHARED: ConsumerType
CONSUMER_TYPE_KEY_SHARED: ConsumerType
CONSUMER_TYPE_EXCLUSIVE: ConsumerType
CONSUMER_TYPE_FAILOVER: ConsumerType

class Message(_message.Message):
    __slots__ = ("body", "properties", "key", "tag", "deliver_at_ms", "delay_ms")
    class PropertiesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    BODY_FIELD_NUMBER: _ClassVar[int]
    PROPERTIES_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    TAG_FIELD_NUMBER: _ClassVar[int]
    DELIVER_AT_MS_FIELD_NUMBER: _ClassVar[int]
    DELAY_MS_FIELD_NUMBER: _ClassVar[int]
    body: bytes
    properties: _containers.ScalarMap[str, str]
    key: str
    tag: str
    deliver_at_ms: int
    delay_ms: int
    def __init__(self, body: _Optional[bytes] = ..., properties: _Optional[_Mapping[str, str]] = ..., key: _Optional[str] = ..., tag: _Optional[str] = ..., deliver_at_ms: _Optional[int] = ..., delay_ms: _Optional[int] = ...) -> None: ...

class PublishRequest(_message.Message):
    __slots__ = ("topic", "messages")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    topic: str
    messages: _containers.RepeatedCompositeFieldContainer[Message]
    def __init__(self, topic: _Optional[str] = ..., messages: _Optional[_Iterable[_Union[Message, _Mapping]]] = ...) -> None: ...

class PublishResponse(_message.Message):
    __slots__ = ("message_ids",)
    MESSAGE_IDS_FIELD_NUMBER: _ClassVar[int]
    message_ids: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, message_ids: _Optional[_Iterable[str]] = ...) -> None: ...

class PublishStreamRequest(_message.Message):
    __slots__ = ("request_id", "publish")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    PUBLISH_FIELD_NUMBER: _ClassVar[int]
    request_id: int
    publish: PublishRequest
    def __init__(self, request_id: _Optional[int] = ..., publish: _Optional[_Union[PublishRequest, _Mapping]] = ...) -> None: ...

class PublishResult(_message.Message):
    __slots__ = ("request_id", "message_ids", "error_code", "error", "status")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_IDS_FIELD_NUMBER: _ClassVar[int]
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    request_id: int
    message_ids: _containers.RepeatedScalarFieldContainer[str]
    error_code: str
    error: str
    status: bytes
    def __init__(self, request_id: _Optional[int] = ..., message_ids: _Optional[_Iterable[str]] = ..., error_code: _Optional[str] = ..., error: _Optional[str] = ..., status: _Optional[bytes] = ...) -> None: ...

class Subscribe(_message.Message):
    __slots__ = ("topic", "group", "policy", "policy_options", "consumer_type", "broadcast", "naming", "prefetch", "consumer_id", "tag_filter", "selector")
    class PolicyOptionsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    GROUP_FIELD_NUMBER: _ClassVar[int]
    POLICY_FIELD_NUMBER: _ClassVar[int]
    POLICY_OPTIONS_FIELD_NUMBER: _ClassVar[int]
    CONSUMER_TYPE_FIELD_NUMBER: _ClassVar[int]
    BROADCAST_FIELD_NUMBER: _ClassVar[int]
    NAMING_FIELD_NUMBER: _ClassVar[int]
    PREFETCH_FIELD_NUMBER: _ClassVar[int]
    CONSUMER_ID_FIELD_NUMBER: _ClassVar[int]
    TAG_FILTER_FIELD_NUMBER: _ClassVar[int]
    SELECTOR_FIELD_NUMBER: _ClassVar[int]
    topic: str
    group: str
    policy: str
    policy_options: _containers.ScalarMap[str, str]
    consumer_type: ConsumerType
    broadcast: bool
    naming: str
    prefetch: int
    consumer_id: str
    tag_filter: str
    selector: str
    def __init__(self, topic: _Optional[str] = ..., group: _Optional[str] = ..., policy: _Optional[str] = ..., policy_options: _Optional[_Mapping[str, str]] = ..., consumer_type: _Optional[_Union[ConsumerType, str]] = ..., broadcast: _Optional[bool] = ..., naming: _Optional[str] = ..., prefetch: _Optional[int] = ..., consumer_id: _Optional[str] = ..., tag_filter: _Optional[str] = ..., selector: _Optional[str] = ...) -> None: ...

class SettleBatch(_message.Message):
    __slots__ = ("settlements", "credit", "acks", "fails")
    SETTLEMENTS_FIELD_NUMBER: _ClassVar[int]
    CREDIT_FIELD_NUMBER: _ClassVar[int]
    ACKS_FIELD_NUMBER: _ClassVar[int]
    FAILS_FIELD_NUMBER: _ClassVar[int]
    settlements: _containers.RepeatedCompositeFieldContainer[Settlement]
    credit: int
    acks: _containers.RepeatedScalarFieldContainer[str]
    fails: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, settlements: _Optional[_Iterable[_Union[Settlement, _Mapping]]] = ..., credit: _Optional[int] = ..., acks: _Optional[_Iterable[str]] = ..., fails: _Optional[_Iterable[str]] = ...) -> None: ...

class Credit(_message.Message):
    __slots__ = ("messages",)
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    messages: int
    def __init__(self, messages: _Optional[int] = ...) -> None: ...

class ConsumeRequest(_message.Message):
    __slots__ = ("subscribe", "settle", "credit")
    SUBSCRIBE_FIELD_NUMBER: _ClassVar[int]
    SETTLE_FIELD_NUMBER: _ClassVar[int]
    CREDIT_FIELD_NUMBER: _ClassVar[int]
    subscribe: Subscribe
    settle: SettleBatch
    credit: Credit
    def __init__(self, subscribe: _Optional[_Union[Subscribe, _Mapping]] = ..., settle: _Optional[_Union[SettleBatch, _Mapping]] = ..., credit: _Optional[_Union[Credit, _Mapping]] = ...) -> None: ...

class Subscribed(_message.Message):
    __slots__ = ("consumer_id", "policy", "naming", "retry_topic", "dead_letter_topic", "max_retries")
    CONSUMER_ID_FIELD_NUMBER: _ClassVar[int]
    POLICY_FIELD_NUMBER: _ClassVar[int]
    NAMING_FIELD_NUMBER: _ClassVar[int]
    RETRY_TOPIC_FIELD_NUMBER: _ClassVar[int]
    DEAD_LETTER_TOPIC_FIELD_NUMBER: _ClassVar[int]
    MAX_RETRIES_FIELD_NUMBER: _ClassVar[int]
    consumer_id: str
    policy: str
    naming: str
    retry_topic: str
    dead_letter_topic: str
    max_retries: int
    def __init__(self, consumer_id: _Optional[str] = ..., policy: _Optional[str] = ..., naming: _Optional[str] = ..., retry_topic: _Optional[str] = ..., dead_letter_topic: _Optional[str] = ..., max_retries: _Optional[int] = ...) -> None: ...

class DeliveryBatch(_message.Message):
    __slots__ = ("deliveries",)
    DELIVERIES_FIELD_NUMBER: _ClassVar[int]
    deliveries: _containers.RepeatedCompositeFieldContainer[Delivery]
    def __init__(self, deliveries: _Optional[_Iterable[_Union[Delivery, _Mapping]]] = ...) -> None: ...

class SettleResults(_message.Message):
    __slots__ = ("results", "acked", "fails_applied")
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    ACKED_FIELD_NUMBER: _ClassVar[int]
    FAILS_APPLIED_FIELD_NUMBER: _ClassVar[int]
    results: _containers.RepeatedCompositeFieldContainer[SettleResult]
    acked: int
    fails_applied: int
    def __init__(self, results: _Optional[_Iterable[_Union[SettleResult, _Mapping]]] = ..., acked: _Optional[int] = ..., fails_applied: _Optional[int] = ...) -> None: ...

class ConsumeResponse(_message.Message):
    __slots__ = ("subscribed", "deliveries", "results")
    SUBSCRIBED_FIELD_NUMBER: _ClassVar[int]
    DELIVERIES_FIELD_NUMBER: _ClassVar[int]
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    subscribed: Subscribed
    deliveries: DeliveryBatch
    results: SettleResults
    def __init__(self, subscribed: _Optional[_Union[Subscribed, _Mapping]] = ..., deliveries: _Optional[_Union[DeliveryBatch, _Mapping]] = ..., results: _Optional[_Union[SettleResults, _Mapping]] = ...) -> None: ...

class Delivery(_message.Message):
    __slots__ = ("receipt", "message_id", "topic", "original_topic", "body", "properties", "key", "tag", "attempt", "retries", "deadline_ms", "publish_ms", "deliver_at_ms", "group")
    class PropertiesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    RECEIPT_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_ID_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    ORIGINAL_TOPIC_FIELD_NUMBER: _ClassVar[int]
    BODY_FIELD_NUMBER: _ClassVar[int]
    PROPERTIES_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    TAG_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    RETRIES_FIELD_NUMBER: _ClassVar[int]
    DEADLINE_MS_FIELD_NUMBER: _ClassVar[int]
    PUBLISH_MS_FIELD_NUMBER: _ClassVar[int]
    DELIVER_AT_MS_FIELD_NUMBER: _ClassVar[int]
    GROUP_FIELD_NUMBER: _ClassVar[int]
    receipt: str
    message_id: str
    topic: str
    original_topic: str
    body: bytes
    properties: _containers.ScalarMap[str, str]
    key: str
    tag: str
    attempt: int
    retries: int
    deadline_ms: int
    publish_ms: int
    deliver_at_ms: int
    group: str
    def __init__(self, receipt: _Optional[str] = ..., message_id: _Optional[str] = ..., topic: _Optional[str] = ..., original_topic: _Optional[str] = ..., body: _Optional[bytes] = ..., properties: _Optional[_Mapping[str, str]] = ..., key: _Optional[str] = ..., tag: _Optional[str] = ..., attempt: _Optional[int] = ..., retries: _Optional[int] = ..., deadline_ms: _Optional[int] = ..., publish_ms: _Optional[int] = ..., deliver_at_ms: _Optional[int] = ..., group: _Optional[str] = ...) -> None: ...

class ReceiveRequest(_message.Message):
    __slots__ = ("topic", "group", "policy", "policy_options", "consumer_type", "naming", "tag_filter", "max_messages", "invisible_ms", "wait_ms", "selector")
    class PolicyOptionsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    GROUP_FIELD_NUMBER: _ClassVar[int]
    POLICY_FIELD_NUMBER: _ClassVar[int]
    POLICY_OPTIONS_FIELD_NUMBER: _ClassVar[int]
    CONSUMER_TYPE_FIELD_NUMBER: _ClassVar[int]
    NAMING_FIELD_NUMBER: _ClassVar[int]
    TAG_FILTER_FIELD_NUMBER: _ClassVar[int]
    MAX_MESSAGES_FIELD_NUMBER: _ClassVar[int]
    INVISIBLE_MS_FIELD_NUMBER: _ClassVar[int]
    WAIT_MS_FIELD_NUMBER: _ClassVar[int]
    SELECTOR_FIELD_NUMBER: _ClassVar[int]
    topic: str
    group: str
    policy: str
    policy_options: _containers.ScalarMap[str, str]
    consumer_type: ConsumerType
    naming: str
    tag_filter: str
    max_messages: int
    invisible_ms: int
    wait_ms: int
    selector: str
    def __init__(self, topic: _Optional[str] = ..., group: _Optional[str] = ..., policy: _Optional[str] = ..., policy_options: _Optional[_Mapping[str, str]] = ..., consumer_type: _Optional[_Union[ConsumerType, str]] = ..., naming: _Optional[str] = ..., tag_filter: _Optional[str] = ..., max_messages: _Optional[int] = ..., invisible_ms: _Optional[int] = ..., wait_ms: _Optional[int] = ..., selector: _Optional[str] = ...) -> None: ...

class ReceiveResponse(_message.Message):
    __slots__ = ("deliveries",)
    DELIVERIES_FIELD_NUMBER: _ClassVar[int]
    deliveries: _containers.RepeatedCompositeFieldContainer[Delivery]
    def __init__(self, deliveries: _Optional[_Iterable[_Union[Delivery, _Mapping]]] = ...) -> None: ...

class SettleRequest(_message.Message):
    __slots__ = ("settlements",)
    SETTLEMENTS_FIELD_NUMBER: _ClassVar[int]
    settlements: _containers.RepeatedCompositeFieldContainer[Settlement]
    def __init__(self, settlements: _Optional[_Iterable[_Union[Settlement, _Mapping]]] = ...) -> None: ...

class SettleResponse(_message.Message):
    __slots__ = ("results",)
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    results: _containers.RepeatedCompositeFieldContainer[SettleResult]
    def __init__(self, results: _Optional[_Iterable[_Union[SettleResult, _Mapping]]] = ...) -> None: ...

class Settlement(_message.Message):
    __slots__ = ("receipt", "ack", "fail", "change_invisible", "dead_letter")
    RECEIPT_FIELD_NUMBER: _ClassVar[int]
    ACK_FIELD_NUMBER: _ClassVar[int]
    FAIL_FIELD_NUMBER: _ClassVar[int]
    CHANGE_INVISIBLE_FIELD_NUMBER: _ClassVar[int]
    DEAD_LETTER_FIELD_NUMBER: _ClassVar[int]
    receipt: str
    ack: Ack
    fail: Fail
    change_invisible: ChangeInvisible
    dead_letter: DeadLetter
    def __init__(self, receipt: _Optional[str] = ..., ack: _Optional[_Union[Ack, _Mapping]] = ..., fail: _Optional[_Union[Fail, _Mapping]] = ..., change_invisible: _Optional[_Union[ChangeInvisible, _Mapping]] = ..., dead_letter: _Optional[_Union[DeadLetter, _Mapping]] = ...) -> None: ...

class Ack(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class Fail(_message.Message):
    __slots__ = ("delay_ms", "delay_level", "reason")
    DELAY_MS_FIELD_NUMBER: _ClassVar[int]
    DELAY_LEVEL_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    delay_ms: int
    delay_level: int
    reason: str
    def __init__(self, delay_ms: _Optional[int] = ..., delay_level: _Optional[int] = ..., reason: _Optional[str] = ...) -> None: ...

class ChangeInvisible(_message.Message):
    __slots__ = ("invisible_ms",)
    INVISIBLE_MS_FIELD_NUMBER: _ClassVar[int]
    invisible_ms: int
    def __init__(self, invisible_ms: _Optional[int] = ...) -> None: ...

class DeadLetter(_message.Message):
    __slots__ = ("reason",)
    REASON_FIELD_NUMBER: _ClassVar[int]
    reason: str
    def __init__(self, reason: _Optional[str] = ...) -> None: ...

class SettleResult(_message.Message):
    __slots__ = ("receipt", "ok", "error_code", "error", "receipt_next", "deadline_ms")
    RECEIPT_FIELD_NUMBER: _ClassVar[int]
    OK_FIELD_NUMBER: _ClassVar[int]
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    RECEIPT_NEXT_FIELD_NUMBER: _ClassVar[int]
    DEADLINE_MS_FIELD_NUMBER: _ClassVar[int]
    receipt: str
    ok: bool
    error_code: str
    error: str
    receipt_next: str
    deadline_ms: int
    def __init__(self, receipt: _Optional[str] = ..., ok: _Optional[bool] = ..., error_code: _Optional[str] = ..., error: _Optional[str] = ..., receipt_next: _Optional[str] = ..., deadline_ms: _Optional[int] = ...) -> None: ...
