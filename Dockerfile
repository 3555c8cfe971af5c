# syntax=docker/dockerfile:1
#
# retry-gateway image: `docker build -t retry-gateway .`
#
# builder: builds the gateway's wheel and the wheels of everything it needs.
# runtime: installs those wheels (no compiler, no network, no build tools) and runs the
#          gateway as the unprivileged user 10001, the uid the Kubernetes manifests in k8s/ use.

FROM python:3.11-slim AS builder

ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /src
COPY pyproject.toml README.md LICENSE ./
# gateway/v1/*.proto link to protos/: the wheel ships the API's .proto files.
COPY protos ./protos
COPY gateway ./gateway
COPY adapters ./adapters
# Every front end and back end is in the base dependencies; the telemetry exporter (Spark) is
# an extra and stays out of the image.
RUN python -m pip wheel --wheel-dir /wheels .


FROM python:3.11-slim AS runtime

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

# The wheels are bind-mounted from the builder, so they never become a layer of this image.
RUN --mount=type=bind,from=builder,source=/wheels,target=/wheels \
    python -m pip install --no-index --find-links=/wheels retry-gateway

RUN groupadd --system --gid 10001 gateway \
    && useradd --system --uid 10001 --gid 10001 --no-create-home \
       --home-dir /nonexistent --shell /usr/sbin/nologin gateway \
    && mkdir -p /etc/gateway /var/lib/gateway \
    && chown 10001:10001 /var/lib/gateway

WORKDIR /var/lib/gateway
USER 10001:10001

# gRPC (gateway.v1, RocketMQ and grpc.health.v1) and the admin port (Prometheus /metrics).
EXPOSE 50051 9464

ENTRYPOINT ["gateway"]
CMD ["serve", "--config", "/etc/gateway/gateway.toml"]
