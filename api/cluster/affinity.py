"""Cache affinity: which replica should answer a request, and the order to try replicas in.

A request's *affinity key* is the content hash of its media when it has any (a replica that decoded those files
has them in its media cache, and its prefix cache when the state repeats too), else the hash of its state (the
prompt prefix before the questions). Each key has a home replica by rendezvous hashing over the replicas' ids:
every router instance (one per gateway replica) agrees without sharing state, and adding or removing a replica
moves only the keys that were or will be at home there. The home goes first unless it is busy — more than
`slack_requests` ahead of the least loaded replica — and the least loaded come next.
Knows nothing of Ray, HTTP or the engine: it sees requests, replica ids and queue lengths.
"""
from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence

from omni.contract.types import DecisionRequest


def affinity_key(request: DecisionRequest) -> str:
    """The media's content hash (in prompt order) when there are media, else the state's; hex."""
    digest = hashlib.sha256()
    if request.media:
        for item in request.media:
            digest.update(f"{item.slot}\0{len(item.data)}\0".encode())
            digest.update(item.data)
    else:
        state = request.state if isinstance(request.state, str) else json.dumps(request.state, sort_keys=True)
        digest.update(b"state\0" + state.encode("utf-8", "surrogatepass"))
    return digest.hexdigest()


def home_replica(key: str, replica_ids: Sequence[str]) -> str:
    """The replica a key lives on: the highest rendezvous score of (key, replica id)."""
    return max(replica_ids, key=lambda rid: hashlib.blake2b(f"{key}\0{rid}".encode(), digest_size=8).digest())


def rank_replicas(key: str | None, queue_lengths: Mapping[str, int | None],
                  slack_requests: int) -> list[list[str]]:
    """Groups of replica ids, most preferred first: [[home], the rest least loaded first] — or, without a key or
    when the home is more than `slack_requests` ahead of the least loaded, everything least loaded first. An unknown
    queue length (None) counts as empty."""
    if not queue_lengths:
        return []
    load = {rid: (n or 0) for rid, n in queue_lengths.items()}
    by_load = sorted(load, key=lambda rid: (load[rid], rid))
    if key is None:
        return [by_load]
    home = home_replica(key, sorted(load))
    if load[home] - load[by_load[0]] > slack_requests:
        return [by_load]
    return [[home], [rid for rid in by_load if rid != home]] if len(load) > 1 else [[home]]
