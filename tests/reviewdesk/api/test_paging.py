"""Every list pages with a cursor and a `next` link: nothing is hidden, nothing repeated."""

from __future__ import annotations

import base64
import json
import time
import uuid
from datetime import timedelta
from urllib.parse import urlsplit

import pytest
from django.utils import timezone

from reviewdesk.approvals.models import ApprovalRequest, ApprovalStatus
from reviewdesk.events.models import DeskEvent
from reviewdesk.runs.models import Run

pytestmark = pytest.mark.django_db


def cursor(key) -> str:
    """A cursor as the API writes one (base64 of JSON), of any key a client makes up."""
    raw = key if isinstance(key, str) else json.dumps(key)
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


def bulk_approvals(
    run, checkpoint_id, count: int, *, status=ApprovalStatus.PENDING, tool="send_email", ties=True
):
    """`count` approvals straight into the table; with `ties`, half share one older created_at."""
    expires = timezone.now() + timedelta(hours=1)
    rows = ApprovalRequest.objects.bulk_create(
        ApprovalRequest(
            run=run,
            checkpoint_id=checkpoint_id,
            tool_call_id=f"bulk-{tool}-{status}-{i}",
            tool=tool,
            arguments={"i": i},
            arguments_sha256="0" * 64,
            expires_at=expires,
            status=status,
        )
        for i in range(count)
    )
    tied = [row.pk for row in rows[: count // 2]] if ties else []
    ApprovalRequest.objects.filter(pk__in=tied).update(created_at=timezone.now() - timedelta(minutes=5))
    return rows


def walk(client, url: str, max_pages: int = 60) -> tuple[list[dict], int]:
    """Follow `next` from `url` to the end: every item, and how many pages it took."""
    items, pages = [], 0
    while url:
        assert pages < max_pages, f"still paging after {pages} pages: a page repeats"
        response = client.get(url)
        assert response.status_code == 200, response.json()
        body = response.json()
        items += body["results"]
        pages += 1
        url = body["next"]
        if url:
            parts = urlsplit(url)
            url = f"{parts.path}?{parts.query}"
    return items, pages


def test_paging_through_10000_approvals_reaches_every_item_exactly_once(
    interrupted_run, personas, api_as, report_timing
):
    run, approval = interrupted_run()
    bulk_approvals(run, approval.checkpoint_id, 10_000)
    expected = set(map(str, ApprovalRequest.objects.values_list("id", flat=True)))
    started = time.monotonic()
    items, pages = walk(api_as(personas.admin, "review"), "/api/v1/approvals?status=pending&limit=200")
    elapsed = time.monotonic() - started
    ids = [item["id"] for item in items]
    assert len(ids) == len(set(ids)) == len(expected) == 10_001
    assert set(ids) == expected
    assert pages == 51
    created = [item["created_at"] for item in items]
    assert created == sorted(created, reverse=True)
    report_timing(f"paging 10,001 approvals, 200 a page: {pages} pages in {elapsed:.1f} s")


def test_300_pending_approvals_are_all_reachable_with_the_default_page(interrupted_run, personas, api_as):
    run, approval = interrupted_run()
    bulk_approvals(run, approval.checkpoint_id, 299)
    first = api_as(personas.alice, "review").get("/api/v1/approvals?status=pending").json()
    assert len(first["results"]) == 50 and first["next"]
    items, pages = walk(api_as(personas.alice, "review"), "/api/v1/approvals?status=pending")
    assert len({item["id"] for item in items}) == 300 and pages == 6


def test_rows_created_while_a_client_pages_never_shift_the_pages_it_has_not_read(
    interrupted_run, personas, api_as
):
    run, approval = interrupted_run()
    bulk_approvals(run, approval.checkpoint_id, 30)
    client = api_as(personas.admin, "review")
    first = client.get("/api/v1/approvals?limit=10").json()
    bulk_approvals(
        run, approval.checkpoint_id, 5, tool="refund_payment", ties=False
    )  # newer: before page one
    rest, _ = walk(client, urlsplit(first["next"]).path + "?" + urlsplit(first["next"]).query)
    ids = [item["id"] for item in first["results"] + rest]
    assert len(ids) == len(set(ids)) == 31


def test_the_filters_keep_only_what_they_name_and_next_keeps_the_filters(interrupted_run, personas, api_as):
    run, approval = interrupted_run()
    bulk_approvals(run, approval.checkpoint_id, 7, tool="refund_payment")
    bulk_approvals(run, approval.checkpoint_id, 4, status=ApprovalStatus.REJECTED)
    client = api_as(personas.admin, "review")
    refunds, _ = walk(client, "/api/v1/approvals?tool=refund_payment&limit=3")
    assert len(refunds) == 7 and {a["tool"] for a in refunds} == {"refund_payment"}
    rejected, _ = walk(client, "/api/v1/approvals?status=rejected&limit=3")
    assert len(rejected) == 4
    assert walk(client, "/api/v1/approvals?agent=nope")[0] == []
    assert len(walk(client, f"/api/v1/approvals?agent=demo&run={run.id}&limit=5")[0]) == 12
    future = (timezone.now() + timedelta(minutes=1)).isoformat().replace("+00:00", "Z")
    assert walk(client, f"/api/v1/approvals?created_after={future}")[0] == []
    assert len(walk(client, f"/api/v1/approvals?created_before={future}")[0]) == 12


def test_runs_page_with_a_next_link_and_filter_by_status_and_agent(personas, api_as):
    Run.objects.bulk_create(
        Run(agent="demo", input=f"task {i}", model={}, approval_ttl_seconds=60, submitted_by=personas.carol)
        for i in range(23)
    )
    client = api_as(personas.carol, "submit")
    runs, pages = walk(client, "/api/v1/runs?limit=10&status=queued&agent=demo")
    assert len({r["id"] for r in runs}) == 23 and pages == 3
    assert walk(client, "/api/v1/runs?status=failed")[0] == []


def test_run_events_page_by_sequence_with_a_next_link(interrupted_run, personas, api_as):
    run, _ = interrupted_run()
    DeskEvent.objects.bulk_create(DeskEvent(type="run.updated", run=run, data={"i": i}) for i in range(25))
    expected = list(DeskEvent.objects.filter(run=run).order_by("id").values_list("id", flat=True))
    events, pages = walk(api_as(personas.carol, "submit"), f"/api/v1/runs/{run.id}/events?limit=10")
    assert [e["seq"] for e in events] == expected
    assert pages == len(expected) // 10 + 1
    after = expected[-3]
    tail = api_as(personas.carol, "submit").get(f"/api/v1/runs/{run.id}/events?after={after}").json()
    assert [e["seq"] for e in tail["results"]] == expected[-2:] and tail["next"] is None
    refused = api_as(personas.carol, "submit").get(f"/api/v1/runs/{run.id}/events?after=%C2%B2")
    assert refused.status_code == 400 and refused.json()["code"] == "bad_parameter"


@pytest.mark.parametrize(
    ("url", "code"),
    [
        ("/api/v1/approvals?cursor=not-a-cursor", "bad_cursor"),
        ("/api/v1/approvals?cursor=WyJ4IiwgInkiXQ", "bad_cursor"),  # base64 of ["x", "y"]
        ("/api/v1/runs?cursor=%%%", "bad_cursor"),
        ("/api/v1/approvals?limit=201", "bad_parameter"),
        ("/api/v1/approvals?limit=0", "bad_parameter"),
        ("/api/v1/approvals?limit=ten", "bad_parameter"),
        # Digits int() refuses: "²" is isdigit() to Python, and int() reads at most 4,300 digits.
        ("/api/v1/approvals?limit=%C2%B2", "bad_parameter"),
        ("/api/v1/runs?limit=" + "1" * 5000, "bad_parameter"),
        ("/api/v1/approvals?cursor=" + cursor(["2026-01-01T00:00:00Z", 5]), "bad_cursor"),  # pk no string
        ("/api/v1/runs?cursor=" + cursor("[" * 3000), "bad_cursor"),  # deeper than json.loads goes
        ("/api/v1/runs?cursor=" + cursor(["9999-12-31T23:00:00-05:00", str(uuid.uuid4())]), "bad_cursor"),
        ("/api/v1/approvals?status=maybe", "bad_parameter"),
        ("/api/v1/approvals?stauts=pending", "bad_parameter"),
        ("/api/v1/approvals?run=nope", "bad_parameter"),
        ("/api/v1/runs?created_after=yesterday", "bad_parameter"),
        ("/api/v1/runs?created_after=2026-13-45T00:00:00Z", "bad_parameter"),
        ("/api/v1/runs?created_after=0001-01-01T00:00:00%2B05:00", "bad_parameter"),  # year 0 in UTC
    ],
)
def test_a_bad_cursor_or_parameter_is_400(personas, api_as, url, code):
    """Never a 500, whatever a client makes up."""
    response = api_as(personas.admin, "review").get(url)
    assert response.status_code == 400, response.json()
    assert response["Content-Type"] == "application/problem+json"
    assert response.json()["code"] == code


@pytest.mark.parametrize(
    "url",
    [
        "/api/v1/runs?agent=%00",
        "/api/v1/approvals?tool=send%00email",
        "/api/v1/approvals?agent=%00",
        "/api/v1/grants?tool=%00",
        "/api/v1/audit?actor=%00",
        "/api/v1/audit?subject_id=%00",
        "/api/v1/runs/{run}/events?type=run.updated%00",
    ],
)
def test_a_nul_character_in_a_text_filter_is_400_not_a_500(personas, api_as, interrupted_run, url):
    """PostgreSQL text cannot hold U+0000: a filter comparing a column with it raised DataError."""
    run, _ = interrupted_run()
    response = api_as(personas.admin, "review", "audit").get(url.format(run=run.id))
    assert response.status_code == 400, response.content
    assert response.json()["code"] == "bad_parameter"


def test_a_cursor_whose_time_has_an_offset_postgresql_refuses_pages_from_that_instant(
    personas, api_as, interrupted_run
):
    """+20:00 is a Python offset but not a PostgreSQL one: the cursor's time is compared in UTC
    (a 500 on PostgreSQL before). Every run is older than that instant, so all are on the page."""
    run, _ = interrupted_run()
    at = cursor(["2999-01-01T00:00:00+20:00", "ffffffff-ffff-ffff-ffff-ffffffffffff"])
    response = api_as(personas.admin, "review").get(f"/api/v1/runs?cursor={at}")
    assert response.status_code == 200, response.content
    assert str(run.id) in [row["id"] for row in response.json()["results"]]


def test_a_time_with_an_offset_postgresql_refuses_is_compared_in_utc_not_a_500(personas, api_as):
    """Found by schemathesis on PostgreSQL: +20:02 is a valid Python offset but not a PG one."""
    response = api_as(personas.admin, "review").get("/api/v1/runs?created_before=0663-03-26T04:05:28%2B20:02")
    assert response.status_code == 200, response.content
    assert response.json()["results"] == []


def test_a_bad_after_on_events_is_400(interrupted_run, personas, api_as):
    run, _ = interrupted_run()
    for after in ("-1", "1e400", "x"):
        response = api_as(personas.carol, "submit").get(f"/api/v1/runs/{run.id}/events?after={after}")
        assert response.status_code == 400 and response.json()["code"] == "bad_parameter"


def test_timestamps_keep_their_microseconds_so_they_sort_as_the_times_do():
    """Python's isoformat drops a zero fraction; a client sorting created_at strings (as the
    paging test does) then put a row created on the second after later ones of that second."""
    from datetime import UTC, datetime

    from reviewdesk.lib.times import rfc3339_sortable

    on_the_second = datetime(2026, 12, 1, 18, 39, 11, tzinfo=UTC)
    just_after = on_the_second.replace(microsecond=287206)
    assert rfc3339_sortable(on_the_second) == "2026-12-01T18:39:11.000000Z"
    assert sorted([rfc3339_sortable(just_after), rfc3339_sortable(on_the_second)]) == [
        rfc3339_sortable(on_the_second),
        rfc3339_sortable(just_after),
    ]


def _reads_by_page_size(client, url: str, limits: tuple[int, ...]) -> tuple[dict[int, list[str]], dict]:
    """The statements of a GET of `url` (its `{}` the page size) at each of `limits`, each page
    checked full; and the last page's body."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    reads, body = {}, {}
    for limit in limits:
        with CaptureQueriesContext(connection) as queries:
            body = client.get(url.format(limit)).json()
        assert len(body["results"]) == limit
        reads[limit] = [q["sql"] for q in queries.captured_queries]
    return reads, body


def _votes(approvals, *reviewers) -> None:
    """A quorum vote by each reviewer on each approval, straight into the table."""
    from reviewdesk.approvals.models import Decision, Verdict

    now = timezone.now()
    Decision.objects.bulk_create(
        Decision(
            request=approval,
            verdict=Verdict.APPROVE,
            reviewer=reviewer,
            arguments=approval.arguments,
            arguments_sha256=approval.arguments_sha256,
            decided_at=now + timedelta(seconds=n),
            not_after=now + timedelta(hours=1),
            nonce=f"{approval.pk}-{reviewer.pk}",
            payload={},
            signature="-",
            key_id="-",
        )
        for approval in approvals
        for n, reviewer in enumerate(reviewers)
    )


def test_a_page_of_approvals_takes_the_same_reads_at_any_size_and_not_the_runs_output(
    interrupted_run, personas, api_as
):
    """In-process (the test client, the test database): the approvals list's reads do not grow
    with its page, votes and their reviewers included, and the members of groups the requests
    are assigned to; a run's output is never read for it, nor a voter's password hash."""
    from django.contrib.auth.models import Group

    Group.objects.get_or_create(name="billing")[0].user_set.add(personas.alice, personas.admin)
    run, approval = interrupted_run()
    Run.objects.filter(pk=run.pk).update(output="x" * 100_000, metadata={"big": "y" * 10_000})
    rows = bulk_approvals(run, approval.checkpoint_id, 30, ties=False)
    _votes(rows, personas.bob, personas.admin)
    ApprovalRequest.objects.filter(pk__in=[r.pk for r in rows[::2]]).update(assignees=["group:billing"])
    client = api_as(personas.alice, "review")
    client.get("/api/v1/approvals?limit=1")  # the token's first use writes its last_used_at
    reads, body = _reads_by_page_size(client, "/api/v1/approvals?status=pending&limit={}", (2, 30))
    assert len(reads[2]) == len(reads[30]), "\n".join(s[:150] for s in reads[2] + ["--"] + reads[30])
    assert not [sql for sql in reads[30] if '"runs_run"."output"' in sql or '"runs_run"."metadata"' in sql]
    assert not [sql for sql in reads[30] if '"auth_user"."password"' in sql and "approvals_decision" in sql]
    assigned = [item["reviewer"]["users"] for item in body["results"] if item["reviewer"]["targets"]]
    assert assigned == [["admin", "alice"]] * 15
    for item in body["results"]:
        assert item["quorum"]["approved_by"] == ["bob", "admin"]
        assert item["submitted_by"] == "carol" and item["agent"] == run.agent
        assert item["task"] == run.input[:280]


def test_a_page_of_runs_reads_as_much_at_four_runs_as_at_one_groups_among_their_assignees(
    interrupted_run, personas, api_as
):
    """In-process: the runs list reads the members of the groups its runs' approvals are
    assigned to once for the page, not once per run, and names them on each approval; so too
    who handed each over, and the votes with their reviewers' names (not their password hashes)."""
    from django.contrib.auth.models import Group

    Group.objects.get_or_create(name="billing")[0].user_set.add(personas.alice, personas.admin)
    runs = [interrupted_run()[0] for _ in range(4)]
    approvals = ApprovalRequest.objects.filter(run__in=runs)
    approvals.update(assignees=["group:billing"], handed_over_by=personas.bob, handed_over_at=timezone.now())
    _votes(approvals, personas.admin)
    client = api_as(personas.carol, "submit")
    client.get("/api/v1/runs?limit=1")  # the token's first use writes its last_used_at
    reads, body = _reads_by_page_size(client, "/api/v1/runs?limit={}", (1, 4))
    assert len(reads[1]) == len(reads[4]), "\n".join(s[:150] for s in reads[1] + ["--"] + reads[4])
    assert not [sql for sql in reads[4] if '"auth_user"."password"' in sql and "approvals_decision" in sql]
    shown = [a for run in body["results"] for a in run["approvals"]]
    assert [a["reviewer"]["users"] for a in shown] == [["admin", "alice"]] * 4
    assert [(a["handover"]["by"], a["quorum"]["approved_by"]) for a in shown] == [("bob", ["admin"])] * 4


def test_an_approval_read_for_a_page_then_refreshed_shows_the_votes_cast_since(interrupted_run, personas):
    """In-process: approval_rows keeps the votes in a list of its own; refresh_from_db drops it,
    as Django drops what it prefetched, and the votes are read again."""
    from reviewdesk.approvals.reads.representation import approval_rows

    _, approval = interrupted_run()
    [row] = approval_rows(ApprovalRequest.objects.filter(pk=approval.pk))
    assert row.approving_decisions() == []
    _votes([approval], personas.bob)
    row.refresh_from_db(fields=["status"])  # a partial refresh keeps the page's reads
    assert row.approving_decisions() == []
    row.refresh_from_db()
    assert [d.reviewer.username for d in row.approving_decisions()] == ["bob"]
