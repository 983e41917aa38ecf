"""Session stores (in memory, and SQLite shared by processes): TTL, atomic claims, wrong and
expired tokens, bounded size, hashed tokens, and a resumed conversation that comes back whole
(history and playbook engine)."""

from __future__ import annotations

import math
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import anyio
import pytest

from llmrtc.agent.history import ConversationHistory
from llmrtc.llm.messages import AssistantMessage, UserMessage
from llmrtc.playbook.engine import PlaybookEngine
from llmrtc.playbook.loading import load_playbook
from llmrtc.rtc.store import (
    InMemorySessionStore,
    SessionCredentials,
    SessionState,
    SessionStore,
    SQLiteSessionStore,
    hash_token,
    new_session_credentials,
)

pytestmark = pytest.mark.anyio

PLAYBOOKS = Path(__file__).resolve().parents[2] / "playbooks"


class FakeClock:
    """Monotonic seconds moved by hand."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


MakeStore = Callable[..., InMemorySessionStore | SQLiteSessionStore]


@pytest.fixture(params=["memory", "sqlite"])
def make_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[MakeStore]:
    """Builds the parametrized kind of store: `make_store(clock=..., max_sessions=...)`."""
    opened: list[SQLiteSessionStore] = []

    def make(**options: object) -> InMemorySessionStore | SQLiteSessionStore:
        if request.param == "memory":
            return InMemorySessionStore(**options)  # type: ignore[arg-type]
        store = SQLiteSessionStore(tmp_path / "sessions.sqlite3", **options)  # type: ignore[arg-type]
        opened.append(store)
        return store

    yield make
    for store in opened:
        store.close()


def _state(credentials: SessionCredentials, **fields: object) -> SessionState:
    return SessionState(
        session_id=credentials.session_id,
        token_hash=hash_token(credentials.token),
        **fields,  # type: ignore[arg-type]
    )


def test_credentials_are_fresh_random_and_url_safe() -> None:
    made = {new_session_credentials() for _ in range(200)}
    assert len(made) == 200
    session_id, token = next(iter(made))  # unpacks as a pair
    assert len(session_id) >= 20 and len(token) >= 40
    for value in (session_id, token):
        assert value.replace("-", "").replace("_", "").isalnum()
    # The id is shown around; it must not be (part of) the secret.
    assert session_id not in token


def test_the_state_holds_a_hash_and_matches_only_its_token() -> None:
    credentials = new_session_credentials()
    state = _state(credentials)
    assert state.token_hash == hash_token(credentials.token) != credentials.token
    assert state.token_matches(credentials.token)
    assert not state.token_matches(credentials.token + "x")
    assert not state.token_matches("")


def test_a_state_needs_a_real_hash_and_a_url_safe_id() -> None:
    with pytest.raises(ValueError, match="token_hash"):
        SessionState(session_id="s", token_hash="plain-token")
    with pytest.raises(ValueError, match="session_id"):
        SessionState(session_id="../etc", token_hash=hash_token("t"))


def test_both_stores_are_session_stores(make_store: MakeStore) -> None:
    assert isinstance(make_store(), SessionStore)


async def test_save_load_and_delete(make_store: MakeStore) -> None:
    store = make_store()
    credentials = new_session_credentials()
    state = _state(credentials, history={"max_messages": 50, "messages": []})
    await store.save(state, ttl=60)
    assert await store.load(credentials.session_id) == state
    assert await store.load(credentials.session_id) == state  # loading does not consume
    await store.delete(credentials.session_id)
    assert await store.load(credentials.session_id) is None
    await store.delete(credentials.session_id)  # deleting twice is fine
    assert await store.load("never-saved") is None


async def test_saving_again_replaces_the_state_and_restarts_its_ttl(make_store: MakeStore) -> None:
    clock = FakeClock()
    store = make_store(clock=clock)
    credentials = new_session_credentials()
    await store.save(_state(credentials, playbook={"current_stage": "a"}), ttl=10)
    clock.now += 8
    await store.save(_state(credentials, playbook={"current_stage": "b"}), ttl=10)
    clock.now += 8  # 16 s after the first save, 8 after the second
    state = await store.load(credentials.session_id)
    assert state is not None and state.playbook == {"current_stage": "b"}


async def test_entries_expire_after_their_ttl(make_store: MakeStore) -> None:
    clock = FakeClock()
    store = make_store(clock=clock)
    credentials = new_session_credentials()
    await store.save(_state(credentials), ttl=120)
    clock.now += 119.9
    assert await store.load(credentials.session_id) is not None
    clock.now += 0.1
    assert await store.load(credentials.session_id) is None
    if isinstance(store, InMemorySessionStore):
        assert len(store) == 0  # purged when it was found expired


async def test_an_expired_token_cannot_claim(make_store: MakeStore) -> None:
    clock = FakeClock()
    store = make_store(clock=clock)
    credentials = new_session_credentials()
    await store.save(_state(credentials), ttl=5)
    clock.now += 5.0
    assert await store.claim(*credentials) is None


async def test_expired_entries_are_purged_lazily_by_later_saves() -> None:
    clock = FakeClock()
    store = InMemorySessionStore(clock=clock)
    for _ in range(50):
        await store.save(_state(new_session_credentials()), ttl=1)
    assert len(store) == 50  # nothing purges before anything expires or is touched
    clock.now += 2
    await store.save(_state(new_session_credentials()), ttl=1)
    assert len(store) == 1


async def test_a_claim_takes_the_state_once(make_store: MakeStore) -> None:
    store = make_store()
    credentials = new_session_credentials()
    state = _state(credentials, history={"max_messages": 50, "messages": []})
    await store.save(state, ttl=60)
    assert await store.claim(credentials.session_id, credentials.token) == state
    assert await store.claim(credentials.session_id, credentials.token) is None
    assert await store.load(credentials.session_id) is None


async def test_a_wrong_token_is_refused_and_leaves_the_session_to_its_owner(
    make_store: MakeStore,
) -> None:
    store = make_store()
    mine, theirs = new_session_credentials(), new_session_credentials()
    await store.save(_state(mine), ttl=60)
    await store.save(_state(theirs), ttl=60)
    assert await store.claim(mine.session_id, theirs.token) is None  # another session's token
    assert await store.claim(mine.session_id, "") is None
    assert await store.claim(mine.session_id, mine.token + "A") is None
    assert await store.claim("unknown", mine.token) is None
    claimed = await store.claim(*mine)
    assert claimed is not None and claimed.session_id == mine.session_id


async def test_concurrent_claims_give_the_session_to_exactly_one(make_store: MakeStore) -> None:
    store = make_store()
    credentials = new_session_credentials()
    await store.save(_state(credentials), ttl=60)
    winners: list[SessionState] = []

    async def claim() -> None:
        await anyio.sleep(0)  # all tasks start, then race
        state = await store.claim(*credentials)
        if state is not None:
            winners.append(state)

    async with anyio.create_task_group() as tasks:
        for _ in range(50):
            tasks.start_soon(claim)
    assert len(winners) == 1


async def test_concurrent_claims_from_threads_give_the_session_to_exactly_one(
    make_store: MakeStore,
) -> None:
    store = make_store()
    credentials = new_session_credentials()
    await store.save(_state(credentials), ttl=60)
    winners: list[SessionState] = []

    def claim() -> None:
        state = anyio.run(store.claim, *credentials)
        if state is not None:
            winners.append(state)

    async with anyio.create_task_group() as tasks:
        for _ in range(8):
            tasks.start_soon(anyio.to_thread.run_sync, claim)
    assert len(winners) == 1


async def test_the_store_is_bounded_and_evicts_what_expires_soonest(make_store: MakeStore) -> None:
    clock = FakeClock()
    store = make_store(max_sessions=3, clock=clock)
    long_lived = new_session_credentials()
    await store.save(_state(long_lived), ttl=1000)
    short = [new_session_credentials() for _ in range(2)]
    for index, credentials in enumerate(short):
        await store.save(_state(credentials), ttl=10 + index)
    newest = new_session_credentials()
    await store.save(_state(newest), ttl=60)
    assert await store.load(short[0].session_id) is None  # it would have expired first
    for kept in (long_lived, short[1], newest):
        assert await store.load(kept.session_id) is not None


async def test_a_full_store_drops_expired_entries_before_live_ones(make_store: MakeStore) -> None:
    clock = FakeClock()
    store = make_store(max_sessions=2, clock=clock)
    live, stale = new_session_credentials(), new_session_credentials()
    await store.save(_state(live), ttl=100)
    await store.save(_state(stale), ttl=1)  # behind a live entry: the front purge misses it
    clock.now += 2
    newest = new_session_credentials()
    await store.save(_state(newest), ttl=100)
    assert await store.load(live.session_id) is not None
    assert await store.load(newest.session_id) is not None
    assert await store.load(stale.session_id) is None


async def test_the_store_never_holds_the_plain_token() -> None:
    store = InMemorySessionStore()
    credentials = new_session_credentials()
    history = ConversationHistory(messages=[UserMessage("hi"), AssistantMessage("hello")])
    await store.save(_state(credentials, history=history.to_dict()), ttl=60)
    held = repr(store._entries) + "".join(
        state.model_dump_json() for _, state in store._entries.values()
    )
    assert credentials.session_id in held
    assert credentials.token not in held


@pytest.mark.parametrize("ttl", [0, -1, math.inf, math.nan, True, "60"])
async def test_a_ttl_must_be_a_positive_number_of_seconds(
    make_store: MakeStore, ttl: object
) -> None:
    store = make_store()
    with pytest.raises(ValueError, match="ttl must be a finite number of seconds > 0"):
        await store.save(_state(new_session_credentials()), ttl=ttl)  # type: ignore[arg-type]


@pytest.mark.parametrize("size", [0, -3, 1.5, True])
def test_max_sessions_must_be_a_positive_int(size: object) -> None:
    with pytest.raises(ValueError, match="max_sessions must be an int >= 1"):
        InMemorySessionStore(max_sessions=size)  # type: ignore[arg-type]


async def test_a_claimed_state_restores_the_conversation_and_playbook_stage(
    make_store: MakeStore,
) -> None:
    playbook = load_playbook(PLAYBOOKS / "weather.yaml")
    engine = PlaybookEngine(playbook)
    first_stage = engine.current_stage.id
    engine.apply(engine.candidates()[0], reason="the user asked")
    assert engine.current_stage.id != first_stage
    engine.update_context(city="Tokyo")
    history = ConversationHistory(
        messages=[UserMessage("Weather in Tokyo?"), AssistantMessage("Sunny, 21 degrees.")]
    )
    credentials = new_session_credentials()
    store = make_store()
    await store.save(
        _state(credentials, history=history.to_dict(), playbook=engine.snapshot()), ttl=120
    )
    # What a distributed store would do: the state crosses a process boundary as JSON.
    state = await store.claim(*credentials)
    assert state is not None
    state = SessionState.model_validate_json(state.model_dump_json())

    assert state.history is not None and state.playbook is not None
    restored_history = ConversationHistory.from_dict(state.history)
    restored = PlaybookEngine.restore(playbook, state.playbook)
    assert restored_history.messages == history.messages
    assert restored.current_stage.id == engine.current_stage.id
    assert restored.context["city"] == "Tokyo"
    assert restored.snapshot() == engine.snapshot()


# SQLite: one file shared by processes -------------------------------------------------------


async def test_sqlite_stores_on_one_file_share_sessions(tmp_path: Path) -> None:
    path = tmp_path / "sessions.sqlite3"
    first, second = SQLiteSessionStore(path), SQLiteSessionStore(path)
    try:
        credentials = new_session_credentials()
        await first.save(_state(credentials, playbook={"current_stage": "chat"}), ttl=60)
        state = await second.claim(*credentials)
        assert state is not None and state.playbook == {"current_stage": "chat"}
        assert await first.claim(*credentials) is None
    finally:
        first.close()
        second.close()


async def test_concurrent_claims_from_separate_connections_give_one_winner(
    tmp_path: Path,
) -> None:
    # One connection per thread: SQLite's file locks decide, as between worker processes.
    path = tmp_path / "sessions.sqlite3"
    stores = [SQLiteSessionStore(path) for _ in range(6)]
    credentials = new_session_credentials()
    await stores[0].save(_state(credentials), ttl=60)
    winners: list[SessionState] = []

    async def claim(store: SQLiteSessionStore) -> None:
        state = await store.claim(*credentials)
        if state is not None:
            winners.append(state)

    try:
        async with anyio.create_task_group() as tasks:
            for store in stores:
                tasks.start_soon(claim, store)
    finally:
        for store in stores:
            store.close()
    assert len(winners) == 1


_CLAIMER = """
import sys, anyio
from llmrtc.rtc.store import SQLiteSessionStore
store = SQLiteSessionStore(sys.argv[1])
sys.stdin.readline()  # start together
state = anyio.run(store.claim, sys.argv[2], sys.argv[3])
print("won" if state is not None else "lost", flush=True)
"""


async def test_concurrent_claims_from_processes_give_one_winner(tmp_path: Path) -> None:
    path = tmp_path / "sessions.sqlite3"
    store = SQLiteSessionStore(path)
    credentials = new_session_credentials()
    await store.save(_state(credentials), ttl=60)
    store.close()
    command = [sys.executable, "-c", _CLAIMER, str(path), *credentials]
    processes = [
        subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        for _ in range(3)
    ]
    outcomes = [process.communicate("go\n", timeout=120)[0].strip() for process in processes]
    assert sorted(outcomes) == ["lost", "lost", "won"]


async def test_the_sqlite_file_never_holds_the_plain_token(tmp_path: Path) -> None:
    store = SQLiteSessionStore(tmp_path / "sessions.sqlite3")
    credentials = new_session_credentials()
    await store.save(_state(credentials, history={"max_messages": 50, "messages": []}), ttl=60)
    store.close()
    on_disk = b"".join(path.read_bytes() for path in tmp_path.iterdir())
    assert credentials.session_id.encode() in on_disk
    assert credentials.token.encode() not in on_disk
    assert hash_token(credentials.token).encode() in on_disk


def test_a_file_that_is_not_a_database_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "notes.txt"
    path.write_text("not a database\n" * 100)
    with pytest.raises(Exception, match="not a database"):
        SQLiteSessionStore(path)


@pytest.mark.parametrize("size", [0, True])
def test_sqlite_max_sessions_must_be_a_positive_int(tmp_path: Path, size: object) -> None:
    with pytest.raises(ValueError, match="max_sessions must be an int >= 1"):
        SQLiteSessionStore(tmp_path / "s.sqlite3", max_sessions=size)  # type: ignore[arg-type]


_OPEN_RACE = """
import multiprocessing, sys
from pathlib import Path


