"""Broker fixtures for the real-client interop suite.

INTEROP_TARGET selects what the tests run against: ``shoal`` (default) or ``kafka`` (real
Apache Kafka); the broker processes are brokers.py's (shared with crates/python/tests).

Every test gets brokers through ``broker`` (module scope, one per test file,
broker config from the module's ``BROKER_CONFIG`` dict) or ``make_broker``
(function scope factory: ``make_broker({"num.partitions": "3"})``).

A module's ``BROKER_LISTENERS`` (or ``make_broker(config, listeners=...)``) adds listeners
beside the PLAINTEXT one the fixtures wait on: ``{"SASL_PLAINTEXT": "SASL_PLAINTEXT"}`` maps a
listener name to its security protocol; each gets a free loopback port
(``broker.listener_bootstrap(name)``), configured with Kafka's keys on both targets.
"""

import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

# Re-exported: the tests import these from conftest.
from brokers import (  # noqa: E402,F401
    _LIVE, REPO, TARGET, Broker, _die_with_parent, _free_port, _kafka_libs, _tcp_ok)


def _module_config(request):
    return getattr(request.module, "BROKER_CONFIG", None) or {}


@pytest.fixture(scope="module")
def broker(request, tmp_path_factory):
    b = Broker(tmp_path_factory.mktemp("broker"), _module_config(request),
               getattr(request.module, "BROKER_LISTENERS", None))
    try:
        b.start()
        yield b
    finally:
        b.stop()
        if b.is_running():
            b.kill9()


@pytest.fixture
def make_broker(tmp_path_factory):
    made = []

    def factory(config=None, listeners=None):
        b = Broker(tmp_path_factory.mktemp("broker"), config, listeners)
        made.append(b)
        return b.start()

    yield factory
    for b in made:
        try:
            b.stop()
        finally:
            b.kill9()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    if rep.failed and _LIVE:
        for b in list(_LIVE):
            rep.sections.append((f"broker log ({b.target}, {b.bootstrap})", b.log_tail(40)))


def pytest_configure(config):
    config.addinivalue_line("markers", "load: bounded load test (many clients for ~20 s)")
    config.addinivalue_line("markers", "kill: SIGSTOPs/SIGKILLs a client process or kill -9s the broker")


def pytest_report_header(config):
    if TARGET == "kafka":
        return f"interop target: kafka (KAFKA_LIBS={os.environ.get('KAFKA_LIBS', '<fetch>')})"
    return (f"interop target: shoal (SHOAL_BIN="
            f"{os.environ.get('SHOAL_BIN') or REPO / 'target' / 'release' / 'shoal'})")


def pytest_sessionfinish(session, exitstatus):
    for b in list(_LIVE):
        try:
            b.kill9()
        except Exception:  # noqa: BLE001
            pass
