"""`manage.py mcp_tools`: the list, and `--accept SERVER` (audited as the command's)."""

from __future__ import annotations

import io

import pytest
from django.core.management import CommandError, call_command

from agents.mcp import PinState
from reviewdesk.audit.models import AuditEvent
from reviewdesk.mcp.models import ToolPin
from reviewdesk.mcp.pins import DjangoPinStore
from reviewdesk.mcp.services import BY_COMMAND
from tests.reviewdesk.mcp.pins import DELETE, READ, READ_CHANGED, SERVER

pytestmark = pytest.mark.django_db


def run(*args: str) -> str:
    out = io.StringIO()
    call_command("mcp_tools", *args, stdout=out)
    return out.getvalue()


def test_it_lists_each_servers_tools_with_their_state_and_short_digests():
    store = DjangoPinStore()
    store.reconcile(SERVER, [READ, DELETE])
    store.reconcile(SERVER, [READ_CHANGED])

    assert run().splitlines() == [
        f"{SERVER}\tdelete_file\tgone\t{DELETE.digest[:12]}",
        f"{SERVER}\tread_file\tchanged\t{READ.digest[:12]} -> {READ_CHANGED.digest[:12]}",
    ]


def test_accept_takes_what_the_server_serves_now_signed_and_audited_as_the_commands():
    store = DjangoPinStore()
    store.reconcile(SERVER, [READ, DELETE])
    store.reconcile(SERVER, [READ_CHANGED])

    out = run("--accept", SERVER, "--yes").splitlines()

    assert out[-2:] == [f"accepted {SERVER}/delete_file", f"accepted {SERVER}/read_file"]
    assert f"  - {READ.description}" in out and f"  + {READ_CHANGED.description}" in out

    pin = ToolPin.objects.get()
    assert (pin.tool, pin.digest, pin.accepted_by, pin.accepted_by_name) == (
        "read_file",
        READ_CHANGED.digest,
        None,
        BY_COMMAND,
    )
    assert store.reconcile(SERVER, [READ_CHANGED]) == {"read_file": PinState.PINNED}
    rows = AuditEvent.objects.filter(action="mcp_tool.accepted")
    assert sorted(rows.values_list("subject_id", "actor_name")) == [
        (f"{SERVER}/delete_file", "system"),
        (f"{SERVER}/read_file", "system"),
    ]
    assert run() == f"{SERVER}\tread_file\tpinned\t{READ_CHANGED.digest[:12]}\n"


def test_accept_of_a_server_never_seen_is_an_error():
    with pytest.raises(CommandError, match="no pinned tools on server 'nowhere'"):
        run("--accept", "nowhere")


def test_accept_without_yes_off_a_terminal_accepts_nothing_and_says_how():
    store = DjangoPinStore()
    store.reconcile(SERVER, [READ])
    store.reconcile(SERVER, [READ_CHANGED])

    with pytest.raises(CommandError, match="Confirm with --yes, or name each tool"):
        run("--accept", SERVER)

    assert ToolPin.objects.get().digest == READ.digest


def test_accept_of_named_tools_takes_only_those_whose_served_digest_was_named():
    store = DjangoPinStore()
    store.reconcile(SERVER, [READ, DELETE])
    store.reconcile(SERVER, [READ_CHANGED])

    with pytest.raises(CommandError, match="name at least 8 of its first characters"):
        run("--accept", SERVER, "--tool", f"read_file={READ.digest[:12]}")  # the old digest
    assert run("--accept", SERVER, "--tool", f"read_file={READ_CHANGED.digest[:8]}").splitlines()[-1] == (
        f"accepted {SERVER}/read_file"
    )

    assert ToolPin.objects.get(tool="read_file").digest == READ_CHANGED.digest
    assert ToolPin.objects.get(tool="delete_file").pending_state == "gone"  # not named: left as it was
