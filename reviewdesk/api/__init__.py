"""The API (v1): DRF views by domain (`views/`), each list's filters (`filters.py`), cursor
paging, Idempotency-Key, per-token throttling, problem+json errors and the OpenAPI document."""
