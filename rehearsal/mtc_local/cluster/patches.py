"""PATCH bodies as the API server applies them (pure): JSON merge patch, JSON patch, strategic merge patch.

- `application/merge-patch+json`: RFC 7386 (https://www.rfc-editor.org/rfc/rfc7386): objects merge key by key,
  `null` removes a key, anything else (lists included) replaces.
- `application/json-patch+json`: RFC 6902 (https://www.rfc-editor.org/rfc/rfc6902) over RFC 6901 pointers:
  add, remove, replace, move, copy, test. A malformed document is 400; an operation that does not apply (missing
  path, failed test) is 422, as the API server answers them.
- `application/strategic-merge-patch+json`: built-in types only; a custom resource answers 415 UnsupportedMediaType
  ("Strategic merge patch is not supported for custom resources",
  https://kubernetes.io/docs/reference/kubectl/generated/kubectl_patch/).
  On maps it merges as a merge patch does, plus the `$patch: replace|delete`, `$retainKeys` and
  `$setElementOrder/<list>` directives
  (https://github.com/kubernetes/community/blob/master/contributors/devel/sig-api-machinery/strategic-merge-patch.md);
  the only built-in type patched here is the ConfigMap, whose lists (metadata.finalizers, ownerReferences) the
  server keeps from the stored object anyway.
- `application/apply-patch+yaml` (server-side apply, with its field managers) is not served: 415 saying so.
"""

from __future__ import annotations

import copy
from typing import Any

from mtc_local.cluster import errors

MERGE = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"
STRATEGIC = "application/strategic-merge-patch+json"
APPLY = "application/apply-patch+yaml"
CUSTOM_TYPES = (JSON_PATCH, MERGE)  # what a CRD's endpoint takes here (the real one also takes APPLY)
BUILTIN_TYPES = (JSON_PATCH, MERGE, STRATEGIC)
_DELETE = object()  # a strategic `$patch: delete` of a whole map


def media_type(content_type: str | None) -> str:
    """`application/merge-patch+json; charset=utf-8` -> `application/merge-patch+json`."""
    return (content_type or "").split(";", 1)[0].strip().lower()


def check_type(media: str, accepted: tuple[str, ...]) -> None:
    """415 UnsupportedMediaType unless `media` is one of `accepted` (the API server's wording)."""
    if media == APPLY:
        raise errors.unsupported_media_type(
            "server-side apply (application/apply-patch+yaml) is not supported by the local cluster: use "
            "`kubectl apply` without --server-side, which sends a merge patch; accepted media types include: "
            + ", ".join(accepted))
    if media not in accepted:
        raise errors.unsupported_media_type("the body of the request was in an unknown format - accepted media "
                                            "types include: " + ", ".join(accepted))


def apply(media: str, current: dict[str, Any], patch: Any) -> dict[str, Any]:
    """The object `patch` (already parsed) makes of `current`; `current` is not changed."""
    if media == JSON_PATCH:
        return json_patch(current, patch)
    if not isinstance(patch, dict):
        raise errors.bad_request(f"the patch must be a JSON object for {media}, not {type(patch).__name__}")
    if media == STRATEGIC:
        merged = strategic_merge(current, patch)
        return {} if merged is _DELETE else merged
    return merge_patch(current, patch)


