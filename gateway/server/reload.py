"""SIGHUP: what a running gateway re-reads in place, its connections staying up.

In order: the client-side TLS certificate chain (new handshakes present it), the
feature catalogue (connections renegotiate with the caps it makes), the
upgrade_target_release the release watch judges traffic against, and the version
bridge's policy file. The first file that does not load ends the reload: it and what
follows keep their old values, ``kafka_gateway_config_reloads{result="failed"}`` counts
it, and one rate-limited line names its key and why. A supervisor reloads its own
control plane so, then signals its workers.

Apart from ``Gateway`` because it is one rule over parts the gateway holds (the TLS
context, the feature gate, the release watch), not a role of its own.
"""

from __future__ import annotations

import ssl

from ..config import Config, ConfigError, reloaded
from ..features.catalogue import CatalogueError
from ..interceptors.bridging import PolicyFileError, reload_policy
from ..observability.logging import RateLimitedLogger, get_logger
from ..observability.metrics import Metrics
from ..observability.release_watch import ReleaseWatch
from ..tls import TlsSetupError, reload_client_chain
from .features import FeatureGate

log = get_logger("gateway.server")
limited = RateLimitedLogger("gateway.server")


def reload_in_place(
    config: Config,
    metrics: Metrics,
    client_tls: ssl.SSLContext | None,
    features: FeatureGate,
    release_watch: ReleaseWatch,
) -> None:
    """Re-read what SIGHUP re-reads; a file that does not load keeps the old one."""
    try:
        if client_tls is not None:
            reload_client_chain(client_tls, config)
        catalogue_changed = features.reload_catalogue()
        target = reloaded("upgrade_target_release", release_watch.release)
        release_watch.set_release(target)
        bridge_policy_changed = reload_policy(config)
    except (TlsSetupError, CatalogueError, ConfigError, PolicyFileError) as exc:
        metrics.config_reloads.labels("failed").inc()
        key = "features.catalogue" if isinstance(exc, CatalogueError) else exc.key
        limited.error("gateway.reload_failed", key=key, reason=str(exc), kept="old")
        return
    metrics.config_reloads.labels("ok").inc()
    log.info(
        "gateway.reload",
        result="ok",
        tls_cert=config.tls_cert,
        catalogue_changed=catalogue_changed,
        upgrade_target_release=release_watch.release,
        bridge_policy_changed=bridge_policy_changed,
    )
