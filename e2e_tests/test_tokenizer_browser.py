"""The tokenizer's Unicode classes in Pyodide, whose Python has its own Unicode database
(the native tests check them against CPython's, and the tokenizer against HF's)."""

from test_tokenizer import CLASSES_AGAINST_UNICODEDATA


def test_letter_and_number_classes_match_pyodides_unicodedata(python_page):
    python_page.load_module("tokenizer_classes", CLASSES_AGAINST_UNICODEDATA)
    unlike = python_page.run("import tokenizer_classes\ntokenizer_classes.classes_unlike_unicodedata()")
    assert unlike == "[]"
