"""The connection form's Test button, pressed in Airflow's real UI in headless Chromium: a streamrep
connection created through the form tests green from the connections list, one edited through the
form to a mistyped URL tests red with its reason, and neither names Airflow's throwaway id.

Only Airflow's API server runs (it serves the UI and the test endpoint), with login off."""

from __future__ import annotations

import json
import os
import subprocess
import time
import urllib.request

import pytest

from conftest import REPO, VENV_BIN, Session, _stop_group, free_port
from streamrep.airflow.connection_test import PortlessConnectionTest
from streamrep.airflow.plugin import StreamrepPlugin

CHROMIUM = "/usr/bin/chromium"


@pytest.fixture(scope="module")
def api_server(e2e: Session):
    """``airflow api-server`` on its own copy of the metadata database, login off, connection
    testing on; stopped with its process group."""
    if not os.path.exists(CHROMIUM):
        pytest.skip("headless Chromium is not installed (apt-get install -y chromium)")
    home = e2e.copy_airflow_home("airflow-home-connection-test")
    assert any(m["middleware"] is PortlessConnectionTest for m in StreamrepPlugin.fastapi_root_middlewares)
    port = int(os.environ.get("E2E_AIRFLOW_PORT") or free_port())  # a developer may pin it
    env = {
        **e2e.env_for(home),
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "True",
        "AIRFLOW__API__PORT": str(port),
    }
    log = e2e.root / "connection-test-api.log"
    with open(log, "wb") as out:
        process = subprocess.Popen(
            [str(VENV_BIN / "airflow"), "api-server", "--port", str(port)],
            env=env,
            cwd=REPO,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    base = f"http://localhost:{port}"
    try:
        deadline = time.monotonic() + 180
        while not _metadatabase_up(base):
            if process.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"the API server did not start:\n{log.read_text()[-3000:]}")
            time.sleep(1)
        yield base
    finally:
        _stop_group(process)


def _metadatabase_up(base: str) -> bool:
    """The API server answers (no scheduler runs here, so conftest's ``_healthy`` never would)."""
    try:
        with urllib.request.urlopen(base + "/api/v2/monitor/health", timeout=30) as resp:
            return json.loads(resp.read())["metadatabase"]["status"] == "healthy"
    except (OSError, ValueError, KeyError):
        return False


def pressed_test(page, connection_id: str) -> tuple[str, str, str]:
    """Press the list's Test button of ``connection_id``: the toast's title and message, and the
    button icon's colour."""
    row = page.get_by_role("row").filter(has_text=connection_id)
    button = row.get_by_role("button", name="Test Connection")
    toasts = page.locator("[data-scope=toast][data-part=root]").filter(has_text="Test Connection")
    for close in toasts.locator("[data-part=close-trigger]").all():  # an earlier test's answer
        close.click()
    toasts.first.wait_for(state="detached", timeout=10_000)
    button.click()
    toast = toasts.first
    toast.wait_for(timeout=60_000)
    title = toast.locator("[data-part=title]").inner_text()
    message = toast.locator("[data-part=description]").inner_text()
    return title, message, button.locator("svg").get_attribute("color") or ""


def test_a_form_saved_connection_tests_green_and_a_mistyped_one_red(api_server, e2e, tmp_path):
    from playwright.sync_api import sync_playwright

    e2e.streamrep("cluster", "add", "-name", "chicago")
    url = f"embedded:{e2e.streamrep_home / 'clusters' / 'chicago.db'}"
    typo = tmp_path / "no-such-folder" / "chicago.db"
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        try:
            page = browser.new_page()
            page.goto(f"{api_server}/connections")
            page.get_by_role("button", name="Add Connection").click()
            page.locator("input[name=connection_id]").fill("streamrep_chicago")
            page.get_by_role("combobox").fill("Streamrep cluster")
            page.keyboard.press("Enter")
            page.locator("input[name=host]").fill(url)  # the form's "Cluster URL"
            page.get_by_role("button", name="Save").click()
            page.get_by_role("row").filter(has_text="streamrep_chicago").wait_for()

            title, message, colour = pressed_test(page, "streamrep_chicago")
            assert (title, message, colour) == (
                "Test Connection Successful",
                f"cluster at {url}: store opened, 0 streams",
                "green",
            )

            row = page.get_by_role("row").filter(has_text="streamrep_chicago")
            row.get_by_role("button", name="Edit Connection").click()
            page.locator("input[name=host]").fill(f"embedded:{typo}")
            page.get_by_role("button", name="Save").click()
            page.get_by_role("row").filter(has_text=str(typo)).wait_for()

            title, message, colour = pressed_test(page, "streamrep_chicago")
            assert colour == "red", (title, message)
            assert message == f"no cluster store at {typo}; create it with 'streamrep cluster add -url embedded:{typo}'"
            page.screenshot(path=str(tmp_path / "connection-test-red.png"))
        finally:
            browser.close()
    assert not typo.parent.exists()  # testing created nothing
