# SPDX-License-Identifier: Apache-2.0
"""Integer arguments, checked before they reach ctypes.

ctypes converts a Python int to a C integer modulo 2**bits without a word:
``c_uint32(2**32)`` is 0 and ``c_uint32(-1)`` is 4294967295, so
``stage_register(2**32)`` would register stage 0 and ``kv_reserve(0, 2**64
+ 5, 0)`` reserve for 5 tokens.  Every integer parameter of the public API
is therefore annotated with its C range (:data:`u32`, :data:`u64`,
:data:`i32`, :data:`ms`, :data:`handle`), and :func:`checked` -- the one
place where arguments are checked -- wraps every public method of a class
so that each such argument is converted and range-checked before the body
runs, that is before anything is sent or mapped:

- not an integer (``1.5``, ``"3"``, ``None`` where None means nothing):
  ``TypeError``; a ``bool`` is refused too (``stage_register(True)`` makes
  no sense; the flags a call takes are parameters of their own, typed
  ``bool``, which take any truth value);
- negative where the C type is unsigned: ``ValueError``;
- beyond the C type: ``OverflowError``.

The message names the call, the argument and the range, e.g.
``stage_register: stage=4294967296 is out of range for u32
(0..4294967295)``.  Anything ``operator.index`` accepts passes (numpy
integers, ``IntEnum`` members), as the plain int it stands for.

A public method whose parameter is annotated plain ``int`` makes
:func:`checked` fail at import: every integer says its range.
"""

from __future__ import annotations

import ctypes
import functools
import inspect
import operator
import typing
from typing import Any, Callable, Dict, List, Optional, Tuple

__all__ = ["IntRange", "U32", "U64", "I32", "MS", "HANDLE",
           "u32", "u64", "i32", "ms", "handle", "check", "checked",
           "checked_function", "int_params"]


class IntRange:
    """A C integer type's range, as annotation metadata and as the checked
    conversion itself: ``U32(value, "stage", "stage_register")``."""

    __slots__ = ("name", "lo", "hi")

    def __init__(self, name: str, lo: int, hi: int) -> None:
        self.name, self.lo, self.hi = name, lo, hi

    def __call__(self, value: Any, arg: str = "value",
                 call: Optional[str] = None) -> int:
        return check(value, self, arg, call)

    def __contains__(self, value: int) -> bool:
        return self.lo <= value <= self.hi

    def __repr__(self) -> str:
        return self.name


def check(value: Any, kind: IntRange, arg: str, call: Optional[str]) -> int:
    """value as a plain int within kind, or TypeError, ValueError (negative
    for an unsigned type) or OverflowError naming call and arg."""
    where = f"{call}: " if call else ""
    if isinstance(value, bool):
        raise TypeError(f"{where}{arg}={value!r}: a bool is not an integer "
                        f"argument ({kind.name}, {kind.lo}..{kind.hi})")
    try:
        v = operator.index(value)
    except TypeError:
        raise TypeError(f"{where}{arg} must be an integer ({kind.name}, "
                        f"{kind.lo}..{kind.hi}), not "
                        f"{type(value).__name__}") from None
    if v < kind.lo and kind.lo == 0:
        raise ValueError(f"{where}{arg}={v} is negative: {kind.name} takes "
                         f"{kind.lo}..{kind.hi}")
    if not kind.lo <= v <= kind.hi:
        raise OverflowError(f"{where}{arg}={v} is out of range for "
                            f"{kind.name} ({kind.lo}..{kind.hi})")
    return int(v)


_PTR_BITS = 8 * ctypes.sizeof(ctypes.c_ssize_t)

#: uint32_t: ids (stages, regions, clients, devices), lanes, slots, layers,
#: chunk counts.
U32 = IntRange("u32", 0, 2**32 - 1)
#: uint64_t: token counts and byte counts.
U64 = IntRange("u64", 0, 2**64 - 1)
#: int: a C int that may be negative (reconnect_ms: -1 never; an error code).
I32 = IntRange("i32", -2**31, 2**31 - 1)
#: int, not negative: a timeout in milliseconds (0: the default).
MS = IntRange("ms", 0, 2**31 - 1)
#: vram_handle (intptr_t), not negative: a file descriptor or HANDLE.
HANDLE = IntRange("handle", 0, 2**(_PTR_BITS - 1) - 1)

try:
    from typing import Annotated
except ImportError:  # Python 3.8: the range object is the annotation
    Annotated = None  # type: ignore[assignment]

if Annotated is not None:
    u32 = Annotated[int, U32]
    u64 = Annotated[int, U64]
    i32 = Annotated[int, I32]
    ms = Annotated[int, MS]
    handle = Annotated[int, HANDLE]
else:  # pragma: no cover - Python 3.8
    u32, u64, i32, ms, handle = U32, U64, I32, MS, HANDLE

# ---- reading the annotations -----------------------------------------------

#: How one parameter is checked: (kind, how), how being "one" (the value),
#: "optional" (None or the value), "each" (an iterable of them, turned
#: into a list) or "optional each" (None or such an iterable: a shape).
Rule = Tuple[IntRange, str]


