"""The project builds without warnings and declares its licence the PEP 639 way.

setuptools before 77 reads ``license = { text = ... }`` and warns on every build (and every
editable install) that such builds stop being supported after 2027-02-18; the SPDX string
form needs setuptools 77+. Building a wheel here is the same build ``pip install -e`` runs.
"""

from __future__ import annotations

import subprocess
import sys
import tomllib
import zipfile
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())


def build_requirements_installed() -> bool:
    """Whether this venv already holds the build backend pyproject.toml asks for."""
    for line in PYPROJECT["build-system"]["requires"]:
        requirement = Requirement(line)
        try:
            installed = metadata.version(requirement.name)
        except metadata.PackageNotFoundError:
            return False
        if installed not in requirement.specifier:
            return False
    return True


def test_the_licence_is_an_spdx_expression_and_the_backend_understands_it() -> None:
    assert PYPROJECT["project"]["license"] == "Apache-2.0"
    (setuptools,) = (
        Requirement(r) for r in PYPROJECT["build-system"]["requires"] if r.startswith("setuptools")
    )
    # 77.0 is the first setuptools that reads `license` as a PEP 639 expression.
    assert "76.9" not in setuptools.specifier and "77.0" in setuptools.specifier


def test_a_wheel_builds_without_warnings_and_carries_license_expression(tmp_path: Path) -> None:
    # Offline when the venv has the pinned backend already; otherwise pip fetches it into an
    # isolated build environment, as `pip install -e` does (CI has PyPI).
    isolation = ["--no-build-isolation"] if build_requirements_installed() else []
    result = subprocess.run(
        [
            *(sys.executable, "-m", "pip", "wheel", ".", "--no-deps"),
            *("--wheel-dir", str(tmp_path), "--disable-pip-version-check", "--no-cache-dir"),
            *isolation,
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    warnings = [line for line in output.splitlines() if "warning" in line.lower()]
    assert warnings == [], output
    (wheel,) = tmp_path.glob("kafka_gateway-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        (name,) = (n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
        headers = archive.read(name).decode().split("\n\n", 1)[0].splitlines()
    assert "License-Expression: Apache-2.0" in headers
    # The deprecated field must be gone, not merely joined by the new one.
    assert not any(h.startswith("License:") for h in headers)
