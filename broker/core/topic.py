"""Topic-exchange pattern matching (AMQP 0-9-1 section 3.1.3.3).

Routing keys and binding patterns are dot-separated words; in a pattern ``*`` matches
exactly one word and ``#`` matches zero or more words.
"""

from __future__ import annotations

from functools import lru_cache


@lru_cache(maxsize=4096)
def _words(text: str) -> tuple[str, ...]:
    # The empty key has no words (RabbitMQ): "*" does not match it, "" and "#" do.
    return tuple(text.split(".")) if text else ()


def topic_matches(pattern: str, routing_key: str) -> bool:
    """True when ``routing_key`` matches the binding ``pattern``."""
    return _match(_words(pattern), _words(routing_key))


def _match(pattern: tuple[str, ...], key: tuple[str, ...]) -> bool:
    # reachable[j]: the pattern prefix processed so far can consume exactly key[:j].
    reachable = [False] * (len(key) + 1)
    reachable[0] = True
    for word in pattern:
        if word == "#":
            # Zero or more words: once a position is reachable, every later one is.
            seen = False
            for j in range(len(reachable)):
                seen = seen or reachable[j]
                reachable[j] = seen
        else:
            nxt = [False] * (len(key) + 1)
            for j in range(len(key)):
                if reachable[j] and (word == "*" or word == key[j]):
                    nxt[j + 1] = True
            reachable = nxt
        if not any(reachable):
            return False
    return reachable[len(key)]
