"""The ZooKeeper side of feature gating (kazoo; blocking calls, use from a thread).

Layout under the chroot (default ``/kafka-gateway``), see ``znode`` for the JSON:

* ``<chroot>/feature``: the finalized levels; epoch = the znode's data version.
* ``<chroot>/gateways/ids/<id>``: one ephemeral registration per live gateway.

Writes of ``feature`` are compare-and-set on the data version the writer read, so two
concurrent writers never lose an update: the second gets ``EpochConflict``.

Security: with ``auth="user:password"`` the client authenticates with ZooKeeper's digest
scheme, and a ``feature`` znode it creates gets an ACL that lets only that user write
(everyone may read, so gateways need no credentials). Registrations stay open, as the
gateways themselves write them.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError
from kazoo.security import ACL, OPEN_ACL_UNSAFE, make_acl, make_digest_acl

from ..observability.logging import get_logger
from .znode import (
    NO_EPOCH,
    Finalized,
    Registration,
    ZNodeError,
    decode_broker_features,
    decode_feature_znode,
    decode_registration,
    encode_feature_znode,
    encode_registration,
)

DEFAULT_CHROOT = "/kafka-gateway"
# The ZooKeeper connect string featurectl uses when --zookeeper is not given; the embedded
# stack's banner prints an `export` of it for the operator's next shell.
ZOOKEEPER_ENV = "KAFKA_GATEWAY_ZOOKEEPER"


class EpochConflict(Exception):
    """Someone else changed the finalized features since they were read."""

    def __init__(self, expected: int, actual: int) -> None:
        super().__init__(
            f"finalized features changed concurrently: expected epoch {expected}, "
            f"found {actual}; read them again and retry"
        )
        self.expected = expected
        self.actual = actual


class GatewayIdTaken(Exception):
    """Another live gateway holds this registration id."""


@dataclass(frozen=True, slots=True)
class Paths:
    chroot: str = DEFAULT_CHROOT

    @property
    def feature(self) -> str:
        return f"{self.chroot}/feature"

    @property
    def gateway_ids(self) -> str:
        return f"{self.chroot}/gateways/ids"

    def gateway(self, gateway_id: str) -> str:
        return f"{self.gateway_ids}/{gateway_id}"

    @property
    def broker_ids(self) -> str:
        """Where ZooKeeper-mode Kafka brokers register when the chroot is Kafka's own."""
        return f"{self.chroot}/brokers/ids"


def normalize_chroot(chroot: str) -> str:
    chroot = "/" + chroot.strip("/")
    if chroot == "/":
        raise ValueError("the chroot must not be '/'")
    return chroot


@dataclass(frozen=True, slots=True)
class ZooKeeperTls:
    """TLS towards ZooKeeper's secureClientPort (PEM files; cert and key for mutual TLS)."""

    ca: str | None = None
    cert: str | None = None
    key: str | None = None
    check_hostname: bool = True


def make_client(
    connect: str,
    *,
    auth: str | None = None,
    timeout_s: float = 10.0,
    tls: ZooKeeperTls | None = None,
    sasl: str | None = None,
) -> KazooClient:
    """A kazoo client (not started). ``auth`` is 'user:password' for digest auth (ACL
    credentials); ``sasl`` 'user:password' for SASL DIGEST-MD5 (the server's JAAS
    DigestLoginModule); ``tls`` turns TLS on."""
    auth_data = [("digest", auth)] if auth else None
    # Reconnect attempts back off to at most 2 s (kazoo's default is 60 s), so a gateway
    # is back within seconds of ZooKeeper returning.
    retry = {"max_tries": -1, "delay": 0.1, "backoff": 2, "max_delay": 2.0}
    options: dict[str, Any] = {}
    if sasl:
        user, _, password = sasl.partition(":")
        options["sasl_options"] = {
            "mechanism": "DIGEST-MD5",
            "username": user,
            "password": password,
        }
    if tls is not None:
        options.update(
            use_ssl=True,
            ca=tls.ca,
            certfile=tls.cert,
            keyfile=tls.key,
            verify_certs=True,
            check_hostname=tls.check_hostname,
        )
    return KazooClient(
        hosts=connect, timeout=timeout_s, auth_data=auth_data, connection_retry=retry, **options
    )


