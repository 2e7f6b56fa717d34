"""A build backend of the standard library only (PEP 517 and PEP 660), so that
`pip install -e examples/agent_package` works offline, with or without build isolation: it
needs nothing downloaded (setuptools alone cannot build an editable wheel without the `wheel`
package). Your own package may use any backend instead (setuptools, hatchling, flit).

It reads the name, version and package from pyproject.toml, and builds:
- an editable wheel: a .pth file that puts this directory on sys.path;
- a wheel: the package's files;
- an sdist: pyproject.toml, README.md, this backend and the package.
"""

from __future__ import annotations

import base64
import hashlib
import io
import tarfile
import tomllib
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _project() -> tuple[str, str, str, str]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    project = config["project"]
    package = config["tool"]["offline_backend"]["package"]
    return project["name"], project["version"], project.get("description", ""), package


def _dist_name(name: str) -> str:
    return name.replace("-", "_")


def _metadata() -> str:
    name, version, description, _ = _project()
    return f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\nSummary: {description}\n"


def _write_wheel(directory: str, files: dict[str, bytes]) -> str:
    name, version, _, _ = _project()
    dist_info = f"{_dist_name(name)}-{version}.dist-info"
    files = {
        **files,
        f"{dist_info}/METADATA": _metadata().encode(),
        f"{dist_info}/WHEEL": b"Wheel-Version: 1.0\nGenerator: offline_backend\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = []
    for path, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append(f"{path},sha256={digest},{len(data)}")
    record.append(f"{dist_info}/RECORD,,")
    files[f"{dist_info}/RECORD"] = ("\n".join(record) + "\n").encode()
    wheel_name = f"{_dist_name(name)}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(Path(directory) / wheel_name, "w", zipfile.ZIP_DEFLATED) as wheel:
        for path, data in files.items():
            wheel.writestr(path, data)
    return wheel_name


def _package_files() -> dict[str, bytes]:
    package = _project()[3]
    return {
        path.relative_to(ROOT).as_posix(): path.read_bytes()
        for path in sorted((ROOT / package).rglob("*.py"))
    }


def build_editable(wheel_directory, config_settings=None, metadata_directory=None):
    name = _dist_name(_project()[0])
    return _write_wheel(wheel_directory, {f"{name}.pth": f"{ROOT}\n".encode()})


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    return _write_wheel(wheel_directory, _package_files())


def build_sdist(sdist_directory, config_settings=None):
    name, version, _, _ = _project()
    base = f"{_dist_name(name)}-{version}"
    files = {"pyproject.toml", "README.md", "_backend/offline_backend.py", *_package_files()}
    with tarfile.open(Path(sdist_directory) / f"{base}.tar.gz", "w:gz") as sdist:
        for path in sorted(files):
            sdist.add(ROOT / path, arcname=f"{base}/{path}")
        info = tarfile.TarInfo(f"{base}/PKG-INFO")
        data = _metadata().encode()
        info.size = len(data)
        sdist.addfile(info, io.BytesIO(data))
    return f"{base}.tar.gz"


def get_requires_for_build_wheel(config_settings=None):
    return []


def get_requires_for_build_editable(config_settings=None):
    return []


def get_requires_for_build_sdist(config_settings=None):
    return []
