"""omni.banks: hash banks — media already judged, matched before the model (issue 36, item 1).

    entries.py    a bank file (CSV or JSONL: hash_type, hash, label, action, source, added) read and checked, every
                  problem naming the file, the line and the field; the bank's version is its file's sha256
    index.py      `Bank`: a bank's entries indexed for lookup — PDQ by Hamming distance (faiss' multi-index hashing,
                  exact within the threshold by the pigeonhole principle), vPDQ videos by their frames (vPDQ's
                  comparison rule), sha256 exactly
    matching.py   `BankSet.consult`: a request's media hashed and looked up; which match is shown and whether it
                  answers without the model
    shelf.py      `BankShelf`: the banks a server runs with, reloaded all or nothing
    video_hasher.py  `VideoHasher`: request videos' vPDQ hashes computed in worker processes (a hostile video costs
                  a worker, never the server), with a timeout
    vpdq_worker.py  the worker process a `VideoHasher` runs (`python -m omni.banks.vpdq_worker`): jobs in on stdin,
                  vPDQ features or the typed media error out on stdout
    decisions.py  the decision a bank answers (no forward), or the model's with the match riding along
    gate.py       the banks before the model wherever a request is answered (`omni serve`, `omni decide`, `omni batch`,
                  an in-process `omni line`): consult, the bank's answer or the model's with the match
    opening.py    `open_banks`: bank files read and indexed with their video hasher, the same for every command

A medium's hashes come from `preprocess/hashes.py`. Knows nothing of HTTP, the engine's internals or policies: the
decision path asks it, and it answers matches and decisions.
"""
