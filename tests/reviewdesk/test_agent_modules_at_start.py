"""A DESK_AGENTS module that cannot be used stops start-up, naming the module and the problem:
`manage.py check` (a system check error), the web process (daphne on the ASGI application), the
Celery worker, beat, and `make run` (the launcher, before it starts anything).

Each case starts a real process with a clean environment: the embedded default (no DATABASE_URL
or REDIS_URL) in a var/ directory of the test's own, and a directory of agent modules on
PYTHONPATH. A healthy module set passes the same check, so the refusal is the module's doing.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
EX_CONFIG = 78

TOOL = """
from agents.registry import Agent, register
from agents.tools import ALWAYS, Effect, Tool

def noop(arguments, ctx):
    return {}

def tool(name, parameters=None, effect=Effect.EXTERNAL):
    return Tool(name=name, description=name, parameters=parameters or {"type": "object"},
                effect=effect, approval=ALWAYS, func=noop)
"""

MODULES = {
    "good_agents": TOOL + 'register(Agent(name="good", system_prompt="", tools=(tool("act"),)))',
    "imports_missing": "import no_such_dependency_xyz\n",
    "bad_schema": TOOL
    + 'register(Agent(name="schema", system_prompt="", tools=(tool("lookup", {"type": "objekt"}),)))',
    "bad_effect": TOOL
    + 'register(Agent(name="effect", system_prompt="", tools=(tool("wipe", effect="sideways"),)))',
    "twin_tools": TOOL
    + 'register(Agent(name="twins", system_prompt="", tools=(tool("send"), tool("send"))))',
    "another_good": TOOL + 'register(Agent(name="good", system_prompt="", tools=(tool("act"),)))',
}

# DESK_AGENTS, and what stderr must say: the module, then the problem.
BROKEN = {
    "a module that does not exist": ("good_agents,myco.agents", ["'myco.agents'", "no module named 'myco'"]),
    "a module whose import fails": (
        "imports_missing",
        ["'imports_missing'", "cannot be imported", "no_such_dependency_xyz"],
    ),
    "a tool with a bad JSON Schema": (
        "bad_schema",
        ["'bad_schema'", "tool 'lookup'", "not a valid JSON Schema", "objekt"],
    ),
    "a tool with an unknown effect kind": (
        "bad_effect",
        ["'bad_effect'", "tool 'wipe'", "unknown effect kind 'sideways'"],
    ),
    "two tools with one name": ("twin_tools", ["'twin_tools'", "agent 'twins'", "two tools named 'send'"]),
    "two agents with one name": (
        "good_agents,another_good",
        ["'another_good'", "two agents named 'good'", "also by 'good_agents'"],
    ),
}


@pytest.fixture
def modules_dir(tmp_path: Path) -> Path:
    directory = tmp_path / "modules"
    directory.mkdir()
    for name, source in MODULES.items():
        (directory / f"{name}.py").write_text(textwrap.dedent(source))
    return directory


def clean_env(tmp_path: Path, modules_dir: Path, desk_agents: str) -> dict[str, str]:
    return {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "DJANGO_SETTINGS_MODULE": "reviewdesk.settings",
        "DESK_VAR_DIR": str(tmp_path / "var"),
        "PYTHONPATH": str(modules_dir),
        "DESK_AGENTS": desk_agents,
        "PORT": "0",  # the launcher's daphne, were it ever to start: never a port in use
    }


def run(command: list[str], env: dict[str, str], timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """Run to its end: a process that refuses exits in seconds; one that starts is killed at
    `timeout`, with every process it started (its own session), and the test fails."""
    process = subprocess.Popen(
        command,
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
        start_new_session=True,
    )
    try:
        stdout, stderr = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        _, stderr = process.communicate()
        pytest.fail(f"{command[2:5]} started and kept running: {stderr[-2000:]!r}")
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)  # anything it left behind
    return subprocess.CompletedProcess(command, process.returncode, stdout, stderr)


def manage_check(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return run([sys.executable, "manage.py", "check"], env)


@pytest.mark.parametrize("case", list(BROKEN))
def test_manage_py_check_reports_the_module_and_the_problem(tmp_path, modules_dir, case):
    desk_agents, said = BROKEN[case]
    checked = manage_check(clean_env(tmp_path, modules_dir, desk_agents))

    assert checked.returncode != 0, checked.stdout + checked.stderr
    assert "(agent_modules.E001)" in checked.stderr
    assert all(part in checked.stderr for part in said), checked.stderr


def test_migrate_the_first_step_of_make_run_stops_before_it_migrates(tmp_path, modules_dir):
    migrated = run(
        [sys.executable, "manage.py", "migrate", "--noinput"], clean_env(tmp_path, modules_dir, "myco.agents")
    )

    assert migrated.returncode != 0
    assert "(agent_modules.E001) DESK_AGENTS: agent module 'myco.agents'" in migrated.stderr
    assert "Applying" not in migrated.stdout


def test_a_healthy_set_passes_the_check(tmp_path, modules_dir):
    checked = manage_check(clean_env(tmp_path, modules_dir, "good_agents,agents.demo"))

    assert checked.returncode == 0, checked.stderr
    assert "agent_modules" not in checked.stdout + checked.stderr


PROCESSES = {
    "web": [sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", "0", "reviewdesk.asgi:application"],
    "worker": [
        sys.executable,
        "-m",
        "celery",
        "-A",
        "reviewdesk",
        "worker",
        "-l",
        "INFO",
        "--concurrency",
        "1",
    ],
    "beat": [sys.executable, "-m", "celery", "-A", "reviewdesk", "beat", "-l", "INFO"],
    "run": [sys.executable, "-m", "reviewdesk.serve.launcher"],  # `make run`
}


@pytest.mark.parametrize("process", list(PROCESSES))
def test_the_processes_refuse_to_start_naming_the_module(tmp_path, modules_dir, process):
    env = clean_env(tmp_path, modules_dir, "good_agents,myco.agents")
    started = run(PROCESSES[process], env)

    assert started.returncode == EX_CONFIG, started.stderr
    assert f"reviewdesk {process} refuses to start: DESK_AGENTS: agent module 'myco.agents'" in started.stderr
    assert "no module named 'myco'" in started.stderr
