"""RabbitMQ test support: a private broker node, and helpers shared by the back-end tests.

A private node serves tests that stop and start the broker.
The node runs `rabbitmq-server` in the foreground as a child process with its own node name
(`gwtest-<pid>-<n>@localhost`), AMQP port, distribution port, data and log directories and Erlang
cookie (HOME) under a temporary directory, and with an empty env file so the machine's
`rabbitmq-env.conf` (which names the shared node) is not read. It is stopped with
`rabbitmqctl -n NODE stop`; its data survive a stop, so `start` again brings back durable queues
and persistent messages. The shared node on port 5672 is never touched.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import shutil
import signal
import socket
import subprocess
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import aio_pika
from aio_pika.abc import AbstractRobustConnection

from adapters.amqp.backend import RabbitMQBackend
from gateway.backend.base import StoredMessage
from gateway.engine.clock import SystemClock

wall_clock_ms = SystemClock().now_ms
"""The engine's clock in production: what `fetch` and `stats` get as now."""

URL = os.environ.get("GATEWAY_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/")

_COUNTER = itertools.count()
_LIB_BIN = Path("/usr/lib/rabbitmq/bin")


def _tool(name: str) -> str:
    """The RabbitMQ script itself (not Debian's /usr/sbin wrapper, which switches user)."""
    candidate = _LIB_BIN / name
    if candidate.exists():
        return str(candidate)
    found = shutil.which(name)
    if found is None:
        raise RuntimeError(f"{name} is not installed (Debian package rabbitmq-server)")
    return found


def free_port() -> int:
    """A TCP port nobody listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class AmqpNode:
    """One private broker node; `start`/`stop` may be called repeatedly."""

    def __init__(self, base: Path) -> None:
        self.base = base
        self.nodename = f"gwtest-{os.getpid()}-{next(_COUNTER)}@localhost"
        self.port = free_port()
        self.dist_port = free_port()
        self._process: subprocess.Popen[bytes] | None = None
        for sub in ("mnesia", "log"):
            (base / sub).mkdir(parents=True, exist_ok=True)
        (base / "rabbitmq-env.conf").write_text("")
        (base / "rabbitmq.conf").write_text("")
        (base / "enabled_plugins").write_text("[].\n")

    @property
    def url(self) -> str:
        return f"amqp://guest:guest@127.0.0.1:{self.port}/"

    def env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("RABBITMQ_")}
        env.update(
            HOME=str(self.base),
            RABBITMQ_NODENAME=self.nodename,
            RABBITMQ_NODE_IP_ADDRESS="127.0.0.1",
            RABBITMQ_NODE_PORT=str(self.port),
            RABBITMQ_DIST_PORT=str(self.dist_port),
            RABBITMQ_MNESIA_BASE=str(self.base / "mnesia"),
            RABBITMQ_LOG_BASE=str(self.base / "log"),
            RABBITMQ_CONF_ENV_FILE=str(self.base / "rabbitmq-env.conf"),
            RABBITMQ_CONFIG_FILE=str(self.base / "rabbitmq.conf"),
            RABBITMQ_ENABLED_PLUGINS_FILE=str(self.base / "enabled_plugins"),
            RABBITMQ_PID_FILE=str(self.base / "node.pid"),
            ERL_EPMD_ADDRESS="127.0.0.1",
        )
        return env

    def ctl(self, *args: str, timeout_s: float = 60) -> subprocess.CompletedProcess[str]:
        """Run `rabbitmqctl -n NODE ARGS...` against this node (with its cookie)."""
        return subprocess.run(
            [_tool("rabbitmqctl"), "-n", self.nodename, *args],
            env=self.env(),
            capture_output=True,
            text=True,
            timeout=timeout_s,
            check=False,
        )

    def _listening(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                return True
        except OSError:
            return False

    def start(self, timeout_s: float = 90) -> None:
        """Start the node and return once it accepts AMQP connections."""
        if self._process is not None and self._process.poll() is None:
            return
        log = (self.base / "server.out").open("ab")
        self._process = subprocess.Popen(
            [_tool("rabbitmq-server")],
            env=self.env(),
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        log.close()
        deadline = time.monotonic() + timeout_s
        while not self._listening():
            if self._process.poll() is not None:
                raise RuntimeError(f"rabbitmq-server exited early:\n{self.output_tail()}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"node did not listen in {timeout_s}s:\n{self.output_tail()}")
            time.sleep(0.2)
        done = self.ctl("await_startup", "--timeout", str(int(timeout_s)))
        if done.returncode != 0:
            raise RuntimeError(f"await_startup failed: {done.stdout}{done.stderr}")

    def stop(self, timeout_s: float = 60) -> None:
        """Stop the node with rabbitmqctl and wait for its process to end."""
        process = self._process
        if process is None or process.poll() is not None:
            return
        self.ctl("stop", timeout_s=timeout_s)
        try:
            process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)  # the session this helper started
            process.wait(timeout=10)
        self._process = None

    def output_tail(self, lines: int = 30) -> str:
        path = self.base / "server.out"
        text = path.read_text(errors="replace") if path.exists() else ""
        return "\n".join(text.splitlines()[-lines:])


def unique(prefix: str = "gwtest") -> str:
    return f"{prefix}.{uuid.uuid4().hex[:12]}"


async def collect(
    backend: RabbitMQBackend,
    topic: str,
    group: str,
    count: int,
    timeout_s: float = 10.0,
    exclude_keys: frozenset[str] = frozenset(),
) -> list[StoredMessage]:
    """Fetch until `count` messages came or `timeout_s` passed (waiting on the back end)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    got: list[StoredMessage] = []
    while len(got) < count:
        got += await backend.fetch(
            topic, group, count - len(got), wall_clock_ms(), exclude_keys=exclude_keys
        )
        remaining = deadline - loop.time()
        if len(got) >= count or remaining <= 0:
            break
        await backend.wait(topic, group, remaining)
    return got


async def ready_in(connection: AbstractRobustConnection, queue: str) -> int:
    """Ready messages of `queue` as RabbitMQ reports them (passive declare on a plain channel)."""
    channel = await connection.channel()
    try:
        declared = await channel.declare_queue(queue, passive=True)
        return int(declared.declaration_result.message_count or 0)
    finally:
        await channel.close()


@asynccontextmanager
async def plain_connection(url: str = URL) -> AsyncIterator[AbstractRobustConnection]:
    connection = await aio_pika.connect_robust(url)
    try:
        yield connection
    finally:
        await connection.close()


async def delete_queues(connection: AbstractRobustConnection, *names: str) -> None:
    channel = await connection.channel()
    try:
        for name in names:
            await channel.queue_delete(name)
    finally:
        await channel.close()


async def delete_exchanges(connection: AbstractRobustConnection, *names: str) -> None:
    channel = await connection.channel()
    try:
        for name in names:
            await channel.exchange_delete(name)
    finally:
        await channel.close()