class FeatureStore:
    def __init__(
        self, client: KazooClient, chroot: str = DEFAULT_CHROOT, *, auth: str | None = None
    ):
        self.client = client
        self.paths = Paths(normalize_chroot(chroot))
        self._auth = auth

    # -- finalized features ------------------------------------------------------------
    def read(self) -> Finalized:
        try:
            data, stat = self.client.get(self.paths.feature)
        except NoNodeError:
            return Finalized({}, NO_EPOCH)
        return decode_feature_znode(data, stat.version)

    def write(
        self,
        levels: Mapping[str, int],
        expected_epoch: int,
        *,
        old: Mapping[str, int] | None = None,
        who: Mapping[str, object] | None = None,
    ) -> int:
        """Replace the finalized levels if the epoch is still ``expected_epoch``.

        Returns the new epoch. Raises ``EpochConflict`` when another writer got there
        first (including creating the znode when ``expected_epoch`` is -1). Every
        change is audited here, the one place all writers pass: ``old`` are the levels
        the writer read at ``expected_epoch``, ``who`` says who asked and from where.
        """
        new_epoch = self._write(levels, expected_epoch)
        audit_feature_change(old, levels, expected_epoch, new_epoch, who or {})
        return new_epoch

    def adopt(
        self,
        levels: Mapping[str, int],
        *,
        upstream: str,
        skipped: Mapping[str, str],
        who: Mapping[str, object],
    ) -> int | None:
        """Create the feature znode holding ``levels`` unless it exists. Returns its epoch
        (0), or None when it exists: another gateway of the fleet adopted first, or an
        operator owns it (even emptied); the caller re-reads. One create, so however many
        gateways start at once, one adopts and logs ``features.adopted``."""
        try:
            epoch = self._write(levels, NO_EPOCH)
        except EpochConflict:
            return None
        audit_feature_adoption(levels, upstream, skipped, epoch, who)
        return epoch

    def _write(self, levels: Mapping[str, int], expected_epoch: int) -> int:
        data = encode_feature_znode(levels)
        self._secure()
        if expected_epoch == NO_EPOCH:
            self.client.ensure_path(self.paths.chroot, acl=self._chroot_acl())
            try:
                self.client.create(self.paths.feature, data, acl=self._feature_acl())
            except NodeExistsError:
                raise EpochConflict(expected_epoch, self.read().epoch) from None
            return 0
        try:
            stat = self.client.set(self.paths.feature, data, version=expected_epoch)
        except BadVersionError:
            raise EpochConflict(expected_epoch, self.read().epoch) from None
        except NoNodeError:
            raise EpochConflict(expected_epoch, NO_EPOCH) from None
        return int(stat.version)

    def _feature_acl(self) -> list[ACL] | None:
        if not self._auth:
            return None
        user, _, password = self._auth.partition(":")
        return [
            make_digest_acl(user, password, all=True),
            make_acl("world", "anyone", read=True),
        ]

    def _chroot_acl(self) -> list[ACL] | None:
        # Deleting a znode needs DELETE on its parent: without locking the chroot too,
        # anyone could delete ``feature`` and create it again, open and at epoch 0.
        # Everyone keeps CREATE so gateways can create ``gateways/ids`` below it.
        if not self._auth:
            return None
        user, _, password = self._auth.partition(":")
        return [
            make_digest_acl(user, password, all=True),
            make_acl("world", "anyone", read=True, create=True),
        ]

    def _secure(self) -> None:
        """With auth: lock down a chroot or feature znode someone created open."""
        for path, acl in (
            (self.paths.chroot, self._chroot_acl()),
            (self.paths.feature, self._feature_acl()),
        ):
            if acl is None:
                return
            try:
                current, _ = self.client.get_acls(path)
            except NoNodeError:
                continue
            if list(current) != acl:
                self.client.set_acls(path, acl)

    def watch(self, callback: Callable[[Finalized | None, Exception | None], None]) -> None:
        """Call ``callback(finalized, None)`` now and on every change (kazoo's thread).

        A znode that does not parse calls ``callback(None, error)``: the caller keeps
        what it had rather than un-finalizing everything.
        """

        def on_change(data: bytes | None, stat: object) -> None:
            epoch = getattr(stat, "version", NO_EPOCH) if stat is not None else NO_EPOCH
            try:
                finalized = decode_feature_znode(data, epoch)
            except ZNodeError as exc:
                callback(None, exc)
                return
            callback(finalized, None)

        self.client.DataWatch(self.paths.feature, on_change)

    # -- gateway registrations ------------------------------------------------------------
    def register(self, registration: Registration) -> None:
        """Create this gateway's ephemeral registration (replacing our own stale one)."""
        path = self.paths.gateway(registration.gateway_id)
        data = encode_registration(registration)
        self.client.ensure_path(self.paths.gateway_ids)
        try:
            self.client.create(path, data, ephemeral=True, acl=OPEN_ACL_UNSAFE)
        except NodeExistsError:
            try:
                _, stat = self.client.get(path)
            except NoNodeError:  # it just expired: try once more
                self.client.create(path, data, ephemeral=True, acl=OPEN_ACL_UNSAFE)
                return
            if stat.ephemeralOwner != self.client.client_id[0]:
                raise GatewayIdTaken(
                    f"gateway id {registration.gateway_id!r} is registered by another live "
                    f"gateway (session 0x{stat.ephemeralOwner:x}); set a unique gateway_id"
                ) from None
            self.client.set(path, data)

    def deregister(self, gateway_id: str) -> None:
        with contextlib.suppress(NoNodeError):
            self.client.delete(self.paths.gateway(gateway_id))

    def registrations(self) -> list[Registration]:
        """Every live gateway's registration (unreadable ones are skipped)."""
        try:
            ids = self.client.get_children(self.paths.gateway_ids)
        except NoNodeError:
            return []
        out = []
        for gateway_id in sorted(ids):
            try:
                data, _ = self.client.get(self.paths.gateway(gateway_id))
                out.append(decode_registration(gateway_id, data))
            except (NoNodeError, ZNodeError):
                continue  # gone between listing and reading, or written by a stranger
        return out

    def supported_by_gateway(self) -> dict[str, dict[str, tuple[int, int]]]:
        """What every live server that reads this chroot's feature znode supports: the
        gateways' registrations, and the ZooKeeper-mode Kafka brokers registered beside
        them when the chroot is Kafka's own ("Kafka broker <id>"). Kafka's controller
        refuses a level one live broker cannot serve; a broker handed one exits."""
        out = {r.gateway_id: dict(r.features) for r in self.registrations()}
        try:
            broker_ids = self.client.get_children(self.paths.broker_ids)
        except NoNodeError:
            return out
        for broker_id in sorted(broker_ids):
            try:
                data, _ = self.client.get(f"{self.paths.broker_ids}/{broker_id}")
                out[f"Kafka broker {broker_id}"] = decode_broker_features(broker_id, data)
            except (NoNodeError, ZNodeError):
                continue
        return out


