import inspect
from typing import Any


def init_kwargs(trigger: Any) -> tuple[str, dict[str, Any]]:
    """`serialize()` (as `serialize = init_kwargs` in the class) for a trigger that keeps each `__init__` argument
    as the attribute of that name: a new argument is serialized without a second list to keep in step."""
    names = [name for name in inspect.signature(type(trigger).__init__).parameters if name != "self"]
    return f"{type(trigger).__module__}.{type(trigger).__qualname__}", {name: getattr(trigger, name) for name in names}
