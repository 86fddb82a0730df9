"""The hub's caches count as synced once every object of the startup listing came through a
watch, or is gone from a later listing."""

from fleet.hub.initial_sync import InitialSync


def test_not_synced_before_the_listing_even_with_no_objects() -> None:
    sync = InitialSync()
    sync.saw("a")
    assert not sync.synced()
    assert sync.missing() == -1


def test_synced_once_every_listed_object_came_through_a_watch() -> None:
    sync = InitialSync()
    sync.saw("a")  # before the listing came back
    sync.listed(["a", "b", "c"])
    assert not sync.synced()
    assert sync.missing() == 2
    sync.saw("b")
    sync.saw("z")  # created after the listing: not waited for
    assert not sync.synced()
    sync.saw("c")
    assert sync.synced()


def test_an_empty_listing_is_synced_at_once() -> None:
    sync = InitialSync()
    sync.listed([])
    assert sync.synced()


def test_an_object_deleted_before_the_watch_saw_it_is_not_waited_for() -> None:
    sync = InitialSync()
    sync.listed(["a", "b"])
    sync.saw("a")
    sync.still_there(["a", "c"])  # b went; c is new and comes through the watch anyway
    assert sync.synced()
