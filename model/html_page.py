"""report.html from report.md: one HTML page per report (`lifetime report`,
`lifetime simulate`), through the `markdown` package with its tables extension.

Raw HTML in the Markdown is not passed through: frame names, program names and
version labels come from profiles, so `<` and `&` in them must show as text."""

from __future__ import annotations

import html

# markdown is imported inside markdown_page: `lifetime --help` must not pay for it (~15 ms).

STYLE = ("body{font-family:sans-serif;max-width:1100px;margin:auto}"
         "table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:2px 6px}")


def markdown_page(md: str, title: str) -> str:
    import markdown

    converter = markdown.Markdown(extensions=["tables"])
    converter.preprocessors.deregister("html_block")
    converter.inlinePatterns.deregister("html")
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}"
            f"</title><style>{STYLE}</style></head><body>\n{converter.convert(md)}\n"
            "</body></html>\n")
