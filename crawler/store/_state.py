"""Scheduler state <-> database rows.

A ``SchedulerState`` (``Scheduler.take_delta()`` or ``state()``) is split into its scalars
(one JSON object: scheduler, format, params, rng, budget, slot and the scheduler's own) and
its per-URL rows: the per-URL arrays are packed into a NumPy structured array whose dtype (a
JSON list of ``[url_<field>, dtype.str]``) is stored next to the scalars; each URL's record
is one fixed-length blob. Loading concatenates the blobs and views them with
``np.frombuffer``: no per-field Python work per URL.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
from numpy.typing import NDArray

from crawler.schedulers import SchedulerState

URL_PREFIX = "url_"


def row_dtype(state: SchedulerState) -> np.dtype[Any]:
    """The structured dtype of one URL's record (fields named ``url_<field>``)."""
    fields = []
    for name, values in state.rows.items():
        arr = np.asarray(values)
        if arr.ndim != 1:
            raise ValueError(f"scheduler state {URL_PREFIX}{name} must be a 1-D array")
        fields.append((URL_PREFIX + name, arr.dtype.str))
    return np.dtype(fields)


def dtype_to_json(dtype: np.dtype[Any]) -> str:
    assert dtype.names is not None
    return json.dumps([[name, dtype.fields[name][0].str] for name in dtype.names])  # type: ignore[index]


def dtype_from_json(text: str) -> np.dtype[Any]:
    fields = json.loads(text)
    if not isinstance(fields, list):
        raise ValueError("url_dtype is not a JSON list")
    return np.dtype([(str(name), str(code)) for name, code in fields])


def pack_rows(state: SchedulerState, dtype: np.dtype[Any]) -> list[bytes]:
    """One blob per URL of ``state.ids``."""
    ids = np.asarray(state.ids)
    rec = np.empty(ids.size, dtype=dtype)
    assert dtype.names is not None
    for key in dtype.names:
        arr = np.asarray(state.rows[key.removeprefix(URL_PREFIX)])
        if arr.shape != ids.shape:
            raise ValueError(f"scheduler state {key} does not match ids")
        rec[key] = arr
    raw = rec.tobytes()
    size = dtype.itemsize
    return [raw[i * size : (i + 1) * size] for i in range(ids.size)]


def unpack_rows(blob: bytes, dtype: np.dtype[Any]) -> dict[str, NDArray[Any]]:
    """The ``url_*`` arrays of concatenated records (each a contiguous copy)."""
    rec = np.frombuffer(blob, dtype=dtype) if dtype.itemsize else np.empty(0, dtype=dtype)
    assert dtype.names is not None
    return {key: np.ascontiguousarray(rec[key]) for key in dtype.names}


def scalars_to_json(state: SchedulerState) -> str:
    """Every entry that is neither ``ids`` nor a per-URL array, as JSON."""
    return json.dumps({k: _encode(v) for k, v in state.scalars().items()}, sort_keys=True)


def scalars_from_json(text: str) -> dict[str, Any]:
    data = json.loads(text)
    if not isinstance(data, dict):
        raise ValueError("scheduler scalars are not a JSON object")
    return {k: _decode(v) for k, v in data.items()}


def _encode(value: Any) -> Any:
    if isinstance(value, np.ndarray):
        return {"__ndarray__": value.tolist(), "dtype": value.dtype.str}
    if isinstance(value, np.generic):
        return value.item()
    return value


def _decode(value: Any) -> Any:
    if isinstance(value, dict) and "__ndarray__" in value:
        return np.asarray(value["__ndarray__"], dtype=np.dtype(value["dtype"]))
    return value


def convert_rows(blobs: list[bytes], old: np.dtype[Any], new: np.dtype[Any]) -> list[bytes]:
    """Records of format ``old`` re-packed as ``new``: the fields they share are carried
    over (cast to the new type), fields only ``new`` has start at zero, fields only ``old``
    had are dropped. Every blob must be ``old.itemsize`` bytes long."""
    assert old.names is not None and new.names is not None
    rec = np.frombuffer(b"".join(blobs), dtype=old) if old.itemsize else np.empty(0, old)
    out = np.zeros(rec.size, dtype=new)
    for key in new.names:
        if key in old.names:
            out[key] = rec[key]
    raw = out.tobytes()
    size = new.itemsize
    return [raw[i * size : (i + 1) * size] for i in range(rec.size)]
