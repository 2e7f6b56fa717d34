"""The effect counters of the crash and race tests see what they must (no processes started)."""

from __future__ import annotations

from collections import Counter

from django.core.mail import EmailMessage
from django.core.mail.backends.filebased import EmailBackend

from tests.e2e.counting import (
    Effects,
    World,
    duplicated,
    effects_per_run,
    message_ids,
    outbox_messages,
    plant_duplicates,
)

RUN_A = "11111111-1111-1111-1111-111111111111"
RUN_B = "22222222-2222-2222-2222-222222222222"


def send(backend: EmailBackend, run_id: str, call_id: str) -> None:
    """What the demo world sends: its Message-ID names the run and the tool call."""
    message = EmailMessage(
        subject="Your refund",
        body="It is on its way.\n" + "-" * 79 + " (a body line is not a separator)",
        to=["ada@example.com"],
        headers={"Message-ID": f"<{run_id}.{call_id}@desk.example>"},
    )
    assert backend.send_messages([message]) == 1


def test_messages_appended_to_one_outbox_file_are_counted_one_by_one(tmp_path):
    """Django's file backend keeps one file per backend object and second: two sends through
    it land in one file, which counting files took for one email."""
    backend = EmailBackend(file_path=str(tmp_path))
    send(backend, RUN_A, "call_1")
    send(backend, RUN_B, "call_1")
    send(backend, RUN_A, "call_1")

    assert len(list(tmp_path.iterdir())) == 1
    assert message_ids(outbox_messages(tmp_path)) == Counter(
        {f"<{RUN_A}.call_1@desk.example>": 2, f"<{RUN_B}.call_1@desk.example>": 1}
    )


def test_messages_across_files_are_counted_together(tmp_path):
    send(EmailBackend(file_path=str(tmp_path / "outbox")), RUN_A, "call_1")
    (tmp_path / "outbox" / "later.log").write_bytes(next((tmp_path / "outbox").iterdir()).read_bytes())
    assert message_ids(outbox_messages(tmp_path / "outbox")) == Counter({f"<{RUN_A}.call_1@desk.example>": 2})


def one_effect_each(tmp_path) -> World:
    outbox, runs = tmp_path / "outbox", tmp_path / "runs"
    backend = EmailBackend(file_path=str(outbox))
    for run_id in (RUN_A, RUN_B):
        send(backend, run_id, "call_1")
        (runs / run_id).mkdir(parents=True)
        (runs / run_id / "effects.log").write_text("4242\n")
    return World(outbox=outbox, refund_keys=(f"{RUN_A}:call_2", f"{RUN_B}:call_2"), runs_dir=runs)


def test_a_world_with_one_effect_of_each_kind_per_run_has_no_duplicates(tmp_path):
    counts = effects_per_run(one_effect_each(tmp_path), [RUN_A, RUN_B])
    assert counts == {RUN_A: Effects(1, 1, 1), RUN_B: Effects(1, 1, 1)}
    assert duplicated(counts) == {}


def test_planted_duplicates_of_each_kind_are_each_counted_for_their_run_only(tmp_path):
    world = one_effect_each(tmp_path)
    planted = plant_duplicates(world, RUN_A, tmp_path / "planted")

    counts = effects_per_run(planted, [RUN_A, RUN_B])

    assert duplicated(counts) == {RUN_A: Effects(2, 2, 2)}
    assert counts[RUN_B] == Effects(1, 1, 1)
    assert len(list(planted.outbox.iterdir())) == len(list(world.outbox.iterdir()))  # same file
    assert effects_per_run(world, [RUN_A]) == {RUN_A: Effects(1, 1, 1)}  # the world is untouched
