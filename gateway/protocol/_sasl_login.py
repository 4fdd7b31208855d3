"""Who logged in: the principal of a SASL exchange the broker accepted (sans-I/O).

The broker authenticates and the gateway only watches the exchange go by, as
Kroxylicious' SASL inspection filter does: it reads the name the client claims from the
client's first token and trusts it once the broker answered the last round with
success. A failed, aborted or unreadable exchange leaves no name. The principal is then
what Kafka's default principal builder makes of the name, ``User:`` + it:

* PLAIN: the authentication id, the second NUL-separated field of
  ``authzid NUL authcid NUL password``. An authorization id that differs is refused by
  Kafka (``PlainSaslServer``), so such a token names nobody here either.
* SCRAM-SHA-256 / SCRAM-SHA-512: the ``n=`` user name of the client-first-message,
  ``=2C`` and ``=3D`` unescaped as Kafka's ``ScramFormatter.username`` does. A
  delegation-token login (extension ``tokenauth=true``) names the token id, not the
  token's owner (whom only the broker knows): no principal.
* OAUTHBEARER: a claim of the bearer token (a JWT), ``sub`` unless configured otherwise
  (Kafka's ``sasl.oauthbearer.sub.claim.name``). Its payload is read without verifying
  the signature: the broker verified the token, and a token it refused sets nothing.
* GSSAPI and any other mechanism: no principal (the Kerberos name and its mapping by
  ``sasl.kerberos.principal.to.local.rules`` are the broker's); the connection records
  the mechanism as not observed.

Tokens are parsed where they pass and dropped: only the name is kept, never a password,
a SCRAM proof or a bearer token. The exchange's rounds are those
``gateway.protocol._sasl`` counts (``FIXED_ROUNDS``); with SaslHandshake v1 each round is a
SaslAuthenticate request and its response (error code 0: the round succeeded), with v0
a raw client token and the broker's raw token (a failed v0 login makes the broker
close instead).
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from typing import Protocol

from ._wire import (
    INT16,
    INT32,
    Incomplete,
    Malformed,
    read_uvarint,
    skip_classic_string,
    skip_compact_string,
)

PLAIN = "PLAIN"
OAUTHBEARER = "OAUTHBEARER"
SCRAM_MECHANISMS = frozenset({"SCRAM-SHA-256", "SCRAM-SHA-512"})
_READ = frozenset({PLAIN, OAUTHBEARER, *SCRAM_MECHANISMS})  # mechanisms whose name is read
DEFAULT_SUB_CLAIM = "sub"
# A first client token longer than this is not read (and names nobody): Kafka's default
# sasl.server.max.receive.size, past which the broker refuses it anyway.
TOKEN_READ_LIMIT = 512 * 1024

# SaslLogin.outcome
AUTHENTICATED = "authenticated"  # the broker accepted the login; ``name`` is who
FAILED = "failed"  # the broker refused it (or it was abandoned); no principal
UNOBSERVED = "unobserved"  # a mechanism whose principal the gateway cannot read

# Kafka's SCRAM grammar (ScramMessages.ClientFirstMessage): a saslname is ASCII without
# ',' and '=' except as =2C and =3D; "n," (no channel binding), an optional authzid,
# an optional reserved m= attribute, the name, the nonce, then extensions.
_SASLNAME = r"(?:[\x01-\x2b\x2d-\x3c\x3e-\x7f]|=2C|=3D)+"
_SCRAM_FIRST = re.compile(
    rf"n,(?:a=(?P<authzid>{_SASLNAME}))?,(?:m=[\x01-\x2b\x2d-\x7f]*,)?"
    rf"n=(?P<saslname>{_SASLNAME}),r=[\x21-\x2b\x2d-\x7e]+"
    r"(?P<extensions>(?:,\w+=[\x01-\x2b\x2d-\x7f]+)*)"
)
# RFC 7628's client initial response, as Kafka's OAuthBearerClientInitialResponse reads it.
_OAUTH_FIRST = re.compile(
    rf"n,(?:a=(?P<authzid>{_SASLNAME}))?,\x01(?P<pairs>(?:[A-Za-z]+=[\x21-\x7e \t\r\n]+\x01)*)\x01"
)
_BEARER = re.compile(r"(?P<scheme>\w+) +(?P<token>[-_.a-zA-Z0-9]+)")


def _text(token: bytes | bytearray | memoryview) -> str | None:
    try:
        return bytes(token).decode("utf-8")
    except UnicodeDecodeError:
        return None


def plain_name(token: bytes | bytearray | memoryview) -> str | None:
    """The authentication id of a PLAIN token, or None where Kafka would refuse it."""
    text = _text(token)
    if text is None:
        return None
    parts = text.split("\0")
    if len(parts) != 3:
        return None
    authzid, authcid, password = parts
    if not authcid or not password or (authzid and authzid != authcid):
        return None
    return authcid


def scram_unescape(saslname: str) -> str | None:
    """A SCRAM saslname as a user name (Kafka's ScramFormatter.username); None when an
    '=' is left that is not part of =2C or =3D."""
    name = saslname.replace("=2C", ",")
    if "=" in name.replace("=3D", ""):
        return None
    return name.replace("=3D", "=")


def scram_name(token: bytes | bytearray | memoryview) -> str | None:
    """The user name of a SCRAM client-first-message; None when it does not read as one,
    its authorization id differs, or it logs in with a delegation token."""
    text = _text(token)
    match = None if text is None else _SCRAM_FIRST.fullmatch(text)
    if match is None:
        return None
    extensions = match.group("extensions").split(",")[1:]
    if any(ext.split("=", 1)[0] == "tokenauth" for ext in extensions):
        return None  # a delegation token's id: its owner is the principal
    name = scram_unescape(match.group("saslname"))
    authzid = match.group("authzid")
    if name is None or (authzid and scram_unescape(authzid) != name):
        return None
    return name


def jwt_claim(token: str, claim: str) -> str | None:
    """The string ``claim`` of a JWT's payload, not verified; None where it is missing,
    not a string, or the token does not read as a JWT."""
    parts = token.split(".")
    if len(parts) != 3:
        return None
    payload = parts[1]
    try:
        raw = base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4))
        claims = json.loads(raw)
    except (binascii.Error, ValueError, RecursionError):
        return None
    value = claims.get(claim) if isinstance(claims, dict) else None
    return value if isinstance(value, str) and value else None


def oauthbearer_name(token: bytes | bytearray | memoryview, claim: str) -> str | None:
    """The ``claim`` of the bearer token in an OAUTHBEARER client initial response."""
    text = _text(token)
    match = None if text is None else _OAUTH_FIRST.fullmatch(text)
    if match is None:
        return None
    pairs = dict(pair.split("=", 1) for pair in match.group("pairs").split("\x01") if "=" in pair)
    auth = _BEARER.fullmatch(pairs.get("auth", ""))
    if auth is None or auth.group("scheme").lower() != "bearer":
        return None
    name = jwt_claim(auth.group("token"), claim)
    authzid = match.group("authzid")
    if name is None or (authzid and authzid != name):
        return None
    return name


def claimed_name(mechanism: str, token: bytes | bytearray | memoryview, claim: str) -> str | None:
    """The name the first client token of ``mechanism`` claims; None if it names nobody
    (or the mechanism is not one whose principal is read)."""
    if len(token) > TOKEN_READ_LIMIT:
        return None
    if mechanism == PLAIN:
        return plain_name(token)
    if mechanism in SCRAM_MECHANISMS:
        return scram_name(token)
    if mechanism == OAUTHBEARER:
        return oauthbearer_name(token, claim)
    return None


# -- SaslAuthenticate (key 36) bodies: the tokens of a SaslHandshake v1 exchange --------
def authenticate_token(version: int, body: bytes | bytearray | memoryview) -> memoryview:
    """The auth_bytes of a SaslAuthenticate request body; raises Malformed."""
    view = memoryview(body)
    try:
        if version >= 2:  # flexible: compact bytes
            size_plus_one, pos = read_uvarint(view, 0)
            size = size_plus_one - 1
        else:
            if len(view) < 4:
                raise Incomplete
            (size,) = INT32.unpack_from(view, 0)
            pos = 4
    except Incomplete:
        raise Malformed("SaslAuthenticate request ends before its auth_bytes") from None
    if size < 0 or pos + size > len(view):
        raise Malformed("SaslAuthenticate auth_bytes run past the request")
    return view[pos : pos + size]


def authenticate_result(version: int, body: bytes | bytearray | memoryview) -> tuple[int, int]:
    """(error code, size of the broker's auth_bytes) of a SaslAuthenticate response body
    (after its header); raises Malformed."""
    view = memoryview(body)
    try:
        if len(view) < 2:
            raise Incomplete
        (error_code,) = INT16.unpack_from(view, 0)
        if version >= 2:
            pos = skip_compact_string(view, 2)
            size_plus_one, pos = read_uvarint(view, pos)
            size = size_plus_one - 1
        else:
            pos = skip_classic_string(view, 2)
            if len(view) < pos + 4:
                raise Incomplete
            (size,) = INT32.unpack_from(view, pos)
    except Incomplete:
        raise Malformed("SaslAuthenticate response ends early") from None
    return error_code, max(size, 0)


# -- one connection's logins ------------------------------------------------------------
class LoginWatcher(Protocol):
    """Who hears how a login ended (``gateway.server.exchange.ConnectionExchange``)."""

    @property
    def sasl_claim(self) -> str: ...

    def sasl_settled(self, login: SaslLogin, previous: str | None) -> None: ...


class SaslLogin:
    """The SASL logins of one connection: the first, then each KIP-368
    re-authentication, which replaces the principal once the broker accepted it.

    Made at the connection's first SaslHandshake (``SaslExchange.login_for``): a
    connection without SASL has none."""

    __slots__ = (
        "_answered",
        "_claimed",
        "_pending",
        "_rounds",
        "_tokens",
        "mechanism",
        "name",
        "outcome",
        "watcher",
    )

    def __init__(self, watcher: LoginWatcher | None = None) -> None:
        self.watcher = watcher
        self.mechanism: str | None = None
        # The name the last accepted login claimed (the principal is "User:" + it).
        self.name: str | None = None
        self.outcome: str | None = None  # of the last login that ended (AUTHENTICATED ...)
        self._pending = False  # a login is under way
        self._rounds = 0  # of the mechanism under way (FIXED_ROUNDS); 0: not observed
        self._tokens = 0  # client tokens of the login under way
        self._answered = 0  # broker answers to them, each a success
        self._claimed: str | None = None  # the name the first token claims

    def begin(self, mechanism: str, rounds: int | None) -> None:
        """A SaslHandshake asked for ``mechanism``, whose exchange takes ``rounds``
        (None: not fixed): a login (or re-login) starts."""
        self.mechanism = mechanism
        self._tokens = self._answered = 0
        self._claimed = None
        self._rounds = rounds if rounds and mechanism in _READ else 0
        self._pending = bool(self._rounds)
        if not self._rounds:
            # GSSAPI or a mechanism not known here: its principal is the broker's alone.
            self._settle(UNOBSERVED, None)

    @property
    def wants_token(self) -> bool:
        """Whether the next client token is the first of a login under way (the one
        that names who logs in)."""
        return self._pending and not self._tokens

    def client_token(self, token: bytes | bytearray | memoryview | None) -> None:
        """A client token of the login under way (None: one that could not be read)."""
        if not self._pending:
            return
        self._tokens += 1
        if self._tokens == 1 and self.mechanism is not None:
            claim = self.watcher.sasl_claim if self.watcher is not None else DEFAULT_SUB_CLAIM
            self._claimed = None if token is None else claimed_name(self.mechanism, token, claim)

    def server_token(self, error_code: int, size: int) -> None:
        """The broker answered a client token: ``error_code`` (0 with SaslHandshake v0,
        whose failures close instead) and the size of its token."""
        if not self._pending:
            return
        if error_code != 0 or self._answered >= self._tokens:
            self._settle(FAILED, None)  # refused, or an answer to no token: not trusted
            return
        if size and self.mechanism == OAUTHBEARER:
            # An error challenge: the client answers it and the broker then refuses.
            self._settle(FAILED, None)
            return
        self._answered += 1
        if self._answered >= self._rounds:
            self._settle(AUTHENTICATED, self._claimed)

    def abandon(self) -> None:
        """The login under way ended without the broker's success (v0: the client went
        back to requests early)."""
        if self._pending:
            self._settle(FAILED, None)

    def _settle(self, outcome: str, name: str | None) -> None:
        self._pending = False
        self._claimed = None
        previous = self.name
        self.outcome = outcome
        self.name = name
        if self.watcher is not None:
            self.watcher.sasl_settled(self, previous)


__all__ = [
    "AUTHENTICATED",
    "DEFAULT_SUB_CLAIM",
    "FAILED",
    "OAUTHBEARER",
    "UNOBSERVED",
    "LoginWatcher",
    "SaslLogin",
    "authenticate_result",
    "authenticate_token",
    "claimed_name",
    "jwt_claim",
    "oauthbearer_name",
    "plain_name",
    "scram_name",
    "scram_unescape",
]
