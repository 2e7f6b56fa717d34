"""Processes run as other users, for the tests of docs/running.md's two-user layout.

Needs root (to add the users and to switch to them) and useradd/userdel/setpriv; the tests that
use these skip with that reason otherwise. See `shared_python` for how the other users run the
suite's own interpreter and packages.
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def why_not() -> str | None:
    """Why these tests cannot run here, or None."""
    if os.geteuid() != 0:
        return "adding users and switching to them needs root"
    for tool in ("useradd", "userdel", "setpriv", "cp"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed"
    return None


def _reachable_by_others(path: Path) -> bool:
    return all(os.stat(p).st_mode & 0o001 for p in [path, *path.parents])


def shared_python(base: Path) -> tuple[Path, dict[str, str]]:
    """A python every user can run, importing the suite's packages, and the environment it needs.

    The suite's interpreter (sys.base_prefix) may sit under a directory only root can enter (a
    pyenv under 0700 /root): then its tree, less its own site-packages, is hard-linked under
    `base` (no copy; the same files), and LD_LIBRARY_PATH points at the linked lib/ (the binary's
    RUNPATH names the unreachable one). A virtualenv made from that interpreter adds the suite's
    site-packages with a `.pth` line: the same interpreter and packages, reachable by anyone."""
    prefix, env = Path(sys.base_prefix).resolve(), {}
    if not _reachable_by_others(prefix):
        linked = base / "python"
        linked.mkdir()
        for entry in prefix.iterdir():
            if entry.name != "lib":
                subprocess.run(["cp", "-al", str(entry), str(linked / entry.name)], check=True)
        (linked / "lib").mkdir()
        for entry in (prefix / "lib").iterdir():
            if entry.name.startswith("python") and entry.is_dir():
                (linked / "lib" / entry.name).mkdir()
                for item in entry.iterdir():
                    if item.name != "site-packages":
                        subprocess.run(
                            ["cp", "-al", str(item), str(linked / "lib" / entry.name / item.name)], check=True
                        )
            else:
                subprocess.run(["cp", "-al", str(entry), str(linked / "lib" / entry.name)], check=True)
        prefix, env = linked, {"LD_LIBRARY_PATH": str(linked / "lib")}
    interpreter = prefix / "bin" / f"python{sys.version_info.major}.{sys.version_info.minor}"
    venv = base / "venv"
    subprocess.run(
        [str(interpreter), "-m", "venv", "--without-pip", str(venv)], check=True, env={**os.environ, **env}
    )
    site_packages = Path(sysconfig.get_paths()["purelib"]).resolve()
    if not _reachable_by_others(site_packages):
        pytest.skip(
            f"{site_packages} is not searchable by other users: the suite's packages are out of their reach"
        )
    (next(venv.glob("lib/python*/site-packages")) / "suite.pth").write_text(
        f"import site; site.addsitedir({str(site_packages)!r})\n"
    )
    subprocess.run(["chmod", "-R", "a+rX", str(venv)], check=True)
    return venv / "bin" / "python", env


@dataclass(frozen=True)
class User:
    name: str
    uid: int
    gid: int

    def command(self, argv: list[str]) -> list[str]:
        """`argv` run as this user, with no supplementary groups (setpriv, as a service manager would)."""
        return ["setpriv", f"--reuid={self.uid}", f"--regid={self.gid}", "--clear-groups", "--", *argv]


@contextmanager
def system_users(*roles: str) -> Iterator[dict[str, User]]:
    """System users named after `roles` (desk-web-<tag>, …), removed afterwards."""
    tag = uuid.uuid4().hex[:6]
    made: dict[str, User] = {}
    try:
        for role in roles:
            name = f"{role}-{tag}"
            subprocess.run(
                ["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", name], check=True
            )
            entry = pwd.getpwnam(name)
            made[role] = User(name, entry.pw_uid, entry.pw_gid)
        yield made
    finally:
        for user in made.values():
            subprocess.run(["userdel", user.name], check=False)


@contextmanager
def shared_directory() -> Iterator[Path]:
    """A fresh directory under the system temp dir that every user can enter (pytest's tmp_path
    sits under a 0700 directory of root's)."""
    base = Path(tempfile.mkdtemp(prefix="reviewdesk-two-users-"))
    base.chmod(0o755)
    try:
        yield base
    finally:
        shutil.rmtree(base, ignore_errors=True)


def project_tree(base: Path) -> Path:
    """The checkout, as the other users reach it: itself when they can, else its files hard-linked
    under `base` (a mutation run's copy sits in a 0700 temporary directory). var/ stays out:
    every process here has a DESK_VAR_DIR of its own."""
    if _reachable_by_others(REPO):
        return REPO
    linked = base / "project"
    linked.mkdir()
    linked.chmod(0o755)
    for entry in REPO.iterdir():
        if entry.name not in {"var", ".git"}:
            subprocess.run(["cp", "-al", str(entry), str(linked / entry.name)], check=True)
    return linked
