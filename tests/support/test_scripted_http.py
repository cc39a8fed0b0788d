"""The scripted loopback server answers from its function and records each request."""

from __future__ import annotations

import urllib.request

from tests.support.scripted_http import Answer, ScriptedServer


def test_the_scripted_server_answers_from_its_function_and_records_requests() -> None:
    def answer(req: object) -> Answer:
        return Answer(201, {"X-Seen": "yes"}, b"body")

    with ScriptedServer(answer) as srv:
        request = urllib.request.Request(
            f"http://{srv.host}/p?q=1", data=b"abc", headers={"X-In": "v"}, method="POST"
        )
        with urllib.request.urlopen(request) as resp:
            assert (resp.status, resp.headers["X-Seen"], resp.read()) == (201, "yes", b"body")
    (req,) = srv.requests
    assert (req.method, req.path, req.body, req.headers["x-in"]) == ("POST", "/p?q=1", b"abc", "v")
    assert ("X-In", "v") in req.header_lines


def test_an_answer_announcing_more_than_it_sends_drops_the_connection() -> None:
    import http.client

    with ScriptedServer(lambda req: Answer(200, {"Content-Length": "10"}, b"abc")) as srv:
        conn = http.client.HTTPConnection(srv.host, timeout=5)
        conn.request("GET", "/")
        resp = conn.getresponse()
        try:
            resp.read()
        except http.client.IncompleteRead as err:
            assert err.partial == b"abc"
        else:
            raise AssertionError("the body was not cut short")
