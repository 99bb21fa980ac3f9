"""The shared SSE framer: the same events however the bytes are cut, CR/LF/CRLF alike."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from lorafleet_core.wire.sse import SseFramer, event_data, event_json

# Pairs of (end of the data line, blank line). A CR followed by an LF is one CRLF, so "\r" then
# "\n..." is left out: that would be a single line end, not an event boundary.
_ENDINGS = [
    ("\n", "\n"),
    ("\r\n", "\r\n"),
    ("\r", "\r"),
    ("\n", "\r\n"),
    ("\r\n", "\n"),
    ("\n", "\r"),
    ("\r\n", "\r"),
    ("\r", "\r\n"),
]
_payload = st.text(
    alphabet=st.characters(exclude_categories=["Cs"], exclude_characters="\r\n"),
    min_size=1,
    max_size=30,
)


def _frame_all(stream: bytes, cuts: list[int]) -> list[bytes]:
    framer = SseFramer()
    out: list[bytes] = []
    start = 0
    for cut in [*sorted(set(cuts)), len(stream)]:
        out.extend(framer.feed(stream[start:cut]))
        start = cut
    rest = framer.flush()
    return out + ([rest] if rest is not None else [])


@given(
    events=st.lists(st.tuples(_payload, st.sampled_from(_ENDINGS)), min_size=1, max_size=8),
    data=st.data(),
)
def test_events_survive_any_chunk_split_and_any_line_ending(events, data):
    stream = b"".join(
        b"data: " + p.encode() + end.encode() + blank.encode() for p, (end, blank) in events
    )
    cuts = data.draw(st.lists(st.integers(0, len(stream)), max_size=12))
    expected = [b"data: " + p.encode() + b"\n\n" for p, _ in events]
    assert _frame_all(stream, cuts) == expected
    assert [event_data(e) for e in expected] == [p.encode() for p, _ in events]


def test_a_crlf_split_between_cr_and_lf_does_not_merge_two_events():
    stream = b'data: {"a":1}\r\n\r\ndata: {"b":2}\r\n\r\n'
    cut = stream.index(b"\r\n\r\n") + 3  # "...\r\n\r" | "\n..."
    framer = SseFramer()
    first = framer.feed(stream[:cut])
    assert first == []  # the trailing CR may still become a CRLF
    events = framer.feed(stream[cut:])
    assert [event_json(e) for e in events] == [{"a": 1}, {"b": 2}]


def test_an_unterminated_last_event_comes_out_at_flush_and_done_is_not_json():
    framer = SseFramer()
    assert framer.feed(b"data: [DONE]") == []
    rest = framer.flush()
    assert rest == b"data: [DONE]\n\n"
    assert event_json(rest) is None
    assert event_data(b": keep-alive\n\n") is None
    assert event_data(b"data:x\ndata: y\n\n") == b"x\ny"
