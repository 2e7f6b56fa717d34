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
