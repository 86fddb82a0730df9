"""The dashboard in a real browser (headless Chromium) against the suite's fleet, reached as a
user reaches it: ``kubectl fleet dashboard`` forwarding a local port to the leading hub Pod.

One queue lets one job out at a time; each job (5 × 8 GPUs) is too big for one member, so it
runs split across both. The page must show the second job waiting at position 1 and the third
at 2, then, once the first is deleted, the second's replicas on both members and the third
moving up to 1; and a member whose agent falls silent flagged stale.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from e2e.conftest import eventually
from e2e.jobs import seed_pytorchjob, state
from e2e.localfleet import HUB, LocalFleet
from fleet.api.cluster import AGENT_HEARTBEAT
from fleet.api.protocol import HEARTBEAT_LEASE, member_namespace
from fleet.clients import errors
from fleet.clients import resources as r
from fleet.clients.kube import Kube

pytestmark = pytest.mark.e2e
NAMESPACE = "board"
GHOST = "ghost"  # a member with no agent: the test speaks for it, then falls silent
CHROMEDRIVER = os.environ.get("FLEET_CHROMEDRIVER", "/usr/bin/chromedriver")
CHROMIUM = os.environ.get("FLEET_CHROMIUM", "/usr/bin/chromium")
SHOTS = Path(os.environ.get("FLEET_DASHBOARD_SHOTS", "")) if \
    os.environ.get("FLEET_DASHBOARD_SHOTS") else None


def require_browser() -> None:
    missing = [p for p in (CHROMIUM, CHROMEDRIVER) if not shutil.which(p)]
    if missing:
        message = f"headless Chromium needed ({', '.join(missing)} missing: make browser-packages)"
        if os.environ.get("FLEET_E2E_REQUIRED") == "1":
            pytest.fail(message)
        pytest.skip(message)


@pytest.fixture(scope="module")
def board(fleet: LocalFleet, hub: Kube) -> Iterator[str]:
    """The page's URL, from ``kubectl fleet dashboard --port 0`` running meanwhile."""
    require_browser()
    command = subprocess.Popen(
        [sys.executable, "-m", "fleet.cli", "dashboard", "--port", "0",
         "--kubeconfig", str(fleet.kubeconfig(HUB))],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lines: list[str] = []

    def read() -> None:
        assert command.stdout is not None
        for line in command.stdout:
            lines.append(line)

    threading.Thread(target=read, daemon=True).start()
    try:
        said = eventually(lambda: next((ln for ln in lines if ln.startswith("Dashboard: ")), None),
                          timeout=60, what="kubectl fleet dashboard's URL")
        if fleet.runs_pods:  # forwarded to the leading hub Pod
            assert any(ln.startswith("Forwarding from 127.0.0.1:") and "-> pod fleet-system/"
                       in ln for ln in lines), lines
        yield said.split()[1]
    finally:
        command.terminate()
        command.wait(10)


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    require_browser()
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                 "--window-size=1400,1000", "--no-first-run", "--disable-extensions"):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    driver.set_page_load_timeout(60)
    try:
        yield driver
    finally:
        driver.quit()


