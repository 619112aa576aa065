"""The one error type the tokenizer runtime raises for bad files, components and ids."""


from ..errors import EmberError


class TokenizerError(EmberError, ValueError):
    """A malformed tokenizer file, an unsupported component, or a bad id. Messages start with
    "ember:" and name the file/component/id involved."""

    def __init__(self, message: str):
        super().__init__(message if message.startswith("ember:") else f"ember: {message}")


def component_type(spec, where: str) -> str:
    """The "type" of one tokenizer.json component dict, or a clear error naming `where`."""
    if not isinstance(spec, dict) or not isinstance(spec.get("type"), str):
        raise TokenizerError(f"tokenizer.json {where}: expected an object with a \"type\" field, "
                             f"got {str(spec)[:80]!r}")
    return spec["type"]


def unsupported(where: str, kind: str, known) -> TokenizerError:
    return TokenizerError(f"tokenizer.json {where}: unsupported type {kind!r} "
                          f"(ember supports {', '.join(sorted(known))})")
