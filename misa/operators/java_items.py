"""How Java's frequent-items sketch (:mod:`.frequent_items`) holds an item of each Spark type Spark's approx_top_k
takes: its identity (``equals``: a float or double by its canonical bits, so -0.0 is not 0.0 and every NaN is one
item; a decimal by its unscaled value, one scale per column; other items by their value), its Java ``hashCode``
(Spark's ``Decimal``'s through Scala's ``BigDecimal``), the serializer Spark gives the sketch for it
(``ArrayOfNumbersSerDe``, ``ArrayOfLongsSerDe``, ``ArrayOfBooleansSerDe``, ``ArrayOfStringsSerDe``, Spark's
``ArrayOfDecimalsSerDe``), and its value as misa outputs it.
"""

from __future__ import annotations

import datetime as dt
import math
import struct
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, Callable

MASK64 = (1 << 64) - 1
NUMBER_INDICATORS = {"tinyint": (2, "<b"), "smallint": (3, "<h"), "int": (9, "<i"), "date": (9, "<i")}
NUMBER_INDICATORS |= {"float": (6, "<f")}
# indicator -> how to read the value after it (a float as its bits, the item misa holds; a long Java may write)
NUMBER_FORMATS = {indicator: fmt for indicator, fmt in NUMBER_INDICATORS.values()} | {6: "<i", 12: "<q"}
EPOCH = dt.date(1970, 1, 1)


def int32(value: int) -> int:
    """``value`` wrapped to Java's int."""
    value &= 0xFFFFFFFF
    return value - (1 << 32) if value >> 31 else value


def _long_hash(value: int) -> int:
    """Java's ``Long.hashCode``."""
    value &= MASK64
    return int32(value ^ (value >> 32))


def _string_hash(text: str) -> int:
    """Java's ``String.hashCode`` (over UTF-16 code units)."""
    units = text.encode("utf-16-be")
    h = 0
    for i in range(0, len(units), 2):
        h = (31 * h + (units[i] << 8 | units[i + 1])) & 0xFFFFFFFF
    return int32(h)


def _float_bits(value: float) -> int:
    """Java's ``Float.floatToIntBits`` (every NaN one pattern), as a signed int."""
    return 0x7FC00000 if math.isnan(value) else struct.unpack("<i", struct.pack("<f", value))[0]


def _double_bits(value: float) -> int:
    """Java's ``Double.doubleToLongBits`` (every NaN one pattern), as a signed long."""
    return 0x7FF8000000000000 if math.isnan(value) else struct.unpack("<q", struct.pack("<d", value))[0]


def _java_to_int(value: float, bits: int) -> int:
    """Java's saturating cast of a finite double to an int (``bits`` 32) or a long (64)."""
    low, high = -(1 << (bits - 1)), (1 << (bits - 1)) - 1
    return max(low, min(high, int(value)))


def _double_hash(value: float) -> int:
    """Scala's ``Statics.doubleHash``: as an int, a long, a float, else a double."""
    as_int = _java_to_int(value, 32)
    if as_int == value:
        return as_int
    as_long = _java_to_int(value, 64)
    if as_long == value:
        return _long_hash(as_long)
    as_float = struct.unpack("<f", struct.pack("<f", value))[0]
    if as_float == value:
        return _float_bits(as_float)
    return _long_hash(_double_bits(value))


