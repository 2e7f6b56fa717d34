"""The demo agent's tools take everything they need from their context, and nothing from Django."""

from __future__ import annotations

import logging
import shutil
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import pytest

from agents.registry import get_agent
from agents.sandbox import shared_tmp_dir
from agents.testing.world import RecordingWorld
from agents.tools import DEFAULT_TIMEOUT_SECONDS, ToolContext, ToolError

EXECUTE = get_agent("demo").tool("execute")
SEND_EMAIL = get_agent("demo").tool("send_email")
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def tmp_path():
    """A runs' directory the run's uid can walk to (pytest's own is 0700 when the suite runs as root)."""
    root = Path(tempfile.mkdtemp(prefix="demo-tools-", dir=shared_tmp_dir()))
    root.chmod(0o711)
    yield root
    shutil.rmtree(root, ignore_errors=True)


def context(workdir: Path, **options) -> ToolContext:
    return ToolContext(
        run_id="run-1", tool_call_id="call_0_0", idempotency_key="run-1:call_0_0", workdir=workdir, **options
    )


def test_execute_runs_the_command_in_the_runs_working_directory(tmp_path):
    result = EXECUTE.run({"command": "echo hi > note.txt && cat note.txt"}, context(tmp_path / "run"))

    assert result == {
        "exit_code": 0,
        "outcome": "succeeded",
        "stdout": "hi\n",
        "stderr": "",
        "files": [{"path": "note.txt", "bytes": 3, "text": "hi\n"}],
    }
    assert (tmp_path / "run" / "note.txt").read_text() == "hi\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]  # its scratch is gone


def test_a_command_that_exits_non_zero_says_it_failed_and_still_gives_the_model_its_output(tmp_path):
    result = EXECUTE.run({"command": "echo partial; echo why >&2; exit 3"}, context(tmp_path / "run"))

    assert (result["exit_code"], result["outcome"]) == (3, "failed")
    assert (result["stdout"], result["stderr"]) == ("partial\n", "why\n")


def test_execute_gives_up_after_the_timeout_its_context_carries(tmp_path):
    with pytest.raises(ToolError, match=r"timed out after 0.3s"):
        EXECUTE.run({"command": "sleep 5"}, context(tmp_path, timeout_seconds=0.3))


def test_a_context_without_a_timeout_gets_the_desks_default():
    assert context(Path("/nonexistent")).timeout_seconds == DEFAULT_TIMEOUT_SECONDS == 30


def test_the_runtime_imports_no_django_even_when_its_tools_run(tmp_path):
    # A fresh interpreter: this one has Django loaded by pytest-django already.
    script = textwrap.dedent(
        f"""
        import pkgutil, sys
        from pathlib import Path
        import agents
        for module in pkgutil.walk_packages(agents.__path__, "agents."):
            __import__(module.name)
        from agents.registry import get_agent
        from agents.tools import ToolContext
        ctx = ToolContext(run_id="r", tool_call_id="c", idempotency_key="r:c", workdir=Path({str(tmp_path)!r}))
        assert get_agent("demo").tool("execute").run({{"command": "true"}}, ctx)["exit_code"] == 0
        loaded = sorted(m for m in sys.modules if m.split(".")[0] in ("django", "reviewdesk"))
        print("loaded:", loaded)
        """
    )
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO)}

    completed = subprocess.run(
        [sys.executable, "-c", script], cwd=REPO, env=env, capture_output=True, text=True, timeout=60
    )

    assert completed.returncode == 0, completed.stderr
    assert completed.stdout.strip() == "loaded: []"


NOT_BARE = [
    "evil@evil.org (x@example.com",  # a comment: SMTP delivers to evil.org, endswith sees example.com
    "Eve <evil@evil.org>, x@example.com",
    "evil@evil.org,x@example.com",
    '"evil@evil.org"@example.com',
    "evil@evil.org\n",
    "no-at-sign.example.com",
]


@pytest.mark.parametrize("to", NOT_BARE)
def test_send_email_takes_a_bare_address_only_in_its_schema(to):
    if not to.endswith("\n"):  # a JSON Schema `$` also matches before a final newline: the tool refuses it
        assert SEND_EMAIL.validation_errors({"to": to, "subject": "s", "body": "b"})
    assert SEND_EMAIL.validation_errors({"to": "o'brien@example.com", "subject": "s", "body": "b"}) == []


@pytest.mark.parametrize("to", NOT_BARE)
def test_send_email_refuses_anything_but_a_bare_address_before_sending(to):
    world = RecordingWorld()
    with pytest.raises(ToolError, match="bare email address"):
        SEND_EMAIL.func(
            {"to": to, "subject": "s", "body": "b"}, context(Path(tempfile.gettempdir()), world=world)
        )
    assert world.emails == []