def open_each(folder, count, barrier, failures):
    from llmrtc.rtc.store import SQLiteSessionStore

    for index in range(count):
        barrier.wait()  # both processes open the same new file at once
        try:
            SQLiteSessionStore(Path(folder) / f"sessions-{index}.sqlite3").close()
        except Exception as exc:
            failures.put(repr(exc))


if __name__ == "__main__":
    context = multiprocessing.get_context("spawn")
    barrier, failures = context.Barrier(2), context.Queue()
    workers = [
        context.Process(target=open_each, args=(sys.argv[1], int(sys.argv[2]), barrier, failures))
        for _ in range(2)
    ]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    found = []
    while not failures.empty():
        found.append(failures.get())
    print(len(found), found[:3], flush=True)
"""


def test_workers_opening_a_new_file_at_once_both_get_the_store(tmp_path: Path) -> None:
    # `llmrtc serve --workers N` starts its workers together on a fresh file: switching it to
    # WAL took a lock SQLite does not wait for, and a worker died with "database is locked".
    script = tmp_path / "open_race.py"
    script.write_text(_OPEN_RACE)
    folder = tmp_path / "stores"
    folder.mkdir()
    done = subprocess.run(
        [sys.executable, str(script), str(folder), "200"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split(" ", 1)[0] == "0", done.stdout
