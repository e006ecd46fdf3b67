"""The process logs are JSON lines a collector can parse, whatever the message holds."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator

import pytest

from adapters import logs
from fsm.placement import cel
from fsm.placement.capacity import Device
from tests.support.root_logging import kept_root_logging


@pytest.fixture
def captured() -> Iterator[io.StringIO]:
    with kept_root_logging():
        out = io.StringIO()
        logs.configure("debug", stream=out)
        yield out


def _records(out: io.StringIO) -> list[dict[str, object]]:
    return [json.loads(line) for line in out.getvalue().splitlines()]


def test_quotes_newlines_and_backslashes_stay_one_valid_json_line(captured) -> None:
    message = 'class "default-llm" said:\n  {"a": 1}\\ and\ttabs \u00e9'
    logging.getLogger("ai.test").warning("rejected: %s", message)
    lines = captured.getvalue().splitlines()
    assert len(lines) == 1
    record = json.loads(lines[0])
    assert record["msg"] == f"rejected: {message}"
    assert (record["level"], record["logger"]) == ("WARNING", "ai.test")
    assert record["time"].endswith("+00:00")


def test_a_traceback_is_inside_the_record(captured) -> None:
    try:
        raise RuntimeError('boom with "quotes"')
    except RuntimeError:
        logging.getLogger("ai.test").exception("pass over %s raised", "uid-1")
    lines = captured.getvalue().splitlines()
    assert len(lines) == 1, "the traceback must not spill onto lines of its own"
    record = json.loads(lines[0])
    assert record["msg"] == "pass over uid-1 raised"
    assert record["exc"].startswith("Traceback (most recent call last):")
    assert 'RuntimeError: boom with "quotes"' in record["exc"]


def test_order_fields_from_extra_and_from_the_pass_context(captured) -> None:
    log = logging.getLogger("ai.test")
    log.info("plain")
    log.info("with extra", extra=logs.order_fields(uid="u-1", namespace="support", name="llm"))
    with logs.about_order(uid="u-2", namespace="analytics", name="embed"):
        log.info("inside a pass")
        log.info("extra wins", extra=logs.order_fields(uid="u-3"))
    log.info("after the pass")
    plain, extra, inside, wins, after = _records(captured)
    assert not {"uid", "namespace", "name"} & set(plain)
    assert (extra["namespace"], extra["name"], extra["uid"]) == ("support", "llm", "u-1")
    assert (inside["namespace"], inside["name"], inside["uid"]) == ("analytics", "embed", "u-2")
    assert (wins["uid"], wins["namespace"]) == ("u-3", "analytics")
    assert "uid" not in after


def test_the_level_filters_and_libraries_stay_quiet(captured) -> None:
    logs.configure("warning", stream=captured)
    logging.getLogger("ai.test").info("not shown")
    logging.getLogger("httpx").warning("shown")
    logging.getLogger("ai.test").error("shown too")
    assert [r["msg"] for r in _records(captured)] == ["shown", "shown too"]
    with pytest.raises(ValueError, match="log level"):
        logs.configure("verbose")


def test_debug_is_the_controllers_not_its_libraries_step_by_step(captured) -> None:
    """At debug, cel-python logged every step of every device selector and drowned the
    controller's own lines; httpcore every socket operation."""
    logs.configure("debug", stream=captured)
    device = Device(driver="gpu.nvidia.com", pool="p", name="d0", node="n")
    assert cel.evaluate("device.driver == 'gpu.nvidia.com'", device)
    logging.getLogger("httpcore.connection").debug("connect_tcp.started")
    logging.getLogger("ai.test").debug("ours")
    assert [r["msg"] for r in _records(captured)] == ["ours"]


def test_configure_twice_does_not_double_lines(captured) -> None:
    logs.configure("info", stream=captured)
    logging.getLogger("ai.test").info("once")
    assert len(captured.getvalue().splitlines()) == 1
