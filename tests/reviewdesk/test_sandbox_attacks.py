"""An approved `execute` command, run through the desk's real host, cannot reach the desk.

Each test is an attack: a command a reviewer approved (alice approves carol's
run), run by `run_execute` in this process exactly as a worker runs it, then
checked twice: on what the tool returned (what the submitter reads through the
API) and on the world (the file unchanged, the process gone).

Both sandbox modes run every attack. `bwrap` needs namespaces from the
machine and skips, saying so, where bubblewrap cannot start. `basic` (the
fallback) keeps the desk's files out of reach by the per-run uid, which needs
a root host and a var/ that is 0700 with 0600 files (the suite's var/ is a
mkdtemp, 0700); it cannot block TCP (see agents/sandbox.py), so the Redis
attack over TCP runs in `bwrap` only.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import socket
import subprocess
import sys
import threading
import uuid
from pathlib import Path
from urllib.parse import urlparse

import pytest
from django.conf import settings

from agents.sandbox import SandboxConfig, bwrap_executable, bwrap_problem, run_uid
from reviewdesk.accounts.demo import demo_password
from reviewdesk.approvals import signing
from reviewdesk.approvals.deciding.record import approval_decide
from reviewdesk.runs.execution import run_execute
from reviewdesk.runs.models import SideEffect

pytestmark = pytest.mark.django_db

AS_ROOT = os.geteuid() == 0
# Asked of bubblewrap directly: with mode "bwrap" forced, the sandbox must then use it.
_BWRAP = bwrap_executable(SandboxConfig())
BWRAP_PROBLEM = bwrap_problem(_BWRAP, run_uid("probe") if AS_ROOT else None) if _BWRAP else "not installed"
BWRAP_HERE = BWRAP_PROBLEM is None


@pytest.fixture(
    params=[
        pytest.param(
            "bwrap",
            marks=pytest.mark.skipif(not BWRAP_HERE, reason=f"bubblewrap cannot run here: {BWRAP_PROBLEM}"),
        ),
        pytest.param(
            "basic",
            marks=pytest.mark.skipif(
                not AS_ROOT, reason="the basic fallback isolates files only on a root host"
            ),
        ),
    ]
)
def mode(request, settings):
    settings.DESK_SANDBOX = request.param
    return request.param


@pytest.fixture
def approved_command(interrupted_run, personas):
    """Run `command` as an approved execute call; return the run and what the tool returned."""

    def run(command: str):
        script = [
            {"tool_calls": [{"name": "execute", "arguments": {"command": command}}]},
            {"content": "Done."},
        ]
        run, approval = interrupted_run(script)
        for reviewer in (personas.alice, personas.bob):  # the demo's execute needs two reviewers
            approval_decide(
                approval_id=approval.id,
                reviewer=reviewer,
                verdict="approve",
                checkpoint_id=str(approval.checkpoint_id),
            )
        run_execute(run_id=run.id, worker="in-process")
        effect = SideEffect.objects.get(run=run, tool="execute")
        assert effect.status == "confirmed"
        return run, effect.result

    return run


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def secret_files() -> dict[str, Path]:
    signing.ensure_keys()
    demo_password()
    files = {
        "signing key": Path(settings.DESK_SIGNING_KEY_FILE),
        "keyring": Path(settings.DESK_VERIFY_KEYS_FILE),
        "django secret": Path(settings.VAR_DIR) / "secret_key",
        "demo password": Path(settings.VAR_DIR) / "demo_password",
    }
    if settings.DATABASES["default"]["ENGINE"].endswith("sqlite3"):
        files["database"] = Path(settings.DATABASES["default"]["NAME"])
    return files


@pytest.mark.parametrize("secret", ["signing key", "keyring", "django secret", "demo password", "database"])
def test_an_approved_command_cannot_read_the_desks_files(approved_command, mode, secret):
    path = secret_files().get(secret)
    if path is None:
        pytest.skip("the database is a server here (DATABASE_URL), not a file")
    before = path.read_bytes()

    _, result = approved_command(f"cat {path} | head -c 4096 | base64")

    assert result["stdout"].strip() == ""
    assert before[:64] not in (result["stdout"] + result["stderr"]).encode()
    assert path.read_bytes()[:4096] == before[:4096]


@pytest.mark.parametrize(
    "variable",
    ["DATABASE_URL", "DJANGO_SECRET_KEY", "DESK_DEMO_PASSWORD", "REDIS_URL", "OPENAI_API_KEY"],
)
def test_an_approved_command_cannot_read_the_workers_credentials_from_its_environment(
    approved_command, mode, monkeypatch, variable
):
    value = f"credential-{uuid.uuid4().hex}"
    monkeypatch.setenv(variable, value)

    _, result = approved_command(f'echo "[${variable}]"; env; cat /proc/$PPID/environ /proc/1/environ')

    assert result["stdout"].startswith("[]\n")
    assert value not in result["stdout"] + result["stderr"]
    assert os.environ[variable] == value


def test_an_approved_command_cannot_write_the_keyring(approved_command, mode):
    keyring = secret_files()["keyring"]
    before = digest(keyring)

    _, result = approved_command(
        f"""echo '{{"ed25519:attacker": "AAAA"}}' > {keyring}; echo exit=$?; """
        f"cp /dev/null {keyring}.tmp && mv {keyring}.tmp {keyring}; echo exit=$?"
    )

    assert "exit=0" not in result["stdout"]
    assert digest(keyring) == before


def test_an_approved_command_cannot_read_or_list_another_runs_directory(approved_command, mode):
    first, _ = approved_command("echo 'the other run' > private.txt")
    theirs = Path(settings.DESK_RUNS_DIR) / str(first.id)
    assert (theirs / "private.txt").read_text() == "the other run\n"
    # The files the first run's call left are kept in its directory; its scratch is gone.
    assert not (theirs.parent / f"{first.id}.scratch").exists()

    _, result = approved_command(
        f"cat {theirs}/private.txt; ls {settings.DESK_RUNS_DIR}; echo > {theirs}/planted"
    )

    assert "the other run" not in result["stdout"]
    assert str(first.id) not in result["stdout"]
    assert sorted(p.name for p in theirs.iterdir()) == ["private.txt"]


PING_UNIX = (
    "python3 -c 'import socket,sys; s=socket.socket(socket.AF_UNIX); s.settimeout(2); s.connect(sys.argv[1]);"
    ' s.sendall(b"PING\\r\\n"); print(s.recv(64))\' {path}'
)
PING_TCP = (
    "python3 -c 'import socket,sys; s=socket.create_connection((sys.argv[1], int(sys.argv[2])), 2);"
    ' s.sendall(b"PING\\r\\n"); print(s.recv(64))\' {host} {port}'
)


def test_an_approved_command_cannot_reach_the_redis_socket(approved_command, mode, redis_client):
    if settings.EMBEDDED_REDIS_SOCKET is not None:
        command = PING_UNIX.format(path=settings.EMBEDDED_REDIS_SOCKET)
    elif mode == "basic":
        pytest.skip("Redis listens on TCP here, and the basic fallback has no network namespace")
    else:
        url = urlparse(settings.REDIS_URL)
        command = PING_TCP.format(host=url.hostname, port=url.port or 6379)
    assert redis_client.ping()  # it is up, and the desk reaches it

    _, result = approved_command(command)

    assert "PONG" not in result["stdout"]
    assert result["exit_code"] != 0


def test_an_approved_command_leaves_no_process_behind(approved_command, mode):
    marker = f"302.{uuid.uuid4().int % 10**9}"

    _, result = approved_command(
        f"sleep {marker} >/dev/null 2>&1 & setsid sleep {marker} >/dev/null 2>&1 & echo $!"
    )

    assert result["exit_code"] == 0 and result["stdout"].strip().isdigit()
    alive = []
    for entry in filter(str.isdigit, os.listdir("/proc")):
        try:
            if marker.encode() in Path(f"/proc/{entry}/cmdline").read_bytes():
                alive.append(entry)
        except OSError:
            continue
    assert alive == []


def test_an_approved_command_with_a_bidi_override_is_refused_and_never_runs(approved_command):
    # A right-to-left override makes the page show the tail of the command reversed: what the
    # reviewer read is not what sh would run. The tool refuses it before any process starts.
    run, result = approved_command("touch pwned #\u202e;sl")

    assert result == {"error": "command refused: it contains control or format characters (U+202E)"}
    assert not (Path(settings.DESK_RUNS_DIR) / str(run.id) / "pwned").exists()


# 40 files of 1 MB, each under the 2 MB file cap, 40 MB together: over the 8 MB scratch cap.
MANY_FILES_UNDER_THE_FILE_CAP = (
    "for i in $(seq 40); do head -c 1000000 /dev/zero > f$i || exit; done; echo wrote all"
)


def disk_used(path: Path) -> int:
    return sum(p.lstat().st_blocks * 512 for p in path.rglob("*")) if path.exists() else 0


def test_an_approved_command_writing_many_files_under_the_file_cap_is_stopped_at_the_total_cap(
    approved_command, mode, settings, api_as, personas
):
    settings.DESK_SANDBOX_FILE_MB, settings.DESK_SANDBOX_SCRATCH_MB = 2, 8
    runs_dir = Path(settings.DESK_RUNS_DIR)

    run, result = approved_command(MANY_FILES_UNDER_THE_FILE_CAP)

    assert result == {
        "error": "command killed: its files passed the scratch space's 8 MiB limit; nothing it wrote was kept"
    }
    # Nothing left behind: no scratch directory, and none of its files kept for the run.
    assert disk_used(runs_dir / str(run.id)) == 0
    assert not any(p.name.endswith(".scratch") for p in runs_dir.iterdir())
    # The run's record of the call says it failed, in the API as on the run page.
    [effect] = api_as(personas.carol).get(f"/api/v1/runs/{run.id}").json()["side_effects"]
    assert (effect["status"], effect["outcome"]) == ("confirmed", "failed")


def test_an_approved_command_that_exits_1_is_a_failed_call_whose_output_the_agent_still_reads(
    approved_command, mode, api_as, personas, client
):
    run, result = approved_command("echo some output; echo the reason >&2; exit 1")

    assert (result["exit_code"], result["outcome"]) == (1, "failed")
    assert (result["stdout"], result["stderr"]) == ("some output\n", "the reason\n")
    shown = api_as(personas.carol).get(f"/api/v1/runs/{run.id}").json()
    [effect] = shown["side_effects"]
    assert (effect["status"], effect["outcome"]) == ("confirmed", "failed")
    # The agent went on: the model read the result, and the run ended as the model said.
    assert shown["status"] == "succeeded" and shown["output"] == "Done."
    assert any(
        '"exit_code": 1' in str(m.get("content")) for m in shown["messages"] if m.get("role") == "tool"
    )
    client.force_login(personas.carol)
    page = client.get(f"/runs/{run.id}/").content.decode()
    assert '<span class="outcome failed">failed</span>' in page
    assert "Effect execute confirmed (failed)" in page


def test_an_approved_command_that_exits_0_is_a_succeeded_call(approved_command, mode, api_as, personas):
    run, result = approved_command("echo fine")

    assert (result["exit_code"], result["outcome"]) == (0, "succeeded")
    [effect] = api_as(personas.carol).get(f"/api/v1/runs/{run.id}").json()["side_effects"]
    assert effect["outcome"] == "succeeded"


# --- With DEBUG off, bwrap or nothing, unless an operator names basic (issue 34, attack 6) ---
# The attack: where bubblewrap could not run, `auto` fell back to `basic` without a word, and
# the command reached a desk service over loopback.


@pytest.fixture
def loopback_service():
    """A TCP service on 127.0.0.1 (a desk, a Redis), counting who connects."""
    server = socket.create_server(("127.0.0.1", 0))
    accepted: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        server.settimeout(0.1)
        while not stop.is_set():
            with contextlib.suppress(OSError):
                accepted.append(server.accept()[0])

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield server.getsockname()[1], accepted
    stop.set()
    thread.join()
    server.close()
    for conn in accepted:
        conn.close()


CONNECT = (
    'python3 -c \'import socket,sys; socket.create_connection(("127.0.0.1", int(sys.argv[1])), 2);'
    ' print("connected")\' {port}'
)


@pytest.mark.skipif("DESK_SANDBOX" in os.environ, reason="the suite was given DESK_SANDBOX: not the default")
def test_with_debug_off_and_no_bubblewrap_the_default_refuses_commands_instead_of_falling_back(
    approved_command, settings, loopback_service, caplog
):
    assert not settings.DEBUG
    settings.DESK_SANDBOX_BWRAP = "/nonexistent/bwrap"  # bubblewrap cannot run here
    port, accepted = loopback_service

    run, result = approved_command(CONNECT.format(port=port) + "; touch ran")

    assert result == {"error": "the sandbox cannot run commands on this worker (its log says why)"}
    assert "DESK_SANDBOX=basic" in caplog.text  # the worker's log names the setting that allows it
    assert not (Path(settings.DESK_RUNS_DIR) / str(run.id) / "ran").exists()
    # No process ran, so none connected: the listener's thread is joined before this is read.
    assert accepted == []


def test_basic_named_by_the_operator_runs_the_command_without_bubblewrap(approved_command, settings):
    settings.DESK_SANDBOX, settings.DESK_SANDBOX_BWRAP = "basic", "/nonexistent/bwrap"

    _, result = approved_command("echo ran")

    assert (result["exit_code"], result["stdout"]) == (0, "ran\n")


@pytest.mark.parametrize("production", [True, False], ids=["production", "embedded default"])
def test_the_system_check_says_commands_will_be_refused_and_names_the_setting(settings, production):
    from reviewdesk.runs.checks import sandbox_runs_here

    settings.DESK_SANDBOX, settings.DESK_SANDBOX_BWRAP = "bwrap", "/nonexistent/bwrap"
    settings.DESK_PRODUCTION = production

    [message] = sandbox_runs_here()

    assert message.id == ("runs.E001" if production else "runs.W001")
    assert "DESK_SANDBOX=basic" in message.msg and "/nonexistent/bwrap" in message.msg
    settings.DESK_SANDBOX = "basic"
    assert sandbox_runs_here() == []


@pytest.mark.parametrize(
    ("environment", "mode"),
    [({}, "bwrap"), ({"DJANGO_DEBUG": "1"}, "auto"), ({"DESK_SANDBOX": "basic"}, "basic")],
    ids=["debug off", "debug on", "basic named"],
)
def test_the_sandbox_setting_defaults_to_bwrap_with_debug_off(environment, mode):
    env = {k: v for k, v in os.environ.items() if k not in ("DESK_SANDBOX", "DJANGO_DEBUG")}
    env.update(environment, DJANGO_SETTINGS_MODULE="reviewdesk.settings")

    printed = subprocess.run(
        [sys.executable, "-c", "from django.conf import settings; print(settings.DESK_SANDBOX)"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout

    assert printed.strip() == mode
