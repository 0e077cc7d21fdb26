"""Types not learned yet: ``null`` at any depth of a field's type, and its refinement.

A field whose values so far gave no type somewhere (a top-level all-null
column; a list column of only empty lists, ``list<null>``; a struct member
always null, ``struct<a: null>``; a map whose values were all null; an
all-null dictionary-encoded column, ``dictionary<int32, null>``) holds only
values of every type there: null, an empty list, a struct whose member is
null. A later write of values gives each such ``null`` the type its values
have (:func:`refined`; records' values have it inferred in the field's shape,
:mod:`merkle.tablets.learnrecords`), and ``alter_schema(widen=...)`` may take
it to any type (:func:`fills_nulls`). One rule at every depth, as for a top-level null
field; nothing stored changes (segments store a dictionary decoded, so a
``dictionary<int32, null>`` column is stored as ``null``), a read casts the old
column to the new type.

A dictionary stays a dictionary: its value type is learned (plain strings or a
dictionary of strings written to a ``dictionary<int32, null>`` field make it
``dictionary<int32, string>``), and its index type is kept unless the data is a
dictionary whose index type numbers more values (a ``dictionary<int8, null>``
field written with a
``dictionary<int16, string>`` column becomes ``dictionary<int16, string>``): the
old index held only nulls, so no value needs it, while the data's own index may
be needed to number its values. A value type no dictionary of merkle-db can
hold (a list, or numbers inside a list) is learned all the same and refused
when the field is checked (:func:`~merkle.tablets.dicts.check_dictionaries`),
which names the value type to declare instead.
"""

from __future__ import annotations

import pyarrow as pa

from merkle.tablets.dicts import index_capacity

__all__ = ["fills_nulls", "has_null", "refined"]


def has_null(kind: pa.DataType) -> bool:
    """Whether ``kind`` is ``null`` or holds a ``null`` type at any depth."""
    if pa.types.is_null(kind):
        return True
    if pa.types.is_dictionary(kind):  # Arrow counts no child fields of a dictionary
        return has_null(kind.value_type)
    return any(has_null(kind.field(i).type) for i in range(kind.num_fields))


def refined(old: pa.DataType, new: pa.DataType) -> pa.DataType:
    """``old`` with each ``null`` inside it given the type at the same place in ``new``.

    Places are matched by shape: a list's items (list, large_list, and a
    fixed-size list of the same size), a struct's members by name (a member
    ``new`` lacks stays as it is; a member only ``new`` has is not added: that
    is a change of shape, not a type learned), a map's keys and values, a
    dictionary's values (those of a dictionary ``new``, or ``new`` itself: the
    values written; see the module doc for its index type). Where the shapes
    differ ``old`` is kept, so a value that does not fit it is refused as
    before. Names, nullability and metadata are ``old``'s.
    """
    if pa.types.is_null(old):
        return new
    if old == new or not has_null(old):
        return old
    types = pa.types
    if types.is_dictionary(old):
        return _refined_dictionary(old, new)
    if types.is_struct(old) and types.is_struct(new):
        members = []
        for member in old:
            at = new.get_field_index(member.name)
            kind = refined(member.type, new.field(at).type) if at >= 0 else member.type
            members.append(member.with_type(kind))
        return pa.struct(members)
    if types.is_map(old) and types.is_map(new):
        key = old.key_field.with_type(refined(old.key_type, new.key_type))
        item = old.item_field.with_type(refined(old.item_type, new.item_type))
        return pa.map_(key, item, keys_sorted=old.keys_sorted)
    if types.is_fixed_size_list(old) and types.is_fixed_size_list(new):
        if old.list_size != new.list_size:
            return old
        item = old.value_field.with_type(refined(old.value_type, new.value_type))
        return pa.list_(item, old.list_size)
    if types.is_list(old) and types.is_list(new):
        return pa.list_(old.value_field.with_type(refined(old.value_type, new.value_type)))
    if types.is_large_list(old) and types.is_large_list(new):
        return pa.large_list(old.value_field.with_type(refined(old.value_type, new.value_type)))
    return old


def fills_nulls(old: pa.DataType, new: pa.DataType) -> bool:
    """Whether ``new`` is ``old`` with some ``null`` inside it given a type (and
    nothing else changed): every value of ``old`` is then a value of ``new``."""
    return bool(has_null(old) and refined(old, new) == new)


def _refined_dictionary(old: pa.DictionaryType, new: pa.DataType) -> pa.DataType:
    """``old`` (a dictionary whose values hold a ``null``) with its values refined by
    those of ``new``; its index type is ``new``'s when that numbers more values."""
    index = old.index_type
    values = new
    if pa.types.is_dictionary(new):
        values = new.value_type
        if index_capacity(new.index_type) > index_capacity(index):
            index = new.index_type
    learned = refined(old.value_type, values)
    if learned == old.value_type:  # nothing learned (nulls again): the index stays too
        return old
    return pa.dictionary(index, learned, old.ordered)
