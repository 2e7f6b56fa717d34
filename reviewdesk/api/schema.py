"""What the OpenAPI document says the API answers: response shapes, problems, security.

These serializers only describe; the bodies are built by their owners (an approval's in
`approvals.reads.representation`, a run's in `api.representations`), and `tests/reviewdesk/api/test_schemathesis.py` checks that what
the views send matches what is written here.
"""

from __future__ import annotations

from drf_spectacular.extensions import OpenApiAuthenticationExtension
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, inline_serializer
from rest_framework import serializers

from agents.tools import Effect
from reviewdesk.accounts.models import Scope
from reviewdesk.api.examples import (  # noqa: F401 - the views read them as doc.*_EXAMPLE
    AGENTS_EXAMPLE,
    DECISION_EXAMPLE,
    GRANT_DECISION_EXAMPLE,
    HANDOVER_EXAMPLE,
    PROBLEM_EXAMPLE,
    SUBMIT_EXAMPLE,
)
from reviewdesk.approvals.models import ApprovalKind, ApprovalStatus, Verdict
from reviewdesk.lib.errors import ERROR_CODES
from reviewdesk.runs.models import AttemptStatus, EffectStatus, ErrorKind, RunKind, RunStatus

ANY_JSON = serializers.JSONField


class BearerTokenScheme(OpenApiAuthenticationExtension):
    target_class = "reviewdesk.accounts.authentication.BearerTokenAuthentication"
    name = "bearerAuth"

    def get_security_definition(self, auto_schema):
        return {
            "type": "http",
            "scheme": "bearer",
            "description": (
                "`Authorization: Bearer <token>`; `python manage.py create_token USER --scope submit` "
                f"prints one. Scopes: {', '.join(Scope.values)}. Each operation names the scope it "
                "needs in its description and in `x-required-scopes`; reading needs any scope."
            ),
        }


class ProblemSerializer(serializers.Serializer):
    type = serializers.CharField(default="about:blank")
    title = serializers.CharField()
    status = serializers.IntegerField()
    detail = serializers.CharField()
    code = serializers.ChoiceField(
        choices=sorted(ERROR_CODES), help_text="see the list in the API description"
    )
    errors = ANY_JSON(required=False, help_text="per-field messages, for `invalid`")


def problem_response(status: int) -> OpenApiResponse:
    codes = sorted(code for code, (code_status, _) in ERROR_CODES.items() if code_status == status)
    return OpenApiResponse(
        ProblemSerializer,
        description="application/problem+json; `code` is one of " + ", ".join(f"`{c}`" for c in codes),
    )


def problems(*statuses: int) -> dict[int, OpenApiResponse]:
    return {status: problem_response(status) for status in statuses}


# The problems any operation can answer: bad query or body framing, no or a bad token, and a
# client that accepts no JSON.
COMMON = (400, 401, 406)
READ_PROBLEMS = problems(*COMMON)
ONE_PROBLEMS = problems(*COMMON, 404)
WRITE_PROBLEMS = problems(*COMMON, 403, 404, 409, 413, 415, 422)


class ReviewerSerializer(serializers.Serializer):
    users = serializers.ListField(
        child=serializers.CharField(), help_text="the usernames the targets name, groups expanded"
    )
    targets = serializers.ListField(
        child=serializers.CharField(),
        help_text='who may decide: usernames and "group:NAME"; empty: any reviewer (never the submitter)',
    )
    group = serializers.CharField()


class QuorumSerializer(serializers.Serializer):
    required = serializers.IntegerField(help_text="how many different reviewers must approve")
    approved_by = serializers.ListField(child=serializers.CharField(), help_text="who approved so far")
    groups = serializers.ListField(
        child=serializers.CharField(), help_text="when not empty, a vote counts only from these groups"
    )


class HandoverOutSerializer(serializers.Serializer):
    by = serializers.CharField(allow_null=True)
    at = serializers.DateTimeField()
    note = serializers.CharField(
        allow_blank=True,
        help_text=(
            "blank for a reader the call does not reach: shown to the users its targets name "
            "(every reviewer when it names none), admins and who handed it over"
        ),
    )


