"""The runs list and the audit page: filters kept in the URL, pages of a fixed cost, the
audit's CSV export, and each decision's signature checked as it is shown."""

from __future__ import annotations

import csv
import io
import re

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from reviewdesk.approvals.deciding.record import approval_decide
from reviewdesk.approvals.models import Decision
from reviewdesk.audit.models import AuditEvent
from reviewdesk.desk.paging import COUNT_CAP, LIST_PAGE_SIZE, MAX_PAGE_OFFSET
from reviewdesk.runs.models import Run, RunStatus

pytestmark = pytest.mark.django_db


def logged_in(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def make_runs(user, count: int, **fields) -> list[Run]:
    defaults = {"agent": "demo", "input": "x", "model": {}, "approval_ttl_seconds": 60, "submitted_by": user}
    return Run.objects.bulk_create([Run(**{**defaults, **fields}) for _ in range(count)])


def run_ids(html: str) -> list[str]:
    return re.findall(r'href="/runs/([0-9a-f-]{36})/"', html)


# -- the runs list ---------------------------------------------------------------------------


def test_carol_filters_her_runs_by_status_and_agent_and_the_links_keep_the_filters(personas):
    failed = make_runs(personas.carol, 2, status=RunStatus.FAILED)
    make_runs(personas.carol, 3, status=RunStatus.SUCCEEDED)
    make_runs(personas.carol, 1, status=RunStatus.FAILED, agent="other")
    client = logged_in(personas.carol)

    page = client.get(reverse("runs"), {"status": "failed", "agent": "demo"}).content.decode()

    assert sorted(run_ids(page)) == sorted(str(r.id) for r in failed)
    assert '<option value="failed" selected>' in page
    assert "<option selected>demo</option>" in page
    assert "1\N{EN DASH}2 of 2" in page


def test_the_runs_list_pages_through_its_runs_keeping_the_filters_in_each_link(personas):
    runs = make_runs(personas.carol, LIST_PAGE_SIZE + 5, status=RunStatus.FAILED)
    make_runs(personas.carol, 3, status=RunStatus.SUCCEEDED)
    client = logged_in(personas.carol)

    first = client.get(reverse("runs"), {"status": "failed"}).content.decode()
    next_link = re.search(r'href="\?([^"]+)" rel="next"', first).group(1).replace("&amp;", "&")
    assert next_link == f"status=failed&offset={LIST_PAGE_SIZE}"
    second = client.get(reverse("runs") + "?" + next_link).content.decode()

    shown = run_ids(first) + run_ids(second)
    assert len(run_ids(first)) == LIST_PAGE_SIZE
    assert sorted(shown) == sorted(str(r.id) for r in runs)
    assert 'rel="next"' not in second and 'rel="prev"' in second


def test_past_the_count_cap_the_runs_list_says_so_and_still_pages_on(personas, monkeypatch):
    """The count stops COUNT_CAP rows past the page (`make bench` #9): "1-50 of 60+", a next link."""
    monkeypatch.setattr("reviewdesk.desk.paging.COUNT_CAP", 10)
    make_runs(personas.carol, LIST_PAGE_SIZE + 11)
    client = logged_in(personas.carol)

    first = client.get(reverse("runs")).content.decode()
    assert f"1\N{EN DASH}{LIST_PAGE_SIZE} of {LIST_PAGE_SIZE + 10}+" in first
    assert 'rel="next"' in first
    last = client.get(reverse("runs"), {"offset": LIST_PAGE_SIZE}).content.decode()
    assert f"{LIST_PAGE_SIZE + 1}\N{EN DASH}{LIST_PAGE_SIZE + 11} of {LIST_PAGE_SIZE + 11}<" in last
    assert 'rel="next"' not in last


def test_the_runs_list_costs_the_same_queries_with_five_runs_or_two_hundred(personas):
    client = logged_in(personas.admin)
    make_runs(personas.carol, 5)
    with CaptureQueriesContext(connection) as few:
        client.get(reverse("runs"))
    make_runs(personas.carol, 195)
    with CaptureQueriesContext(connection) as many:
        client.get(reverse("runs"))
    assert len(many) == len(few)


def test_olivia_sees_none_of_carols_runs_in_the_list(personas):
    make_runs(personas.carol, 3)
    page = logged_in(personas.olivia).get(reverse("runs")).content.decode()
    assert run_ids(page) == []
    assert "No runs yet." in page


@pytest.mark.parametrize("offset", ["-7x", str(2**63)])
def test_a_malformed_offset_shows_the_first_page(personas, offset):
    """Not a number, or past any list (a 64-bit OFFSET would overflow in the database)."""
    make_runs(personas.carol, 2)
    response = logged_in(personas.carol).get(reverse("runs"), {"offset": offset})
    assert response.status_code == 200 and len(run_ids(response.content.decode())) == 2


def furthest_read(queries) -> int:
    """The largest LIMIT or OFFSET in the statements: how far into a list any of them may walk."""
    return max(
        (int(n) for q in queries for n in re.findall(r"\b(?:LIMIT|OFFSET) (\d+)", q["sql"])), default=0
    )


def test_an_offset_far_past_the_end_shows_the_last_page_says_so_and_reads_no_further(personas):
    """The count and the slice were bounded by the offset asked (a LIMIT and an OFFSET of a
    billion), so one cheap request walked every run the user may see to draw an empty page.
    Now an offset past the end is the last real page, read as that page is, with a note."""
    runs = make_runs(personas.carol, LIST_PAGE_SIZE + 10)
    client = logged_in(personas.carol)
    with CaptureQueriesContext(connection) as ordinary:
        last = client.get(reverse("runs"), {"offset": LIST_PAGE_SIZE}).content.decode()
    with CaptureQueriesContext(connection) as huge:
        response = client.get(reverse("runs"), {"offset": 999_999_999})
    page = response.content.decode()
    assert response.status_code == 200
    assert run_ids(page) == run_ids(last) and len(run_ids(page)) == 10 and len(runs) == LIST_PAGE_SIZE + 10
    assert f"{LIST_PAGE_SIZE + 1}\N{EN DASH}{LIST_PAGE_SIZE + 10} of {LIST_PAGE_SIZE + 10}<" in page
    assert "Row 1,000,000,000 is past the end of this list: here is its last page." in page
    assert 'rel="prev"' in page and 'rel="next"' not in page
    assert len(huge) == len(ordinary)
    assert furthest_read(huge) <= MAX_PAGE_OFFSET + LIST_PAGE_SIZE + COUNT_CAP + 1


def test_the_lists_page_no_deeper_than_their_limit_and_say_how_to_reach_the_rest(personas, monkeypatch):
    """Past MAX_PAGE_OFFSET (here one page) there is no next link, and an offset asked beyond it
    is that deepest page; either way the page says to narrow the list with its filters."""
    monkeypatch.setattr("reviewdesk.desk.paging.MAX_PAGE_OFFSET", LIST_PAGE_SIZE)
    monkeypatch.setattr("reviewdesk.desk.paging.COUNT_CAP", 10)
    make_runs(personas.carol, 2 * LIST_PAGE_SIZE + 20)
    client = logged_in(personas.carol)
    note = f"This list pages no further than row {2 * LIST_PAGE_SIZE}: narrow it with the filters"
    clicked = client.get(reverse("runs"), {"offset": LIST_PAGE_SIZE}).content.decode()
    with CaptureQueriesContext(connection) as queries:
        asked = client.get(reverse("runs"), {"offset": 10**6}).content.decode()
    for page in (clicked, asked):
        assert f"{LIST_PAGE_SIZE + 1}\N{EN DASH}{2 * LIST_PAGE_SIZE} of {2 * LIST_PAGE_SIZE + 10}+" in page
        assert note in page and 'rel="next"' not in page and 'rel="prev"' in page
    assert run_ids(asked) == run_ids(clicked)
    assert furthest_read(queries) <= 2 * LIST_PAGE_SIZE + 10 + 1
    assert note not in client.get(reverse("runs")).content.decode()  # the first page pages on


@pytest.mark.parametrize("path", ["grants", "audit"])
def test_the_grants_and_audit_lists_answer_a_huge_offset_with_their_last_page(personas, path):
    client = logged_in(personas.admin)
    with CaptureQueriesContext(connection) as ordinary:
        client.get(reverse(path))
    with CaptureQueriesContext(connection) as huge:
        response = client.get(reverse(path), {"offset": 999_999_999})
    assert response.status_code == 200
    assert "is past the end of this list: here is its last page." in response.content.decode()
    assert len(huge) == len(ordinary)
    assert furthest_read(huge) <= MAX_PAGE_OFFSET + LIST_PAGE_SIZE + COUNT_CAP + 1


# -- the audit page --------------------------------------------------------------------------


@pytest.fixture
def decided(interrupted_run, personas):
    """Two runs by carol: alice approved the first's send_email, bob rejected the second's."""
    first, a1 = interrupted_run()
    second, a2 = interrupted_run()
    approval_decide(
        approval_id=a1.id, reviewer=personas.alice, verdict="approve", checkpoint_id=str(a1.checkpoint_id)
    )
    approval_decide(
        approval_id=a2.id,
        reviewer=personas.bob,
        verdict="reject",
        reason='=HYPERLINK("http://evil")',
        checkpoint_id=str(a2.checkpoint_id),
    )
    return first, second


def audit_ids(html: str) -> list[int]:
    return [int(i) for i in re.findall(r'<tr id="audit-(\d+)">', html)]


def test_only_admins_see_the_audit_page_and_its_export(personas):
    for user in (personas.alice, personas.carol, personas.olivia):
        client = logged_in(user)
        assert client.get(reverse("audit")).status_code == 403
        assert client.get(reverse("audit-export")).status_code == 403
    assert Client().get(reverse("audit-export")).status_code == 302  # to the login page


@pytest.mark.parametrize(
    ("who", "path", "query"),
    [
        ("carol", "runs", {"agent": "demo\x00"}),
        ("carol", "runs", {"status": "\x00"}),
        ("admin", "audit", {"actor": "bob\x00", "action": "\x00decision."}),
    ],
    ids=["runs agent", "runs status", "audit actor and action"],
)
def test_a_nul_character_in_a_pages_filter_matches_nothing_and_is_no_500(decided, personas, who, path, query):
    """`%00` decodes to U+0000, which PostgreSQL text cannot hold: compared with a column as
    typed, it raised DataError (a 500). No name holds one, so the filter matches no row (the
    desk page's queue: test_snapshot_window.py)."""
    response = logged_in(getattr(personas, who)).get(reverse(path), query)

    assert response.status_code == 200
    page = response.content.decode()
    assert run_ids(page) == [] and audit_ids(page) == []
    assert run_ids(logged_in(getattr(personas, who)).get(reverse(path)).content.decode()) or audit_ids(
        logged_in(getattr(personas, who)).get(reverse(path)).content.decode()
    ), "control: the same page unfiltered lists rows"


def test_the_admin_filters_the_audit_by_actor_action_and_run(decided, personas):
    first, _second = decided
    client = logged_in(personas.admin)

    by_bob = audit_ids(client.get(reverse("audit"), {"actor": "bob"}).content.decode())
    assert by_bob == list(
        AuditEvent.objects.filter(actor_name="bob").order_by("-id").values_list("id", flat=True)
    )
    assert len(by_bob) == 1

    decisions = audit_ids(client.get(reverse("audit"), {"action": "decision."}).content.decode())
    assert {AuditEvent.objects.get(id=i).action for i in decisions} == {"decision.approve", "decision.reject"}

    of_first = client.get(reverse("audit"), {"run": str(first.id)}).content.decode()
    actions = {AuditEvent.objects.get(id=i).action for i in audit_ids(of_first)}
    assert {"run.submitted", "approval.requested", "decision.approve"} <= actions
    assert "decision.reject" not in actions
    assert all(
        e.subject_id == str(first.id) or e.data.get("run") == str(first.id)
        for e in AuditEvent.objects.filter(id__in=audit_ids(of_first))
    )


def test_the_audit_filters_by_time_and_says_when_a_time_is_malformed(decided, personas):
    client = logged_in(personas.admin)
    newest = AuditEvent.objects.order_by("-id").first()
    since = newest.at.strftime("%Y-%m-%dT%H:%M:%S.%f")
    shown = audit_ids(client.get(reverse("audit"), {"since": since}).content.decode())
    assert shown and newest.id in shown
    assert all(AuditEvent.objects.get(id=i).at >= newest.at for i in shown)
    assert audit_ids(client.get(reverse("audit"), {"until": since}).content.decode()) == list(
        AuditEvent.objects.filter(at__lt=newest.at)
        .order_by("-id")
        .values_list("id", flat=True)[:LIST_PAGE_SIZE]
    )

    bad = client.get(reverse("audit"), {"since": "yesterday"})
    assert bad.status_code == 400
    assert "since: &#x27;yesterday&#x27; is not a time" in bad.content.decode()
    assert client.get(reverse("audit"), {"run": "not-a-run"}).status_code == 400
    assert client.get(reverse("audit-export"), {"until": "soon"}).status_code == 400
    # Well formed, but no time: Django's parse_datetime raises rather than saying None (a 500).
    for impossible in ("2026-13-01T00:00", "2026-02-30T10:00", "2026-01-01T24:00"):
        assert client.get(reverse("audit"), {"since": impossible}).status_code == 400, impossible
        assert client.get(reverse("audit-export"), {"until": impossible}).status_code == 400, impossible


def test_each_decision_row_shows_its_signature_checked_and_a_forged_one_is_flagged(decided, personas):
    client = logged_in(personas.admin)
    page = client.get(reverse("audit"), {"action": "decision."}).content.decode()
    assert page.count("✓ signature valid") == 2

    tampered = Decision.objects.get(verdict="reject")
    tampered.payload = {**tampered.payload, "verdict": "approve"}
    tampered.verdict = "approve"
    tampered.save()
    page = client.get(reverse("audit"), {"action": "decision."}).content.decode()
    assert page.count("✓ signature valid") == 1
    assert page.count("✗ invalid") == 1


def test_a_decision_row_whose_arguments_hash_differs_from_the_decisions_is_flagged(decided, personas):
    row = AuditEvent.objects.get(action="decision.approve")
    decision = Decision.objects.get(id=row.data["decision"])
    decision.arguments_sha256 = "0" * 64
    decision.save()
    page = logged_in(personas.admin).get(reverse("audit"), {"action": "decision."}).content.decode()
    assert page.count("✓ signature valid") == 1 and page.count("✗ invalid") == 1


@pytest.mark.parametrize(
    ("field", "value"),
    [("reason", "Approved after all: refund 10x."), ("note", "Refund 10x."), ("answer", {"choice": "yes"})],
)
def test_a_decision_whose_words_were_edited_is_flagged(decided, personas, field, value):
    """The texts that reach the model in the reviewer's name, and an answer, are signed (their
    SHA-256): an edit of the stored decision showed a valid signature, though the gate refuses it."""
    Decision.objects.filter(verdict="reject").update(**{field: value})
    page = logged_in(personas.admin).get(reverse("audit"), {"action": "decision."}).content.decode()
    assert page.count("✓ signature valid") == 1 and page.count("✗ invalid") == 1


def test_a_decision_row_whose_reviewer_was_edited_is_not_shown_verified(decided, personas):
    """alice's approval, its payload (naming alice) and signature untouched, is moved to bob in
    the database: its badge says it was signed by another reviewer, naming both; bob's own
    rejection still shows valid."""
    approved = Decision.objects.get(verdict="approve")
    assert approved.payload["reviewer"] == "alice"
    Decision.objects.filter(pk=approved.pk).update(reviewer=personas.bob)
    page = logged_in(personas.admin).get(reverse("audit"), {"action": "decision."}).content.decode()
    assert page.count("✓ signature valid") == 1  # bob's own rejection, untouched
    assert page.count("✗ invalid: signed by another reviewer (alice), the decision names bob") == 1


def test_a_decision_signed_with_a_key_not_in_the_keyring_is_flagged(decided, personas):
    Decision.objects.filter(verdict="approve").update(key_id="ed25519:0000000000000000")
    page = logged_in(personas.admin).get(reverse("audit"), {"action": "decision."}).content.decode()
    assert page.count("✗ unknown key") == 1


def test_the_audit_page_shows_the_chain_intact_then_broken(decided, personas, settings, tmp_path):
    """No anchor yet, so the page walks every row (tests/reviewdesk/audit/test_audit_page_chain.py
    has the rest: anchors, beat's full check)."""
    settings.DESK_AUDIT_ANCHOR_FILE = tmp_path / "audit_anchors.jsonl"
    settings.DESK_AUDIT_CHECK_FILE = tmp_path / "audit_check.json"
    settings.DESK_AUDIT_SWEEP_FILE = tmp_path / "audit_sweep.json"
    client = logged_in(personas.admin)
    rows = AuditEvent.objects.count()
    assert (
        f'<p class="flash success" id="chain-status"><span class="chain-line">Hash chain intact: all {rows} rows '
        "(no anchor yet) checked now.</span></p>" in client.get(reverse("audit")).content.decode()
    )
    victim = AuditEvent.objects.order_by("id")[2]
    AuditEvent.objects.filter(id=victim.id).update(actor_name="mallory")
    assert (
        f'<p class="flash error" id="chain-status"><span class="chain-line">Hash chain broken at row {victim.id}: '
        "its hash does not match its contents (edited, or recomputed without the key) (checked now).</span></p>"
        in client.get(reverse("audit")).content.decode()
    )


def test_the_audit_page_costs_the_same_queries_for_a_page_of_few_or_many_decisions(interrupted_run, personas):
    client = logged_in(personas.admin)

    def decide_one():
        _run, approval = interrupted_run()
        approval_decide(
            approval_id=approval.id,
            reviewer=personas.alice,
            verdict="approve",
            checkpoint_id=str(approval.checkpoint_id),
        )

    decide_one()
    with CaptureQueriesContext(connection) as few:
        client.get(reverse("audit"), {"action": "decision."})
    for _ in range(4):
        decide_one()
    with CaptureQueriesContext(connection) as many:
        page = client.get(reverse("audit"), {"action": "decision."}).content.decode()
    assert page.count("✓ signature valid") == 5
    # The chain's check walks its rows in chunks; the page's own queries do not grow with its rows.
    page_queries = [q for q in many if "approvals_decision" in q["sql"]]
    assert len(page_queries) == len([q for q in few if "approvals_decision" in q["sql"]]) == 1


def test_the_export_streams_the_filtered_rows_as_csv_with_badges_and_defused_formulas(decided, personas):
    first, _second = decided
    client = logged_in(personas.admin)
    response = client.get(reverse("audit-export"), {"action": "decision."})
    assert response.status_code == 200 and response.streaming
    assert response["Content-Type"] == "text/csv; charset=utf-8"
    assert "attachment" in response["Content-Disposition"]
    rows = list(csv.DictReader(io.StringIO(b"".join(response.streaming_content).decode())))

    assert [int(r["id"]) for r in rows] == list(
        AuditEvent.objects.filter(action__startswith="decision.").order_by("-id").values_list("id", flat=True)
    )
    assert {r["signature"] for r in rows} == {"valid"}
    rejected = next(r for r in rows if r["action"] == "decision.reject")
    assert rejected["actor"] == "bob"
    assert '"reason":"=HYPERLINK' in rejected["data"]  # inside JSON: not at the cell's start

    everything = client.get(reverse("audit-export"), {"run": str(first.id)})
    exported = list(csv.DictReader(io.StringIO(b"".join(everything.streaming_content).decode())))
    assert exported and all(r["subject_id"] == str(first.id) or str(first.id) in r["data"] for r in exported)


def test_a_cell_that_starts_like_a_formula_is_exported_as_text(personas):
    from reviewdesk.audit.services import audit_record

    audit_record(actor=personas.admin, action="=cmd|' /C calc'!A0", subject_type="run", subject_id="-1+1")
    response = logged_in(personas.admin).get(reverse("audit-export"))
    (row,) = list(csv.DictReader(io.StringIO(b"".join(response.streaming_content).decode())))
    assert row["action"] == "'=cmd|' /C calc'!A0"
    assert row["subject_id"] == "'-1+1"


# -- the run page's timeline -----------------------------------------------------------------


def timeline_texts(html: str) -> list[str]:
    section = html[
        html.index('<ol class="timeline"') : html.index("</ol>", html.index('<ol class="timeline"'))
    ]
    return [
        re.sub(r"<[^>]+>", "", t).strip() for t in re.findall(r'<span class="tl-text">(.*?)</span>', section)
    ]


def test_the_run_page_tells_the_run_in_order_from_submission_to_its_end(interrupted_run, personas):
    from reviewdesk.runs.execution import run_execute

    run, approval = interrupted_run()
    approval_decide(
        approval_id=approval.id,
        reviewer=personas.alice,
        verdict="approve",
        checkpoint_id=str(approval.checkpoint_id),
    )
    run_execute(run_id=run.id, worker="in-process")
    run.refresh_from_db()
    assert run.status == RunStatus.SUCCEEDED, run.error

    texts = timeline_texts(logged_in(personas.carol).get(f"/runs/{run.id}/").content.decode())

    assert texts[0] == "Run submitted"
    expected_in_order = [
        "Run submitted",
        "Attempt #1 started",
        "Model turn: asks for lookup_customer, send_email",
        "Approval requested: send_email",
        "Attempt #1 released",
        "Approved send_email",
        "Attempt #2 started",
        "Effect send_email recorded as pending",
        "Effect send_email confirmed",
        "Model turn: answers",
        "Run succeeded",
    ]
    assert set(expected_in_order) <= set(texts), texts
    positions = [texts.index(t) for t in expected_in_order]
    assert positions == sorted(positions), texts


def test_a_run_that_ends_while_its_page_renders_is_not_shown_running_beside_its_end(
    interrupted_run, personas, monkeypatch
):
    """The worker's finish commits between the page's read of the run and of its timeline (the
    live page refetches itself while runs end): the status shown must agree with the timeline."""
    from reviewdesk.desk.views import runs as run_views
    from reviewdesk.runs.execution import run_execute

    run, approval = interrupted_run()
    approval_decide(
        approval_id=approval.id,
        reviewer=personas.alice,
        verdict="approve",
        checkpoint_id=str(approval.checkpoint_id),
    )
    timeline = run_views.run_timeline

    def the_worker_finishes_first(seen):
        assert seen.status == RunStatus.QUEUED  # the page has read the run before it ended
        run_execute(run_id=seen.id, worker="in-process")
        return timeline(seen)

    monkeypatch.setattr(run_views, "run_timeline", the_worker_finishes_first)
    page = logged_in(personas.carol).get(f"/runs/{run.id}/").content.decode()

    assert "Run succeeded" in timeline_texts(page)
    assert re.search(r'id="run-status">succeeded<', page), "the timeline ended the run; the status did not"


def test_a_cancelled_run_ends_its_timeline_with_who_cancelled_it(interrupted_run, personas):
    from reviewdesk.runs.services import run_cancel

    run, _approval = interrupted_run()
    run_cancel(run_id=run.id, user=personas.carol)
    page = logged_in(personas.carol).get(f"/runs/{run.id}/").content.decode()
    texts = timeline_texts(page)
    assert texts.index("Approval cancelled: send_email") > texts.index("Approval requested: send_email")
    assert "Run cancelled" in texts and "by carol" in page


def test_an_audit_row_whose_subject_is_not_an_id_is_shown_unlinked(decided, personas):
    from reviewdesk.audit.services import audit_record

    audit_record(actor=None, action="run.odd", subject_type="run", subject_id="<not-an-id>")
    page = logged_in(personas.admin).get(reverse("audit")).content.decode()
    assert "run <code>&lt;not-an-id&gt;</code>" in page
    run_rows = AuditEvent.objects.filter(subject_type="run").exclude(subject_id="<not-an-id>")
    assert all(f'href="/runs/{e.subject_id}/"' in page for e in run_rows)
    approval_rows = AuditEvent.objects.filter(subject_type="approval")
    assert all(f'href="/approvals/{e.subject_id}/"' in page for e in approval_rows)


def test_a_row_about_something_else_after_a_run_row_links_nowhere(personas):
    from reviewdesk.audit.services import audit_record

    run = make_runs(personas.carol, 1)[0]
    audit_record(actor=None, action="run.touched", subject_type="run", subject_id=run.id)
    audit_record(actor=None, action="key.rotated", subject_type="key", subject_id="k1")
    page = logged_in(personas.admin).get(reverse("audit")).content.decode()
    assert "key <code>k1</code>" in page
    assert run_ids(page) == [str(run.id)]
