"""Input validation for the API. Representations are built in `representations`."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from reviewdesk.approvals.models import Verdict
from reviewdesk.lib.limits import EXTERNAL_REF_MAX, TEXT_MAX


class _StringsOnly:
    """A field whose JSON value must be a string: DRF's own read a number as its str(), and a
    UUIDField an integer as a UUID (123 is 00000000-…-00007b), which made a mistyped
    checkpoint_id a 409 `stale` instead of a 422 naming the field."""

    def to_internal_value(self, data):
        if not isinstance(data, str):
            self.fail("invalid")
        return super().to_internal_value(data)


class StrictCharField(_StringsOnly, serializers.CharField):
    pass


class StrictUUIDField(_StringsOnly, serializers.UUIDField):
    pass


class StrictSerializer(serializers.Serializer):
    """Unknown fields are an error, not silently dropped: a typo must not change meaning."""

    def validate(self, attrs):
        unknown = set(self.initial_data) - set(self.fields) if isinstance(self.initial_data, dict) else set()
        if unknown:
            raise serializers.ValidationError({name: ["unknown field"] for name in sorted(unknown)})
        return attrs


class RunSubmitSerializer(StrictSerializer):
    agent = StrictCharField(max_length=100)
    input = StrictCharField(max_length=100_000)
    model = serializers.JSONField(required=False)
    reviewers = serializers.ListField(child=StrictCharField(max_length=150), required=False, max_length=20)
    approval_ttl_seconds = serializers.IntegerField(required=False, min_value=10, max_value=30 * 24 * 3600)
    metadata = serializers.DictField(required=False)


class RetrySerializer(StrictSerializer):
    checkpoint_id = StrictUUIDField(required=False)


# A decision is only parsed here: its rules (lengths, which verdict answers which kind of
# request, what an edit or a confirm needs) are `approvals.deciding.input.decision_input_check`,
# which the decide service runs for the API and the desk form alike. The fields below are
# plain strings whose OpenAPI schema still shows the verdicts and the limits.
@extend_schema_field(serializers.ChoiceField(choices=Verdict.values))
class VerdictField(StrictCharField):
    pass


@extend_schema_field({"type": "string", "maxLength": TEXT_MAX})
class DecisionTextField(StrictCharField):
    pass


@extend_schema_field({"type": "string", "maxLength": EXTERNAL_REF_MAX})
class ExternalRefField(StrictCharField):
    pass


class DecisionSerializer(StrictSerializer):
    verdict = VerdictField(trim_whitespace=False)  # " approve" is no verdict, as before
    reason = DecisionTextField(required=False, allow_blank=True, default="")
    note = DecisionTextField(required=False, allow_blank=True, default="")
    external_ref = ExternalRefField(required=False, allow_blank=True, default="")
    # Absent becomes None for the validator; an explicit null is refused here, as it always was.
    arguments = serializers.JSONField(required=False)
    # A question's answer (verdict "answer"): any JSON but null, checked against the question.
    answer = serializers.JSONField(required=False)
    checkpoint_id = StrictUUIDField()
    # With an approve: a standing grant (approvals.grants.create checks it with the decision).
    grant = serializers.JSONField(required=False)
    # A device-signed decision: all three, or none.
    signature = StrictCharField(required=False, max_length=200)
    key_id = StrictCharField(required=False, max_length=64)
    payload = serializers.DictField(required=False, help_text="the payload from /payload, as signed")

    def validate(self, attrs):
        attrs = super().validate(attrs)
        given = [name for name in ("signature", "key_id", "payload") if name in attrs]
        if given and len(given) != 3:
            raise serializers.ValidationError(
                {
                    name: ["a device-signed decision sends signature, key_id and payload together"]
                    for name in given
                }
            )
        return attrs


class QueryJSONField(serializers.JSONField):
    """JSON sent as a query parameter's text (binary). No body parser limited it: nested past
    ~1000 levels json.loads raises RecursionError, which DRF's field let through as a 500."""

    def __init__(self, **kwargs):
        super().__init__(binary=True, **kwargs)

    def to_internal_value(self, data):
        try:
            return super().to_internal_value(data)
        except RecursionError:
            self.fail("invalid")


class DecisionPayloadQuerySerializer(StrictSerializer):
    """The decision about to be signed, as query parameters (`arguments` as JSON, for an edit)."""

    verdict = VerdictField(trim_whitespace=False)
    key_id = StrictCharField(max_length=64)
    checkpoint_id = StrictUUIDField()
    reason = DecisionTextField(required=False, allow_blank=True, default="")
    note = DecisionTextField(required=False, allow_blank=True, default="")
    external_ref = ExternalRefField(required=False, allow_blank=True, default="")
    arguments = QueryJSONField(required=False)
    answer = QueryJSONField(required=False)  # a question's answer, as JSON


class HandoverSerializer(StrictSerializer):
    """Only parsed here: who may receive the item is `approvals.lifecycle.handover`'s to judge (422)."""

    to = StrictCharField(max_length=160, trim_whitespace=False)
    note = DecisionTextField(required=False, allow_blank=True, default="", trim_whitespace=False)


