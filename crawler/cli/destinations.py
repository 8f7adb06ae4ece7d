"""``crawler destinations add/list/remove/test``: where the outbox's events go.

A destination's URL passes the crawl's own checks (``check_url``: canonical form, the
address policy for an IP-literal host); its URL pattern must compile with RE2, its event
types be known ones, its secret be ``whsec_`` + base64 (one is made and printed when none
is given: the receiver needs it to verify the signatures).
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

import typer
from rich.markup import escape
from rich.table import Table

from crawler.cli._app import app
from crawler.cli._common import (
    USAGE,
    ConfigOption,
    DatabaseOption,
    JsonOption,
    err_console,
    fail,
    open_store,
    out_console,
    print_json,
    settings_from,
    store_errors,
)

destinations_app = typer.Typer(
    help="Webhook and notification destinations of the events.", no_args_is_help=True
)
app.add_typer(destinations_app, name="destinations")


@destinations_app.command("add")
def destinations_add(
    url: str = typer.Argument(..., help="The webhook URL (http or https)."),
    secret: str | None = typer.Option(
        None, "--secret", help="whsec_<base64> to sign with (default: a new one, printed)."
    ),
    tag: list[str] = typer.Option(None, "--tag", help="Only events of URLs with this tag."),
    event: list[str] = typer.Option(None, "--event", help="Only events of this type."),
    url_pattern: str | None = typer.Option(
        None, "--url-pattern", help="Only events of URLs matching this RE2 expression."
    ),
    body_format: str | None = typer.Option(
        None,
        "--format",
        help="An apprise URL's body: text (default), markdown or html.",
    ),
    template: str | None = typer.Option(
        None,
        "--template",
        help="An apprise URL's body template: $type $url $event_id $timestamp $tags $diff "
        "$old_hash $new_hash $change_rate $expected_interval_s.",
    ),
    config: str | None = ConfigOption,
    database_url: str | None = DatabaseOption,
    as_json: bool = JsonOption,
) -> None:
    """Send the events to URL: http(s) = a webhook signed per Standard Webhooks; any
    other scheme apprise knows (mailto://, slack://, ntfy://, json://, ...) = a
    notification (pip install 'crawler[notify]')."""
    from crawler.cli._validate import check_url
    from crawler.delivery import (
        EVENT_TYPES,
        FORMATS,
        check_notify_url,
        check_secret,
        check_template,
        compile_pattern,
        generate_secret,
        is_webhook,
    )
    from crawler.fetch import AddressPolicy
    from crawler.store import DestinationSpec

    settings = settings_from(config, database_url=database_url)
    webhook = is_webhook(url)
    try:
        if webhook:
            if body_format or template:
                raise ValueError("--format and --template are for apprise URLs, not webhooks")
            canonical = check_url(url, AddressPolicy(settings.allow_private_addresses))
            made = secret is None
            secret = generate_secret() if secret is None else check_secret(secret)
        else:
            if secret is not None:
                raise ValueError("--secret is for webhooks (http or https URLs)")
            canonical, made, secret = check_notify_url(url), False, ""
            body_format = body_format or "text"
            if body_format not in FORMATS:
                raise ValueError(f"unknown --format {body_format!r}: use {', '.join(FORMATS)}")
            if template is not None:
                check_template(template)
        if url_pattern:
            compile_pattern(url_pattern)
    except ValueError as exc:
        fail(str(exc), USAGE)
    unknown = [e for e in event or () if e not in EVENT_TYPES]
    if unknown:
        fail(f"unknown event type {unknown[0]!r}: choose from {', '.join(EVENT_TYPES)}", USAGE)
    spec = DestinationSpec(
        canonical,
        secret,
        tuple(tag or ()),
        tuple(event or ()),
        url_pattern or None,
        None if webhook else body_format,
        None if webhook else template,
    )
    with store_errors():
        new = open_store(settings).outbox.add_destination(spec)
    if as_json:
        print_json({"id": new, "url": canonical, "secret": secret or None})
        return
    out_console.print(f"destination {new}: {escape(canonical)}")
    if made:
        out_console.print(f"secret (give it to the receiver): {secret}", highlight=False)


@destinations_app.command("list")
def destinations_list(
    config: str | None = ConfigOption,
    database_url: str | None = DatabaseOption,
    as_json: bool = JsonOption,
) -> None:
    """The destinations, their filters and whether they are disabled (secrets hidden: no
    signing secret, and the URL's passwords and tokens masked)."""
    from crawler.delivery import masked_url

    settings = settings_from(config, database_url=database_url)
    with store_errors():
        rows = open_store(settings).outbox.destinations()
    if as_json:
        docs = [d.as_json() | {"url": masked_url(d.spec.url)} for d in rows]
        print_json({"destinations": docs})
        return
    table = Table()
    for col in ("id", "url", "events", "tags", "url pattern", "state"):
        table.add_column(col)
    for d in rows:
        state = f"disabled: {d.disabled_reason}" if d.disabled_at else "active"
        table.add_row(
            str(d.id),
            escape(masked_url(d.spec.url)),
            ", ".join(d.spec.event_types) or "all",
            ", ".join(d.spec.tags) or "all",
            escape(d.spec.url_pattern or ""),
            escape(state),
        )
    out_console.print(table)


@destinations_app.command("remove")
def destinations_remove(
    destination_id: int = typer.Argument(..., help="The destination's id."),
    config: str | None = ConfigOption,
    database_url: str | None = DatabaseOption,
) -> None:
    """Stop sending to a destination and forget its delivery state (exit 1 if unknown)."""

    settings = settings_from(config, database_url=database_url)
    with store_errors():
        gone = open_store(settings).outbox.remove_destination(destination_id)
    if not gone:
        fail(f"no destination {destination_id} (see crawler destinations list)")
    err_console.print(f"removed destination {destination_id}")


@destinations_app.command("test")
def destinations_test(
    destination_id: int = typer.Argument(..., help="The destination's id."),
    config: str | None = ConfigOption,
    database_url: str | None = DatabaseOption,
    as_json: bool = JsonOption,
) -> None:
    """Send a signed ``test`` event (a webhook) or a test notification (apprise) now and
    print the answer (exit 1 unless 2xx / sent)."""
    from crawler.delivery import NotifySender, WebhookSender, signed_headers, test_body
    from crawler.fetch import AddressPolicy

    settings = settings_from(config, database_url=database_url)
    with store_errors():
        found = open_store(settings).outbox.destination(destination_id)
    if found is None:
        fail(f"no destination {destination_id} (see crawler destinations list)")
    now = datetime.now(UTC)
    msg_id = f"msg_test_{int(now.timestamp() * 1000)}"
    body = test_body(destination_id, now)
    headers = signed_headers(found.spec.secret, msg_id, body, now)

    async def send() -> tuple[int | None, str | None, str]:
        sender = WebhookSender(
            AddressPolicy(settings.allow_private_addresses),
            settings.delivery_timeout_s,
            settings.user_agent,
        )
        notifier = NotifySender(sender, settings.delivery_timeout_s, 1)
        try:
            if found.spec.body_format is not None:  # an apprise destination
                answer = await notifier.send(
                    found.spec.url, "test: crawler", "a test from crawler", found.spec.body_format
                )
            else:
                answer = await sender.send(found.spec.url, headers, body)
        finally:
            await sender.aclose()
            notifier.close()
        return answer.status, answer.error, answer.text

    status, error, text = asyncio.run(send())
    ok = status is not None and 200 <= status < 300
    if as_json:
        print_json({"id": msg_id, "status": status, "error": error, "answer": text, "ok": ok})
    else:
        out_console.print(f"{msg_id} -> {status if status is not None else 'no answer'}")
        if error or text:
            out_console.print(escape(error or text), soft_wrap=True)
    if not ok:
        raise typer.Exit(1)
