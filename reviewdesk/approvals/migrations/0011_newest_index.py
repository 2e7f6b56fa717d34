from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):
    """approval_newest for the API's list (newest first by created_at, then id), and
    approval_targeted re-created after it, unchanged: on SQLite with no statistics, the index
    created last wins a tie between indexes that seek on `status` alone, and the assignment
    check's read must use the partial index over the few assigned rows, not a scan of every
    pending one (see ApprovalRequest.Meta.indexes)."""

    dependencies = [
        ("approvals", "0010_targeted_index"),
        ("runs", "0008_follow_ups"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.RemoveIndex(model_name="approvalrequest", name="approval_targeted"),
        migrations.AddIndex(
            model_name="approvalrequest",
            index=models.Index(fields=["status", "-created_at", "-id"], name="approval_newest"),
        ),
        migrations.AddIndex(
            model_name="approvalrequest",
            index=models.Index(
                condition=models.Q(("assignees", []), _negated=True), fields=["status"], name="approval_targeted"
            ),
        ),
    ]