def _kind_of(hint: Any) -> Optional[IntRange]:
    if isinstance(hint, IntRange):
        return hint
    if getattr(hint, "__metadata__", None):
        for m in hint.__metadata__:
            if isinstance(m, IntRange):
                return m
    return None


def _plain_int(hint: Any) -> bool:
    if hint is int:
        return True
    return any(_plain_int(a) for a in typing.get_args(hint)
               if _kind_of(a) is None)


def _rule(hint: Any) -> Optional[Rule]:
    """The check an annotation asks for, None when it is not an integer."""
    k = _kind_of(hint)
    if k is not None:
        return (k, "one")
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if origin is typing.Union:
        kinds = [_kind_of(a) for a in args]
        found = [x for x in kinds if x is not None]
        if found:
            return (found[0], "optional" if type(None) in args else "one")
        each = [r for r in (_rule(a) for a in args if a is not type(None))
                if r is not None and r[1] == "each"]
        if each:
            return (each[0][0], "optional each" if type(None) in args else "each")
        return None
    if origin is not None and args and _kind_of(args[0]) is not None:
        import collections.abc as abc
        if isinstance(origin, type) and issubclass(origin, abc.Iterable):
            return (_kind_of(args[0]), "each")  # type: ignore[return-value]
    return None


def int_params(fn: Callable[..., Any]) -> Dict[str, Rule]:
    """The integer parameters of fn and how each is checked, from its
    annotations.  Raises TypeError for a parameter annotated plain int."""
    fn = inspect.unwrap(fn)
    sig = inspect.signature(fn)
    glob = getattr(fn, "__globals__", {})
    out: Dict[str, Rule] = {}
    for name, p in sig.parameters.items():
        ann = p.annotation
        if ann is inspect.Parameter.empty or name == "self":
            continue
        hint = eval(ann, glob) if isinstance(ann, str) else ann  # noqa: S307
        rule = _rule(hint)
        if rule is None and _plain_int(hint):
            raise TypeError(f"{fn.__qualname__}: parameter {name} is a plain "
                            "int: annotate it with its C range (vram._args: "
                            "u32, u64, i32, ms, handle)")
        if rule is not None:
            out[name] = rule
    return out


def _wrap(fn: Callable[..., Any], call: str) -> Callable[..., Any]:
    rules = int_params(fn)
    if not rules:
        return fn
    # The parameters after the first (self, or cls of a classmethod).
    names = list(inspect.signature(fn).parameters)[1:]
    index = {n: i for i, n in enumerate(names)}
    # Positions of the checked parameters among the positional arguments
    # (after self / cls).
    pos: List[Tuple[int, str, Rule]] = sorted(
        (index[n], n, r) for n, r in rules.items())

    def conv(name: str, rule: Rule, v: Any) -> Any:
        kind, how = rule
        if how in ("optional", "optional each") and v is None:
            return None
        if how in ("each", "optional each"):
            try:
                items = list(v)
            except TypeError:
                raise TypeError(f"{call}: {name} must be an iterable of "
                                f"integers ({kind.name}), not "
                                f"{type(v).__name__}") from None
            return [check(x, kind, f"{name}[{i}]", call)
                    for i, x in enumerate(items)]
        return check(v, kind, name, call)

    @functools.wraps(fn)
    def wrapper(first: Any, *args: Any, **kwargs: Any) -> Any:
        if args:
            args = list(args)  # type: ignore[assignment]
            for i, name, rule in pos:
                if i < len(args):
                    args[i] = conv(name, rule, args[i])  # type: ignore[index]
        for name, v in kwargs.items():
            rule = rules.get(name)
            if rule is not None:
                kwargs[name] = conv(name, rule, v)
        return fn(first, *args, **kwargs)

    wrapper.__vram_int_params__ = rules  # type: ignore[attr-defined]
    return wrapper


def checked(cls: type) -> type:
    """Class decorator: every public method (and __init__, and public
    classmethods) checks its integer arguments (see the module)."""
    for name, attr in list(vars(cls).items()):
        if name.startswith("_") and name != "__init__":
            continue
        call = name if name != "__init__" else cls.__name__
        if isinstance(attr, classmethod):
            setattr(cls, name, classmethod(_wrap(attr.__func__, call)))
        elif inspect.isfunction(attr):
            setattr(cls, name, _wrap(attr, call))
    return cls


def checked_function(fn: Callable[..., Any]) -> Callable[..., Any]:
    """A module-level function's arguments checked the same way."""
    rules = int_params(fn)
    if not rules:
        return fn
    names = list(inspect.signature(fn).parameters)

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        args = list(args)  # type: ignore[assignment]
        for i, n in enumerate(names[:len(args)]):
            if n in rules:
                args[i] = check(args[i], rules[n][0], n, fn.__name__)  # type: ignore[index]
        for n, v in kwargs.items():
            if n in rules:
                kwargs[n] = check(v, rules[n][0], n, fn.__name__)
        return fn(*args, **kwargs)

    wrapper.__vram_int_params__ = rules  # type: ignore[attr-defined]
    return wrapper
