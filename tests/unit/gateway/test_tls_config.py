"""TLS settings: TOML tables, validation (files are loaded at config time) and the contexts."""

from __future__ import annotations

import ssl
from pathlib import Path

import pytest
import trustme
from cryptography.hazmat.primitives import serialization

from gateway.config import ConfigError, HostPort, load_config
from gateway.tls import client_side_context, upstream_context, upstream_server_hostname


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """PEM files: a CA, a server cert and key (apart and together), another CA's key, an
    encrypted key."""
    d = tmp_path_factory.mktemp("pki")
    ca = trustme.CA()
    leaf = ca.issue_cert("gw.example", "127.0.0.1")
    other = trustme.CA().issue_cert("other.example")
    ca.cert_pem.write_to_path(str(d / "ca.pem"))
    leaf.cert_chain_pems[0].write_to_path(str(d / "cert.pem"))
    leaf.private_key_pem.write_to_path(str(d / "key.pem"))
    leaf.private_key_and_cert_chain_pem.write_to_path(str(d / "both.pem"))
    other.private_key_pem.write_to_path(str(d / "other-key.pem"))
    key = serialization.load_pem_private_key(leaf.private_key_pem.bytes(), None)
    (d / "encrypted-key.pem").write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.BestAvailableEncryption(b"secret"),
        )
    )
    (d / "garbage.pem").write_text("not a certificate\n")
    return {p.stem: str(p) for p in d.iterdir()}


def test_tls_tables_flatten_and_enabled_names_the_table_key(tmp_path: Path, pki) -> None:
    conf = tmp_path / "gw.toml"
    conf.write_text(
        f'[tls]\ncert = "{pki["cert"]}"\nkey = "{pki["key"]}"\nca = "{pki["ca"]}"\n'
        'client_auth = "required"\n'
        f'[upstream_tls]\nenabled = true\nca = "{pki["ca"]}"\ncert = "{pki["both"]}"\n'
        'server_hostname = "broker.example"\ncheck_hostname = false\n'
    )
    cfg = load_config(conf)
    assert (cfg.tls_cert, cfg.tls_key, cfg.tls_ca) == (pki["cert"], pki["key"], pki["ca"])
    assert cfg.tls_client_auth == "required"
    assert cfg.upstream_tls and cfg.upstream_tls_cert == pki["both"]
    assert cfg.upstream_tls_server_hostname == "broker.example"
    assert cfg.upstream_tls_check_hostname is False


def test_plaintext_by_default() -> None:
    cfg = load_config(None, {})
    assert client_side_context(cfg) is None and upstream_context(cfg) is None
    assert upstream_server_hostname(cfg, HostPort("kafka-0", 9092)) is None


@pytest.mark.parametrize(
    ("client_auth", "verify_mode"),
    [("none", ssl.CERT_NONE), ("requested", ssl.CERT_OPTIONAL), ("required", ssl.CERT_REQUIRED)],
)
def test_client_side_context(pki, client_auth: str, verify_mode: ssl.VerifyMode) -> None:
    settings = {"tls_cert": pki["both"], "tls_client_auth": client_auth}
    if client_auth != "none":
        settings["tls_ca"] = pki["ca"]
    ctx = client_side_context(load_config(None, settings))
    assert ctx is not None
    assert ctx.verify_mode == verify_mode
    assert ctx.minimum_version == ssl.TLSVersion.TLSv1_2


def test_upstream_context_and_server_hostname(pki) -> None:
    cfg = load_config(None, {"upstream_tls": True, "upstream_tls_ca": pki["ca"]})
    ctx = upstream_context(cfg)
    assert ctx is not None and ctx.check_hostname and ctx.verify_mode == ssl.CERT_REQUIRED
    assert upstream_server_hostname(cfg, HostPort("kafka-0", 9093)) == "kafka-0"
    cfg = load_config(
        None,
        {
            "upstream_tls": True,
            "upstream_tls_server_hostname": "kafka.internal",
            "upstream_tls_check_hostname": False,
        },
    )
    ctx = upstream_context(cfg)
    assert ctx is not None and not ctx.check_hostname
    assert ctx.verify_mode == ssl.CERT_REQUIRED  # the chain is still verified
    assert upstream_server_hostname(cfg, HostPort("10.0.0.5", 9093)) == "kafka.internal"


BAD = [
    ({"tls_cert": "{missing}"}, "tls_cert", "cannot read"),
    ({"tls_cert": "{garbage}"}, "tls_cert", "no PEM certificate"),
    ({"tls_cert": "{key}", "tls_key": "{key}"}, "tls_cert", "no PEM certificate"),
    ({"tls_cert": "{cert}"}, "tls_cert", "no tls_key set"),
    ({"tls_cert": "{cert}", "tls_key": "{missing}"}, "tls_key", "cannot read"),
    ({"tls_cert": "{cert}", "tls_key": "{other-key}"}, "tls_key", "does not match"),
    ({"tls_cert": "{cert}", "tls_key": "{encrypted-key}"}, "tls_key", "encrypted"),
    ({"tls_key": "{key}"}, "tls_key", "needs tls_cert"),
    ({"tls_ca": "{ca}"}, "tls_ca", "needs tls_cert"),
    ({"tls_client_auth": "required"}, "tls_client_auth", "needs tls_cert"),
    ({"tls_cert": "{both}", "tls_client_auth": "yes"}, "tls_client_auth", "must be none"),
    ({"tls_cert": "{both}", "tls_client_auth": "required"}, "tls_client_auth", "needs tls_ca"),
    ({"tls_cert": "{both}", "tls_ca": "{ca}"}, "tls_ca", "set tls_client_auth"),
    (
        {"tls_cert": "{both}", "tls_ca": "{garbage}", "tls_client_auth": "required"},
        "tls_ca",
        "no PEM CA",
    ),
    ({"upstream_tls": "yes"}, "upstream_tls", "true or false"),
    ({"upstream_tls_ca": "{ca}"}, "upstream_tls_ca", "needs upstream_tls"),
    ({"upstream_tls_server_hostname": "b"}, "upstream_tls_server_hostname", "needs upstream_tls"),
    ({"upstream_tls": True, "upstream_tls_ca": "{missing}"}, "upstream_tls_ca", "cannot read"),
    ({"upstream_tls": True, "upstream_tls_key": "{key}"}, "upstream_tls_key", "needs"),
    (
        {"upstream_tls": True, "upstream_tls_cert": "{cert}", "upstream_tls_key": "{other-key}"},
        "upstream_tls_key",
        "does not match",
    ),
    (
        {"upstream_tls": True, "upstream_tls_server_hostname": ""},
        "upstream_tls_server_hostname",
        "empty",
    ),
    (
        {"upstream_tls": True, "upstream_tls_check_hostname": "no"},
        "upstream_tls_check_hostname",
        "true or false",
    ),
]


@pytest.mark.parametrize(("settings", "key", "reason"), BAD)
def test_bad_tls_settings_name_the_key(pki, settings: dict, key: str, reason: str) -> None:
    paths = {**pki, "missing": "/nonexistent/tls.pem"}
    resolved = {
        k: v.format(**paths) if isinstance(v, str) and "{" in v else v for k, v in settings.items()
    }
    with pytest.raises(ConfigError) as info:
        load_config(None, resolved)
    assert info.value.key == key
    assert reason in info.value.reason
