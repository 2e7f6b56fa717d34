"""The audit page for admins: filters, paging, signature badges, the chain's status, CSV export."""

from __future__ import annotations

import csv
import uuid
from collections.abc import Iterable, Iterator
from datetime import datetime

from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.db.models import Q, QuerySet
from django.http import HttpRequest, HttpResponse, StreamingHttpResponse
from django.shortcuts import render
from django.urls import reverse
from django.utils import timezone
from django.utils.dateparse import parse_datetime
from django.utils.http import urlencode

from agents.canonical import canonical_json
from agents.decisions import (
    answer_matches,
    is_device_signed,
    payload_version,
    signature_valid,
    signed_texts_mismatch,
)
from agents.trust import DeviceRefused, verify_with_trust
from reviewdesk.accounts.devicekeys import TrustSnapshot
from reviewdesk.accounts.roles import is_admin
from reviewdesk.approvals.models import Decision
from reviewdesk.approvals.reads.decisions import signed_decision
from reviewdesk.approvals.signing import FileKeyring
from reviewdesk.audit.models import AuditEvent
from reviewdesk.desk.chain_status import chain_status

# What the decision templates compare with and limit to, so that they spell no enum value or limit.
from reviewdesk.desk.paging import filter_text, paged


class AuditFilterError(ValueError):
    pass


AUDIT_FILTERS = ("actor", "action", "run", "since", "until")


def _audit_rows(request: HttpRequest) -> tuple[QuerySet[AuditEvent], dict[str, str]]:
    """The audit rows the URL's filters select, newest first, and the filters to keep.

    actor: a username (exact); action: a prefix ("decision." is every decision); run: a run id,
    matching the run's own rows and those of its approvals; since/until: local times
    (YYYY-MM-DDTHH:MM), until exclusive. A malformed filter raises AuditFilterError.
    """
    kept = {name: filter_text(request, name) for name in AUDIT_FILTERS}
    kept = {name: value for name, value in kept.items() if value}
    rows = AuditEvent.objects.select_related("actor").order_by("-id")
    if "actor" in kept:
        rows = rows.filter(actor_name=kept["actor"])
    if "action" in kept:
        rows = rows.filter(action__startswith=kept["action"])
    if "run" in kept:
        try:
            run_id = str(uuid.UUID(kept["run"]))
        except ValueError:
            raise AuditFilterError(f"run: {kept['run']!r} is not a run id") from None
        rows = rows.filter(Q(subject_type="run", subject_id=run_id) | Q(data__run=run_id))
    for name, lookup in (("since", "at__gte"), ("until", "at__lt")):
        if name in kept:
            try:
                moment = parse_datetime(kept[name])
            except ValueError:  # well formed but no time (month 13): Django raises
                moment = None
            if moment is None:
                raise AuditFilterError(f"{name}: {kept[name]!r} is not a time (YYYY-MM-DDTHH:MM)")
            if timezone.is_naive(moment):
                moment = timezone.make_aware(moment)
            rows = rows.filter(**{lookup: moment})
    return rows, kept


def _require_admin(request: HttpRequest) -> None:
    if not is_admin(request.user):
        raise PermissionDenied("the audit trail is for admins")


# A decision row's badge on the audit page and in the export.
SIGNATURE_VALID = "valid"
SIGNATURE_VALID_DEVICE = "valid, device-signed"  # by the reviewer's own device key
SIGNATURE_INVALID = "invalid"
SIGNATURE_UNKNOWN_KEY = "unknown key"
# A device-signed decision the workers' gate would refuse for its key: no endorsement under the
# pinned roots, a revoked key, a signature the endorsed key does not verify (and why, after it).
SIGNATURE_UNTRUSTED = "device key not trusted"
SIGNATURE_MISSING = "no decision"
# The signed payload names another reviewer than the decision row (a row edited in the database):
# the signature may verify, but not as this reviewer's decision. Followed by both names.
SIGNATURE_OTHER_REVIEWER = "invalid: signed by another reviewer"