@pytest.fixture(scope="module")
def queue(hub: Kube) -> Iterator[str]:
    """A quota tree whose one leaf serves the test's namespace, one job at a time, and a
    queued Divided Gang policy that may split a job over two members."""
    assert not hub.list(r.ELASTICQUOTATREES, "kube-system")[0], "another test's tree is left"
    if hub.get_or_none(r.NAMESPACES, NAMESPACE) is None:
        hub.create(r.NAMESPACES, {"apiVersion": "v1", "kind": "Namespace",
                                  "metadata": {"name": NAMESPACE}})
    hub.create(r.ELASTICQUOTATREES, {
        "apiVersion": "scheduling.sigs.k8s.io/v1beta1", "kind": "ElasticQuotaTree",
        "metadata": {"name": "board", "namespace": "kube-system"},
        "spec": {"root": {"name": "root", "max": {"nvidia.com/gpu": 1000, "cpu": 1000,
                                                  "memory": "4000Gi"},
                          "min": {"nvidia.com/gpu": 1000, "cpu": 1000, "memory": "4000Gi"},
                          "children": [{"name": "board", "namespaces": [NAMESPACE],
                                        "min": {"nvidia.com/gpu": 40},
                                        "max": {"kube-queue/max-jobs": 1,
                                                "nvidia.com/gpu": 1000, "cpu": 1000,
                                                "memory": "4000Gi"}}]}}})
    hub.apply(r.PROPAGATIONPOLICIES, {
        "apiVersion": "policy.one.alibabacloud.com/v1alpha1", "kind": "PropagationPolicy",
        "metadata": {"name": "board", "namespace": NAMESPACE},
        "spec": {"suspension": {"scheduling": True},
                 "resourceSelectors": [{"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob"}],
                 "placement": {"replicaScheduling": {"replicaSchedulingType": "Divided",
                                                     "customSchedulingType": "Gang"},
                               "spreadConstraints": [{"spreadByField": "cluster",
                                                      "maxGroups": 2}]}}},
        field_manager="test")
    yield "root-board"
    for job in hub.list(r.PYTORCHJOBS, NAMESPACE)[0]:
        hub.delete(r.PYTORCHJOBS, job["metadata"]["name"], NAMESPACE)
    eventually(lambda: not hub.list(r.PYTORCHJOBS, NAMESPACE)[0], timeout=90, what="jobs gone")
    hub.delete(r.ELASTICQUOTATREES, "board", "kube-system")
    hub.delete(r.NAMESPACES, NAMESPACE)


def big_job(name: str) -> dict[str, Any]:
    """5 replicas of 8 GPUs: more than a member's 32, so split over both."""
    return seed_pytorchjob(name, NAMESPACE, run_for="1h", gpus=8, workers=4)


def shown(browser: Any, url: str, selector: str, *, timeout: float = 90,
          what: str = "") -> list[Any]:
    """Open ``url`` (if not there) and wait for the live page to show ``selector``."""
    from selenium.webdriver.common.by import By

    if browser.current_url != url:
        browser.get(url)

    def found() -> list[Any] | None:
        return browser.find_elements(By.CSS_SELECTOR, selector) or None
    try:
        return eventually(found, timeout=timeout, interval=0.5, what=what or selector)
    except BaseException:
        status = browser.find_elements(By.ID, "status")
        print("page status:", status[0].text if status else "-", "\n", browser.page_source[:3000])
        raise


def page_errors(browser: Any) -> list[str]:
    """Script errors and security refusals (a CSP violation) the page caused; a refused
    request (a 503 while the leader changes) is the page's to say, not an error."""
    return [entry["message"] for entry in browser.get_log("browser")
            if entry.get("level") == "SEVERE" and entry.get("source") in ("javascript",
                                                                            "security")]


def snap(browser: Any, name: str) -> None:
    if SHOTS is not None:
        SHOTS.mkdir(parents=True, exist_ok=True)
        browser.save_screenshot(str(SHOTS / f"{name}.png"))


def test_a_job_moves_from_waiting_to_running_across_two_members(
        board: str, browser: Any, queue: str, hub: Kube) -> None:
    hub.create(r.PYTORCHJOBS, big_job("first"))
    eventually(lambda: state(hub.get(r.PYTORCHJOBS, "first", NAMESPACE)) == "Running",
               timeout=120, what="first Running")
    second = hub.create(r.PYTORCHJOBS, big_job("second"))
    hub.create(r.PYTORCHJOBS, big_job("third"))

    rows = shown(browser, f"{board}#/queues",
                 f'[data-waiting-in="{queue}"] tr[data-job="{NAMESPACE}/third"]'
                 '[data-position="2"]', what="third at position 2 in the queue")
    waiting = shown(browser, f"{board}#/queues",
                    f'[data-waiting-in="{queue}"] tr[data-job="{NAMESPACE}/second"]')[0]
    assert waiting.get_attribute("data-position") == "1"
    reason = waiting.find_elements("css selector", "td")[2].text
    assert reason not in ("", "-"), waiting.text
    assert rows
    snap(browser, "queues")

    job_page = f"{board}#/jobs/{second['metadata']['uid']}"
    summary = shown(browser, job_page, "#job-summary")[0]
    assert "waits in queue" in summary.text, summary.text
    assert "position 1" in summary.text, summary.text

    hub.delete(r.PYTORCHJOBS, "first", NAMESPACE)
    shares = shown(browser, job_page, "#shares tr[data-cluster]", timeout=120,
                   what="second's shares on the page")
    eventually(lambda: len(shown(browser, job_page, "#shares tr[data-cluster]")) == 2,
               what="second split over two members")
    by_member = {row.get_attribute("data-cluster"): row.text
                 for row in shown(browser, job_page, "#shares tr[data-cluster]")}
    assert set(by_member) == {"member1", "member2"}, by_member
    replicas: dict[str, int] = {}
    for text in by_member.values():
        for role, count in re.findall(r"\b(Master|Worker) (\d+)", text):
            replicas[role] = replicas.get(role, 0) + int(count)
    assert replicas == {"Master": 1, "Worker": 4}, by_member  # the gang, split in two
    eventually(lambda: "Running" in shown(browser, job_page, "#job-summary")[0].text,
               timeout=120, what="second Running on the page")
    assert shares
    snap(browser, "job")

    moved = shown(browser, f"{board}#/queues",
                  f'[data-waiting-in="{queue}"] tr[data-job="{NAMESPACE}/third"]'
                  '[data-position="1"]', what="third moved up to position 1")
    assert moved
    cards = shown(browser, f"{board}#/", "#card-gpus-used strong", what="the overview")
    assert cards[0].text.endswith("/ 64"), cards[0].text  # both members' GPUs
    snap(browser, "overview")
    assert page_errors(browser) == []


