"""Review tokens (flowctl.engine.tokens): made once, stored only as their hash."""
from __future__ import annotations

import hashlib

from flowctl.engine.tokens import hash_token, new_token


def test_a_new_token_is_random_and_comes_with_its_hash():
    (a, a_hash), (b, _) = new_token(), new_token()
    assert a != b and len(a) == 32
    assert a_hash == hash_token(a) == hashlib.sha256(a.encode()).hexdigest()


def test_a_paused_review_stores_the_hash_never_the_token(tmp_path):
    from support.enginekit import Harness, build

    root = build(tmp_path, {"states/ask.yaml": "id: ask\ntype: review\ndecisions: [ok]\n",
                            "transitions/f.yaml": "flow: f\nstart: ask\ntransitions:\n  - {from: ask, to: done}\n"})
    h = Harness(root)
    result = h.run()
    token = result.review["token"]
    row = h.store.get_run(result.run_id)
    assert row["cursor"]["pending"]["token_hash"] == hash_token(token)
    assert token not in str(row) and all(token not in str(e) for e in h.store.events(result.run_id))
    assert h.engine.resume(result.run_id, token=token, decision="ok").status == "succeeded"