def _is_uuid(text: str) -> bool:
    try:
        uuid.UUID(text)
    except ValueError:
        return False
    return True


def _signatures(events: Iterable[AuditEvent]) -> dict[int, str]:
    """For each decision row among `events` (id → badge): whether the Decision it names
    carries a valid signature over a payload that is that decision's (its reviewer, verdict,
    arguments, texts and answer), with the arguments hash the audit row recorded. A
    server-signed one is checked with the keyring; a device-signed one as the workers' gate
    checks it (`agents.trust.verify_with_trust`): with the public key an endorsement under the
    pinned roots names, and no revocation, never with the key row the database holds. One
    query for all the rows' decisions, two for their device keys' records."""
    named = {e.id: str(e.data.get("decision", "")) for e in events if e.action.startswith("decision.")}
    wanted = [decision_id for decision_id in named.values() if _is_uuid(decision_id)]
    decisions = {str(d.id): d for d in Decision.objects.filter(id__in=wanted).select_related("reviewer")}
    device_key_ids = {d.key_id for d in decisions.values() if is_device_signed(d.payload)}
    trust = TrustSnapshot(device_key_ids) if device_key_ids else None
    keyring, keys = FileKeyring(), {}
    data = {e.id: e.data for e in events}
    badges = {}
    for event_id, decision_id in named.items():
        decision = decisions.get(decision_id)
        if decision is None:
            badges[event_id] = SIGNATURE_MISSING
            continue
        device = is_device_signed(decision.payload)
        if not device and decision.key_id not in keys:
            keys[decision.key_id] = keyring.public_key(decision.key_id)
        if not device and keys[decision.key_id] is None:
            badges[event_id] = SIGNATURE_UNKNOWN_KEY
            continue
        payload = decision.payload
        # Who signed is who the row says decided, server- or device-signed alike (the gate
        # checks the payload's reviewer against the request; the row is what the page shows).
        signer, recorded = payload.get("reviewer"), decision.reviewer.get_username()
        if signer != recorded:
            badges[event_id] = f"{SIGNATURE_OTHER_REVIEWER} ({signer}), the decision names {recorded}"
            continue
        agrees = (
            payload.get("decision_id") == decision_id
            and payload.get("verdict") == decision.verdict
            and payload.get("arguments_sha256") == decision.arguments_sha256
            and payload.get("arguments_sha256") == data[event_id].get("arguments_sha256")
            and payload.get("key_id") == decision.key_id
            # The words that reach the model in the reviewer's name, as stored now.
            and signed_texts_mismatch(
                payload, reason=decision.reason, note=decision.note, external_ref=decision.external_ref
            )
            is None
            and _answer_agrees(payload, decision)
        )
        if not agrees:
            badges[event_id] = SIGNATURE_INVALID
        elif device:
            badges[event_id] = _device_badge(trust, decision)
        else:
            valid = signature_valid(keys[decision.key_id], payload, decision.signature)
            badges[event_id] = SIGNATURE_VALID if valid else SIGNATURE_INVALID
    return badges


def _device_badge(trust: TrustSnapshot | None, decision: Decision) -> str:
    """The gate's verdict on a device-signed decision's key and signature, as of when it was
    signed (its signed `issued_at`: an endorsement that lapsed since does not unmake it; a
    revocation does, whenever it came)."""
    signed = signed_decision(decision)
    try:
        issued_at = datetime.fromisoformat(str(decision.payload.get("issued_at")))
    except ValueError:
        return f"{SIGNATURE_UNTRUSTED}: the payload has no valid issued_at"
    if issued_at.tzinfo is None:
        return f"{SIGNATURE_UNTRUSTED}: the payload has no valid issued_at (no time zone)"
    try:
        verify_with_trust(trust, signed, now=issued_at)
    except DeviceRefused as exc:
        return f"{SIGNATURE_UNTRUSTED}: {exc.reason}"
    return SIGNATURE_VALID_DEVICE


