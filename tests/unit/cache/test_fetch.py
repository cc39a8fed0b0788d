"""The job's sources: a stalled one is left once, for the next, with one line saying why."""

from __future__ import annotations

from rocmenv.cache.fetch import Sources


def test_a_source_is_abandoned_once_for_the_next_with_one_log_line() -> None:
    lines: list[str] = []
    sources = Sources(hosts=["mirror:5000", "upstream:5000"], log=lines.append)
    index, host = sources.current()
    assert host == "mirror:5000"
    sources.abandon(index, "0.10 MB/s over the last 20 s")
    sources.abandon(index, "a second thread saw it too")  # already left: no second line
    assert sources.current() == (1, "upstream:5000")
    assert len(lines) == 1 and "mirror:5000" in lines[0] and "upstream:5000" in lines[0]


def test_the_last_source_is_never_abandoned() -> None:
    lines: list[str] = []
    sources = Sources(hosts=["upstream:5000"], log=lines.append)
    sources.abandon(0, "slow")
    assert sources.current() == (0, "upstream:5000") and lines == []


def test_bytes_are_counted_per_source() -> None:
    sources = Sources(hosts=["m", "u"], log=lambda _: None)
    sources.count("m", 5)
    sources.count("u", 7)
    sources.count("m", 1)
    assert sources.received == {"m": 6, "u": 7} and sources.network_bytes == 13
