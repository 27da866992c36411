"""The commit path's cache: bounded, keeps what is hit, lock-free reads under threads."""

from __future__ import annotations

import threading

from catalog.lru import LockedLRU


def test_the_oldest_entry_not_hit_goes_first() -> None:
    cache: LockedLRU[str, int] = LockedLRU(3)
    for i, key in enumerate("abc"):
        cache.put(key, i)
    assert cache.get("a") == 0  # a hit: "a" gets a second chance
    cache.put("d", 3)
    assert cache.get("b") is None and len(cache) == 3
    assert (cache.get("a"), cache.get("c"), cache.get("d")) == (0, 2, 3)


def test_a_second_chance_is_used_up_and_the_size_holds() -> None:
    cache: LockedLRU[int, int] = LockedLRU(2)
    cache.put(1, 1)
    cache.put(2, 2)
    cache.get(1)
    cache.put(3, 3)  # 2 goes; 1 moves back, its mark cleared
    cache.put(4, 4)  # 3 is now the oldest and was never hit: 3 goes
    assert sorted(k for k in (1, 2, 3, 4) if cache.get(k) is not None) == [1, 4]
    for k in range(100):
        cache.get(k)
        cache.put(k, k)
    assert len(cache) == 2


def test_replacing_a_value_keeps_one_entry() -> None:
    cache: LockedLRU[str, int] = LockedLRU(2)
    cache.put("a", 1)
    cache.put("a", 2)
    cache.put("b", 3)
    assert (cache.get("a"), cache.get("b"), len(cache)) == (2, 3, 2)


def test_readers_and_writers_on_many_threads_never_see_a_wrong_value() -> None:
    cache: LockedLRU[int, int] = LockedLRU(64)
    wrong: list[tuple[int, int]] = []

    def work(offset: int) -> None:
        for i in range(20_000):
            key = (i * 7 + offset) % 200
            found = cache.get(key)
            if found is None:
                cache.put(key, key * 3)
            elif found != key * 3:
                wrong.append((key, found))

    threads = [threading.Thread(target=work, args=(n,)) for n in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert wrong == [] and len(cache) <= 64
