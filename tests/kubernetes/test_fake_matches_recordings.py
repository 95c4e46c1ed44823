"""The fake API server answers as the real kube-apiserver did in the recordings.

The driver's fake-server tests are only worth what the fake is: each test here replays a recorded
request against the fake (over HTTP, as the driver talks to it) and compares the answer with the
recorded one — statuses, Status bodies, the defaulted Pod, deletion fields, watch sequences.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from datetime import datetime
from typing import Any

import aiohttp
import anyio
import fake_pods as k8s
import pytest
from fake_apiserver import TOKEN, FakeApiServer
from fake_kubelet import ContainerScript
from k8s_recordings import USER_AGENT, condensed, exchange, normalised, recording

from tests.polling import until

pytestmark = pytest.mark.anyio

NS = "asyncdeploy-rec"
PODS = f"/api/v1/namespaces/{NS}/pods"


@pytest.fixture
async def server() -> AsyncIterator[FakeApiServer]:
    async with FakeApiServer(namespaces=(NS,)) as fake:
        fake.schedule = False  # the recordings had no scheduler: only nodeName binds a Pod
        yield fake


@pytest.fixture
async def http(server: FakeApiServer) -> AsyncIterator[aiohttp.ClientSession]:
    headers = {"Authorization": f"Bearer {TOKEN}", "User-Agent": USER_AGENT}
    async with aiohttp.ClientSession(base_url=server.url, headers=headers) as session:
        yield session


async def send(http: aiohttp.ClientSession, recorded: dict[str, Any]) -> tuple[int, Any]:
    request = recorded["request"]
    body = request.get("body")
    async with http.request(
        request["method"],
        request["path"],
        params=request.get("query") or None,
        data=None if body is None else json.dumps(body) if not isinstance(body, str) else body,
        headers={"Content-Type": "application/json"},
    ) as response:
        return response.status, await response.json()


async def watch_lines(
    http: aiohttp.ClientSession, query: dict[str, str], until: str | None = None
) -> list[dict[str, Any]]:
    """The events of one watch, to its end (or to the first event of type ``until``)."""
    events = []
    async with http.get(PODS, params={"watch": "1", **query}) as response:
        assert response.status == 200
        assert response.headers["Content-Type"] == "application/json"
        assert response.headers["Transfer-Encoding"] == "chunked"
        async for line in response.content:
            if line.strip():
                events.append(json.loads(line))
                if events[-1]["type"] == until:
                    break
    return events


# --- create: the stored object (01a-01c) ------------------------------------------------------


@pytest.mark.parametrize("stem", ["01a", "01b", "01c"])
async def test_create_answers_the_defaulted_pod_as_recorded(
    http: aiohttp.ClientSession, stem: str
) -> None:
    """Every server default, normalised quantity and dropped false toggle, in the server's order."""
    recorded = exchange(stem, "create")
    status, body = await send(http, recorded)
    assert status == recorded["response"]["status"] == 201
    expected = normalised(recorded["response"]["body"])
    assert normalised(body) == expected
    # Go serialises struct fields in declaration order: so does the fake.
    assert json.dumps(normalised(body)) == json.dumps(expected)


@pytest.mark.parametrize("stem", ["01a", "01b", "01c"])
async def test_a_later_get_of_an_unbound_pod_equals_the_create_answer(
    http: aiohttp.ClientSession, stem: str
) -> None:
    assert recording(stem)["differences_create_vs_get"] == []
    created = (await send(http, exchange(stem, "create")))[1]
    status, fetched = await send(http, exchange(stem, "GET later"))
    assert status == 200
    assert fetched == created


# --- quantities (02) ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "row",
    recording("02")["rows"],
    ids=[f"{r['resource']}={r['sent']!r}({r['sent_as']})" for r in recording("02")["rows"]],
)
def test_quantity_spellings_are_stored_or_refused_as_recorded(row: dict[str, Any]) -> None:
    sent = row["sent"] if row["sent_as"] == "JSON string" else json.loads(row["sent"])
    if row["sent_as"] == "JSON number" and isinstance(sent, float):
        sent = row["sent"]  # the fake decodes JSON numbers as their literal text
    if row["status"] == 400:
        with pytest.raises(ValueError, match="quantit") as caught:
            k8s.canonical_quantity(sent)
        assert row["message"].endswith(str(caught.value))
    elif row["status"] == 422:  # decodes, then fails validation (see the HTTP test below)
        assert k8s.canonical_quantity(sent) == row["sent"]
    else:
        assert k8s.canonical_quantity(sent) == row["stored"]