def beat(hub: Kube, stop: threading.Event) -> None:
    """Speak for the ghost member's agent: renew its heartbeat Lease every second."""
    namespace = member_namespace(GHOST)
    while not stop.wait(1.0):
        try:
            hub.patch(r.LEASES, HEARTBEAT_LEASE, {"spec": {"renewTime": micro_now()}},
                      namespace)
        except errors.ApiError:
            pass


def micro_now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S.000000Z", time.gmtime())


@pytest.fixture
def ghost(hub: Kube) -> Iterator[threading.Event]:
    """A member no job may go to (a taint nothing tolerates) whose heartbeat the test keeps
    until it sets the returned event."""
    namespace = member_namespace(GHOST)
    hub.create(r.NAMESPACES, {"apiVersion": "v1", "kind": "Namespace",
                              "metadata": {"name": namespace}})
    hub.create(r.MEMBERCLUSTERS, {
        "apiVersion": "fleet.sh/v1alpha1", "kind": "MemberCluster",
        "metadata": {"name": GHOST},
        "spec": {"taints": [{"key": "fleet.sh/test", "value": "ghost", "effect": "NoSchedule"}]}})
    hub.patch(r.MEMBERCLUSTERS, GHOST, {"status": {
        "conditions": [{"type": "Ready", "status": "True", "reason": "AgentReady",
                        "message": "the test speaks for it",
                        "lastTransitionTime": micro_now()[:19] + "Z"}],
        "capacity": {"observedTime": micro_now()[:19] + "Z",
                     "nodeGroups": [{"count": 1, "allocatable": {"cpu": 4000},
                                     "free": {"cpu": 4000}}],
                     "allocatable": {"cpu": 4000}, "free": {"cpu": 4000}}}},
        subresource="status")
    hub.create(r.LEASES, {
        "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": {"name": HEARTBEAT_LEASE, "namespace": namespace,
                     "labels": {AGENT_HEARTBEAT: "true"}},
        "spec": {"holderIdentity": "test", "leaseDurationSeconds": 15,
                 "renewTime": micro_now()}})
    silent = threading.Event()
    threading.Thread(target=beat, args=(hub, silent), daemon=True).start()
    try:
        yield silent
    finally:
        silent.set()
        hub.delete(r.MEMBERCLUSTERS, GHOST)
        hub.delete(r.NAMESPACES, namespace)


def test_a_member_whose_agent_falls_silent_is_flagged_stale(
        board: str, browser: Any, ghost: threading.Event) -> None:
    page = f"{board}#/members"
    shown(browser, page, f'tr[data-member="{GHOST}"][data-state="Ready"]',
          what="ghost Ready while it beats")
    assert shown(browser, page, 'tr[data-member="member1"][data-state="Ready"]')
    ghost.set()  # its agent falls silent
    row = shown(browser, page, f'tr[data-member="{GHOST}"][data-state="NotReady"]',
                timeout=90, what="ghost flagged once silent")[0]
    assert "stale" in (row.get_attribute("class") or "")
    assert "heartbeat" in row.text, row.text
    snap(browser, "members")
    assert page_errors(browser) == []
