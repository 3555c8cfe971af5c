"""`gateway serve`: run the gateway until SIGTERM or SIGINT, then drain; or until its back end
cannot recover, then exit with EXIT_BACKEND_LOST so that a supervisor restarts it."""

from __future__ import annotations

import argparse
import asyncio
import gc
import signal

import structlog

from gateway import logs
from gateway.errors import GatewayError
from gateway.product import installed, settings_of
from gateway.server.config import ServeConfig, backends, load

OWN_FLAGS = ("listen", "data_dir", "backend", "cache_mb", "grace_s", "time_scale",
             "max_message_bytes", "log_level", "admin_listen", "console_listen", "tokens_file",
             "tls_cert", "tls_key", "tls_client_ca", "allow_remote_unauthenticated", "telemetry",
             "broadcast_idle_s", "max_unacked", "max_rpcs")
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
    p = sub.add_parser("serve", help="run the gateway (embedded store by default)")
    p.add_argument("--config", help="TOML config file")
    p.add_argument("--listen", help="gRPC HOST:PORT (default 127.0.0.1:50051)")
    p.add_argument("--data-dir", dest="data_dir", help="embedded store directory (default ./data)")
    *others, last = backends(installed())
    p.add_argument("--backend", help=f"{', '.join(others)} or {last}" if others else last)
    p.add_argument("--cache-mb", dest="cache_mb", type=int,
                   help="embedded store: MiB of recently published messages kept in memory "
                        "(default 64; 0 reads every message from disk)")
    p.add_argument("--grace-s", dest="grace_s", type=float, help="drain period on SIGTERM")
    p.add_argument("--broadcast-idle-s", dest="broadcast_idle_s", type=float,
                   help="keep a broadcast consumer's own group this long after it leaves, so "
                        "the same consumer id resumes (default 3600; 0 drops it at once)")
    p.add_argument("--time-scale", dest="time_scale", type=float,
                   help="multiply every policy wait (tests and demos; default 1)")
    p.add_argument("--max-message-bytes", dest="max_message_bytes", type=int)
    p.add_argument("--max-unacked", dest="max_unacked", type=int,
                   help="most deliveries one consumer holds unsettled (default 50000)")
    p.add_argument("--max-rpcs", dest="max_rpcs", type=int,
                   help="calls and open streams served at once (default 10000)")
    p.add_argument("--log-level", dest="log_level")
    p.add_argument("--admin-listen", dest="admin_listen",
                   help="Prometheus metrics on HOST:PORT (/metrics)")
    p.add_argument("--console-listen", dest="console_listen",
                   help="serve the web console on HOST:PORT (off unless given; loopback only "
                        "without --tokens-file)")
    p.add_argument("--tokens-file", dest="tokens_file",
                   help="bearer tokens and permissions (TOML); turns authentication on")
    p.add_argument("--telemetry", action="store_const", const=True,
                   help="spool every retry transition to DATA_DIR/telemetry for `gateway export`")
    p.add_argument("--tls-cert", dest="tls_cert")
    p.add_argument("--tls-key", dest="tls_key")
    p.add_argument("--tls-client-ca", dest="tls_client_ca",
                   help="require client certificates signed by this CA (mTLS)")
    p.add_argument("--allow-remote-unauthenticated", dest="allow_remote_unauthenticated",
                   action="store_const", const=True,
                   help="listen beyond loopback without authentication")
    _add_product_flags(p)
    p.set_defaults(run=run)


def _add_product_flags(p: argparse.ArgumentParser) -> None:
    """The flags each installed product declares for its settings."""
    for product in installed():
        for spec in settings_of(product.config_type):
            if not spec.setting.flag:
                continue
            help_text = spec.setting.help or None
            if spec.kind is bool:
                p.add_argument(spec.setting.flag, dest=spec.key, action="store_const",
                               const=True, help=help_text)
            elif spec.kind in (int, float):
                p.add_argument(spec.setting.flag, dest=spec.key, type=spec.kind, help=help_text)
            else:  # text; a list is comma-separated, as in the environment
                p.add_argument(spec.setting.flag, dest=spec.key, help=help_text)


def configure_logging(level: str) -> None:
    """Every line of the gateway's log stream JSON, at `level` (`gateway.logs`)."""
    logs.configure(level)


async def serve(config: ServeConfig) -> int:
    """Serve until SIGTERM or SIGINT (exit status 0) or until the back end cannot recover
    (EXIT_BACKEND_LOST: a supervisor restarts the gateway)."""
    from gateway.server.app import GatewayApp

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    app = GatewayApp(config)
    await app.start()
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


def tune_gc() -> None:
    """Move what start-up built out of the collector's sight, then collect less often."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)


def run(args: argparse.Namespace) -> int:
    flags = {name: getattr(args, name) for name in FLAGS}
    config = load(args.config, flags=flags)
    configure_logging(config.log_level)
    try:
        return asyncio.run(serve(config))
    except GatewayError:
        raise  # a usage error (a missing extra, a bad setting): the CLI says it in one line
    except Exception:
        log.exception("gateway failed")
        return 1