# The validation of extended resources (example.com/gpu) is not modelled: plans have none.
_MODELLED = [
    r
    for r in recording("02")["requests_vs_limits"]
    if r["status"] == 201 or ("extended" not in r["case"] and "unknown" not in r["case"])
]


@pytest.mark.parametrize("row", _MODELLED, ids=lambda r: r["case"])
async def test_requests_limits_and_qos_class_as_recorded(
    http: aiohttp.ClientSession, row: dict[str, Any]
) -> None:
    name = json.loads(json.dumps(row)).get("message", 'Pod "q"').split('"')[1]
    body = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {"containers": [{"name": "main", "image": "x:1", "resources": row["sent"]}]},
    }
    status, stored = await send(http, {"request": {"method": "POST", "path": PODS, "body": body}})
    assert status == row["status"]
    if status == 422:
        assert (stored["message"], stored["details"]["causes"]) == (row["message"], row["causes"])
    else:
        assert stored["spec"]["containers"][0]["resources"] == row["stored"]
        assert stored["status"]["qosClass"] == row["qosClass"]


@pytest.mark.parametrize("example", sorted(recording("02")["example_exchanges"]))
async def test_quantity_example_exchanges(http: aiohttp.ClientSession, example: str) -> None:
    """A 201 with one Warning header per fractional memory field; a 400; a 422."""
    item = recording("02")["example_exchanges"][example]
    request = item["request"]
    async with http.post(
        request["path"], data=request["body"], headers={"Content-Type": "application/json"}
    ) as response:
        status, body = response.status, await response.json()
        warnings = response.headers.getall("Warning", [])
    expected = item["response"]
    assert status == expected["status"]
    if status == 201:
        assert warnings == expected["headers"]["Warning"]
        assert normalised(body) == normalised(expected["body"])
    else:
        assert (warnings, body) == ([], expected["body"])


# --- Status bodies (03b, 03c, 04b, 07a-07c) ----------------------------------------------------


async def test_missing_pod_is_404_with_the_recorded_body(http: aiohttp.ClientSession) -> None:
    for label in ("DELETE a Pod that does not exist", "GET a Pod that does not exist"):
        recorded = exchange("03c", label)
        assert await send(http, recorded) == (404, recorded["response"]["body"])


async def test_duplicate_create_is_409_already_exists(http: aiohttp.ClientSession) -> None:
    first = exchange("07a", "create Pod rec-dup")
    assert (await send(http, first))[0] == 201
    again = exchange("07a", "create Pod rec-dup again")
    assert await send(http, again) == (409, again["response"]["body"])


@pytest.mark.parametrize(
    "label",
    [
        "invalid name",
        "container without image",
        "both at once",
        "no containers at all",
        "name longer than 253",
        "hostNetwork true with a hostPort",
    ],
)
async def test_invalid_pods_get_the_recorded_422(http: aiohttp.ClientSession, label: str) -> None:
    recorded = exchange("07b", label)
    assert await send(http, recorded) == (422, recorded["response"]["body"])


async def test_errors_outside_pods(http: aiohttp.ClientSession, server: FakeApiServer) -> None:
    """A missing namespace, a mismatched namespace, a wrong token."""
    for label in ("create a Pod in a namespace", "body whose metadata.namespace"):
        recorded = exchange("07c", label)
        assert await send(http, recorded) == (
            recorded["response"]["status"],
            recorded["response"]["body"],
        )
    unauthorized = exchange("07c", "request with a wrong bearer token")["response"]
    async with (
        aiohttp.ClientSession(base_url=server.url) as anonymous,
        anonymous.get(f"{PODS}/x", headers={"Authorization": "Bearer no"}) as answer,
    ):
        assert (answer.status, await answer.json()) == (401, unauthorized["body"])


async def test_uid_precondition_mismatch_is_409_conflict(
    http: aiohttp.ClientSession, server: FakeApiServer
) -> None:
    pod = server.create_pod(NS, _bound_pod("del-b"))
    recorded = exchange("03b", "DELETE with preconditions.uid that does not match")
    expected = json.loads(
        json.dumps(recorded["response"]["body"]).replace(
            "1f8a3ece-ff88-4579-9538-aff83cf7bbf4", pod["metadata"]["uid"]
        )
    )
    assert await send(http, recorded) == (409, expected)
    matching = exchange("03b", "DELETE again with the matching uid")
    matching["request"]["body"]["preconditions"]["uid"] = pod["metadata"]["uid"]
    status, body = await send(http, matching)
    assert status == 200
    assert body["metadata"]["deletionGracePeriodSeconds"] == 5