# --- External runs (runs/external/): the shapes only; the service checks hashes, caps, verdicts.


class StrictNestedSerializer(serializers.Serializer):
    """`StrictSerializer` for a serializer used as a field: unknown keys are an error."""

    def to_internal_value(self, data):
        if isinstance(data, dict):
            unknown = set(data) - set(self.fields)
            if unknown:
                raise serializers.ValidationError({name: ["unknown field"] for name in sorted(unknown)})
        return super().to_internal_value(data)


def _id_field(**kwargs):
    # An id is the framework's, exactly: no spaces trimmed, none blank.
    return StrictCharField(max_length=200, trim_whitespace=False, **kwargs)


class ExternalRunSerializer(StrictNestedSerializer):
    external_id = _id_field()
    framework = StrictCharField(max_length=50)
    agent = StrictCharField(max_length=100)
    title = StrictCharField(max_length=200, required=False, allow_blank=True, default="")
    input = StrictCharField(
        max_length=100_000, required=False, allow_blank=True, default="", trim_whitespace=False
    )
    metadata = serializers.DictField(required=False, default=dict)


@extend_schema_field({"type": "string", "maxLength": TEXT_MAX})
class ExternalTextField(StrictCharField):
    pass


class ExternalCallSerializer(StrictNestedSerializer):
    tool_call_id = _id_field()
    tool = StrictCharField(max_length=100)
    arguments = serializers.DictField()
    arguments_sha256 = StrictCharField(min_length=64, max_length=64)
    schema = serializers.JSONField(required=False, allow_null=True, default=None)
    verdicts = serializers.ListField(child=StrictCharField(max_length=20), required=False, max_length=3)
    description = ExternalTextField(required=False, allow_blank=True, default="", trim_whitespace=False)
    reason = ExternalTextField(required=False, allow_blank=True, default="", trim_whitespace=False)
    preview = StrictCharField(
        required=False, allow_blank=True, default="", max_length=64 * 1024, trim_whitespace=False
    )
    reviewers = serializers.ListField(child=StrictCharField(max_length=160), required=False, max_length=20)
    required_approvals = serializers.IntegerField(required=False, min_value=1, max_value=10, default=1)


class ExternalMessageSerializer(StrictNestedSerializer):
    role = serializers.ChoiceField(choices=["user", "assistant", "tool", "system"])
    content = StrictCharField(allow_blank=True, trim_whitespace=False)
    # A tool message's tool and call: where an argument that came from its output came from.
    name = StrictCharField(required=False, max_length=200)
    tool_call_id = StrictCharField(required=False, max_length=200)


class ExternalContextSerializer(StrictNestedSerializer):
    messages = ExternalMessageSerializer(many=True, required=False, default=list)
    truncated = serializers.BooleanField(required=False, default=False)
    # The tools whose output is your own systems' truth; every other tool's output is untrusted.
    trusted_tools = serializers.ListField(
        child=StrictCharField(max_length=200), required=False, default=list, max_length=200
    )


class ExternalSubmitSerializer(StrictSerializer):
    run = ExternalRunSerializer()
    checkpoint = _id_field()
    resume_policy = serializers.ChoiceField(
        choices=["per_call", "all_or_nothing"], required=False, default="per_call"
    )
    calls = ExternalCallSerializer(many=True, allow_empty=False, max_length=50)
    context = ExternalContextSerializer(required=False)
    reviewers = serializers.ListField(child=StrictCharField(max_length=160), required=False, max_length=20)
    approval_ttl_seconds = serializers.IntegerField(required=False, min_value=10, max_value=30 * 24 * 3600)


class ConsumeSerializer(StrictSerializer):
    decision_id = StrictUUIDField()
    nonce = StrictCharField(max_length=64, trim_whitespace=False)


class ReportEventSerializer(StrictNestedSerializer):
    type = serializers.ChoiceField(choices=["tool.finished", "run.finished"])
    tool_call_id = _id_field(required=False)
    status = StrictCharField(max_length=20)
    summary = ExternalTextField(required=False, allow_blank=True, default="", trim_whitespace=False)
    output = StrictCharField(
        required=False, allow_blank=True, default="", max_length=100_000, trim_whitespace=False
    )

    def validate(self, attrs):
        allowed = (
            ("confirmed", "failed", "refused")
            if attrs["type"] == "tool.finished"
            else ("succeeded", "failed", "cancelled")
        )
        if attrs["status"] not in allowed:
            raise serializers.ValidationError(
                {"status": [f"{attrs['type']} takes one of {', '.join(allowed)}"]}
            )
        if attrs["type"] == "tool.finished" and "tool_call_id" not in attrs:
            raise serializers.ValidationError({"tool_call_id": ["tool.finished names its call"]})
        return attrs


class ReportSerializer(StrictSerializer):
    events = ReportEventSerializer(many=True, allow_empty=False, max_length=100)
