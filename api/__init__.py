"""api: the edges of omni-decide, over the core in `omni/`.

    api/http/  the FastAPI service: app, routes (System One, Cloudflare's route), transport (bytes -> JSON + parts),
               schemas (docs only), the one error table, Prometheus metrics, settings (the only env reader)
    api/cli/   the `omni` command: decide, make-tiny, serve, eval, calibrate, finetune

Requests enter through `omni.contract.request.parse_request` (the one wire parser) and are answered by
`omni.serve.engine.DecisionEngine`; the CLI's learning commands use `omni.learn` and `omni.model`. Never imports
torch itself.
"""