def _answer_agrees(payload: dict, decision: Decision) -> bool:
    """The stored answer is the one signed; payloads before version 3 signed none (nor held one)."""
    if payload_version(payload) in (1, 2):
        return decision.answer is None
    return answer_matches(payload, decision.answer)


def _subject_url(event: AuditEvent) -> str:
    """The page of the row's run or approval; none when its subject id is not an id."""
    if event.subject_type in ("run", "approval") and _is_uuid(event.subject_id):
        return reverse(event.subject_type, args=[event.subject_id])
    return ""


@login_required
def audit_page(request: HttpRequest) -> HttpResponse:
    """The audit trail for admins: filtered, a page at a time, each decision's signature
    checked as it is shown, and the chain's status (the rows since the newest anchor checked
    now, the window beat's last sweep walked and when, the whole chain as beat's last full check
    found it: desk/chain_status.py)."""
    _require_admin(request)
    context: dict = {"chain": chain_status(), "filters": {}, "page": None, "error": ""}
    try:
        rows, kept = _audit_rows(request)
    except AuditFilterError as exc:
        context["error"] = str(exc)
        context["filters"] = {name: request.GET.get(name, "")[:100] for name in AUDIT_FILTERS}
        return render(request, "desk/audit.html", context, status=400)
    page = paged(request, rows, kept)
    badges = _signatures(page["rows"])
    page["rows"] = [(event, badges.get(event.id), _subject_url(event)) for event in page["rows"]]
    context.update(
        filters=kept,
        page=page,
        export_query=urlencode(kept),
        SIGNATURE_VALID=SIGNATURE_VALID,
        SIGNATURE_VALID_DEVICE=SIGNATURE_VALID_DEVICE,
    )
    return render(request, "desk/audit.html", context)


AUDIT_CSV_COLUMNS = ("id", "at", "actor", "action", "subject_type", "subject_id", "data", "signature", "hash")
AUDIT_CSV_CHUNK = 500


def _cell(value: str) -> str:
    """A CSV cell a spreadsheet will not run: text starting =, +, -, @, tab or CR gets a quote mark."""
    return "'" + value if value[:1] in ("=", "+", "-", "@", "\t", "\r") else value


class _Echo:
    def write(self, value: str) -> str:
        return value


def _audit_csv_lines(rows: QuerySet[AuditEvent]) -> Iterator[str]:
    writer = csv.writer(_Echo())
    yield writer.writerow(AUDIT_CSV_COLUMNS)
    chunk: list[AuditEvent] = []
    for event in rows.iterator(chunk_size=AUDIT_CSV_CHUNK):
        chunk.append(event)
        if len(chunk) == AUDIT_CSV_CHUNK:
            yield from _audit_csv_chunk(writer, chunk)
            chunk = []
    yield from _audit_csv_chunk(writer, chunk)


def _audit_csv_chunk(writer, chunk: list[AuditEvent]) -> Iterator[str]:
    badges = _signatures(chunk)
    for e in chunk:
        cells = (
            str(e.id),
            e.at.isoformat(),
            e.actor_name,
            e.action,
            e.subject_type,
            e.subject_id,
            canonical_json(e.data).decode(),
            badges.get(e.id, ""),
            e.hash,
        )
        yield writer.writerow([_cell(c) for c in cells])


@login_required
def audit_export(request: HttpRequest) -> HttpResponse:
    """The filtered audit rows as CSV, streamed (admins only; the same filters as the page)."""
    _require_admin(request)
    try:
        rows, _kept = _audit_rows(request)
    except AuditFilterError as exc:
        return HttpResponse(f"Not exported: {exc}\n", status=400, content_type="text/plain; charset=utf-8")
    response = StreamingHttpResponse(_audit_csv_lines(rows), content_type="text/csv; charset=utf-8")
    response["Content-Disposition"] = 'attachment; filename="audit.csv"'
    return response
