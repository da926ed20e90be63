"""omni.serve: answering requests with a model.

    surface.py    ServingEngine: what the HTTP app calls on an engine (DecisionEngine here, RemoteEngine on Ray)
    engine.py     DecisionEngine(config, model=None): warm-up, decide / decide_batch, submit (admission, decode pool)
    adapters.py   AdapterRegistry: served adapter names -> folders, residency (LRU of idle ones), holds, reload,
                  unload, rescan, shadow pairs, policies bound to adapters
    selection.py  a request's `model` -> the adapter version it keeps and its shadow candidate; shadow counters
    shadow.py     ShadowScorer: head-only shadow candidates scored on a thread of their own after the live answer
    batcher.py    MicroBatcher: a bounded queue in front of the one thread that owns the model (REQUEUE: next turn)
    chunking.py   long prefills: admitted if they can finish in time, a chunk per model turn, requeued until done
    admission.py  PrefillBacklog: the long prefills under way and what a prefix token costs here (for admission)
    backlog.py    `omni batch`'s runner: a JSONL file of requests -> one output record per line, resumable
    heap.py       HeapTrimmer: hands memory freed after big work back to the operating system
    cpus.py       the CPUs this process may use (affinity, cgroup quota) and torch threads sized from them
    decision_log.py        DecisionLog: every decision appended to JSONL segments by one writer thread (bounded
                           queue, health, counters; media kept once by sha256)
    decision_log_files.py  the decision log's layout and record format, reading it back, retention
    replay.py     logged decisions re-run on an engine: refused / unreplayable / drift / differs / reproduced, per
                  record and overall, against the audit record's unrounded probabilities

Uses omni.contract and the model surface of omni.model (and omni.model.clef only to load the model its config
names); knows nothing of HTTP, argv, the environment or training.
"""
