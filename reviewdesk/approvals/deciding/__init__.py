"""Deciding an approval: `checks.approval_check_decide` authorises and validates under the
run's and the approval's row locks (in that order, as the worker takes them), and
`record.approval_do_decide` signs, stores, audits and emits; `record.approval_decide` does both
in one transaction. Every door (API, desk form, terminal) hands in one `input.DecisionInput`."""
