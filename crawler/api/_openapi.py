"""The OpenAPI 3.1 document of what the service's HTTP port serves, written by hand.

A hand-written dict rather than a generator (aiohttp has no built-in one; aiohttp-apispec
and friends want their own decorators and schemas library for four routes): a test checks it
with ``openapi-spec-validator`` and compares its paths with the app's router, so it cannot
drift from the routes actually served.
"""

from __future__ import annotations

from typing import Any

__all__ = ["openapi_document"]

_PROBLEM = {"$ref": "#/components/schemas/Problem"}


def _problem(description: str) -> dict[str, Any]:
    return {
        "description": description,
        "content": {"application/problem+json": {"schema": _PROBLEM}},
    }


def _param(name: str, description: str, schema: dict[str, Any]) -> dict[str, Any]:
    return {
        "name": name,
        "in": "query",
        "required": False,
        "description": description,
        "schema": schema,
    }


_FILTERS = [
    _param("since", "only changes detected at or after this ISO 8601 time", {"type": "string"}),
    _param("url", "only changes of this watched URL", {"type": "string"}),
    _param("tag", "only changes of URLs with this tag", {"type": "string"}),
    _param("cursor", "the next_cursor of the previous page", {"type": "string"}),
]

_CHANGE_INFO: dict[str, Any] = {
    "type": "object",
    "required": ["id", "url_id", "url", "slot", "detected_at", "old_hash", "new_hash", "tags"],
    "properties": {
        "id": {"type": "integer", "description": "the change's id; ids grow in commit order"},
        "url_id": {"type": "integer"},
        "url": {"type": "string"},
        "slot": {"type": "integer"},
        "detected_at": {"type": "string", "format": "date-time"},
        "old_hash": {"type": ["string", "null"]},
        "new_hash": {"type": ["string", "null"]},
        "tags": {"type": "array", "items": {"type": "string"}},
    },
}


def openapi_document() -> dict[str, Any]:
    """The document served at ``/api/v1/openapi.json`` (a new dict each call)."""
    unauthorized = _problem("the bearer token is missing or wrong (only when one is set)")
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "crawler changes",
            "version": "1",
            "description": "Read-only feed and API of the changes the crawler detected.",
        },
        "components": {
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
            "schemas": {
                "Problem": {
                    "type": "object",
                    "description": "RFC 9457 problem details",
                    "properties": {
                        "type": {"type": "string"},
                        "title": {"type": "string"},
                        "status": {"type": "integer"},
                        "detail": {"type": "string"},
                    },
                },
                "ChangeInfo": _CHANGE_INFO,
                "ChangePage": {
                    "type": "object",
                    "required": ["changes", "next_cursor"],
                    "properties": {
                        "changes": {
                            "type": "array",
                            "items": {"$ref": "#/components/schemas/ChangeInfo"},
                        },
                        "next_cursor": {
                            "type": ["string", "null"],
                            "description": "pass as cursor for the next page; null: no more",
                        },
                    },
                },
                "Change": {
                    "allOf": [
                        {"$ref": "#/components/schemas/ChangeInfo"},
                        {
                            "type": "object",
                            "properties": {
                                "before": {"type": ["string", "null"]},
                                "after": {"type": ["string", "null"]},
                                "diff": {"type": ["string", "null"], "description": "unified diff"},
                                "diff_truncated": {"type": "boolean"},
                            },
                        },
                    ]
                },
            },
        },
        "security": [{"bearer": []}],
        "paths": {
            "/feed/changes.atom": {
                "get": {
                    "summary": "Atom feed of the newest changes, each with its diff",
                    "operationId": "feed",
                    "parameters": [
                        *_FILTERS[:3],
                        _param(
                            "limit",
                            "entries (default 50)",
                            {"type": "integer", "minimum": 1, "maximum": 500},
                        ),
                    ],
                    "responses": {
                        "200": {
                            "description": "an Atom feed, newest change first",
                            "content": {"application/atom+xml": {"schema": {"type": "string"}}},
                        },
                        "400": _problem("a bad parameter"),
                        "401": unauthorized,
                    },
                }
            },
            "/api/v1/changes": {
                "get": {
                    "summary": "Changes, oldest first, a page at a time",
                    "operationId": "listChanges",
                    "parameters": [
                        *_FILTERS,
                        _param(
                            "limit",
                            "changes per page (default 100)",
                            {"type": "integer", "minimum": 1, "maximum": 1000},
                        ),
                    ],
                    "responses": {
                        "200": {
                            "description": "a page of changes",
                            "content": {
                                "application/json": {
                                    "schema": {"$ref": "#/components/schemas/ChangePage"}
                                }
                            },
                        },
                        "400": _problem("a bad parameter"),
                        "401": unauthorized,
                    },
                }
            },
            "/api/v1/changes/{id}": {
                "get": {
                    "summary": "One change with its before, after and diff",
                    "operationId": "getChange",
                    "parameters": [
                        {
                            "name": "id",
                            "in": "path",
                            "required": True,
                            "schema": {"type": "integer", "minimum": 0},
                        }
                    ],
                    "responses": {
                        "200": {
                            "description": "the change",
                            "content": {
                                "application/json": {
                                    "schema": {"$ref": "#/components/schemas/Change"}
                                }
                            },
                        },
                        "400": _problem("not a change id"),
                        "401": unauthorized,
                        "404": _problem("no such change"),
                    },
                }
            },
            "/api/v1/openapi.json": {
                "get": {
                    "summary": "This document",
                    "operationId": "openapi",
                    "responses": {
                        "200": {
                            "description": "OpenAPI 3.1",
                            "content": {"application/json": {"schema": {"type": "object"}}},
                        },
                        "401": unauthorized,
                    },
                }
            },
            "/metrics": {
                "get": {
                    "summary": "Prometheus metrics (never needs the token)",
                    "operationId": "metrics",
                    "security": [],
                    "responses": {
                        "200": {
                            "description": "the Prometheus text exposition",
                            "content": {"text/plain": {"schema": {"type": "string"}}},
                        }
                    },
                }
            },
            "/healthz": {
                "get": {
                    "summary": "Liveness of the crawl loop (never needs the token)",
                    "operationId": "healthz",
                    "security": [],
                    "responses": {
                        "200": {
                            "description": "ok",
                            "content": {"text/plain": {"schema": {"type": "string"}}},
                        },
                        "503": {
                            "description": "unhealthy, with the reason",
                            "content": {"text/plain": {"schema": {"type": "string"}}},
                        },
                    },
                }
            },
        },
    }
