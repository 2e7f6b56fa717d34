"""Rows written before the chain was keyed keep verifying under the plain SHA-256 rule.

The field is added with default PLAIN (1), so every existing row is marked as
written under the old rule; new rows default to KEYED (2).
"""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("audit", "0001_initial"),
    ]

    operations = [
        migrations.AddField(
            model_name="auditevent",
            name="version",
            field=models.PositiveSmallIntegerField(choices=[(1, "Plain"), (2, "Keyed")], default=1),
        ),
        migrations.AlterField(
            model_name="auditevent",
            name="version",
            field=models.PositiveSmallIntegerField(choices=[(1, "Plain"), (2, "Keyed")], default=2),
        ),
        migrations.AddConstraint(
            model_name="auditevent",
            constraint=models.CheckConstraint(
                condition=models.Q(("version__in", [1, 2])), name="audit_event_version_known"
            ),
        ),
    ]
