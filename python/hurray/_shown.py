"""Text from a file (names, metadata keys and values), made safe to print:
the C library's hurray_escape_text rules, which the C command uses too, so
no terminal control sequence, newline or invalid UTF-8 reaches a screen."""

# hurray_escape_text's flags (include/hurray/common.h).
ESCAPE_BACKSLASH = 1
ESCAPE_JSON = 2


def shown(text: str, flags: int = ESCAPE_BACKSLASH) -> str:
    """`text` escaped; with flags 0 a backslash stays as it is, so escaping
    again changes nothing (for messages that may quote escaped names)."""
    from ._hurray import _escape_text

    text = str(text)
    try:  # bytes that were not UTF-8, decoded with surrogateescape, as they were
        raw = text.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:  # any other lone surrogate (a torch key may hold one)
        raw = text.encode("utf-8", "surrogatepass")
    return _escape_text(raw, flags)


def counted(n: int, noun: str) -> str:
    """'1 tensor', '2 tensors': a count and its noun, as the C command words it."""
    return f"{n} {noun}{'' if n == 1 else 's'}"