class DecisionOutSerializer(serializers.Serializer):
    id = serializers.UUIDField()
    verdict = serializers.ChoiceField(choices=Verdict.values)
    reason = serializers.CharField(allow_blank=True)
    note = serializers.CharField(allow_blank=True)
    external_ref = serializers.CharField(allow_null=True)
    reviewer = serializers.CharField()
    arguments_sha256 = serializers.CharField()
    arguments = ANY_JSON(allow_null=True)
    decided_at = serializers.DateTimeField()
    payload = ANY_JSON(help_text="the signed payload (RFC 8785 canonical JSON is what was signed)")
    signature = serializers.CharField(help_text="base64 Ed25519 signature")
    key_id = serializers.CharField()
    signer = serializers.ChoiceField(
        choices=["server", "device"], help_text="device: signed by the reviewer's own device key"
    )
    consumed_at = serializers.DateTimeField(allow_null=True)
    answer = serializers.JSONField(allow_null=True, help_text="a question's answer (verdict answer)")
    payload_b64 = serializers.CharField(
        help_text="base64 of the exact bytes signed (the payload's RFC 8785 canonical JSON): verify "
        "the signature over these, then parse them"
    )
    grant = ANY_JSON(required=False, allow_null=True, help_text="the standing grant made with it (a Grant)")
    reading = ANY_JSON(
        allow_null=True, help_text="the second opinion (model output) the reviewer was shown; advice only"
    )
    provenance = ANY_JSON(
        allow_null=True,
        help_text="an edit's arguments, where each came from: the request's sources for a value kept, "
        '{"kind": "reviewer", "by"} for one the reviewer wrote; null for other verdicts',
    )


class DecisionPayloadOutSerializer(serializers.Serializer):
    payload = ANY_JSON(help_text="the decision payload (version 4, signer device) to post back, signed")
    bytes = serializers.CharField(help_text="base64 of the payload's RFC 8785 canonical JSON: sign these")
    canonical = serializers.CharField(help_text="the same bytes as UTF-8 text, to show the reviewer")


class ExternalCallOutSerializer(serializers.Serializer):
    framework = serializers.CharField()
    external_id = serializers.CharField()
    resume_policy = serializers.CharField(help_text="per_call, all_or_nothing; empty for a reconciliation")
    schema = ANY_JSON(allow_null=True, help_text="the JSON Schema an edit is checked against; null: no edit")
    description = serializers.CharField(allow_blank=True)
    preview = serializers.CharField(
        allow_blank=True, help_text="the adapter's rendering of the effect; untrusted"
    )


class ProvenanceSourceSerializer(serializers.Serializer):
    kind = serializers.ChoiceField(choices=["task", "tool_output", "reviewer", "system", "none"])
    match = serializers.ChoiceField(
        choices=["exact", "normalised"], required=False, help_text="absent for kind none"
    )
    normalised = serializers.ListField(
        child=serializers.CharField(),
        required=False,
        help_text="what a normalised match needed: case, whitespace, confusables, punycode, url",
    )
    step = serializers.IntegerField(
        required=False,
        help_text="1-based position of the message in the run's log; 0: an external run's input",
    )
    tool = serializers.CharField(required=False, help_text="tool_output: the tool")
    call_id = serializers.CharField(required=False, help_text="tool_output: the call whose output it was")
    trusted = serializers.BooleanField(
        required=False, help_text="tool_output: whether the tool's output is trusted"
    )
    said = serializers.ChoiceField(
        choices=["answer", "note", "rejection"],
        required=False,
        help_text="reviewer: what the reviewer's words were",
    )
    shared = serializers.BooleanField(
        required=False, help_text="task: a user message an external run's framework sent"
    )
    seen = serializers.CharField(
        required=False, help_text="a normalised match: the text as the source holds it"
    )
    untraced = serializers.BooleanField(
        required=False, help_text="none: past the values a call's tracing covers"
    )


class ProvenanceFlagSerializer(serializers.Serializer):
    pointer = serializers.CharField(help_text="the argument's JSON Pointer")
    code = serializers.CharField(help_text="untrusted_origin, lookalike, addresses_reviewer or untraced")
    text = serializers.CharField()


class ReadingConcernSerializer(serializers.Serializer):
    about = serializers.CharField(help_text="an argument's JSON Pointer, or step:N for a message of the log")
    text = serializers.CharField()