async def test_collection_delete_without_the_verb_is_405(
    http: aiohttp.ClientSession, server: FakeApiServer
) -> None:
    recorded = exchange("04b", "DELETE collection on bindings")["response"]
    server.allow_collection_delete = False
    async with http.delete(PODS, params={"labelSelector": "a=b"}) as answer:
        assert (answer.status, await answer.json()) == (405, recorded["body"])


# --- deletion (03a, 03d, 03e, 03f, 03h) --------------------------------------------------------


def _bound_pod(name: str, grace: int = 30, labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": labels or {"asyncdeploy/recording": "delete"}},
        "spec": {
            "nodeName": "asyncdeploy-node-1",
            "terminationGracePeriodSeconds": grace,
            "containers": [{"name": "main", "image": "localhost/asyncdeploy/busybox:local"}],
        },
    }


def _second(wall_clock: str) -> datetime:
    return datetime.fromisoformat(wall_clock).replace(microsecond=0)


@pytest.mark.parametrize("stem", ["03a", "03h"])
def test_deletion_arithmetic_reproduces_the_recorded_timestamps(stem: str) -> None:
    """First delete: the request's second + grace; longer later: no-op; shorter: moved."""
    metadata: dict[str, Any] = {}
    for item in recording(stem)["exchanges"]:
        request, response = item["request"], item["response"]
        if request["method"] != "DELETE" or response["status"] != 200:
            continue
        grace = int(
            (request["body"] or {}).get("gracePeriodSeconds")
            or request["query"]["gracePeriodSeconds"]
        )
        change = k8s.graceful_deletion(metadata, grace, _second(item["wall_clock"]))
        answered = response["body"]["metadata"]
        if change is not None:
            metadata = {"deletionTimestamp": change[0], "deletionGracePeriodSeconds": change[1]}
        assert metadata == {
            "deletionTimestamp": answered["deletionTimestamp"],
            "deletionGracePeriodSeconds": answered["deletionGracePeriodSeconds"],
        }


async def test_graceful_delete_of_a_bound_pod(
    http: aiohttp.ClientSession, server: FakeApiServer
) -> None:
    """200 with the Pod; generation +1; a longer grace writes nothing; a shorter one moves it."""
    server.scripts["main"] = ContainerScript(ignore_term=True)
    created = server.create_pod(NS, _bound_pod("del-a"))
    await until(lambda: _phase(server, "del-a") == "Running")
    first = exchange("03a", "DELETE with DeleteOptions body gracePeriodSeconds 5")
    status, body = await send(http, first)
    recorded = first["response"]["body"]
    assert status == 200
    assert body["kind"] == recorded["kind"] == "Pod"
    assert list(body["metadata"]) == list(recorded["metadata"])
    assert body["metadata"]["generation"] == created["metadata"]["generation"] + 1 == 2
    assert body["metadata"]["deletionGracePeriodSeconds"] == 5
    assert body["status"]["phase"] == recorded["status"]["phase"] == "Running"
    longer = exchange("03a", "second DELETE, longer grace")
    status, unchanged = await send(http, longer)
    assert status == 200
    assert (
        unchanged["metadata"]["resourceVersion"]
        == server.pods[(NS, "del-a")]["metadata"]["resourceVersion"]
    )
    assert unchanged["metadata"]["deletionTimestamp"] == body["metadata"]["deletionTimestamp"]
    shorter = exchange("03a", "third DELETE, shorter grace")
    status, moved = await send(http, shorter)
    assert moved["metadata"]["deletionGracePeriodSeconds"] == 2


