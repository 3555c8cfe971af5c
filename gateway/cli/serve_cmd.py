"""`gateway serve`: run the gateway until SIGTERM, SIGINT or SIGHUP, then drain; or until its back
end cannot recover, then exit with EXIT_BACKEND_LOST so that a supervisor restarts it (also when
the back end cannot be reached, or refuses the gateway, at start: `BackendUnreachable`)."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import os
import signal
import ssl
import sys
from collections.abc import Callable
from dataclasses import MISSING, fields

import structlog

from gateway import logs
from gateway.errors import BackendUnreachable, GatewayError, InvalidArgument, Unavailable
from gateway.product import installed, settings_of
from gateway.server.config import (
    ServeConfig,
    backends,
    env_name,
    load,
    other_backends_settings,
    unknown_env,
)

OWN_FLAGS = ("listen", "data_dir", "backend", "cache_mb", "commit_timeout_s", "grace_s",
             "time_scale", "max_message_bytes", "log_level", "admin_listen", "console_listen",
             "tokens_file", "tls_cert", "tls_key", "tls_client_ca", "allow_remote_unauthenticated",
             "telemetry", "broadcast_idle_s", "max_unacked", "max_unacked_mb", "max_held_mb",
             "max_publish_mb", "max_groups", "max_groups_per_principal", "max_topics",
             "max_stored_groups", "max_topics_per_principal", "max_stored_groups_per_principal",
             "max_rpcs", "tracing", "tracing_endpoint", "metrics_label_cap",
             "gateway_id")
"""Settings of the gateway's own that have a flag (the products declare theirs)."""
FLAGS = OWN_FLAGS + tuple(spec.key for product in installed()
                          for spec in settings_of(product.config_type) if spec.setting.flag)
"""Every setting with a flag: the parsed namespace's attribute names."""
GC_THRESHOLDS = (50_000, 20, 100)
"""The cyclic collector's thresholds while serving. Python's default (700, 10, 10) runs a young
collection every 700 container allocations, and a gateway allocates several per message: in
`python -m bench.gateway` the collector took 9% of the event loop's thread and end-to-end
throughput rose from 23,600 to 27,500 msgs/s with these. Messages form few reference cycles;
what they do form is still collected, less often."""
log = structlog.get_logger("gateway.server")