class ReadingSerializer(serializers.Serializer):
    status = serializers.ChoiceField(choices=["pending", "ready", "unavailable"])
    model = serializers.CharField()
    risk = serializers.ChoiceField(choices=["low", "medium", "high"], required=False, allow_null=True)
    summary = serializers.CharField(required=False, allow_blank=True)
    concerns = ReadingConcernSerializer(many=True, required=False)
    error = serializers.CharField(required=False, help_text="unavailable: why")
    at = serializers.DateTimeField()


class ApprovalOutSerializer(serializers.Serializer):
    id = serializers.UUIDField()
    kind = serializers.ChoiceField(choices=ApprovalKind.values)
    run = serializers.UUIDField()
    tool = serializers.CharField()
    tool_call_id = serializers.CharField()
    arguments = ANY_JSON()
    arguments_sha256 = serializers.CharField()
    reason = serializers.CharField(allow_blank=True)
    reviewer = ReviewerSerializer()
    expires_at = serializers.DateTimeField()
    respond_by = serializers.DateTimeField(allow_null=True, help_text="response-time target; null: none")
    reminded_at = serializers.DateTimeField(allow_null=True)
    escalation_level = serializers.IntegerField()
    checkpoint_id = serializers.UUIDField()
    status = serializers.ChoiceField(choices=ApprovalStatus.values)
    created_at = serializers.DateTimeField()
    decision = DecisionOutSerializer(allow_null=True)
    quorum = QuorumSerializer()
    handover = HandoverOutSerializer(allow_null=True, help_text="the latest hand-over, if any")
    verdicts = serializers.ListField(
        child=serializers.CharField(),
        help_text="the verdicts that answer it (of `decision.verdict`'s): an external call's own list, else its kind's",
    )
    external = ExternalCallOutSerializer(
        allow_null=True, help_text="an external run's call; null for a desk run's"
    )
    provenance = serializers.DictField(
        child=ProvenanceSourceSerializer(many=True),
        allow_null=True,
        help_text="where each argument came from, by JSON Pointer, best source first; null when not "
        "known (an external run's call)",
    )
    provenance_flags = ProvenanceFlagSerializer(
        many=True,
        help_text="what provenance warns of: an aimed value only from untrusted output, a lookalike",
    )
    reading = ReadingSerializer(
        allow_null=True,
        help_text="a model's advisory reading of the call; never a decision. null: none asked for",
    )


class ExternalRunOutSerializer(serializers.Serializer):
    id = serializers.UUIDField()
    external_id = serializers.CharField()
    framework = serializers.CharField()
    status = serializers.ChoiceField(choices=RunStatus.values)
    kind = serializers.ChoiceField(choices=RunKind.values)


class ExternalApprovalOutSerializer(serializers.Serializer):
    id = serializers.UUIDField()
    tool_call_id = serializers.CharField()
    status = serializers.ChoiceField(choices=ApprovalStatus.values)
    verdicts = serializers.ListField(
        child=serializers.CharField(), help_text="approve, reject and, with a schema, edit"
    )
    arguments_sha256 = serializers.CharField()
    checkpoint_id = serializers.UUIDField(
        help_text="the desk checkpoint the call was raised at (its decision signs it)"
    )
    external_checkpoint = serializers.CharField(help_text="the framework's checkpoint the call was raised at")
    expires_at = serializers.DateTimeField()
    url = serializers.URLField(help_text="the approval's page on the desk")
    decision = DecisionOutSerializer(allow_null=True)


class ExternalSubmitOutSerializer(serializers.Serializer):
    run = ExternalRunOutSerializer()
    audience = serializers.CharField(help_text="the submitting account's username, which decisions bind")
    checkpoint_id = serializers.UUIDField(help_text="the desk checkpoint standing for the framework's")
    approvals = ExternalApprovalOutSerializer(many=True, help_text="one per call, in the order sent")


class ConsumeOutSerializer(serializers.Serializer):
    consumed_at = serializers.DateTimeField()


class ReportLedgerOutSerializer(serializers.Serializer):
    tool_call_id = serializers.CharField()
    ledger = serializers.ChoiceField(choices=["confirmed", "unchanged"])


class ReportOutSerializer(serializers.Serializer):
    run = ExternalRunOutSerializer()
    ledger = ReportLedgerOutSerializer(many=True, help_text="what each tool.finished did, in order")


