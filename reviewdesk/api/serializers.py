"""Input validation for the API. Representations are built in `representations`."""

from __future__ import annotations

from rest_framework import serializers

from reviewdesk.approvals.models import Verdict


class StrictSerializer(serializers.Serializer):
    """Unknown fields are an error, not silently dropped: a typo must not change meaning."""

    def validate(self, attrs):
        unknown = set(self.initial_data) - set(self.fields) if isinstance(self.initial_data, dict) else set()
        if unknown:
            raise serializers.ValidationError({name: ["unknown field"] for name in sorted(unknown)})
        return attrs


class RunSubmitSerializer(StrictSerializer):
    agent = serializers.CharField(max_length=100)
    input = serializers.CharField(max_length=100_000)
    model = serializers.JSONField(required=False)
    reviewers = serializers.ListField(
        child=serializers.CharField(max_length=150), required=False, max_length=20
    )
    approval_ttl_seconds = serializers.IntegerField(required=False, min_value=10, max_value=30 * 24 * 3600)
    metadata = serializers.DictField(required=False)


class RetrySerializer(StrictSerializer):
    checkpoint_id = serializers.UUIDField(required=False)


class DecisionSerializer(StrictSerializer):
    verdict = serializers.ChoiceField(choices=Verdict.values)
    reason = serializers.CharField(max_length=10_000, required=False, allow_blank=True, default="")
    note = serializers.CharField(max_length=10_000, required=False, allow_blank=True, default="")
    external_ref = serializers.CharField(max_length=200, required=False, allow_blank=True, default="")
    arguments = serializers.JSONField(required=False)
    checkpoint_id = serializers.UUIDField()

    def validate(self, attrs):
        attrs = super().validate(attrs)
        if attrs["verdict"] == Verdict.EDIT and not isinstance(attrs.get("arguments"), dict):
            raise serializers.ValidationError(
                {"arguments": ["an edit needs the changed arguments as an object"]}
            )
        if attrs["verdict"] != Verdict.EDIT and "arguments" in attrs:
            raise serializers.ValidationError({"arguments": ["only an edit carries arguments"]})
        return attrs
