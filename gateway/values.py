"""Value classes: immutable to the type checker, plain slotted classes at run time.

A frozen dataclass's generated `__init__` stores every field through `object.__setattr__`, which
costs about eight times a plain slotted one (1.2 us against 0.16 us for 14 fields, measured here).
The classes built once or more per message (messages, leases, deliveries, settlements, events)
use `value` instead: mypy treats them as frozen (no field may be assigned after construction),
while at run time they are ordinary `@dataclass(slots=True)` classes. They compare by value and
are not hashable.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TypeVar, dataclass_transform

T = TypeVar("T")


@dataclass_transform(frozen_default=True, field_specifiers=(field,))
def value(cls: type[T]) -> type[T]:
    """Make `cls` a value class (see the module docstring)."""
    return dataclass(slots=True)(cls)
