"""How a setting is declared, once: its type, default, where it is set, and why.

A key is a dataclass field of one of the concept classes (``addresses``, ``upstream``,
...). Its annotation is its type, and reading a value from TOML or a flag follows from
that type alone (``convert``); ``setting`` records the rest (the TOML table it lives in,
its flag, a check beyond the type, the one-line why) in the field's metadata.
"""

from __future__ import annotations

import types
from collections.abc import Callable
from dataclasses import MISSING, dataclass, field
from typing import Annotated, Any, Literal, Union, get_args, get_origin


class ConfigError(ValueError):
    """A setting is invalid; the message names the key and says why."""

    def __init__(self, key: str, reason: str) -> None:
        super().__init__(f"invalid config: {key}: {reason}")
        self.key = key
        self.reason = reason


@dataclass(frozen=True, slots=True)
class HostPort:
    host: str
    port: int

    def __str__(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"


#: A check beyond the type: raises ConfigError (key, reason) for a bad value.
Check = Callable[[str, Any], None]


@dataclass(frozen=True, slots=True)
class Setting:
    """What a Config field declares besides its name, type and default."""

    why: str
    # The TOML table the key may also be written in ([tls] cert = ...), and its name
    # there; None: the top level only.
    table: str | None = None
    name: str | None = None
    flag: str | None = None
    # The environment variable an operator expects to set it (the default reads it).
    env: str | None = None
    check: Check | None = None
    # What the default is, in words, where its value does not say it: None ("the
    # advertised host"), one computed when Config is made, or a number with a meaning.
    default_means: str | None = None
    # A value to show in conf/gateway.toml where the default has none to show (None, {}).
    example: Any = None
    # The flag's value in --help (FILE, PEM); by default named from the type.
    metavar: str | None = None
    # The page (and section) of docs/ that says more: "operations.md#live-reload-sighup".
    see: str | None = None

    def toml(self, key: str) -> str:
        """Where the TOML file sets ``key``: "key" or "table.name"."""
        return key if self.table is None else f"{self.table}.{self.name}"


def setting(
    default: Any = MISSING,
    *,
    why: str,
    table: str | None = None,
    name: str | None = None,
    flag: str | None = None,
    env: str | None = None,
    check: Check | None = None,
    factory: Callable[[], Any] | None = None,
    default_means: str | None = None,
    example: Any = None,
    metavar: str | None = None,
    see: str | None = None,
) -> Any:
    """A Config field: ``default`` (or ``factory`` for one computed when Config is made),
    and how it is set. In ``table`` the name defaults to the key less the table's name:
    ``tls_cert`` is ``[tls] cert``, and ``enabled`` names the key named like the table."""
    if table is not None and name is None:
        raise TypeError("a setting in a table names its key there")
    meta = {
        "setting": Setting(why, table, name, flag, env, check, default_means, example, metavar, see)
    }
    if factory is not None:
        return field(default_factory=factory, metadata=meta)
    return field(default=default, metadata=meta)


@dataclass(frozen=True, slots=True)
class Shape:
    """Annotated metadata: how a value of the type must look, and what the error says."""

    # The text after "expected" when the value is not of the type (or for a Literal, the
    # text after "must be" when it is none of the choices).
    expected: str | None = None
    # Numbers: the closed range the value must be in, reported as not of the type.
    within: tuple[float, float] | None = None
    # Lists of strings: each item starts with this, else not of the type...
    item_prefix: str | None = None
    # ...or parses with this (its ValueError's text is the reason).
    item_parse: Callable[[str], object] | None = None
    # Addresses: the host of a bare "PORT".
    default_host: str | None = None
    # Literals: a value in any case is one of the choices ("DEBUG" is debug).
    any_case: bool = False


Seconds = Annotated[float, Shape("a number of seconds")]
Fraction = Annotated[float, Shape("a fraction between 0 and 1", within=(0, 1))]
Port = Annotated[int, Shape("a port 1-65535", within=(1, 65535))]


def unwrap(hint: Any) -> tuple[Any, Shape]:
    """The type a value is read as (``X | None`` less the None: TOML has no null), and
    its ``Shape``."""
    shape = Shape()
    if get_origin(hint) is Annotated:
        hint, shape = get_args(hint)[0], get_args(hint)[1]
    if get_origin(hint) in (Union, types.UnionType):
        hint = next(arg for arg in get_args(hint) if arg is not type(None))
        if get_origin(hint) is Annotated:
            hint, shape = get_args(hint)[0], get_args(hint)[1]
    return hint, shape


def convert(key: str, hint: Any, value: Any) -> Any:
    """``value`` (from TOML or a flag) as the declared type ``hint``, or ConfigError."""
    hint, shape = unwrap(hint)
    expected = shape.expected
    if hint is bool:
        if not isinstance(value, bool):
            raise ConfigError(key, f"expected true or false, got {value!r}")
        return value
    if hint is int or hint is float:
        kinds = int if hint is int else int | float
        within = shape.within
        if (
            isinstance(value, bool)
            or not isinstance(value, kinds)
            or (within is not None and not within[0] <= value <= within[1])
        ):
            default = "an integer" if hint is int else "a number"
            raise ConfigError(key, f"expected {expected or default}, got {value!r}")
        return hint(value)
    if hint is HostPort:
        return parse_host_port(key, value, default_host=shape.default_host)
    if get_origin(hint) is Literal:
        choices = get_args(hint)
        if not isinstance(value, str):
            raise ConfigError(key, f"expected a string, got {value!r}")
        if (value.lower() if shape.any_case else value) not in choices:
            listed = expected or f"{', '.join(choices[:-1])} or {choices[-1]}"
            raise ConfigError(key, f"must be {listed}, got {value!r}")
        return value
    if get_origin(hint) is tuple:  # tuple[str, ...], from a TOML list
        if not isinstance(value, list | tuple) or not all(
            isinstance(v, str) and v.startswith(shape.item_prefix or "") for v in value
        ):
            raise ConfigError(key, f"expected {expected or 'a list of strings'}, got {value!r}")
        for item in value if shape.item_parse else ():
            try:
                shape.item_parse(item)
            except ValueError as exc:
                raise ConfigError(key, str(exc)) from None
        return tuple(value)
    if get_origin(hint) is dict:  # dict[int, X]: a table of node id = X
        if not isinstance(value, dict):
            raise ConfigError(key, "expected a table of node id = value")
        item = get_args(hint)[1]
        return {_node_id(key, k): convert(f"{key}.{k}", item, v) for k, v in value.items()}
    if hint is str:
        if not isinstance(value, str):
            raise ConfigError(key, f"expected a string, got {value!r}")
        return value
    raise TypeError(f"{key}: no conversion for {hint!r}")


def _node_id(key: str, raw: Any) -> int:
    try:
        node_id = int(raw)
    except (TypeError, ValueError):
        raise ConfigError(f"{key}.{raw}", "node ids are integers") from None
    if node_id < 0:
        raise ConfigError(f"{key}.{raw}", "node ids are >= 0")
    return node_id


def parse_host_port(key: str, value: object, default_host: str | None = None) -> HostPort:
    if not isinstance(value, str) or not value:
        raise ConfigError(key, f"expected 'HOST:PORT', got {value!r}")
    if value.startswith("["):  # [IPv6]:PORT
        host, bracket, rest = value[1:].partition("]")
        if not bracket or not rest.startswith(":"):
            raise ConfigError(key, f"expected '[HOST]:PORT', got {value!r}")
        port_text = rest[1:]
    else:
        host, sep, port_text = value.rpartition(":")
        if not sep:
            if default_host is None:
                raise ConfigError(key, f"expected 'HOST:PORT', got {value!r}")
            host, port_text = default_host, value
        elif ":" in host or "[" in host or "]" in host:
            raise ConfigError(key, f"IPv6 hosts go in brackets, '[HOST]:PORT', got {value!r}")
    if not host:
        raise ConfigError(key, f"missing host in {value!r}")
    try:
        port = int(port_text)
    except ValueError:
        raise ConfigError(key, f"port {port_text!r} is not a number") from None
    if not 0 <= port <= 65535:
        raise ConfigError(key, f"port {port} is outside 0-65535")
    return HostPort(host, port)


# -- checks beyond the type, shared by several keys ---------------------------------------


def at_least(low: int, *, unless: int | None = None) -> Check:
    """``value >= low`` (``unless``: one more value that means "no limit")."""

    def check(key: str, value: Any) -> None:
        if value is not None and value != unless and value < low:
            raise ConfigError(key, f"must be >= {low}, got {value}")

    return check


def between(low: int, high: int, unit: str = "") -> Check:
    def check(key: str, value: Any) -> None:
        if value is not None and not low <= value <= high:
            raise ConfigError(key, f"must be between {low} and {high}{unit}, got {value}")

    return check


def parsed_by(parse: Callable[[Any], object]) -> Check:
    """The value (when set) is one ``parse`` reads: its ValueError names the key."""

    def check(key: str, value: Any) -> None:
        if value is not None:
            try:
                parse(value)
            except ValueError as exc:
                raise ConfigError(key, str(exc)) from None

    return check


def positive(key: str, value: Any) -> None:
    if not value > 0:  # "not >" also rejects NaN, which TOML allows
        raise ConfigError(key, f"must be > 0, got {value}")


def user_password(key: str, value: Any) -> None:
    if value is not None and ":" not in value:
        raise ConfigError(key, "expected 'user:password'")