class PublicKeyOutSerializer(serializers.Serializer):
    key_id = serializers.CharField()
    alg = serializers.ChoiceField(choices=["Ed25519"])
    public_key = serializers.CharField(help_text="base64 of the raw 32-byte public key")
    status = serializers.ChoiceField(choices=["active", "retired"])
    created_at = serializers.DateTimeField(allow_null=True)


class KeysOutSerializer(serializers.Serializer):
    keys = PublicKeyOutSerializer(many=True)
    warning = serializers.CharField()


class SideEffectSerializer(serializers.Serializer):
    idempotency_key = serializers.CharField()
    tool_call_id = serializers.CharField()
    tool = serializers.CharField()
    status = serializers.ChoiceField(choices=EffectStatus.values)
    outcome = serializers.ChoiceField(
        choices=["succeeded", "failed"],
        allow_null=True,
        help_text="how the call ended once confirmed: failed when its result says so (a tool error, "
        "a command that exited non-zero); null while pending or unknown",
    )
    result = ANY_JSON(allow_null=True)
    external_ref = serializers.CharField(allow_null=True)
    decision = serializers.UUIDField(allow_null=True)
    created_at = serializers.DateTimeField()
    updated_at = serializers.DateTimeField()


class AttemptSerializer(serializers.Serializer):
    number = serializers.IntegerField()
    status = serializers.ChoiceField(choices=AttemptStatus.values)
    lease_epoch = serializers.IntegerField()
    worker = serializers.CharField(allow_blank=True)
    started_at = serializers.DateTimeField(allow_null=True)
    ended_at = serializers.DateTimeField(allow_null=True)


class FollowUpOutSerializer(serializers.Serializer):
    number = serializers.IntegerField(help_text="1, 2, … : the turn it opened (the submission is turn 0)")
    input = serializers.CharField()
    position = serializers.IntegerField(help_text="its place in `messages`")
    posted_by = serializers.CharField()
    created_at = serializers.DateTimeField()


class RunOutSerializer(serializers.Serializer):
    id = serializers.UUIDField()
    kind = serializers.ChoiceField(
        choices=RunKind.values, help_text="external: run by a framework outside the desk"
    )
    framework = serializers.CharField(
        allow_blank=True, help_text="an external run's framework; empty otherwise"
    )
    external_id = serializers.CharField(
        allow_blank=True, help_text="an external run's own id; empty otherwise"
    )
    title = serializers.CharField(allow_blank=True)
    context = ANY_JSON(
        allow_null=True, help_text="an external run's context messages (untrusted); null otherwise"
    )
    agent = serializers.CharField()
    status = serializers.ChoiceField(choices=RunStatus.values)
    input = serializers.CharField(allow_blank=True)
    output = serializers.CharField(allow_null=True, allow_blank=True)
    error = serializers.CharField(allow_null=True, allow_blank=True)
    error_kind = serializers.ChoiceField(choices=ErrorKind.values, allow_null=True)
    submitted_by = serializers.CharField()
    reviewers = serializers.ListField(child=serializers.CharField())
    approval_ttl_seconds = serializers.IntegerField()
    metadata = serializers.DictField()
    revision = serializers.IntegerField()
    created_at = serializers.DateTimeField()
    updated_at = serializers.DateTimeField()
    model = ANY_JSON(allow_null=True, help_text="null for an external run")
    checkpoint_id = serializers.UUIDField(allow_null=True)
    approvals = ApprovalOutSerializer(many=True)
    messages = serializers.ListField(child=ANY_JSON(), help_text="the chat messages, oldest first")
    side_effects = SideEffectSerializer(many=True)
    thread = FollowUpOutSerializer(many=True, help_text="follow-up messages, oldest first")
    attempts = AttemptSerializer(many=True)


class EventSerializer(serializers.Serializer):
    seq = serializers.IntegerField(
        help_text="the desk event sequence number; `after=` and Last-Event-ID take it"
    )
    type = serializers.CharField(help_text="approval.created, approval.updated, run.updated, …")
    data = ANY_JSON()


def page_of(name: str, item: type[serializers.Serializer]) -> serializers.Serializer:
    return inline_serializer(
        name=name,
        fields={
            "results": item(many=True),
            "next": serializers.URLField(
                allow_null=True, help_text="the next page; null only on the last page"
            ),
        },
    )


