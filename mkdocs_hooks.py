"""mkdocs hooks for the manual's site (mkdocs.yml `hooks:`): it opens from disk, as built.

mkdocs writes 404.html, the page a web server gives for a missing address, with links from
the server's root (`/css/base.css`, `var base_url = "/"`), where every other page links
relatively: opened from disk, it had no style and its links went to the file system's root.
It sits at the site's root, so its links are made relative to where it is.
"""

from __future__ import annotations

import re

_ROOT_ABSOLUTE = re.compile(r"""((?:href|src)=["'])/(?!/)""")
_BASE_URL = re.compile(r"""(var base_url = ["'])/(["'])""")


def on_post_template(output_content: str, template_name: str, config) -> str:
    """404.html with its links relative to the site's root, where it is."""
    if template_name != "404.html":
        return output_content
    return _BASE_URL.sub(r"\1.\2", _ROOT_ABSOLUTE.sub(r"\1", output_content))
