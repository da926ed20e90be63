"""omni.banks: hash banks — media already judged, matched before the model (issue 36, item 1: the matching core).

    entries.py  a bank file (CSV or JSONL: hash_type, hash, label, action, source, added) read and checked, every
                problem naming the file, the line and the field; the bank's version is its file's sha256
    index.py    `Bank`: a bank's entries indexed for lookup — PDQ by Hamming distance (faiss' multi-index hashing,
                exact within the threshold by the pigeonhole principle), sha256 exactly

A medium's hashes come from `preprocess/hashes.py`. Knows nothing of HTTP, the engine, the model or policies: the
decision path asks it, and it answers matches.
"""
