from django.db import migrations, models


class Migration(migrations.Migration):
    """approval_targeted in the queue's order (status, expires_at, created_at, id): the desk's
    tiers read the assigned rows naming the reviewer by expiry, stopping at a page, instead of
    every pending row in order (approvals.routing.in_queue_order). Re-created last, as 0011
    explains, so SQLite still prefers it for the assignment check."""

    dependencies = [("approvals", "0011_newest_index")]

    operations = [
        migrations.RemoveIndex(model_name="approvalrequest", name="approval_targeted"),
        migrations.AddIndex(
            model_name="approvalrequest",
            index=models.Index(
                condition=models.Q(("assignees", []), _negated=True),
                fields=["status", "expires_at", "created_at", "id"],
                name="approval_targeted",
            ),
        ),
    ]
