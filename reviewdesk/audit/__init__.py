"""The audit trail: who did what to which subject, in a keyed hash chain whose head is anchored
outside the database; its writes, its checks, and beat's signed full check."""
