"""api.http: the HTTP service around one engine (the `ServingEngine` surface of omni.serve).

    app.py         create_app(settings, engine=None): routes, error handlers, request ids, lifespan (load, drain)
    routes.py      /v1/systemone and the shared `decide` path, /v1/models, /v1/whoami, /health, /ready, /metrics
    dependencies.py  what every router depends on: `ServiceState` (`service(request)`) and `require_role`, the one
                   check of who calls
    identity.py    callers and roles (caller < reviewer < admin): the keys file's `KEY [NAME [ROLE]]` lines, names
    cloudflare.py  POST /accounts/{id}/ai/run/@cf/cloudflare/{model}: the same decision in Cloudflare's envelope
    review.py      /v1/review/...: review queues, their items and media, labels, guidelines, eval reports
    guidelines.py  the queues' guidelines: a markdown file per queue, rendered once with raw HTML off
    admin.py       /v1/admin/policy and /v1/admin/banks: the policy and the hash banks in force, their reloads
                   (as SIGHUP)
    appeals.py     /v1/decisions/{id}/appeal and /v1/appeals: logged decisions contested, upheld or reversed
    adapters.py    adapters at the edge: /v1/admin/adapters and /v1/admin/shadows, /v1/models' entries, the
                   --adapters DIR rescan (SIGHUP)
    shadow.py      a decision's line in the decision log, with its shadow candidate's block once the score is in
    ui.py          the workbench page at /ui (its files are in static/: index.html, app.js, app.css, icon.svg)
    transport.py   headers, bounded decompression, JSON and multipart -> (JSON body, named parts): bytes only
    errors.py      the ONE error table (status, body shape, headers, Cloudflare code)
    drain.py       the drain gate: once draining, new requests get 503 (Retry-After, Connection: close)
    schemas.py     pydantic shapes for the OpenAPI docs (never used to validate)
    review_schemas.py  the review routes' shapes and request bodies for the OpenAPI docs
    metrics.py     Prometheus metrics of one app
    webhooks.py    signed webhook deliveries: bounded queue, retries with backoff, dead-letter file, drain
    webhook_transport.py  an httpx transport whose every request (a delivery attempt) is bounded as a whole
    dead_letters.py  the webhook dead-letter file: lines appended whole; what it does not take waits and is retried
    settings.py    Settings from OMNI_* (the only place that reads the environment) and flags
    settings_lists.py  list settings (comma lists, NAME=VALUE pairs), the adapters' start checks, SettingsError

Knows the engine only through its serving surface (readiness, submit, info, stats) and never imports torch.
"""