EXIT_BACKEND_LOST = 75
"""Exit status when the back end cannot recover within the process (EX_TEMPFAIL: try again)."""


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("serve", help="run the gateway (embedded store by default)",
                       description="Run the gateway. Each setting comes from its flag, else the "
                       "environment variable GATEWAY_<KEY> named in its help, else the --config "
                       "file, else its default.")
    p.add_argument("--config", help="TOML config file (default: none, every setting from "
                   "flags, environment and defaults)")
    own = _OwnFlags(p)
    own.add("--listen", "listen", "the gRPC API on HOST:PORT (and the gRPC services of the "
            "products that mount theirs)")
    own.add("--data-dir", "data_dir", "embedded store directory")
    *others, last = backends(installed())
    own.add("--backend", "backend",
            f"where messages are kept: {', '.join(others)} or {last}" if others else last)
    own.add("--cache-mb", "cache_mb", "embedded store: MiB of recently published messages kept "
            "in memory (0 reads every message from disk)", int)
    own.add("--commit-timeout-s", "commit_timeout_s", "embedded store: seconds writes may wait "
            "for a commit before the writer process counts as hung and is restarted", float)
    own.add("--grace-s", "grace_s", "drain period on SIGTERM: settles are accepted this long",
            float)
    own.add("--broadcast-idle-s", "broadcast_idle_s", "keep a broadcast consumer's own group "
            "this long after it leaves, so the same consumer id resumes (0 drops it at once)",
            float)
    own.add("--time-scale", "time_scale", "multiply every policy wait (tests and demos)", float)
    own.add("--max-message-bytes", "max_message_bytes",
            "largest message accepted: body + key + tag + property keys and values, in bytes",
            int)
    own.add("--max-unacked", "max_unacked", "most deliveries one consumer holds unsettled", int)
    own.add("--max-unacked-mb", "max_unacked_mb", "most MiB of message bodies one consumer "
            "holds unsettled (at least one delivery)", int)
    own.add("--max-held-mb", "max_held_mb", "most MiB of message bodies one principal "
            "(token) holds unsettled, its consumers and pulls together", int)
    own.add("--max-publish-mb", "max_publish_mb", "most MiB of messages of publishes stored at "
            "once, every front end together; more wait their turn", int)
    own.add("--max-groups", "max_groups", "most topic/group subscriptions run at once (about "
            "8 KB each); a new group beyond it is refused", int)
    own.add("--max-groups-per-principal", "max_groups_per_principal", "most of them one "
            "principal (token) runs at once; 0: half of --max-groups with --tokens-file, all of "
            "them without", int)
    own.add("--max-topics", "max_topics", "most topics the back end holds (retry and "
            "dead-letter destinations included) for a new one to be made on first use", int)
    own.add("--max-stored-groups", "max_stored_groups", "most groups the back end keeps (their "
            "positions, about 1 KB each in the embedded store) for a new one to be made on "
            "first use", int)
    own.add("--max-topics-per-principal", "max_topics_per_principal", "most new topics one "
            "principal (token) makes; 0: half of --max-topics with --tokens-file, all of them "
            "without", int)
    own.add("--max-stored-groups-per-principal", "max_stored_groups_per_principal", "most new "
            "groups one principal (token) makes; 0: half of --max-stored-groups with "
            "--tokens-file, all of them without", int)
    own.add("--max-rpcs", "max_rpcs", "calls and open streams served at once", int)
    own.add("--log-level", "log_level", "debug, info, warning or error")
    own.add("--admin-listen", "admin_listen", "Prometheus metrics on HOST:PORT (/metrics)")
    own.add("--metrics-label-cap", "metrics_label_cap", "topics and groups labelled by name in "
            "/metrics (the rest are _other)", int)
    own.add("--console-listen", "console_listen", "serve the web console on HOST:PORT (loopback "
            "only without --tokens-file)")
    own.add("--tokens-file", "tokens_file", "bearer tokens and permissions (TOML); turns "
            "authentication on")
    own.switch("--telemetry", "telemetry", "spool every retry transition to DATA_DIR/telemetry "
               "for `gateway export`")
    own.add("--gateway-id", "gateway_id", "this gateway's name in telemetry rows and trace "
            "resources (default: the host name)")
    own.switch("--tracing", "tracing", "OpenTelemetry spans of every message over OTLP "
               "([tracing] in the config file)")
    own.add("--tracing-endpoint", "tracing_endpoint", "OTLP collector URL (empty: the "
            "exporter's default and OTEL_EXPORTER_OTLP_*)")
    own.add("--tls-cert", "tls_cert", "PEM certificate chain of the gateway: turns TLS on for "
            "every listener (with --tls-key)")
    own.add("--tls-key", "tls_key", "PEM private key of --tls-cert")
    own.add("--tls-client-ca", "tls_client_ca", "require client certificates signed by this CA "
            "(mTLS)")
    own.switch("--allow-remote-unauthenticated", "allow_remote_unauthenticated",
               "listen beyond loopback without authentication")
    _add_product_flags(p)
    p.set_defaults(run=run)


def ascii_number(kind: type) -> Callable[[str], object]:
    """`kind` (int, float or str) for a flag, refusing digits other than ASCII ones: Python
    reads `٣` (an Arabic-Indic 3) as 3, and a port of such digits is refused already."""
    if kind not in (int, float):
        return kind

    def parse(text: str) -> object:
        if not text.isascii():
            raise ValueError(text)
        return kind(text)

    parse.__name__ = kind.__name__  # argparse's "invalid int value: ..."
    return parse


def describe_default(value: object) -> str:
    """How a default reads in a flag's help."""
    if value == "" or value == ():
        return "none"
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, tuple):
        return ",".join(str(v) for v in value)
    return str(value)


