"""The approval page in a real browser: Debian's Chromium, headless, driven by Selenium.

A real worker parks the gated call; an operator signs in on the intake's page, sees the
call with its arguments, and approves it (the call runs once and goes out with its batch)
or denies it with a reason (it never runs; the model is told who and why). Chromium and
its driver come from Debian (``chromium``, ``chromium-driver``): nothing is downloaded.
Without them the test is skipped, and under CI it fails instead.

``TOOLFAN_SCREENSHOT=path.png`` saves the page as the test sees it (the README's picture).
"""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Iterator

import pytest

from emulator import function_call
from tests.e2e.harness import batch_events, poll_loop
from tests.e2e.test_approvals import waiting_for
from tests.e2e.test_webhook_intake import TOKEN, intake  # noqa: F401  # the fixture

pytestmark = pytest.mark.usefixtures("worker")

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
DRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"


@pytest.fixture(scope="module")
def browser() -> Iterator[object]:
    """Headless Chromium, Debian's own build and driver."""
    if not (os.path.exists(CHROMIUM) and os.path.exists(DRIVER)):
        message = "Debian's chromium and chromium-driver are not installed"
        if os.environ.get("CI"):
            pytest.fail(message + " (.ci/run installs them)")
        pytest.skip(message)
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    os.environ.setdefault("SE_OFFLINE", "true")  # never let Selenium fetch a browser
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage"):
        options.add_argument(flag)
    options.add_argument("--window-size=1500,900")
    driver = webdriver.Chrome(service=Service(DRIVER), options=options)
    try:
        yield driver
    finally:
        driver.quit()


def sign_in(driver, intake: str, name: str) -> None:  # noqa: F811
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    driver.delete_all_cookies()
    driver.get(f"{intake}/approvals")
    assert driver.current_url.endswith("/approvals/login")  # sent to sign in first
    driver.find_element(By.NAME, "name").send_keys(name)
    driver.find_element(By.NAME, "token").send_keys(TOKEN)
    driver.find_element(By.CSS_SELECTOR, "form.login button").click()
    # The click returns before the next page may have loaded: wait for it.
    WebDriverWait(driver, 30).until(lambda d: f"Signed in as {name}" in d.page_source)


def notice_after(driver) -> str:
    """The notice of the page a decision led to, once it has loaded."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    WebDriverWait(driver, 30).until(lambda d: d.find_elements(By.CSS_SELECTOR, ".notice"))
    return str(driver.find_element(By.CSS_SELECTOR, ".notice").text)


def row_of(driver, aid: str):
    from selenium.webdriver.common.by import By

    (row,) = [r for r in driver.find_elements(By.CSS_SELECTOR, "tbody tr") if aid in r.text]
    return row


def test_an_operator_approves_on_the_page_and_the_call_runs_once(
    intake,  # noqa: F811
    browser,
    api,
    redis_client,
):
    from selenium.webdriver.common.by import By

    key = uuid.uuid4().hex
    gated = function_call("erase", {"key": key}, turn_id="turn_1")
    plain = function_call("add", {"a": 2, "b": 3}, turn_id="turn_1")
    sid = api.create_session([gated, plain])["id"]
    with poll_loop():
        aid = waiting_for(sid, gated)
        sign_in(browser, intake, "alice")
        row = row_of(browser, aid)
        cells = [c.text for c in row.find_elements(By.TAG_NAME, "td")]
        assert cells[0].startswith("erase") and key in cells[1] and sid in cells[2]
        assert cells[3].endswith("ago") and ("min" in cells[4] or cells[4].endswith(" s"))
        assert cells[5] == "the tool requires it"
        if os.environ.get("TOOLFAN_SCREENSHOT"):
            browser.set_window_size(1500, 420)
            browser.save_screenshot(os.environ["TOOLFAN_SCREENSHOT"])
            browser.set_window_size(1500, 900)
        assert redis_client.get(f"test:runs:{key}") is None  # nothing ran before the decision
        row.find_element(By.CSS_SELECTOR, "button.approve").click()
        notice = notice_after(browser)
        assert notice == f"erase ({aid}): approved by alice."
        answered = batch_events(api, sid)
    assert answered[gated["call_id"]]["output"] == "erased 1"
    assert answered[plain["call_id"]]["output"] == "5"
    assert redis_client.get(f"test:runs:{key}") == "1"
    assert len(api.batches(sid)) == 1


def test_an_operator_denies_on_the_page_with_a_reason(intake, browser, api, redis_client):  # noqa: F811
    from selenium.webdriver.common.by import By

    key = uuid.uuid4().hex
    gated = function_call("erase", {"key": key}, turn_id="turn_1")
    sid = api.create_session([gated])["id"]
    with poll_loop():
        aid = waiting_for(sid, gated)
        sign_in(browser, intake, "dana")
        deny = row_of(browser, aid).find_element(By.CSS_SELECTOR, "button.deny")
        deny.click()  # no reason yet: the browser keeps the form (the field is required)
        assert browser.find_elements(By.CSS_SELECTOR, ".notice") == []
        assert aid in row_of(browser, aid).text
        row = row_of(browser, aid)
        row.find_element(By.CSS_SELECTOR, "form[action$='/deny'] input[name=reason]").send_keys(
            "not without a ticket"
        )
        row.find_element(By.CSS_SELECTOR, "button.deny").click()
        notice = notice_after(browser)
        assert notice == f"erase ({aid}): denied by dana."
        answered = batch_events(api, sid)
    assert answered[gated["call_id"]]["error"] == "Denied by dana: not without a ticket"
    assert redis_client.get(f"test:runs:{key}") is None
    browser.find_element(By.CSS_SELECTOR, "header button").click()  # sign out
    browser.get(f"{intake}/approvals")
    assert browser.current_url.endswith("/approvals/login")