@pytest.mark.parametrize(
    "char",
    ["\u2060", "\u00ad", "\u0085", "\u2028", "\u2029", "\U000e0041", "\u202e", "\x1b"],
    ids=[
        "word joiner",
        "soft hyphen",
        "C1 NEL",
        "line separator",
        "paragraph separator",
        "tag",
        "bidi",
        "ESC",
    ],
)
def test_execute_refuses_every_character_the_desk_flags_as_invisible(tmp_path, char):
    """The tool's rule is the desk's "invisible" rule: what the page escapes, the tool refuses."""
    with pytest.raises(ToolError, match=f"U\\+{ord(char):04X}"):
        EXECUTE.run({"command": f"touch pwned{char}x"}, context(tmp_path))
    assert not any(tmp_path.iterdir())


def test_the_execute_preview_shows_the_sandbox_and_limits_it_will_run_under(tmp_path):
    from agents.sandbox import SandboxConfig, SandboxMode

    sandbox = SandboxConfig(
        mode=SandboxMode.BASIC, cpu_seconds=7, memory_bytes=256 << 20, max_processes=9, scratch_bytes=32 << 20
    )
    shown = dict(EXECUTE.preview({"command": "ls"}, context(tmp_path, sandbox=sandbox))["rows"])
    assert shown["Sandbox"].startswith("a user id of its own")
    assert shown["Sandbox limits"].startswith(
        "CPU 7 s, memory 256 MiB, files 64 MiB each, 32 MiB in all, 9 processes"
    )


def test_a_command_that_cannot_start_is_a_start_failure_not_an_unknown_effect(tmp_path):
    """Basic mode execs the command directly: a missing program fails in Popen, before anything
    ran, and the sandbox says so with its own exception."""
    from agents.sandbox import SandboxConfig, SandboxMode, SandboxStartFailed, run_sandboxed

    with pytest.raises(SandboxStartFailed, match="could not be started"):
        run_sandboxed(
            ["/nonexistent/program"],
            run_id="run-1",
            workdir=tmp_path / "run",
            timeout=5,
            config=SandboxConfig(mode=SandboxMode.BASIC),
        )


def test_a_scratch_directory_that_cannot_be_made_is_a_start_failure_and_keeps_its_path_to_the_log(
    tmp_path, caplog
):
    """The runs' directory is below a file: mkdir fails before any process, so the call is a
    start failure the runtime may retry (nothing ran), not an effect a reviewer must settle;
    the path is in the worker's log, not in what the model reads."""
    caplog.set_level(logging.WARNING, logger="agents")  # not the level an earlier test left on root
    from agents.tools import ToolUnavailable

    (tmp_path / "a-file").write_text("")
    with pytest.raises(ToolUnavailable, match="could not be started") as raised:
        EXECUTE.run({"command": "true"}, context(tmp_path / "a-file" / "runs" / "run-1"))
    assert str(tmp_path) not in str(raised.value)
    assert (
        "scratch directory could not be prepared" in caplog.text and str(tmp_path / "a-file") in caplog.text
    )


def _execute_failing_with(failure: Exception, tmp_path, monkeypatch):
    """`execute` with run_sandboxed replaced by one raising `failure`: what the call raises."""
    from agents import demo

    def failing(*args, **kwargs):
        raise failure

    monkeypatch.setattr(demo, "run_sandboxed", failing)
    with pytest.raises(Exception) as raised:
        EXECUTE.run({"command": "true"}, context(tmp_path))
    return raised.value


def test_execute_reports_a_start_failure_as_transient_and_its_reason_only_to_the_log(
    tmp_path, monkeypatch, caplog
):
    """In-process, with run_sandboxed replaced: only the mapping is checked here (the failure
    itself is the test above). The model and the submitter read a tool error: the worker's
    paths stay in its log."""
    caplog.set_level(logging.WARNING, logger="agents")  # not the level an earlier test left on root
    from agents.sandbox import SandboxStartFailed
    from agents.tools import ToolUnavailable

    failure = SandboxStartFailed(
        "the command could not be started: [Errno 2] No such file: '/srv/desk/bin/sh'"
    )
    raised = _execute_failing_with(failure, tmp_path, monkeypatch)
    assert isinstance(raised, ToolUnavailable) and "could not be started" in str(raised)
    assert "/srv/desk" not in str(raised)
    assert "/srv/desk/bin/sh" in caplog.text


def test_execute_reports_a_sandbox_it_cannot_use_without_the_workers_paths(tmp_path, monkeypatch, caplog):
    """In-process, as above: DESK_SANDBOX=bwrap on a worker whose bubblewrap cannot run (or
    whose runs' directory is unusable) fails the call; why is the operator's to read."""
    caplog.set_level(logging.WARNING, logger="agents")  # not the level an earlier test left on root
    from agents.sandbox import SandboxUnavailable
    from agents.tools import ToolError

    failure = SandboxUnavailable(
        "the runs' directory /srv/desk/var/runs is below /srv/desk, which other users ..."
    )
    raised = _execute_failing_with(failure, tmp_path, monkeypatch)
    assert isinstance(raised, ToolError) and "sandbox cannot run commands on this worker" in str(raised)
    assert "/srv/desk" not in str(raised)
    assert "/srv/desk/var/runs" in caplog.text
