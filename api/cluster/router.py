"""`CacheAffinityRouter`: Ray Serve's request-router extension point, ranking the engine replicas by cache affinity.

The gateway calls the engine deployment with `affinity=<key>` (`api.cluster.affinity.affinity_key`); Ray Serve
builds one router per deployment handle and asks it, for each pending request, which replicas to try in which order.
This one returns [[the key's home replica], the others least loaded first] — or only the least-loaded order when
the home is busy (`slack_requests` more in its queue than the least loaded replica) or the call has no key. Ray
then sends to the first replica of the first group that accepts (queue below `max_ongoing_requests`), probing queue
lengths when its cache has none. Replicas that die or are stopping are taken out of the candidates by Ray.
Knows nothing of HTTP or the engine; the ranking itself is `api.cluster.affinity`.
"""
from __future__ import annotations

from ray.serve.request_router import PendingRequest, RequestRouter, RunningReplica

from api.cluster.affinity import rank_replicas

DEFAULT_SLACK_REQUESTS = 8


class CacheAffinityRouter(RequestRouter):
    def initialize_state(self, slack_requests: int = DEFAULT_SLACK_REQUESTS, **_: object) -> None:
        self.slack_requests = int(slack_requests)

    async def choose_replicas(self, candidate_replicas: list[RunningReplica],
                              pending_request: PendingRequest | None = None) -> list[list[RunningReplica]]:
        by_id = {replica.replica_id.unique_id: replica for replica in candidate_replicas}
        key = pending_request.kwargs.get("affinity") if pending_request is not None else None
        lengths = {rid: self._replica_queue_len_cache.get(replica.replica_id) for rid, replica in by_id.items()}
        slack = getattr(self, "slack_requests", DEFAULT_SLACK_REQUESTS)
        return [[by_id[rid] for rid in group] for group in rank_replicas(key, lengths, slack)]
