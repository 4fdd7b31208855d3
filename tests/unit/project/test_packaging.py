"""The project builds without warnings and declares its licence the PEP 639 way.

setuptools before 77 reads ``license = { text = ... }`` and warns on every build (and every
editable install) that such builds stop being supported after 2027-02-18; the SPDX string
form needs setuptools 77+. Building a wheel here is the same build ``pip install -e`` runs.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tomllib
import zipfile
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[3]
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


def source_copy(tmp_path: Path) -> Path:
    """The project's sources in a fresh directory: a build leaves build/ and *.egg-info
    behind, which must not land in the checkout (and must not feed a later build)."""
    copy = tmp_path / "src"
    skipped = [".git", ".venv", ".carry", "build", "dist", "run", "*.egg-info", "__pycache__"]
    shutil.copytree(ROOT, copy, ignore=shutil.ignore_patterns(*skipped, ".*_cache"))
    return copy


def pip(*args: str, cwd: Path) -> tuple[int, str]:
    # Offline when the venv has the pinned backend already; otherwise pip fetches it into an
    # isolated build environment, as `pip install -e` does (CI has PyPI).
    isolation = ["--no-build-isolation"] if build_requirements_installed() else []
    result = subprocess.run(
        [sys.executable, "-m", "pip", *args, "--disable-pip-version-check", *isolation],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=600,
    )
    return result.returncode, result.stdout + result.stderr


def warning_lines(output: str) -> list[str]:
    return [line for line in output.splitlines() if "warning" in line.lower()]


def test_a_wheel_builds_without_warnings_and_carries_license_expression(tmp_path: Path) -> None:
    wheels = tmp_path / "wheels"
    code, output = pip(
        "wheel", ".", "--no-deps", "--no-cache-dir", "--wheel-dir", str(wheels),
        cwd=source_copy(tmp_path),
    )  # fmt: skip
    assert code == 0, output
    assert warning_lines(output) == [], output
    (wheel,) = wheels.glob("kafka_gateway-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        (name,) = (n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
        headers = archive.read(name).decode().split("\n\n", 1)[0].splitlines()
    assert "License-Expression: Apache-2.0" in headers
    # The compiled lane is in it (setup.py; optional only where no C compiler is).
    with zipfile.ZipFile(wheel) as archive:
        assert any(
            n.startswith("gateway/server/_lane.") and n.endswith(".so") for n in archive.namelist()
        )
    # The deprecated field must be gone, not merely joined by the new one.
    assert not any(h.startswith("License:") for h in headers)


def test_an_editable_install_warns_of_nothing_but_its_own_note(tmp_path: Path) -> None:
    # The install scripts/test runs. setuptools notes on every editable install that a
    # folder named like the package in the working directory wins imports (scripts/test
    # hides that note: here it is the point); nothing else may be a warning.
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", venv], check=True, timeout=120)
    code, output = pip(
        "--python", str(venv / "bin" / "python"), "install", "--no-deps", "-e", ".",
        cwd=source_copy(tmp_path),
    )  # fmt: skip
    assert code == 0, output
    note = "BuildBackendWarning: Editable installation."
    assert [line for line in warning_lines(output) if note not in line] == [], output
