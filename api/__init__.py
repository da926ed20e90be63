"""api: the edges of omni-decide — the HTTP service (FastAPI app, routes, one error table, metrics, settings) and argv.

Knows the core only through `omni.contract.request.parse_request` and the DecisionEngine surface; never imports torch itself.
"""
