"""`CacheAffinityRouter`: Ray Serve's request-router extension point, ranking the engine replicas by cache affinity.

The gateway calls the engine deployment with `affinity=<key>` (`api.cluster.affinity.affinity_key`); Ray Serve
builds one router per deployment handle and asks it, for each pending request, which replicas to try in which order.
This one returns [[the key's home replica], the others least loaded first] — or only the least-loaded order when
the home is busy (`slack_requests` more in its queue than the least loaded replica) or the call has no key. Ray
then sends to the first replica of the first group that accepts (queue below `max_ongoing_requests`), probing queue
lengths when its cache has none. A call for an adapter (Ray's `multiplexed_model_id`) is ranked by Ray's own
multiplexing first (`MultiplexMixin`: the replicas where that adapter is resident, then those with the fewest
adapters, then the rest), by affinity within each of those groups. Replicas that die or are stopping are taken out of the candidates by Ray.
Knows nothing of HTTP or the engine; the ranking itself is `api.cluster.affinity`.
"""
from __future__ import annotations

from ray.serve.request_router import MultiplexMixin, PendingRequest, RequestRouter, RunningReplica

from api.cluster.affinity import rank_replicas

DEFAULT_SLACK_REQUESTS = 8


class CacheAffinityRouter(MultiplexMixin, RequestRouter):
    def initialize_state(self, slack_requests: int = DEFAULT_SLACK_REQUESTS, **_: object) -> None:
        self.slack_requests = int(slack_requests)

    async def choose_replicas(self, candidate_replicas: list[RunningReplica],
                              pending_request: PendingRequest | None = None) -> list[list[RunningReplica]]:
        by_id = {replica.replica_id.unique_id: replica for replica in candidate_replicas}
        key = pending_request.kwargs.get("affinity") if pending_request is not None else None
        lengths = {rid: self._replica_queue_len_cache.get(replica.replica_id) for rid, replica in by_id.items()}
        slack = getattr(self, "slack_requests", DEFAULT_SLACK_REQUESTS)
        groups = [[by_id[rid] for rid in group] for group in rank_replicas(key, lengths, slack)]
        model_id = pending_request.metadata.multiplexed_model_id if pending_request is not None else ""
        if not model_id:
            return groups
        order = {replica.replica_id.unique_id: i for i, replica in enumerate(r for group in groups for r in group)}
        tiers = self.rank_replicas_via_multiplex(candidate_replicas, model_id)
        return [sorted(tier, key=lambda r: order.get(r.replica_id.unique_id, len(order))) for tier in tiers if tier]
