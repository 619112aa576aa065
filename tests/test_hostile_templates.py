"""String escapes in a chat template, as hostile input: ember.jinja decodes a literal's escapes as jinja2 does
('unicode-escape'), and an escape jinja2 refuses is ember's TemplateSyntaxError naming the template and line, never
a raw ValueError (the fuzzer's `'\\9'` in a template was `invalid literal for int() with base 8`)."""
import pytest

from ember.jinja import Template, TemplateSyntaxError

jinja2 = pytest.importorskip("jinja2")

LITERALS = [r"\9x", r"\101\8", r"\0", r"\777", r"\u00e9\x41\U0001F600", r"\N{BULLET}", r"\q\ ", r"\'\"\\",
            r"\UFFFFFFFF", r"\u", r"\x4", r"\U0011ffff", r"\N{NO SUCH NAME}"]


@pytest.mark.parametrize("body", LITERALS)
def test_escapes_decode_or_fail_as_jinja2(body):
    src = "{{ '" + body + "' }}"
    try:
        want = jinja2.Template(src).render()
    except jinja2.TemplateSyntaxError:
        with pytest.raises(TemplateSyntaxError, match=r"^ember: chat_template, line 1: "):
            Template(src, "chat_template").render()
        return
    assert Template(src, "chat_template").render() == want
