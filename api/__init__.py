"""api: the edges of omni-decide, over the core in `omni/`. Imports go one way, down this list:

    api/cli/      the `omni` command: decide, make-tiny, serve, review, batch (in-process or --url), eval,
                  calibrate, finetune, export, replay, policy, report, doctor, line, bank
    api/cluster/  `omni serve --ray`: the same app on Ray Serve, one engine per replica (the only room that imports Ray)
    api/http/     the FastAPI service: app, routes (System One, Cloudflare's route, review), the workbench page,
                  transport (bytes -> JSON + parts), schemas (docs only), the one error table, Prometheus metrics,
                  settings (the only env reader)
    api/line/     `omni line CONFIG.toml`: an inspection line's triggers (folder, MQTT, OPC UA) decided once each,
                  within a deadline, answered to its sinks (the only room that imports watchfiles, paho-mqtt, asyncua)

Requests enter through `omni.contract.request.parse_request` (the one wire parser) and are answered by an engine
with the `omni.serve.surface.ServingEngine` surface (`DecisionEngine` in-process, `RemoteEngine` on Ray); the CLI's
learning commands use `omni.learn` and `omni.model`, the review commands `omni.review`, the policy, report and
export commands `omni.governance`. Never imports torch itself.
"""