def _big_integer_hash(value: int) -> int:
    """Java's ``BigInteger.hashCode``: its magnitude's 32-bit words, big-endian, times its sign."""
    magnitude, h = abs(value), 0
    for shift in range((magnitude.bit_length() + 31) // 32 * 32 - 32, -32, -32):
        h = (31 * h + ((magnitude >> shift) & 0xFFFFFFFF)) & 0xFFFFFFFF
    return int32(h * (value > 0) - h * (value < 0))


def _big_int_hash(value: int) -> int:
    """Scala's ``BigInt.hashCode``: a long's unified hash (an int's own value), else Java's ``BigInteger``'s."""
    if -(1 << 63) <= value < 1 << 63:
        return value if -(1 << 31) <= value < 1 << 31 else _long_hash(value)
    return _big_integer_hash(value)


def _mix_last(hash_code: int, data: int) -> int:
    """Scala's ``MurmurHash3.mixLast``."""
    k = (data * 0xCC9E2D51) & 0xFFFFFFFF
    k = ((k << 15) | (k >> 17)) & 0xFFFFFFFF
    k = (k * 0x1B873593) & 0xFFFFFFFF
    return int32(hash_code ^ k)


def decimal_hash(unscaled: int, scale: int) -> int:
    """Spark's ``Decimal.hashCode``: Scala's ``BigDecimal.hashCode`` of ``unscaled`` x 10^-scale (a whole number's
    as a BigInt's; one a double holds exactly, by its shortest decimal form, as the double's; else of its digits
    without trailing zeros, mixed with their scale)."""
    while scale > 0 and unscaled % 10 == 0:  # stripTrailingZeros
        unscaled, scale = unscaled // 10, scale - 1
    if scale <= 0 or unscaled == 0:
        return _big_int_hash(unscaled * 10 ** max(0, -scale))
    exact = Decimal(unscaled).scaleb(-scale)
    as_double = float(exact)
    if not math.isinf(as_double) and Decimal(repr(as_double)) == exact:
        return _double_hash(as_double)
    return _mix_last(_big_integer_hash(unscaled), scale)


@dataclass(frozen=True)
class ItemType:
    """How Spark's sketch of one column type holds an item: its Java hash, its serializer, its output value."""

    name: str  # Spark's type name (its DDL's, lower case)
    hash: Callable[[Any], int]
    write: Callable[[list[Any]], bytes]
    read: Callable[[bytes, int, int], list[Any]]  # (image, offset, count)
    value: Callable[[Any], Any] = lambda item: item


def _write_numbers(name: str) -> Callable[[list[Any]], bytes]:
    """``ArrayOfNumbersSerDe``: each item its type's indicator byte, then its little-endian value."""
    indicator, fmt = NUMBER_INDICATORS[name]
    if name == "float":
        return lambda items: b"".join(struct.pack("<bi", indicator, bits) for bits in items)
    return lambda items: b"".join(struct.pack("<b" + fmt[1], indicator, item) for item in items)


def _read_numbers(image: bytes, offset: int, count: int) -> list[Any]:
    items = []
    for _ in range(count):
        fmt = NUMBER_FORMATS[image[offset]]
        items.append(struct.unpack_from(fmt, image, offset + 1)[0])
        offset += 1 + struct.calcsize(fmt)
    return items


def _write_longs(items: list[Any]) -> bytes:
    return struct.pack(f"<{len(items)}q", *items)


def _read_longs(image: bytes, offset: int, count: int) -> list[Any]:
    return list(struct.unpack_from(f"<{count}q", image, offset))


def _write_booleans(items: list[Any]) -> bytes:
    """``ArrayOfBooleansSerDe``: one bit each, the first item the lowest bit."""
    packed = bytearray((len(items) + 7) // 8)
    for i, item in enumerate(items):
        packed[i >> 3] |= int(item) << (i & 7)
    return bytes(packed)


def _read_booleans(image: bytes, offset: int, count: int) -> list[Any]:
    return [bool(image[offset + (i >> 3)] >> (i & 7) & 1) for i in range(count)]


def _write_sized(items: list[bytes]) -> bytes:
    """Each item's length (a little-endian int), then its bytes (strings' UTF-8; big decimals' two's complement)."""
    return b"".join(struct.pack("<i", len(item)) + item for item in items)


def _read_sized(image: bytes, offset: int, count: int) -> list[bytes]:
    items = []
    for _ in range(count):
        (size,) = struct.unpack_from("<i", image, offset)
        items.append(image[offset + 4 : offset + 4 + size])
        offset += 4 + size
    return items


def _two_complement(value: int) -> bytes:
    """Java's ``BigInteger.toByteArray``: the fewest big-endian bytes with a sign bit."""
    bits = value.bit_length() if value >= 0 else (~value).bit_length()
    return value.to_bytes(bits // 8 + 1, "big", signed=True)


def item_type(ddl: str) -> ItemType:
    """The item type of Spark's sketch state's ``itemDataTypeDDL`` (``item INT NOT NULL``, ``item string not
    null``, ``item DECIMAL(10,2) NOT NULL``, ...)."""
    name = ddl.split()[1].lower()
    if name in ("tinyint", "smallint", "int", "date"):
        convert = (lambda days: EPOCH + dt.timedelta(days=days)) if name == "date" else (lambda item: item)
        return ItemType(name, int32, _write_numbers(name), _read_numbers, convert)
    if name == "float":
        return ItemType(name, lambda bits: bits, _write_numbers(name), _read_numbers, _float_of)
    if name in ("bigint", "timestamp", "timestamp_ntz"):
        return ItemType(name, _long_hash, _write_longs, _read_longs)
    if name == "double":
        return ItemType(name, _long_hash, _write_longs, _read_longs, _double_of)
    if name == "boolean":
        return ItemType(name, lambda item: 1231 if item else 1237, _write_booleans, _read_booleans)
    if name == "string":
        return ItemType(
            name,
            _string_hash,
            lambda items: _write_sized([item.encode("utf-8") for item in items]),
            lambda image, offset, count: [item.decode("utf-8") for item in _read_sized(image, offset, count)],
        )
    if name.startswith("decimal("):
        return _decimal_type(name)
    raise ValueError(f"approx_top_k: items of type {name!r} are not among those misa reads ({ddl!r})")


def _decimal_type(name: str) -> ItemType:
    """Spark's ``ArrayOfDecimalsSerDe``: unscaled values as ints (precision up to 9), longs (18), else sized
    two's complement bytes."""
    precision, scale = (int(part) for part in name[len("decimal(") : -1].split(","))

    def value(unscaled: int) -> Decimal:
        return Decimal(unscaled).scaleb(-scale)

    def hash_of(unscaled: int) -> int:
        return decimal_hash(unscaled, scale)

    if precision <= 9:
        return ItemType(name, hash_of, _write_numbers("int"), _read_numbers, value)
    if precision <= 18:
        return ItemType(name, hash_of, _write_longs, _read_longs, value)
    return ItemType(
        name,
        hash_of,
        lambda items: _write_sized([_two_complement(item) for item in items]),
        lambda image, offset, count: [int.from_bytes(b, "big", signed=True) for b in _read_sized(image, offset, count)],
        value,
    )


def float_item(value: float, double: bool) -> int:
    """A float's or a double's item: its canonical bits."""
    return _double_bits(value) if double else _float_bits(value)


def _float_of(bits: int) -> float:
    return struct.unpack("<f", struct.pack("<i", bits))[0]


def _double_of(bits: int) -> float:
    return struct.unpack("<d", struct.pack("<q", bits))[0]
