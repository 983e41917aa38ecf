"""AbortController / AbortSignal: idempotent, thread-safe, usable before a loop exists."""

from __future__ import annotations

import threading

import anyio
import pytest

from llmrtc import AbortController, AbortedError


def test_controller_and_signal_can_be_created_outside_an_event_loop() -> None:
    controller = AbortController()
    assert controller.signal.aborted is False
    assert controller.signal.reason is None
    assert controller.abort("bye") is True
    assert controller.abort("again") is False  # idempotent: the first reason stays
    assert controller.signal.aborted is True
    assert controller.signal.reason == "bye"
    with pytest.raises(AbortedError, match="bye"):
        controller.signal.raise_if_aborted()


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio", "trio"])
async def test_wait_returns_when_aborted_from_another_thread() -> None:
    controller = AbortController()
    thread = threading.Timer(0.05, controller.abort, args=("barge-in",))
    with anyio.fail_after(5):
        thread.start()
        await controller.signal.wait()
    thread.join()
    assert controller.signal.reason == "barge-in"


@pytest.mark.anyio
async def test_wait_returns_at_once_when_already_aborted() -> None:
    controller = AbortController()
    controller.abort()
    with anyio.fail_after(1):
        await controller.signal.wait()


@pytest.mark.anyio
async def test_child_follows_parent_but_not_the_other_way_round() -> None:
    parent = AbortController()
    child = AbortController(parent=parent.signal)
    sibling = AbortController(parent=parent.signal)
    child.abort("timeout")
    assert child.signal.aborted and child.signal.reason == "timeout"
    assert not parent.signal.aborted and not sibling.signal.aborted
    parent.abort("barge-in")
    assert sibling.signal.aborted and sibling.signal.reason == "barge-in"
    assert child.signal.reason == "timeout"  # its own reason wins
    with anyio.fail_after(1):
        await sibling.signal.wait()


@pytest.mark.anyio
async def test_subscribe_runs_callback_once_in_loop_thread_and_can_unsubscribe() -> None:
    parent = AbortController()
    child = AbortController(parent=parent.signal)
    loop_thread = threading.get_ident()
    calls: list[int] = []
    child.signal.subscribe(lambda: calls.append(threading.get_ident()))
    removed: list[int] = []
    unsubscribe = child.signal.subscribe(lambda: removed.append(1))
    unsubscribe()

    def abort_both() -> None:
        child.abort("a")
        parent.abort("b")

    thread = threading.Thread(target=abort_both)
    thread.start()
    thread.join()
    with anyio.fail_after(2):
        while not calls:
            await anyio.sleep(0.01)
    await anyio.sleep(0.05)
    assert calls == [loop_thread]  # once, although both the child and its parent aborted
    assert removed == []