__all__ = [
    "DEFAULT_CHROOT",
    "EpochConflict",
    "FeatureStore",
    "GatewayIdTaken",
    "Paths",
    "make_client",
    "normalize_chroot",
]


_audit = get_logger("gateway.audit")


def audit_feature_change(
    old: Mapping[str, int] | None,
    new: Mapping[str, int],
    old_epoch: int,
    new_epoch: int,
    who: Mapping[str, object],
) -> None:
    """One structured line per change of the finalized levels (``features.changed``):
    who (principal), from where, old -> new levels per feature, and the epochs."""
    changes = (
        {
            name: f"{old.get(name, 0)} -> {new.get(name, 0)}"
            for name in sorted(set(old) | set(new))
            if old.get(name, 0) != new.get(name, 0)
        }
        if old is not None
        else None
    )
    _audit.info(
        "features.changed",
        principal=who.get("principal", "unknown"),
        address=who.get("address", "unknown"),
        **{k: v for k, v in who.items() if k not in ("principal", "address")},
        changes=changes,
        old_levels=dict(old) if old is not None else None,
        new_levels=dict(new),
        epoch=f"{old_epoch} -> {new_epoch}",
    )


def audit_feature_adoption(
    levels: Mapping[str, int],
    upstream: str,
    skipped: Mapping[str, str],
    epoch: int,
    who: Mapping[str, object],
) -> None:
    """The one line (``features.adopted``) of a fleet taking its brokers' finalized levels
    into an empty store: the levels, the broker they came from, what was left out and
    why, and the epoch; shaped like ``features.changed``."""
    _audit.info(
        "features.adopted",
        principal=who.get("principal", "unknown"),
        address=who.get("address", "unknown"),
        **{k: v for k, v in who.items() if k not in ("principal", "address")},
        upstream=upstream,
        changes={name: f"0 -> {level}" for name, level in sorted(levels.items())},
        old_levels=None,
        new_levels=dict(levels),
        skipped=dict(skipped),
        epoch=f"{NO_EPOCH} -> {epoch}",
    )
