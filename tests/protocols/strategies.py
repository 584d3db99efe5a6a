"""Hypothesis strategies derived from msgspec's own type information.

Built from ``msgspec.inspect`` so every constraint on the wire types (patterns, bounds,
lengths) is honoured and new message types are covered without writing a strategy.
"""

from __future__ import annotations

from typing import Any

import msgspec
import msgspec.inspect as mi
from hypothesis import strategies as st

_json_scalars = st.none() | st.booleans() | st.integers(-(2**53), 2**53) | st.text(max_size=20)
_json = st.recursive(
    _json_scalars,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=8,
)


def for_type(t: Any) -> st.SearchStrategy[Any]:
    return _for(mi.type_info(t))


def _for(info: mi.Type) -> st.SearchStrategy[Any]:
    if isinstance(info, mi.StructType):
        fields = {f.encode_name: _for(f.type) for f in info.fields}
        return st.builds(info.cls, **{f.name: fields[f.encode_name] for f in info.fields})
    if isinstance(info, mi.UnionType):
        return st.one_of(*[_for(t) for t in info.types])
    if isinstance(info, mi.StrType):
        if info.pattern is not None:
            return st.from_regex(info.pattern, fullmatch=True)
        return st.text(min_size=info.min_length or 0, max_size=min(info.max_length or 40, 40))
    if isinstance(info, mi.IntType):
        lo = info.ge if info.ge is not None else -(2**31)
        hi = info.le if info.le is not None else 2**31
        return st.integers(lo, hi)
    if isinstance(info, mi.FloatType):
        return st.floats(
            min_value=info.gt if info.gt is not None else info.ge,
            max_value=info.lt if info.lt is not None else info.le,
            exclude_min=info.gt is not None, exclude_max=info.lt is not None,
            allow_nan=False, allow_infinity=False)
    if isinstance(info, mi.BoolType):
        return st.booleans()
    if isinstance(info, mi.NoneType):
        return st.none()
    if isinstance(info, mi.LiteralType):
        return st.sampled_from(info.values)
    if isinstance(info, mi.ListType):
        return st.lists(_for(info.item_type), max_size=3)
    if isinstance(info, mi.DictType):
        return st.dictionaries(_for(info.key_type), _for(info.value_type), max_size=3)
    if isinstance(info, mi.AnyType):
        return _json
    if isinstance(info, mi.RawType):  # any JSON, kept as its encoded bytes
        return _json.map(lambda value: msgspec.Raw(msgspec.json.encode(value)))
    raise NotImplementedError(f"no strategy for {info!r}")  # a new kind of field: add it here


def roundtrip(message: msgspec.Struct, t: Any) -> Any:
    return msgspec.json.decode(msgspec.json.encode(message), type=t)
