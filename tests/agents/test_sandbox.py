"""The sandbox a tool's processes run in, in both of its modes.

`bwrap` needs namespaces from the machine: where bubblewrap cannot start here,
those cases skip and say so; `basic` (the fallback) always runs. The suite runs
as root on CI and on the developers' machines, so `basic` is tested with its
per-run uid; as a non-root user it cannot change uid (see agents/sandbox.py).
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import socket
import tempfile
import threading
import uuid
from pathlib import Path

import pytest

from agents import sandbox
from agents.sandbox import SandboxConfig, SandboxMode, SandboxUnavailable, run_sandboxed, shared_tmp_dir

AS_ROOT = os.geteuid() == 0
# Asked of bubblewrap directly, not through chosen_mode: the tests below check chosen_mode.
_BWRAP = sandbox.bwrap_executable(SandboxConfig())
BWRAP_PROBLEM = (
    sandbox.bwrap_problem(_BWRAP, sandbox.run_uid("probe") if AS_ROOT else None)
    if _BWRAP
    else "not installed"
)
BWRAP_HERE = BWRAP_PROBLEM is None
needs_root = pytest.mark.skipif(
    not AS_ROOT, reason="the basic mode isolates files only when the host is root"
)

MODES = [
    pytest.param(
        SandboxMode.BWRAP,
        marks=pytest.mark.skipif(not BWRAP_HERE, reason=f"bubblewrap cannot run here: {BWRAP_PROBLEM}"),
        id="bwrap",
    ),
    pytest.param(SandboxMode.BASIC, id="basic"),
]


@pytest.fixture
def runs_root():
    """A runs' directory like the desk's default: under the temp dir, 0711, outside any var/."""
    root = Path(tempfile.mkdtemp(prefix="sandbox-test-", dir=shared_tmp_dir()))
    root.chmod(0o711)
    yield root
    shutil.rmtree(root, ignore_errors=True)


def sh(command: str, *, root: Path, mode: SandboxMode, run_id: str = "", timeout: float = 20, **limits):
    run_id = run_id or str(uuid.uuid4())
    return run_sandboxed(
        ["sh", "-c", command],
        run_id=run_id,
        workdir=root / run_id,
        timeout=timeout,
        config=SandboxConfig(mode=mode, **limits),
    )


def processes_with(marker: str) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                cmdline = Path(f"/proc/{entry}/cmdline").read_bytes()
            except OSError:
                continue
            if marker.encode() in cmdline:
                found.append(int(entry))
    return found


@pytest.mark.parametrize("mode", MODES)
def test_the_command_sees_only_path_lang_and_home(runs_root, mode, monkeypatch):
    monkeypatch.setenv("DATABASE_URL", "postgres://desk:hunter2@db/desk")
    monkeypatch.setenv("DJANGO_SECRET_KEY", "s3cret-django")

    result = sh("env", root=runs_root, mode=mode)

    names = {line.split("=", 1)[0] for line in result.stdout.splitlines()}
    assert names <= {"PATH", "LANG", "HOME", "PWD", "SHLVL", "_"}, result.stdout
    assert "hunter2" not in result.stdout and "s3cret" not in result.stdout
    assert result.mode == mode


@pytest.mark.parametrize("mode", MODES)
def test_the_command_works_in_its_runs_scratch_directory_which_is_its_home(runs_root, mode):
    run_id = str(uuid.uuid4())

    result = sh(
        'echo hi > note.txt && test "$HOME" = "$(pwd)" && cat note.txt',
        root=runs_root,
        mode=mode,
        run_id=run_id,
    )

    assert (result.exit_code, result.stdout) == (0, "hi\n"), result.stderr
    assert (runs_root / run_id / "note.txt").read_text() == "hi\n"
    assert (runs_root / run_id).stat().st_mode & 0o777 == 0o700


@pytest.mark.parametrize("mode", MODES)
def test_the_command_inherits_no_file_descriptor(runs_root, mode):
    read_end, write_end = os.pipe()
    os.set_inheritable(write_end, True)
    try:
        result = sh("ls /proc/self/fd", root=runs_root, mode=mode)
    finally:
        os.close(read_end)
        os.close(write_end)

    # 0-2, and the one `ls` opens on the directory it lists.
    assert sorted(int(fd) for fd in result.stdout.split()) == [0, 1, 2, 3], result.stdout


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("escape", ["", "setsid "], ids=["background", "own session"])
def test_nothing_the_command_started_outlives_the_call(runs_root, mode, escape):
    if mode == SandboxMode.BASIC and escape and not AS_ROOT:
        pytest.skip("as non-root the basic mode kills the process group only; setsid leaves it")
    marker = f"300.{uuid.uuid4().int % 10**9}"

    result = sh(f"{escape}sleep {marker} > /dev/null 2>&1 & echo started", root=runs_root, mode=mode)

    assert result.stdout == "started\n"
    assert processes_with(marker) == []


@pytest.mark.parametrize("mode", MODES)
def test_a_command_past_its_timeout_is_killed_with_everything_it_started(runs_root, mode):
    marker = f"301.{uuid.uuid4().int % 10**9}"

    result = sh(f"sleep {marker} & sleep 30", root=runs_root, mode=mode, timeout=0.5)

    assert result.timed_out
    assert processes_with(marker) == []


@pytest.mark.parametrize("mode", MODES)
def test_resource_limits_hold(runs_root, mode):
    limits = {"cpu_seconds": 7, "memory_bytes": 512 << 20, "file_size_bytes": 1 << 20, "max_processes": 33}

    result = sh(
        "cat /proc/self/limits; head -c 2000000 /dev/zero > big; echo wrote=$?",
        root=runs_root,
        mode=mode,
        **limits,
    )

    soft = {
        line[:26].strip(): line[26:].split()[0]
        for line in result.stdout.splitlines()[1:]
        if line[:3] == "Max"
    }
    assert soft["Max cpu time"] == "7"
    assert soft["Max address space"] == str(512 << 20)
    assert soft["Max file size"] == str(1 << 20)
    assert soft["Max processes"] == "33"
    assert "wrote=0" not in result.stdout
    assert os.path.getsize(next(runs_root.iterdir()) / "big") <= 1 << 20


@needs_root
@pytest.mark.parametrize("mode", MODES)
def test_as_root_the_command_runs_as_its_runs_own_unprivileged_uid(runs_root, mode):
    run_id = str(uuid.uuid4())

    result = sh("id -u; id -g; id -G", root=runs_root, mode=mode, run_id=run_id)

    uid = sandbox.run_uid(run_id)
    assert result.stdout.split() == [str(uid)] * 3
    assert uid >= 1 << 30 and uid != sandbox.run_uid(str(uuid.uuid4()))


@pytest.mark.parametrize("mode", MODES)
def test_one_run_cannot_read_or_list_another_runs_directory(runs_root, mode):
    if mode == SandboxMode.BASIC and not AS_ROOT:
        pytest.skip("as non-root every run has the host's uid")
    first, second = str(uuid.uuid4()), str(uuid.uuid4())
    sh("echo private > mine.txt", root=runs_root, mode=mode, run_id=first)

    result = sh(f"cat {runs_root}/{first}/mine.txt; ls {runs_root}", root=runs_root, mode=mode, run_id=second)

    assert "private" not in result.stdout and first not in result.stdout
    assert result.exit_code != 0


@pytest.fixture
def loopback_listener():
    """A TCP service on 127.0.0.1, standing in for a Redis or a database server."""
    server = socket.create_server(("127.0.0.1", 0))
    accepted = []
    server.settimeout(5)

    def accept() -> None:
        with contextlib.suppress(OSError):  # closed by the fixture when nobody connected
            accepted.append(server.accept()[0])

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield server.getsockname()[1], accepted
    server.close()
    for conn in accepted:
        conn.close()


CONNECT = 'python3 -c \'import socket,sys; socket.create_connection(("127.0.0.1", int(sys.argv[1])), 2); print("connected")\' {port}'


@pytest.mark.skipif(not BWRAP_HERE, reason=f"bubblewrap cannot run here: {BWRAP_PROBLEM}")
def test_in_bwrap_the_command_has_no_network(runs_root, loopback_listener):
    port, accepted = loopback_listener

    result = sh(CONNECT.format(port=port), root=runs_root, mode=SandboxMode.BWRAP)

    assert result.exit_code != 0 and "connected" not in result.stdout
    assert accepted == []


def test_the_basic_fallback_cannot_block_the_network(runs_root, loopback_listener):
    """Said so in agents/sandbox.py: without a network namespace, loopback TCP is reachable."""
    port, _ = loopback_listener

    result = sh(CONNECT.format(port=port), root=runs_root, mode=SandboxMode.BASIC)

    assert result.stdout == "connected\n", result.stderr


@pytest.mark.skipif(not BWRAP_HERE, reason=f"bubblewrap cannot run here: {BWRAP_PROBLEM}")
def test_in_bwrap_the_hosts_files_do_not_exist(runs_root):
    result = sh(f"ls /; ls {Path.cwd()}; cat /etc/shadow", root=runs_root, mode=SandboxMode.BWRAP)

    assert set(result.stdout.split()) <= {
        "bin",
        "dev",
        "etc",
        "lib",
        "lib32",
        "lib64",
        "libx32",
        "proc",
        "sbin",
        "scratch",
        "tmp",
        "usr",
    }
    assert result.exit_code != 0


@pytest.mark.skipif(not BWRAP_HERE, reason=f"bubblewrap cannot run here: {BWRAP_PROBLEM}")
def test_auto_uses_bwrap_where_the_machine_allows_it(runs_root):
    result = sh("echo ran", root=runs_root, mode=SandboxMode.AUTO)

    assert (result.mode, result.stdout) == (SandboxMode.BWRAP, "ran\n")


def test_auto_falls_back_to_basic_when_bwrap_cannot_start_and_logs_it_once(runs_root, monkeypatch, caplog):
    caplog.set_level(logging.WARNING, logger="agents")  # not the level an earlier test left on root
    monkeypatch.setattr(sandbox, "_FALLBACKS_WARNED", set())
    config = SandboxConfig(mode=SandboxMode.AUTO, bwrap="/bin/false")

    for _ in range(2):
        result = run_sandboxed(
            ["sh", "-c", "echo ran"], run_id="r1", workdir=runs_root / "r1", timeout=10, config=config
        )

    assert (result.mode, result.stdout) == (SandboxMode.BASIC, "ran\n")
    [warning] = [r.getMessage() for r in caplog.records if r.name == "agents.sandbox"]
    assert "/bin/false exited 1" in warning and "basic mode" in warning


def test_forced_bwrap_refuses_to_run_without_it(runs_root):
    config = SandboxConfig(mode=SandboxMode.BWRAP, bwrap="/nonexistent/bwrap")

    with pytest.raises(SandboxUnavailable, match="bubblewrap cannot run here"):
        run_sandboxed(
            ["sh", "-c", "touch ran"], run_id="r1", workdir=runs_root / "r1", timeout=10, config=config
        )
    assert not (runs_root / "r1" / "ran").exists()


def test_forced_bwrap_that_fails_its_probe_says_what_bubblewrap_said(runs_root):
    """A bwrap that exits as bubblewrap does when a mounted path is out of the run uid's reach
    (a stand-in executable: the real one's failure depends on the machine), in a directory the
    run's uid can reach (pytest's tmp_path is 0700)."""
    with tempfile.TemporaryDirectory(dir=shared_tmp_dir()) as made:
        reachable = Path(made)
        reachable.chmod(0o755)
        fake = reachable / "bwrap"
        fake.write_text(
            '#!/bin/sh\necho "bwrap: Can\'t find source path /x/.venv: Permission denied" >&2\nexit 1\n'
        )
        fake.chmod(0o755)
        config = SandboxConfig(mode=SandboxMode.BWRAP, bwrap=str(fake))

        with pytest.raises(SandboxUnavailable, match=r"exited 1: bwrap: Can't find source path /x/\.venv"):
            run_sandboxed(["true"], run_id="r1", workdir=runs_root / "r1", timeout=10, config=config)
        config = SandboxConfig(mode=SandboxMode.AUTO, bwrap=str(fake))
        assert sandbox.chosen_mode(config) == SandboxMode.BASIC


@needs_root
def test_a_runs_directory_the_runs_uid_cannot_reach_is_refused_with_a_reason(tmp_path):
    # pytest's tmp_path is below a 0700 directory.
    with pytest.raises(SandboxUnavailable, match="other users cannot enter"):
        run_sandboxed(
            ["true"], run_id="r1", workdir=tmp_path / "runs" / "r1", timeout=10, config=SandboxConfig()
        )


def test_the_shared_temporary_directory_is_one_a_runs_uid_can_walk_through(tmp_path):
    # Some machines give a session a private 0700 /tmp: the runs' default directory and the
    # bwrap probe must then live elsewhere, or every approved command fails.
    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    (private / "inner").mkdir(mode=0o755)

    assert not sandbox.world_traversable(str(private / "inner"))
    assert sandbox.world_traversable(shared_tmp_dir())


@pytest.mark.parametrize("shared", ["sticky, like /tmp", "another user's"])
def test_a_workdir_that_is_not_a_runs_own_is_refused_and_left_as_it_was(runs_root, shared):
    """The scratch directory is tightened to 0700 and handed to the run's uid: never a shared
    or foreign directory. (A test that passed /tmp as the workdir once did that to /tmp.)"""
    from agents.sandbox import SandboxUnavailable, prepare_scratch

    workdir = runs_root / "shared"
    workdir.mkdir()
    if shared.startswith("sticky"):
        workdir.chmod(0o1777)
    elif os.geteuid() == 0:
        os.chown(workdir, 4242, 4242)
    else:
        pytest.skip("only root can make a directory another user's")
    before = workdir.stat()
    with pytest.raises(SandboxUnavailable, match="not a run's scratch directory"):
        prepare_scratch(workdir, "run-1")
    after = workdir.stat()
    assert (after.st_mode, after.st_uid) == (before.st_mode, before.st_uid)


# --- The scratch space: a total cap, and nothing left behind (issue 34, attack 3) ----------
# The attack: files each under the per-file cap (RLIMIT_FSIZE), as many as it takes to fill the
# worker's disk; and the scratch of earlier calls still on disk afterwards.
# 200 files of 1 MB: a bounded stand-in for "until the disk is full", 25 times the cap of 8 MB.
FILL_THE_DISK = 'for i in $(seq 200); do head -c 1000000 /dev/zero > "f$i" || break; done; echo "wrote $i"'
CAPS = {"scratch_bytes": 8 << 20, "file_size_bytes": 2 << 20}


def left_in(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


@pytest.mark.parametrize("mode", MODES)
def test_a_command_filling_the_disk_with_files_under_the_file_cap_is_killed_at_the_total_cap(runs_root, mode):
    run_id = str(uuid.uuid4())
    sh("echo kept > earlier.txt", root=runs_root, mode=mode, run_id=run_id, **CAPS)

    result = sh(FILL_THE_DISK, root=runs_root, mode=mode, run_id=run_id, timeout=30, **CAPS)

    # Killed by the watcher while it writes (no "wrote" line), long before the time limit.
    assert result.scratch_exceeded and not result.timed_out, result
    assert "wrote" not in result.stdout
    # Nothing it wrote was kept; the run's directory is as the earlier call left it; no scratch.
    assert left_in(runs_root) == [run_id, f"{run_id}/earlier.txt"]


@pytest.mark.parametrize("mode", MODES)
def test_what_a_command_writes_after_the_watchers_last_look_counts_too(runs_root, mode, monkeypatch):
    monkeypatch.setattr(sandbox, "WATCH_SECONDS", 3600)  # the watcher never looks: only the end does
    run_id = str(uuid.uuid4())

    result = sh(
        "for i in $(seq 12); do head -c 1000000 /dev/zero > f$i; done; echo done",
        root=runs_root,
        mode=mode,
        run_id=run_id,
        **CAPS,
    )

    assert result.stdout == "done\n" and result.scratch_exceeded
    assert left_in(runs_root) == []


@pytest.mark.parametrize("mode", MODES)
def test_a_million_empty_files_count_against_the_cap(runs_root, mode):
    result = sh("mkdir d && cd d && seq 100000 | xargs touch; echo done", root=runs_root, mode=mode, **CAPS)

    assert result.scratch_exceeded, result
    assert left_in(runs_root) == []


@pytest.mark.skipif(not BWRAP_HERE, reason=f"bubblewrap cannot run here: {BWRAP_PROBLEM}")
def test_in_bwrap_tmp_is_held_to_the_scratch_size_by_the_kernel(runs_root):
    result = sh(
        "for i in $(seq 12); do head -c 1000000 /dev/zero > /tmp/f$i || exit 9; done",
        root=runs_root,
        mode=SandboxMode.BWRAP,
        **CAPS,
    )

    assert result.exit_code == 9 and "No space left" in result.stderr, result


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(
    "ending", ["exits 0", "exits 1", "times out", "is killed"], ids=["ok", "failed", "timeout", "killed"]
)
def test_the_calls_scratch_is_removed_however_the_call_ends_and_its_files_are_kept(runs_root, mode, ending):
    run_id = str(uuid.uuid4())
    command = {
        "exits 0": "echo out > out.txt",
        "exits 1": "echo out > out.txt; exit 1",
        "times out": "echo out > out.txt; sleep 30",
        "is killed": "echo out > out.txt; kill -9 $$",
    }[ending]

    result = sh(command, root=runs_root, mode=mode, run_id=run_id, timeout=1 if ending == "times out" else 20)

    assert result.timed_out == (ending == "times out")
    assert left_in(runs_root) == [run_id, f"{run_id}/out.txt"]
    assert (runs_root / run_id / "out.txt").read_text() == "out\n"
    assert (runs_root / run_id).stat().st_uid == os.geteuid()  # the worker's: the command never sees it


@pytest.mark.parametrize("mode", MODES)
def test_the_result_names_the_files_left_with_the_text_of_small_ones_within_limits(runs_root, mode):
    run_id = str(uuid.uuid4())

    result = sh(
        "mkdir -p a; echo small > a/note.txt; head -c 5000 /dev/zero > big; "
        "for i in $(seq 60); do : > n$i; done; ln -s /etc/passwd link; mkfifo fifo",
        root=runs_root,
        mode=mode,
        run_id=run_id,
    )

    by_path = {f.path: f for f in result.files}
    assert by_path["a/note.txt"] == sandbox.LeftFile(path="a/note.txt", bytes=6, text="small\n")
    assert by_path["big"] == sandbox.LeftFile(path="big", bytes=5000, text=None)
    assert len(result.files) == sandbox.LISTED_FILES and result.files_not_listed == 62 - sandbox.LISTED_FILES
    # Regular files and directories only, listed or copied back: a link is never followed.
    assert "link" not in by_path and "fifo" not in by_path
    kept = {p.name for p in (runs_root / run_id).iterdir()}
    assert {"a", "big", "n60"} <= kept and not {"link", "fifo"} & kept


@pytest.mark.parametrize("mode", MODES)
def test_the_next_call_of_the_run_finds_what_the_last_one_left(runs_root, mode):
    run_id = str(uuid.uuid4())
    sh("echo one >> log", root=runs_root, mode=mode, run_id=run_id)

    result = sh("echo two >> log; cat log", root=runs_root, mode=mode, run_id=run_id)

    assert result.stdout == "one\ntwo\n"


def test_a_scratch_left_by_a_dead_worker_is_salvaged_into_its_run_and_removed_by_the_next_call(runs_root):
    dead = runs_root / f"dead-run{sandbox.SCRATCH_SUFFIX}"
    dead.mkdir(mode=0o700)
    (dead / "evidence").write_text("it ran\n")

    sh("true", root=runs_root, mode=SandboxMode.BASIC)

    assert (runs_root / "dead-run" / "evidence").read_text() == "it ran\n"
    assert not dead.exists()


def test_a_live_calls_scratch_is_left_alone_by_another_calls_sweep(runs_root):
    live = runs_root / f"live-run{sandbox.SCRATCH_SUFFIX}"
    live.mkdir(mode=0o700)
    (live / "working").write_text("busy\n")

    with sandbox._scratch_held(live):  # as run_sandboxed holds it while its command runs
        sh("true", root=runs_root, mode=SandboxMode.BASIC)
        assert (live / "working").read_text() == "busy\n"
        assert not (runs_root / "live-run").exists()


def test_runs_directories_untouched_past_the_keep_time_are_removed(runs_root):
    old, recent = runs_root / "old-run", runs_root / "recent-run"
    for path in (old, recent):
        path.mkdir(mode=0o700)
        (path / "file").write_text("x")
    os.utime(old, (1, 1))

    sh("true", root=runs_root, mode=SandboxMode.BASIC, keep_seconds=3600)

    assert not old.exists() and (recent / "file").exists()


def test_a_shared_runs_directory_is_never_swept(runs_root):
    runs_root.chmod(0o1777)  # DESK_RUNS_DIR=/tmp, say: not every entry is a run's
    someone_elses = runs_root / "someone-elses"
    someone_elses.mkdir()
    os.utime(someone_elses, (1, 1))
    stale = runs_root / f"x{sandbox.SCRATCH_SUFFIX}"
    stale.mkdir(mode=0o700)

    sh("true", root=runs_root, mode=SandboxMode.BASIC, keep_seconds=60)

    assert someone_elses.exists() and stale.exists()


def test_a_second_call_of_a_run_whose_call_is_live_does_not_start_and_leaves_the_live_one_be(runs_root):
    """A stale worker's call still running (its lease expired): the new call is a start failure,
    retried later, never a salvage of the live call's scratch."""
    live = runs_root / f"run-1{sandbox.SCRATCH_SUFFIX}"
    live.mkdir(mode=0o700)
    (live / "working").write_text("busy\n")

    with (
        sandbox._scratch_held(live),
        pytest.raises(sandbox.SandboxStartFailed, match="could not be prepared"),
    ):
        sh("touch ran", root=runs_root, mode=SandboxMode.BASIC, run_id="run-1")

    assert left_in(runs_root) == [live.name, f"{live.name}/working"]
