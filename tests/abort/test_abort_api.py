"""The abort API used as an API: parents, deadlines, `cancel_scope()` and `sleep()`, on asyncio
and trio, with aborts coming from plain threads (as a VAD thread would send them)."""

from __future__ import annotations

import threading
import time
from typing import Any

import anyio
import pytest

from llmrtc import AbortController


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: Any) -> str:
    return str(request.param)


pytestmark = pytest.mark.anyio


def abort_from_thread(controller: AbortController, delay: float, reason: str) -> threading.Timer:
    timer = threading.Timer(delay, controller.abort, args=(reason,))
    timer.start()
    return timer


async def test_a_deadline_aborts_with_reason_timeout_and_can_be_moved_or_cleared() -> None:
    controller = AbortController(deadline=time.monotonic() - 1)
    assert controller.signal.aborted and controller.signal.reason == "timeout"
    controller.deadline = None
    assert controller.deadline is None and controller.signal.deadline is None
    assert not controller.signal.aborted
    controller.deadline = time.monotonic() + 60
    assert controller.signal.deadline == controller.deadline
    assert not controller.signal.aborted
    with pytest.raises(AttributeError):
        controller.signal.deadline = 0.0  # type: ignore[misc]  # read-only: set it on the controller


async def test_a_child_follows_its_parents_deadline_but_keeps_its_own() -> None:
    parent = AbortController(deadline=time.monotonic() + 0.05)
    child = AbortController(parent=parent.signal)
    assert child.signal.deadline is None  # its own deadline
    with anyio.fail_after(5):
        await child.signal.wait()  # woken by the parent's deadline
    assert child.signal.reason == "timeout"


async def test_cancel_scope_is_cancelled_by_an_abort_from_a_plain_thread() -> None:
    controller = AbortController()
    timer = abort_from_thread(controller, 0.05, "barge-in")
    with anyio.fail_after(5):
        with controller.signal.cancel_scope() as scope:
            await anyio.sleep(30)
    timer.join()
    assert scope.cancelled_caught
    assert controller.signal.reason == "barge-in"


async def test_cancel_scope_is_cancelled_by_a_parent_abort_from_a_thread() -> None:
    parent = AbortController()
    child = AbortController(parent=parent.signal)
    timer = abort_from_thread(parent, 0.05, "hang-up")
    with anyio.fail_after(5), child.signal.cancel_scope() as scope:
        await anyio.sleep(30)
    timer.join()
    assert scope.cancelled_caught and child.signal.reason == "hang-up"


async def test_cancel_scope_follows_a_deadline_set_while_it_runs_even_from_a_thread() -> None:
    controller = AbortController(deadline=time.monotonic() + 60)
    moved = threading.Timer(0.05, setattr, args=(controller, "deadline", time.monotonic()))
    with anyio.fail_after(5):
        with controller.signal.cancel_scope() as scope:
            moved.start()
            await anyio.sleep(30)
    moved.join()
    assert scope.cancelled_caught and controller.signal.reason == "timeout"


async def test_clearing_the_deadline_lets_the_block_finish() -> None:
    controller = AbortController(deadline=time.monotonic() + 0.1)
    with controller.signal.cancel_scope() as scope:
        controller.deadline = None
        await anyio.sleep(0.2)
    assert not scope.cancelled_caught


async def test_cancel_scope_of_an_aborted_signal_cancels_at_the_first_checkpoint() -> None:
    controller = AbortController()
    controller.abort()
    reached: list[str] = []
    with controller.signal.cancel_scope() as scope:
        reached.append("before")
        await anyio.sleep(0)
        reached.append("after")
    assert scope.cancelled_caught and reached == ["before"]


