"""The API's views, a module per domain (runs, approvals, the device-signing payload, threads,
grants, webhooks, the audit trail, the SSE streams, the OpenAPI document). Thin: parse, fetch
by id, call one service, render. Every list pages with a cursor (`api.paging`) and declares its
query parameters once (`api.filters`); every error is problem+json (`api.errors`)."""