@pytest.mark.parametrize(
    ("stem", "bound"), [("03d", False), ("03e", True)], ids=["unbound", "grace-0"]
)
async def test_immediate_deletes_answer_dgp_0_and_the_pod_is_gone(
    http: aiohttp.ClientSession, server: FakeApiServer, stem: str, bound: bool
) -> None:
    """Unbound Pods and grace 0: MODIFIED (dGP 0) then DELETED, and a GET right after is 404."""
    name = "del-unbound" if stem == "03d" else "del-d"
    body = _bound_pod(name)
    if not bound:
        del body["spec"]["nodeName"]
    server.create_pod(NS, body)
    if bound:
        await until(lambda: _phase(server, name) == "Running")
    version = str(server.resource_version)
    delete = exchange(stem, "DELETE with gracePeriodSeconds")
    status, answer = await send(http, delete)
    assert status == delete["response"]["status"] == 200
    assert answer["metadata"]["deletionGracePeriodSeconds"] == 0
    assert answer["metadata"]["generation"] == delete["response"]["body"]["metadata"]["generation"]
    after = exchange(stem, "GET right after")
    assert (await send(http, after))[0] == 404
    events = await watch_lines(http, {"resourceVersion": version, "timeoutSeconds": "1"}, "DELETED")
    assert [e["type"] for e in events] == [e["type"] for e in recording(stem)["watch_timeline"][0]]
    assert condensed(events) == condensed(recording(stem)["watches"][0]["response"]["events"])


async def test_delete_without_options_uses_the_spec_grace(
    http: aiohttp.ClientSession, server: FakeApiServer
) -> None:
    server.scripts["main"] = ContainerScript(ignore_term=True)
    server.create_pod(NS, _bound_pod("del-e", grace=7))
    await until(lambda: _phase(server, "del-e") == "Running")
    recorded = exchange("03f", "DELETE with no body")
    status, body = await send(http, recorded)
    assert status == 200
    assert (
        body["metadata"]["deletionGracePeriodSeconds"]
        == recorded["response"]["body"]["metadata"]["deletionGracePeriodSeconds"]
        == 7
    )


async def test_collection_delete_answers_the_pods_as_they_were_before(
    http: aiohttp.ClientSession, server: FakeApiServer
) -> None:
    """04a: a PodList of the matched Pods without deletionTimestamp; the effect is per Pod."""
    server.scripts["main"] = ContainerScript(ignore_term=True)
    for name in ("coll-1", "coll-2"):
        server.create_pod(NS, _bound_pod(name, labels={"asyncdeploy/plan": "coll"}))
    unbound = _bound_pod("coll-3-unbound", labels={"asyncdeploy/plan": "coll"})
    del unbound["spec"]["nodeName"]
    server.create_pod(NS, unbound)
    other = _bound_pod("other-1-unbound", labels={"asyncdeploy/plan": "other"})
    del other["spec"]["nodeName"]
    server.create_pod(NS, other)
    await until(lambda: _phase(server, "coll-2") == "Running")
    recorded = exchange("04a", "DELETE collection: labelSelector")
    status, body = await send(http, recorded)
    expected = recorded["response"]["body"]
    assert status == 200
    assert (body["kind"], body["apiVersion"], list(body["metadata"])) == (
        expected["kind"],
        expected["apiVersion"],
        list(expected["metadata"]),
    )
    assert [i["metadata"]["name"] for i in body["items"]] == [
        i["metadata"]["name"] for i in expected["items"]
    ]
    for item in body["items"]:
        assert "kind" not in item and "apiVersion" not in item
        assert "deletionTimestamp" not in item["metadata"]
    after = exchange("04a", "list by label right after")
    status, listing = await send(http, after)
    recorded_after = after["response"]["body"]["items"]
    assert [i["metadata"]["name"] for i in listing["items"]] == [
        i["metadata"]["name"] for i in recorded_after
    ]
    assert {i["metadata"]["deletionGracePeriodSeconds"] for i in listing["items"]} == {5}
    assert len({i["metadata"]["deletionTimestamp"] for i in listing["items"]}) == 1
    untouched = exchange("04a", "the Pod with another label is untouched")
    assert (await send(http, untouched))[0] == 200
    nothing = exchange("04a", "DELETE collection that matches nothing")
    for name in ("coll-1", "coll-2"):  # as the kubelet would, 5 s later
        server._delete_pod((NS, name), 0)
    status, empty = await send(http, nothing)
    assert (status, empty["items"]) == (200, nothing["response"]["body"]["items"]) == (200, [])


# --- watches (05a, 05b, 05d, 05e, 05f) ---------------------------------------------------------


