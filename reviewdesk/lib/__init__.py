"""Small libraries the apps share: database helpers (and, fenced, the hand-written SQL dialect
that only the apps' `rows.py` modules use), the one error type, input limits, times, fault
injection for the crash tests, the admin's read-only base and the tools' world by setting."""