# ---- RFC 7386 --------------------------------------------------------------------------------------
def merge_patch(target: Any, patch: Any) -> Any:
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = copy.deepcopy(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


# ---- strategic merge patch, on maps ---------------------------------------------------------------------
def strategic_merge(target: Any, patch: Any) -> Any:
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    directive = patch.get("$patch")
    body = {k: v for k, v in patch.items() if k != "$patch"}
    if directive == "delete":
        return _DELETE
    if directive == "replace":
        return {k: v for k, v in copy.deepcopy(body).items() if not k.startswith("$")}
    if directive is not None:
        raise errors.bad_request(f'$patch: Unsupported value: "{directive}": supported values: "replace", "delete"')
    result = copy.deepcopy(target) if isinstance(target, dict) else {}
    retain = body.pop("$retainKeys", None)
    for key, value in body.items():
        if key.startswith("$setElementOrder/"):
            continue  # only orders a merged list
        if key.startswith("$"):
            raise errors.bad_request(f"{key}: this strategic merge patch directive is not supported by the local "
                                     "cluster; supported: $patch (replace, delete), $retainKeys, $setElementOrder")
        if value is None:
            result.pop(key, None)
            continue
        merged = strategic_merge(result.get(key), value)
        if merged is _DELETE:
            result.pop(key, None)
        else:
            result[key] = merged
    if retain is not None:
        if not isinstance(retain, list):
            raise errors.bad_request("$retainKeys: Invalid value: must be a list of field names")
        result = {k: v for k, v in result.items() if k in retain}
    return result


# ---- RFC 6902 ------------------------------------------------------------------------------------------
def _tokens(pointer: Any, where: str) -> list[str]:
    """RFC 6901: "" is the whole document, "/a/b~1c" is ["a", "b/c"]."""
    if not isinstance(pointer, str) or (pointer and not pointer.startswith("/")):
        raise errors.bad_request(f'{where}: Invalid value: {pointer!r}: a JSON pointer ("" or "/...")')
    if pointer == "":
        return []
    return [t.replace("~1", "/").replace("~0", "~") for t in pointer[1:].split("/")]


def _unprocessable(message: str) -> errors.StatusError:
    return errors.StatusError(422, "Invalid", message)


def _index(container: list[Any], token: str, op: str, path: str, adding: bool = False) -> int:
    if adding and token == "-":
        return len(container)
    if not token.isdigit() or (len(token) > 1 and token.startswith("0")):
        raise _unprocessable(f"{op} operation does not apply: {token!r} is not an array index at {path}")
    index = int(token)
    if index > len(container) or (index == len(container) and not adding):
        raise _unprocessable(f"{op} operation does not apply: index {index} is out of range at {path}")
    return index


def _parent(doc: Any, tokens: list[str], op: str, path: str) -> Any:
    node = doc
    for token in tokens[:-1]:
        if isinstance(node, dict) and token in node:
            node = node[token]
        elif isinstance(node, list):
            node = node[_index(node, token, op, path)]
        else:
            raise _unprocessable(f"{op} operation does not apply: doc is missing path: {path}")
    if not isinstance(node, (dict, list)):
        raise _unprocessable(f"{op} operation does not apply: doc is missing path: {path}")
    return node


def _get(doc: Any, tokens: list[str], op: str, path: str) -> Any:
    if not tokens:
        return doc
    parent, last = _parent(doc, tokens, op, path), tokens[-1]
    if isinstance(parent, dict):
        if last not in parent:
            raise _unprocessable(f"{op} operation does not apply: doc is missing key: {path}")
        return parent[last]
    return parent[_index(parent, last, op, path)]


def _remove(doc: Any, tokens: list[str], op: str, path: str) -> Any:
    if not tokens:
        raise _unprocessable(f"{op} operation does not apply: the whole document cannot be removed")
    parent, last = _parent(doc, tokens, op, path), tokens[-1]
    if isinstance(parent, dict):
        if last not in parent:
            raise _unprocessable(f"{op} operation does not apply: doc is missing key: {path}")
        return parent.pop(last)
    return parent.pop(_index(parent, last, op, path))


def _add(doc: Any, tokens: list[str], value: Any, op: str, path: str) -> Any:
    """The document with `value` added at `tokens` (a new root when the pointer is "")."""
    if not tokens:
        return value
    parent, last = _parent(doc, tokens, op, path), tokens[-1]
    if isinstance(parent, dict):
        parent[last] = value
    else:
        parent.insert(_index(parent, last, op, path, adding=True), value)
    return doc


def json_patch(current: dict[str, Any], operations: Any) -> dict[str, Any]:
    if not isinstance(operations, list):
        raise errors.bad_request("a JSON patch (application/json-patch+json) must be a list of operations")
    doc: Any = copy.deepcopy(current)
    for i, operation in enumerate(operations):
        where = f"patch[{i}]"
        if not isinstance(operation, dict):
            raise errors.bad_request(f"{where}: Invalid value: must be an object with op and path")
        op = operation.get("op")
        if op not in ("add", "remove", "replace", "move", "copy", "test"):
            raise errors.bad_request(f'{where}.op: Unsupported value: {op!r}: supported values: "add", "remove", '
                                     '"replace", "move", "copy", "test"')
        path = operation.get("path")
        tokens = _tokens(path, f"{where}.path")
        if op in ("add", "replace", "test") and "value" not in operation:
            raise errors.bad_request(f"{where}.value: Required value: {op} needs a value")
        value = copy.deepcopy(operation.get("value"))
        if op == "add":
            doc = _add(doc, tokens, value, op, path)
        elif op == "remove":
            _remove(doc, tokens, op, path)
        elif op == "replace":
            if not tokens:
                doc = value
            else:
                _remove(doc, tokens, op, path)
                doc = _add(doc, tokens, value, op, path)
        elif op == "test":
            if _get(doc, tokens, op, path) != value:
                raise _unprocessable(f"testing value {path} failed")
        else:  # move, copy
            source = operation.get("from")
            from_tokens = _tokens(source, f"{where}.from")
            if op == "move" and tokens[:len(from_tokens)] == from_tokens and tokens != from_tokens:
                raise _unprocessable(f"move operation does not apply: {path} is inside {source}")
            moved = _remove(doc, from_tokens, op, source) if op == "move" else copy.deepcopy(
                _get(doc, from_tokens, op, source))
            doc = _add(doc, tokens, moved, op, path)
    if not isinstance(doc, dict):
        raise _unprocessable("the patched document is not a JSON object")
    return doc
