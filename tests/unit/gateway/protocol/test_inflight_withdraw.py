"""``InFlight.withdraw``: a request held for a local answer that will get none (the
version bridge sends an acks=0 produce on unanswered) stops holding later answers."""

from __future__ import annotations

from gateway.protocol import InFlight


def test_a_withdrawn_entry_releases_the_local_answers_behind_it() -> None:
    inflight = InFlight()
    held = inflight.add(0, 2, 1, to_upstream=False)  # the bridged acks=0 produce
    later = inflight.add(18, 0, 2, to_upstream=False)
    assert inflight.answer_locally(later, b"answer") == []  # waits behind ``held``
    assert inflight.withdraw(held) == [b"answer"]
    assert inflight.entries == [] and len(inflight) == 0
    assert inflight.withdraw(held) == []  # twice: nothing more


def test_withdraw_waits_for_an_upstream_answer_still_ahead() -> None:
    inflight = InFlight()
    ahead = inflight.add(1, 11, 1)  # a forwarded fetch, unanswered yet
    held = inflight.add(0, 2, 2, to_upstream=False)
    later = inflight.add(18, 0, 3, to_upstream=False)
    inflight.answer_locally(later, b"answer")
    assert inflight.withdraw(held) == []
    assert inflight.finish(ahead) == [b"answer"]
