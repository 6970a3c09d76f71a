"""Classes registered under the names users type (`encoding=`, `model.kind=`, `dataset=`)."""

from __future__ import annotations

from posjax.errors import unknown


class Registry(dict):
    """name -> class, filled by the `register(name)` class decorator.

    what: how errors name an entry ("encoding", "model.kind", ...); attribute: the class
    attribute that receives the name.
    """

    def __init__(self, what: str, attribute: str = "name"):
        super().__init__()
        self.what = what
        self.attribute = attribute

    def register(self, name: str):
        """Class decorator: make the class available as `name` (once)."""

        def wrap(cls):
            if name in self:
                raise ValueError(f"{self.what} {name!r} registered twice")
            setattr(cls, self.attribute, name)
            self[name] = cls
            return cls

        return wrap

    def lookup(self, name: str):
        """The class registered as `name`; unknown names list the valid ones in one line."""
        if name not in self:
            raise unknown(self.what, name, self)
        return self[name]