def flag_help(text: str, key: str, default: object) -> str:
    """A serve flag's help: what it does, its default (a default worked out at start, as
    `gateway_id`'s, is said in `text` itself), its environment variable."""
    if default is MISSING:
        return f"{text} (env GATEWAY_{key.upper()})"
    return f"{text} (default {describe_default(default)}; env GATEWAY_{key.upper()})"


class _OwnFlags:
    """Adds the gateway's own serve flags, each help naming the default and the variable."""

    def __init__(self, parser: argparse.ArgumentParser) -> None:
        self.parser = parser
        self.defaults = {f.name: f.default for f in fields(ServeConfig)}

    def add(self, flag: str, key: str, text: str, kind: type = str) -> None:
        self.parser.add_argument(flag, dest=key, type=ascii_number(kind), metavar=key.upper(),
                                 help=flag_help(text, key, self.defaults[key]))

    def switch(self, flag: str, key: str, text: str) -> None:
        self.parser.add_argument(flag, dest=key, action="store_const", const=True,
                                 help=flag_help(text, key, self.defaults[key]))


def _add_product_flags(p: argparse.ArgumentParser) -> None:
    """The flags each installed product declares for its settings."""
    for product in installed():
        for spec in settings_of(product.config_type):
            if not spec.setting.flag:
                continue
            section, _, key = spec.setting.toml.partition(".")
            text = spec.setting.help or f"sets [{section}] {key} of the config file"
            help_text = flag_help(text, spec.key, spec.default)
            if spec.kind is bool:
                p.add_argument(spec.setting.flag, dest=spec.key, action="store_const",
                               const=True, help=help_text)
            elif spec.kind in (int, float):
                p.add_argument(spec.setting.flag, dest=spec.key, type=ascii_number(spec.kind),
                               help=help_text, metavar=spec.key.upper())
            else:  # text; a list is comma-separated, as in the environment
                p.add_argument(spec.setting.flag, dest=spec.key, help=help_text,
                               metavar=spec.key.upper())


def configure_logging(level: str) -> None:
    """Every line of the gateway's log stream JSON, at `level` (`gateway.logs`), written from
    a thread of its own (a log reader that does not keep up must not stop the gateway)."""
    logs.configure(level)
    logs.background()


async def serve(config: ServeConfig) -> int:
    """Serve until SIGTERM, SIGINT or SIGHUP (exit status 0) or until the back end cannot recover
    (EXIT_BACKEND_LOST: a supervisor restarts the gateway)."""
    from gateway.server.app import GatewayApp

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in STOP_SIGNALS:
        loop.add_signal_handler(sig, _stopping, sig, stop)
    app = GatewayApp(config)
    starting = asyncio.ensure_future(app.start())
    stopped = asyncio.ensure_future(stop.wait())
    try:
        # A stop signal during start-up ends it (a back end that takes long to answer must
        # not leave the process deaf to SIGTERM until it does).
        await asyncio.wait([starting, stopped], return_when=asyncio.FIRST_COMPLETED)
        if not starting.done():
            starting.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await starting
            await app.abandon()
            log.info("gateway stopped before it started")
            return 0
        starting.result()
    except BaseException as exc:
        await app.abandon()
        if isinstance(exc, OSError):  # a listener could not bind: one line, not a traceback
            raise Unavailable(f"cannot start: {exc}") from None
        raise
    finally:
        stopped.cancel()
    tune_gc()
    grpc_at = f"{config.listen.rsplit(':', 1)[0]}:{app.grpc_port}"
    logs.announce(f"gateway listening on {grpc_at}", listen=grpc_at)
    if config.console_listen:
        scheme = "https" if config.tls_cert else "http"
        console_at = (f"{scheme}://{config.console_listen.rsplit(':', 1)[0]}:"
                      f"{app.console_port}/")
        logs.announce(f"gateway console on {console_at}", console=console_at)
    ends = [asyncio.ensure_future(stop.wait()), asyncio.ensure_future(app.lost.wait())]
    await asyncio.wait(ends, return_when=asyncio.FIRST_COMPLETED)
    for end in ends:
        end.cancel()
    if not app.lost.is_set():
        await app.stop()
        return 0
    logs.announce(f"gateway: exiting with status {EXIT_BACKEND_LOST}: {app.backend.fatal()}",
                  "error", status=EXIT_BACKEND_LOST)
    await app.stop(grace_s=0.0)  # nothing can be settled: no drain
    return EXIT_BACKEND_LOST


STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
"""Each drains and stops the gateway (exit status 0). SIGHUP too: the gateway does not reload
its settings, and its default action killed the process at once, without a drain or a line in
the log (a closed terminal, or an operator expecting a reload)."""


def _stopping(sig: signal.Signals, stop: asyncio.Event) -> None:
    if not stop.is_set():
        log.info("stopping", signal=sig.name)
    stop.set()


def tune_gc() -> None:
    """Move what start-up built out of the collector's sight, then collect less often."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)


def run(args: argparse.Namespace) -> int:
    flags = {name: getattr(args, name) for name in FLAGS}
    config = load(args.config, flags=flags)
    unused = other_backends_settings(installed(), config.backend)
    for key, backend in unused.items():
        if flags.get(key) is not None:  # it served on another back end without a word
            flag = "--" + key.replace("_", "-")
            raise GatewayError(f"{flag} is a setting of back end {backend}: give --backend "
                               f"{backend} with it (this gateway's back end is "
                               f"{config.backend})")
    try:
        check_files(config)
        configure_logging(config.log_level)
        for variable, meant in unknown_env(os.environ):  # a typo ran with the default
            log.warning("unknown setting variable ignored", variable=variable, meant=meant)
        in_file = _file_values(config)
        for key, backend in unused.items():
            if env_name(key) in os.environ:  # one manifest may serve several sidecars
                log.warning("setting not used", variable=env_name(key), backend=config.backend,
                            setting_of=backend)
            elif key in in_file:  # `[pulsar] token` on another back end: ignored, unsaid
                log.warning("setting not used", setting=in_file[key], backend=config.backend,
                            setting_of=backend)
        return asyncio.run(serve(config))
    except InvalidArgument as exc:
        # A setting refused once serving began: name the variable when that is where it came
        # from (`load` does the same for the values it checks).
        variable = env_name(exc.field)
        if flags.get(exc.field) is None and variable in os.environ:
            raise InvalidArgument(variable, exc.value, exc.allowed) from None
        raise
    except BackendUnreachable as exc:
        # Not a usage error: the back end may come (or let the gateway in) later.
        logs.drain()
        print(f"gateway: error: {exc.message} (exit status {EXIT_BACKEND_LOST})",
              file=sys.stderr, flush=True)
        return EXIT_BACKEND_LOST
    except GatewayError:
        raise  # a usage error (a missing extra, a bad setting): the CLI says it in one line
    except Exception:
        log.exception("gateway failed")
        return 1
    finally:
        logs.drain()


def _file_values(config: ServeConfig) -> dict[str, str]:
    """The products' settings that are not at their defaults, by flat key, each with its place
    in the config file (`pulsar.token`)."""
    return {spec.key: spec.setting.toml for product in installed()
            for spec in settings_of(product.config_type)
            if config.value(spec.key) != spec.default}


def check_files(config: ServeConfig) -> None:
    """The files the settings name are readable, and the TLS ones hold what TLS needs, so that
    a wrong path is one line naming the setting, not a traceback from deep inside start-up."""
    for key in ("tokens_file", "tls_cert", "tls_key", "tls_client_ca"):
        path = getattr(config, key)
        if path:
            try:
                with open(path, "rb"):
                    pass
            except OSError as exc:
                raise InvalidArgument(key, path, f"a readable file ({exc.strerror})") from None
    if config.tls_cert:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        try:
            context.load_cert_chain(config.tls_cert, config.tls_key)
        except ssl.SSLError as exc:
            raise InvalidArgument("tls_cert", config.tls_cert, "a PEM certificate chain whose "
                                  f"key is tls_key ({exc.reason or exc})") from None
    if config.tls_client_ca:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        try:
            context.load_verify_locations(config.tls_client_ca)
        except ssl.SSLError as exc:
            raise InvalidArgument("tls_client_ca", config.tls_client_ca,
                                  f"PEM CA certificates ({exc.reason or exc})") from None