class GrantOutSerializer(serializers.Serializer):  # a standing grant (approvals.grants.create)
    id = serializers.UUIDField()
    tool = serializers.CharField()
    agent = serializers.CharField()
    scope = serializers.ChoiceField(choices=["run", "agent", "global"])
    run = serializers.UUIDField(allow_null=True)
    match = ANY_JSON(help_text='"exact", or the constraints: {"to": {"endswith": "@example.com"}}')
    arguments_sha256 = serializers.CharField(allow_null=True)
    arguments = ANY_JSON(allow_null=True)
    max_uses = serializers.IntegerField()
    uses = serializers.IntegerField()
    expires_at = serializers.DateTimeField()
    status = serializers.ChoiceField(choices=["live", "revoked", "expired", "used_up"])
    granted_by = serializers.CharField()
    approval = serializers.UUIDField()
    decision = serializers.UUIDField()
    created_at = serializers.DateTimeField()
    revoked_at = serializers.DateTimeField(allow_null=True)
    revoked_by = serializers.CharField(allow_null=True)
    payload = ANY_JSON(help_text="the signed grant payload (agents/grants.py)")
    signature = serializers.CharField()
    key_id = serializers.CharField()


class ToolSourceOutSerializer(serializers.Serializer):
    kind = serializers.ChoiceField(choices=["module", "mcp"])
    name = serializers.CharField(help_text="the module's dotted path, or the MCP server's name")


class ToolQuorumOutSerializer(serializers.Serializer):
    required = serializers.IntegerField(help_text="how many different reviewers must approve a call")
    groups = serializers.ListField(
        child=serializers.CharField(), help_text="when not empty, a vote counts only from these groups"
    )


class AgentToolOutSerializer(serializers.Serializer):
    name = serializers.CharField()
    description = serializers.CharField(allow_blank=True)
    parameters = ANY_JSON(help_text="the arguments' JSON Schema (draft 2020-12)")
    effect = serializers.ChoiceField(choices=[effect.value for effect in Effect])
    approval = serializers.ChoiceField(
        choices=["always", "never", "depends"],
        help_text="whether a call waits for a human: always, never, or depending on its arguments "
        "(the agent's policy decides per call; it may also read the run's earlier calls)",
    )
    grantable = serializers.BooleanField(help_text="whether a standing grant may allow a call")
    quorum = ToolQuorumOutSerializer()
    requires_device_keys = serializers.BooleanField(
        help_text="a call runs only on a decision signed by the reviewer's device key"
    )
    output_trusted = serializers.BooleanField(
        help_text="whether its output counts as trusted; an argument only from untrusted output is flagged"
    )
    aimed = serializers.ListField(
        child=serializers.CharField(),
        allow_null=True,
        help_text="JSON Pointers of the arguments that aim the effect (recipient, order, command); null: all",
    )
    second_opinion = serializers.BooleanField(
        help_text="whether a model gives an advisory reading of each call"
    )
    source = ToolSourceOutSerializer(help_text="where the tool comes from: a module, or an MCP server")


class AgentOutSerializer(serializers.Serializer):
    name = serializers.CharField(help_text="what `agent` names when a run is submitted")
    requires_device_keys = serializers.BooleanField(
        help_text="every decision on this agent's calls must be signed by a device key"
    )
    tools = AgentToolOutSerializer(many=True)


RunPage = page_of("RunPage", RunOutSerializer)
AgentPage = page_of("AgentPage", AgentOutSerializer)
GrantPage = page_of("GrantPage", GrantOutSerializer)
ApprovalPage = page_of("ApprovalPage", ApprovalOutSerializer)
EventPage = page_of("EventPage", EventSerializer)


IDEMPOTENCY_KEY = OpenApiParameter(
    "Idempotency-Key",
    str,
    OpenApiParameter.HEADER,
    description=(
        "1 to 200 characters, surrounding spaces not counted (blanks alone: 400 `bad_idempotency_key`); "
        "a repeat replays the first success (IETF draft); a 4xx or 5xx keeps the key free"
    ),
)
LAST_EVENT_ID = OpenApiParameter(
    "Last-Event-ID", int, OpenApiParameter.HEADER, description="resume after this sequence number"
)


def scopes(*names: str) -> dict:
    return {"x-required-scopes": list(names)}


__all__ = [name for name in dir() if not name.startswith("_")]
