"""The configuration's keys: the gateway's own by TOML section, the installed products', the
kind of each value, and how a TOML document and text values become flat keys of those kinds
(`gateway.server.config` puts them together)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gateway.errors import InvalidArgument
from gateway.product import AnyProduct, settings_of
from gateway.server.config_hints import key_hint, section_hint

SECTIONS = {
    "server": {"listen", "max_message_bytes", "grace_s", "time_scale", "auto_create", "log_level",
               "gateway_id", "telemetry", "admin_listen", "console_listen", "broadcast_idle_s",
               "max_unacked", "max_unacked_mb", "max_held_mb", "max_publish_mb", "max_groups",
               "max_groups_per_principal", "max_topics", "max_stored_groups",
               "max_topics_per_principal", "max_stored_groups_per_principal", "max_rpcs",
               "metrics_label_cap"},
    "store": {"backend", "data_dir", "cache_mb", "commit_timeout_s"},
    "auth": {"tokens_file", "principals", "tls_cert", "tls_key", "tls_client_ca",
             "allow_remote_unauthenticated"},
}
"""The gateway's own TOML keys by section (each is also the flat key)."""
TRACING_KEYS = {"enabled": "tracing", "endpoint": "tracing_endpoint",
                "protocol": "tracing_protocol", "sample_ratio": "tracing_sample_ratio",
                "service_name": "tracing_service_name"}
"""The `[tracing]` table's keys -> their flat keys (`GATEWAY_TRACING`, `--tracing`, ...)."""
PRINCIPALS = object()
"""Kind of `principals`: a list of tables, passed through as it is."""
@dataclass(frozen=True, slots=True)
class Keys:
    """Every key the installed products make known, besides the gateway's own."""

    toml: dict[str, dict[str, str]]
    """Section -> TOML key -> flat key, sections in the order errors list them."""
    kinds: dict[str, object]
    """Flat key -> str, int, float, bool, tuple or PRINCIPALS."""
    owners: dict[str, str]
    """A product setting's flat key -> the product's name."""
    allowed: dict[str, str]
    """Flat key -> what a value of the wrong shape should be (lists)."""


def keys_of(products: Sequence[AnyProduct], own_kinds: Mapping[str, object]) -> Keys:
    """Every key of the gateway (`own_kinds`: its own flat keys' kinds) and of `products`."""
    toml = {section: {k: k for k in sorted(keys)} for section, keys in SECTIONS.items()
            if section != "auth"}
    auth = {k: k for k in sorted(SECTIONS["auth"])}
    kinds = dict(own_kinds)
    owners: dict[str, str] = {}
    allowed: dict[str, str] = {}
    for product in products:
        for spec in settings_of(product.config_type):
            if spec.key in kinds:
                raise TypeError(f"{product.name}: setting {spec.key!r} is declared twice")
            section, _, key = spec.setting.toml.partition(".")
            (auth if section == "auth" else toml.setdefault(section, {}))[key] = spec.key
            kinds[spec.key] = spec.kind
            owners[spec.key] = product.name
            allowed[spec.key] = spec.setting.allowed or "a list of strings"
    toml["auth"] = auth
    toml["tracing"] = dict(TRACING_KEYS)
    return Keys(toml, kinds, owners, allowed)


def flatten(doc: Mapping[str, Any], keys: Keys) -> dict[str, Any]:
    """A TOML document's values by flat key, each checked for its kind."""
    flat: dict[str, Any] = {}
    for section, table in doc.items():
        if section not in keys.toml or not isinstance(table, dict):
            raise InvalidArgument("config", section, section_hint(section, keys.toml)
                                  + "sections " + ", ".join(keys.toml))
        for key, value in table.items():
            known = keys.toml[section]
            if key not in known:
                raise InvalidArgument(f"{section}.{key}", value, key_hint(section, key, keys.toml)
                                      + "keys " + ", ".join(sorted(known)))
            name = known[key]
            kind = keys.kinds[name]
            if kind is tuple and (not isinstance(value, list)
                                  or not all(isinstance(v, str) and v.strip() for v in value)):
                # an empty name ("" or " ") was dropped without a word
                raise InvalidArgument(f"{section}.{key}", value, keys.allowed[name])
            if kind is PRINCIPALS:
                if not isinstance(value, list) or not all(isinstance(v, dict) for v in value):
                    raise InvalidArgument(f"{section}.{key}", value, "a list of tables")
                value = tuple(value)
            elif kind in _TOML_TYPES and not _toml_fits(value, kind):
                raise InvalidArgument(f"{section}.{key}", value, _TOML_TYPES[kind])
            if any("\0" in v for v in (value if isinstance(value, list) else [value])
                   if isinstance(v, str)):
                # TOML's "\u0000" is the only way a NUL reaches a setting (flags and the
                # environment cannot carry one): a path with it was a ValueError traceback.
                shown = "***" if name.endswith(("token", "_key")) else value  # a secret
                raise InvalidArgument(f"{section}.{key}", shown, "text without NUL characters")
            flat[name] = value
    return flat


_TOML_TYPES: dict[object, str] = {str: "a string", int: "an integer", float: "a number",
                                  bool: "a boolean (true or false)"}
"""What a value in the file must be for each kind of setting: TOML has its own types, and a
value of another type is a mistake (`data_dir = true` made a directory named True)."""


def _toml_fits(value: object, kind: object) -> bool:
    if kind is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if kind is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, kind)  # type: ignore[arg-type]


def coerce(name: str, value: Any, kind: object) -> Any:
    """A value (text from the environment or a flag, or a TOML value) as its kind."""
    if kind is PRINCIPALS:
        return value
    if kind is tuple:
        items = value.split(",") if isinstance(value, str) else value
        return tuple(str(v).strip() for v in items if str(v).strip())
    text = str(value)
    try:
        if kind in (int, float) and not text.isascii():  # `٣` (an Arabic-Indic 3) was 3
            raise ValueError(text)
        if kind is int:
            return int(text)
        if kind is float:
            return float(text)
        if kind is bool:
            if isinstance(value, bool):
                return value
            if text.lower() in ("1", "true", "yes", "on"):
                return True
            if text.lower() in ("0", "false", "no", "off"):
                return False
            raise ValueError(text)
    except ValueError:
        kind_name = {int: "an integer", float: "a number", bool: "a boolean (true, false, 1, 0, "
                     "yes, no, on, off)"}.get(kind, str(kind))  # type: ignore[call-overload]
        raise InvalidArgument(name, value, kind_name) from None
    return text
