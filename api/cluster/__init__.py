"""The cluster edge: `omni serve` on Ray Serve — the same FastAPI app at the front, one engine per replica behind it.

- `affinity.py`: which replica should answer a request (its media's content hash, else its state), and the ranking
  that falls back to the least loaded replica when that one is busy; plain Python, no Ray;
- `router.py`: `CacheAffinityRouter`, that ranking as Ray Serve's own request-router extension point;
- `adapters.py`: adapters under Ray Serve's model multiplexing: the served table every replica knows, making one
  resident in (Ray's loader) or evicting it from (Ray's LRU) a replica's engine; the names the gateway serves;
- `remote.py`: `RemoteEngine`, the engine surface the HTTP app uses (`submit`, `info`, stats) over a deployment
  handle, with the replicas' cache and batcher counters summed for `/metrics`;
- `deployments.py`: the two deployments (`OmniGateway`: the app; `OmniEngine`: a `DecisionEngine`) and
  `build_app(args)`, the application builder that `serve deploy` configs and `omni serve --ray` share;
- `launch.py`: `omni serve --ray`: a local Ray instance, the application, drain on SIGTERM.
Only this room imports Ray (the `[cluster]` extra); nothing outside it knows Ray exists.
"""