@pytest.mark.parametrize(
    ("stem", "script"),
    [("05a", ContainerScript(drain=0.2)), ("05b", ContainerScript(ignore_term=True))],
    ids=["exit-0-on-sigterm", "ignores-sigterm"],
)
async def test_a_pods_life_watched_from_creation_to_deletion(
    http: aiohttp.ClientSession, server: FakeApiServer, stem: str, script: ContainerScript
) -> None:
    """The same distinct states as the recording, in the same order, ADDED to DELETED.

    The recordings used grace 10 and 3; here grace 1 keeps the test short (the fake honours any).
    """
    server.scripts["main"] = script
    create = exchange(stem, "create the Pod")
    version = str(server.resource_version)
    results: list[list[dict[str, Any]]] = []

    async def follow() -> None:
        results.append(await watch_lines(http, {"resourceVersion": version, "timeoutSeconds": "4"}))

    async with anyio.create_task_group() as tg:
        tg.start_soon(follow)
        await anyio.sleep(0.05)
        assert (await send(http, create))[0] == 201
        name = create["request"]["body"]["metadata"]["name"]
        await until(lambda: _phase(server, name) == "Running")
        await anyio.sleep(0.1)
        delete = {
            "request": {
                "method": "DELETE",
                "path": f"{PODS}/{name}",
                "body": {"gracePeriodSeconds": 1},
            }
        }
        assert (await send(http, delete))[0] == 200
        await until(lambda: (NS, name) not in server.pods, timeout=4)
        server.expire_watches()
    [events] = results
    events = [e for e in events if e["type"] != "ERROR"]
    recorded = recording(stem)["watches"][0]["response"]["events"]
    assert condensed(events) == condensed(recorded)
    for ours, theirs in ((events[-1], recorded[-1]), (events[0], recorded[0])):
        assert list(ours["object"]) == list(theirs["object"])
        assert set(ours["object"]["metadata"]) == set(theirs["object"]["metadata"])
    last_status = recorded[-1]["object"]["status"]
    assert set(events[-1]["object"]["status"]) <= set(last_status)
    assert set(events[-1]["object"]["status"]["containerStatuses"][0]) <= set(
        last_status["containerStatuses"][0]
    )


async def test_a_watch_from_a_compacted_version_gets_one_410_error_event(
    http: aiohttp.ClientSession, server: FakeApiServer
) -> None:
    recorded = exchange("05d", "watch from resourceVersion 1 (older")
    server.create_pod(NS, _bound_pod("watch-a"))
    server.expire_watches()  # compacts everything so far
    events = await watch_lines(http, recorded["request"]["query"])
    [theirs] = recorded["response"]["events"]
    assert [e["type"] for e in events] == ["ERROR"]
    ours = events[0]["object"]
    assert {k: v for k, v in ours.items() if k != "message"} == {
        k: v for k, v in theirs["object"].items() if k != "message"
    }
    assert ours["message"].startswith("too old resource version: 1 (")


async def test_a_watch_without_a_version_starts_with_synthetic_added_and_a_bookmark(
    http: aiohttp.ClientSession, server: FakeApiServer
) -> None:
    recorded = exchange("05e", "watch with no resourceVersion, allowWatchBookmarks=true")
    server.create_pod(
        NS,
        {**_bound_pod("rec-minimal"), "spec": {"containers": [{"name": "main", "image": "x:1"}]}},
    )
    events = await watch_lines(http, {**recorded["request"]["query"], "timeoutSeconds": "1"})
    theirs = recorded["response"]["events"]
    assert (
        [e["type"] for e in events[:2]] == [e["type"] for e in theirs[:2]] == ["ADDED", "BOOKMARK"]
    )
    ours_mark, their_mark = events[1]["object"], theirs[1]["object"]
    ours_mark["metadata"]["resourceVersion"] = their_mark["metadata"]["resourceVersion"]
    assert ours_mark == their_mark


async def test_an_idle_watch_gets_a_bookmark_then_ends_at_its_timeout(
    http: aiohttp.ClientSession, server: FakeApiServer
) -> None:
    recorded = recording("05f")["watches"][0]
    query = {**recorded["request"]["query"], "timeoutSeconds": "1"}
    query["resourceVersion"] = str(server.resource_version)
    with anyio.fail_after(3):
        events = await watch_lines(http, query)
    assert [e["type"] for e in events] == ["BOOKMARK"]
    ours, theirs = events[0]["object"], recorded["response"]["events"][-1]["object"]
    ours["metadata"]["resourceVersion"] = theirs["metadata"]["resourceVersion"]
    assert ours == theirs


def _phase(server: Any, name: str) -> str | None:
    """The fake Pod's phase; None while it is not there yet."""
    return server.pods.get((NS, name), {}).get("status", {}).get("phase")
