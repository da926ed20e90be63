"""api.http: the FastAPI service (app, routes, transport, schemas, the error table, metrics, settings)."""
