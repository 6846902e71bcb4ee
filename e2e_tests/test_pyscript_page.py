"""web/pyscript.html: a PyScript `<script type="py">` installs pywebgpu offline, loads the
bundled model and writes a greedy reply: the same one eager PyTorch gives."""

from test_chat_page import LOAD_TIMEOUT_MS, bundled_model, eager_greedy_reply  # noqa: F401 (fixture)


def test_pyscript_page_replies(fresh_page, bundled_model):  # noqa: F811
    page, problems = fresh_page("/pyscript.html")
    # PyScript shows a Python error as a .py-error element: stop waiting at once then.
    page.wait_for_function(
        "document.querySelector('#reply[data-done=\"1\"], .py-error') !== null", timeout=LOAD_TIMEOUT_MS
    )
    assert not page.query_selector(".py-error"), page.text_content(".py-error")
    reply = page.text_content("#reply")
    assert reply == eager_greedy_reply(bundled_model, "What is the capital of France?", 32)
    assert "first token" in page.text_content("#speed")
    assert not problems.take()
