"""Fixtures of the simulator's conformance tests.

`simulator` starts one simulated cluster for a test module from the cluster file the
module names in CLUSTER (under clusters/), and always stops it; `make_simulator`
starts one for a single test from a description (a dict) and stops it at the end.
"""

import os

import pytest
import yaml

from sim_helpers import CLUSTERS, Simulator


@pytest.fixture(scope="session")
def stopping():
    """Stop commands still running; the session waits for every one before it ends."""
    processes = []
    yield processes
    for process in processes:
        process.wait(timeout=30)


@pytest.fixture(scope="module")
def simulator(request, tmp_path_factory, stopping):
    name = getattr(request.module, "CLUSTER", "basic.yml")
    sim = Simulator(os.path.join(CLUSTERS, name), tmp_path_factory.mktemp("sim"))
    try:
        yield sim.start()
    finally:
        stopping.append(sim.stop(wait=False))


@pytest.fixture
def make_simulator(tmp_path, stopping):
    started = []

    def make(description):
        folder = tmp_path / f"sim{len(started)}"
        folder.mkdir()
        path = folder / "cluster.yml"
        path.write_text(yaml.safe_dump(description), encoding="utf-8")
        sim = Simulator(str(path), folder)
        started.append(sim)
        return sim.start()

    try:
        yield make
    finally:
        for sim in started:
            stopping.append(sim.stop(wait=False))
