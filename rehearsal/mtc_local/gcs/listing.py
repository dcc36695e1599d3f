"""`objects.list` over a sorted list of object names, as the GCS JSON API documents it (pure: no I/O).

https://cloud.google.com/storage/docs/json_api/v1/objects/list

- `prefix`; `startOffset` (inclusive) and `endOffset` (exclusive), in lexicographic order;
- `delimiter`: names with the delimiter after the prefix collapse into `prefixes` (each counted once);
- `matchGlob` (https://cloud.google.com/storage/docs/json_api/v1/objects/list#list-objects-and-prefixes-using-glob):
  `*` any characters except `/`, `**` any characters including `/`, `?` one character except `/`,
  `[abc]` / `[a-z]` / `[!a]` one of (or none of), `{a,b}` one of the alternatives;
- `maxResults`: "Maximum combined number of entries in items[] and prefixes[] to return in a single page",
  1,000 at most (and by default); `nextPageToken` when more remain, passed back as `pageToken`.
"""

from __future__ import annotations

import base64
import bisect
import json
import re
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Sequence

MAX_RESULTS = 1000


class BadListing(ValueError):
    """A listing parameter GCS would answer with 400 invalid; the message names it."""


@lru_cache(maxsize=256)
def glob_regex(glob: str) -> re.Pattern[str]:
    """GCS matchGlob syntax as a regular expression over the whole object name."""
    out, i = [], 0
    try:
        while i < len(glob):
            c = glob[i]
            if glob.startswith("**", i):
                out.append(".*")
                i += 2
                continue
            if c == "*":
                out.append("[^/]*")
            elif c == "?":
                out.append("[^/]")
            elif c == "[":
                end = glob.index("]", i + 1)
                body = glob[i + 1:end]
                out.append("[" + ("^" + re.escape(body[1:]) if body.startswith("!") else body.replace("\\", "\\\\")) + "]")
                i = end
            elif c == "{":
                end = glob.index("}", i + 1)
                out.append("(?:" + "|".join(re.escape(a) for a in glob[i + 1:end].split(",")) + ")")
                i = end
            else:
                out.append(re.escape(c))
            i += 1
        return re.compile("".join(out) + r"\Z", re.DOTALL)
    except (ValueError, re.error) as exc:
        raise BadListing(f"Invalid matchGlob {glob!r}: {exc}") from None


def glob_depth(glob: str | None) -> int | None:
    """How many '/' a matching name has, when the glob fixes it (no `**`); None: any depth."""
    if not glob or "**" in glob:
        return None
    return glob.count("/")


@dataclass
class Page:
    items: list[str] = field(default_factory=list)
    prefixes: list[str] = field(default_factory=list)
    next_page_token: str | None = None


def _token(last: str, is_prefix: bool) -> str:
    return base64.urlsafe_b64encode(json.dumps([last, is_prefix]).encode()).decode()


def _untoken(token: str) -> tuple[str, bool]:
    try:
        last, is_prefix = json.loads(base64.urlsafe_b64decode(token.encode()))
        return str(last), bool(is_prefix)
    except (ValueError, TypeError) as exc:
        raise BadListing(f"Invalid pageToken {token!r}") from exc


def max_results(value: str | None) -> int:
    if value in (None, ""):
        return MAX_RESULTS
    try:
        number = int(value)
    except ValueError:
        raise BadListing(f"Invalid value for maxResults: {value!r}") from None
    if number < 1:
        raise BadListing(f"Invalid value for maxResults: {value!r}")
    return min(number, MAX_RESULTS)


def list_page(names: Sequence[str], params: dict[str, str]) -> Page:
    """One page of `objects.list` over `names` (sorted ascending)."""
    prefix = params.get("prefix") or ""
    delimiter = params.get("delimiter") or ""
    end = params.get("endOffset") or None
    glob = glob_regex(params["matchGlob"]) if params.get("matchGlob") else None
    limit = max_results(params.get("maxResults"))
    index = bisect.bisect_left(names, max(prefix, params.get("startOffset") or ""))
    skip_under = None
    if params.get("pageToken"):
        last, is_prefix = _untoken(params["pageToken"])
        index = max(index, bisect.bisect_right(names, last))
        skip_under = last if is_prefix else None
    page, last = Page(), None
    while index < len(names):
        name = names[index]
        index += 1
        if not name.startswith(prefix):
            if name > prefix:
                break
            continue
        if end is not None and name >= end:
            break
        if skip_under is not None and name.startswith(skip_under):
            continue
        if glob is not None and not glob.match(name):
            continue
        cut = name.find(delimiter, len(prefix)) if delimiter else -1
        entry, is_prefix = (name[:cut + len(delimiter)], True) if cut >= 0 else (name, False)
        if is_prefix and page.prefixes and page.prefixes[-1] == entry:
            continue
        if len(page.items) + len(page.prefixes) == limit:
            page.next_page_token = _token(*last)  # the last entry served: the next page starts after it
            break
        (page.prefixes if is_prefix else page.items).append(entry)
        last = (entry, is_prefix)
        skip_under = entry if is_prefix else None
    return page