async def test_sleep_says_whether_the_full_time_passed() -> None:
    controller = AbortController()
    assert await controller.signal.sleep(0.01) is True
    timer = abort_from_thread(controller, 0.05, "stop")
    started = time.monotonic()
    assert await controller.signal.sleep(30) is False
    assert time.monotonic() - started < 5
    timer.join()
    assert await controller.signal.sleep(30) is False  # already aborted: at once
    timed = AbortController(deadline=time.monotonic() + 0.05)
    assert await timed.signal.sleep(30) is False


async def test_sleep_still_propagates_the_callers_own_cancellation() -> None:
    controller = AbortController()
    with anyio.move_on_after(0.05) as outer:
        await controller.signal.sleep(30)
        pytest.fail("the caller's cancellation must propagate")
    assert outer.cancelled_caught and not controller.signal.aborted


async def test_listeners_are_let_go_when_the_block_ends() -> None:
    controller = AbortController()
    signal = controller.signal
    with signal.cancel_scope():
        await signal.sleep(0)
    assert signal._listeners == [] and signal._watchers == []  # nothing kept alive


async def test_a_childs_block_lets_go_of_every_signal_up_its_chain() -> None:
    root = AbortController(deadline=time.monotonic() + 60)
    child = AbortController(parent=root.signal)
    with child.signal.cancel_scope() as scope:
        assert root.signal._listeners != [] and root.signal._watchers != []
        await anyio.sleep(0)
    assert not scope.cancelled_caught
    for signal in (root.signal, child.signal):
        assert signal._listeners == [] and signal._watchers == []


async def test_a_block_entered_after_the_parent_aborted_is_cancelled_at_once() -> None:
    root = AbortController()
    root.abort("hang-up")
    child = AbortController(parent=root.signal)
    with anyio.fail_after(5), child.signal.cancel_scope() as scope:
        await anyio.sleep(10)
    assert scope.cancelled_caught
    assert root.signal._watchers == [] and child.signal._listeners == []


async def test_a_listener_that_raises_is_logged_and_the_others_still_run(
    caplog: pytest.LogCaptureFixture,
) -> None:
    controller = AbortController()
    told: list[str] = []

    def broken() -> None:
        raise RuntimeError("listener bug")

    controller.signal.subscribe(broken)  # registered before the block: fired first
    controller.signal.subscribe(lambda: told.append("after"))
    with anyio.fail_after(10):
        with controller.signal.cancel_scope() as scope:
            controller.abort("barge-in")  # in the loop thread: listeners run right here
            await anyio.sleep(5)
    assert scope.cancelled_caught and told == ["after"]
    assert any("listener bug" in str(r.exc_info[1]) for r in caplog.records if r.exc_info)


async def test_a_listener_that_raises_does_not_stop_a_deadline_change_reaching_a_block() -> None:
    controller = AbortController()
    with anyio.fail_after(10):
        with controller.signal.cancel_scope() as scope:
            controller.signal._watchers.insert(0, _RaisingListener())  # a watcher that fails
            controller.deadline = time.monotonic() - 1
            await anyio.sleep(5)
    assert scope.cancelled_caught


class _RaisingListener:
    callback = None

    def fire(self) -> None:
        raise RuntimeError("watcher bug")


@pytest.mark.parametrize("where", ["constructor", "setter"])
async def test_a_nan_deadline_is_refused_and_leaves_nothing_behind(where: str) -> None:
    controller = AbortController()
    with pytest.raises(ValueError, match="nan"):
        if where == "constructor":
            AbortController(deadline=float("nan"))
        else:
            with controller.signal.cancel_scope():
                controller.deadline = float("nan")
    assert controller.deadline is None
    assert controller.signal._listeners == [] and controller.signal._watchers == []


async def test_entering_the_same_cancel_scope_object_twice_at_once_is_refused() -> None:
    controller = AbortController()
    block = controller.signal.cancel_scope()
    with block, pytest.raises(RuntimeError, match="already entered"), block:
        pass
    assert controller.signal._listeners == [] and controller.signal._watchers == []
    with block:  # one after the other is fine
        pass
    assert controller.signal._listeners == [] and controller.signal._watchers == []
