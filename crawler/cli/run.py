"""``crawler run``: the service. Every setting is a flag, generated from the Settings model."""

from __future__ import annotations

import asyncio
import inspect
import json
from typing import Any, Literal, Optional, get_args, get_origin

import typer

from crawler.cli._app import app
from crawler.cli._common import fail
from crawler.logs import configure_logging
from crawler.settings import Settings, SettingsError, load_settings

#: exit status of a ``crawler run`` refused because another service holds the database
ALREADY_RUNNING = 3


def _flag_annotation(annotation: Any) -> Any:
    """The flag's type: the setting's type without None; dicts and lists are JSON text."""
    if annotation in (dict, list) or get_origin(annotation) in (dict, list):
        return Optional[str]  # noqa: UP045  (JSON text)
    args = [a for a in get_args(annotation) if a is not type(None)]
    kind = args[0] if get_origin(annotation) is not Literal and args else annotation
    if kind in (dict, list) or get_origin(kind) in (dict, list):
        return Optional[str]  # noqa: UP045  (typer reads this annotation at run time)
    return Optional[kind]  # noqa: UP045


def _run(config: str | None, max_slots: int | None, **flags: Any) -> None:
    for name in ("scheduler_params", "delivery_retry_schedule"):
        if isinstance(flags.get(name), str):
            try:
                flags[name] = json.loads(flags[name])
            except json.JSONDecodeError as exc:
                fail(f"--{name.replace('_', '-')} is not JSON: {exc}")
    try:
        settings = load_settings(flags, config)
    except SettingsError as exc:
        fail(str(exc))
    configure_logging(settings.log_level, settings.log_format)
    from crawler.service import serve
    from crawler.store import ServiceLockHeld, StoreError

    try:
        asyncio.run(serve(settings, max_slots))
    except KeyboardInterrupt:
        pass
    except ServiceLockHeld as exc:  # another service on this database
        fail(str(exc), ALREADY_RUNNING)
    except StoreError as exc:
        fail(f"{exc} (check --database-url / CRAWLER_DATABASE_URL, and that the server is up)")
    except OSError as exc:  # e.g. the metrics port is taken
        fail(f"{exc} (is another crawler running? change --metrics-port)")


def _build_signature() -> tuple[inspect.Signature, dict[str, Any]]:
    kw = inspect.Parameter.KEYWORD_ONLY
    params = [
        inspect.Parameter(
            "config",
            kw,
            annotation=Optional[str],  # noqa: UP045
            default=typer.Option(None, "--config", help="TOML settings file (or $CRAWLER_CONFIG)."),
        ),
        inspect.Parameter(
            "max_slots",
            kw,
            annotation=Optional[int],  # noqa: UP045
            default=typer.Option(None, "--max-slots", help="Stop after this many slots."),
        ),
    ]
    for name, field in Settings.model_fields.items():
        default = field.get_default(call_default_factory=True)
        text = (field.description or name.replace("_", " ")).rstrip(".")
        if name == "scheduler_params":
            text += ' (JSON, e.g. {"N": 64})'
        # the variable on a line of its own that click does not re-wrap ("\b"): wrapped in
        # the description's column, the longest names were cut in two at 80 columns
        text += f"\n\n\b\nenv CRAWLER_{name.upper()}, default {default!r}"
        flag = "--" + name.replace("_", "-")
        if field.annotation is bool:
            flag = f"{flag}/--no-{flag[2:]}"
        params.append(
            inspect.Parameter(
                name,
                kw,
                annotation=_flag_annotation(field.annotation),
                default=typer.Option(None, flag, help=text, show_default=False),
            )
        )
    annotations = {p.name: p.annotation for p in params}
    return inspect.Signature(params, return_annotation=None), annotations


def run(**kwargs: Any) -> None:
    """The service: poll the watched URLs slot after slot until SIGINT/SIGTERM, then stop
    cleanly. Every setting is a flag (flag > environment > config file > default)."""
    _run(**kwargs)


run.__signature__, run.__annotations__ = _build_signature()  # type: ignore[attr-defined]
app.command("run")(run)
