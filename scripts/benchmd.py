"""benchmd — one home for replacing a marked section of BENCHMARKS.md (scripts/bench_*.py).

A section runs from its BEGIN marker to its END marker, both included in the text given; a
file without the markers gets the section appended.
"""


def replace_section(out, begin, end, section):
    """Write `section` (holding `begin` … `end`) into the file `out` in place of the old one."""
    section = section.rstrip("\n")
    text = out.read_text() if out.exists() else "# Benchmarks\n"
    if begin in text and end in text:
        a, b = text.index(begin), text.index(end) + len(end)
        text = text[:a] + section + text[b:]
    else:
        text = text.rstrip("\n") + "\n\n" + section + "\n"
    out.write_text(text)
