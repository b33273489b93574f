# syntax=docker/dockerfile:1
# Ballast controller image: `docker build -t REGISTRY/ballast:0.1.0 .`
# Build stage: a wheel and its dependencies, compiled where needed.
FROM python:3.11-slim AS build
WORKDIR /src
# Compilers for wheels without binaries; this stage is discarded, and Debian rolls these
# versions, so they are not pinned.
# hadolint ignore=DL3008
RUN apt-get update \
 && apt-get install -y --no-install-recommends build-essential \
 && rm -rf /var/lib/apt/lists/*
COPY pyproject.toml README.md ./
COPY assignors ./assignors
COPY controller ./controller
COPY pipeline ./pipeline
RUN pip wheel --no-cache-dir --wheel-dir /wheels ".[keda]"

# Final stage: only the runtime wheels, no compilers, a non-root user.
FROM python:3.11-slim
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
RUN groupadd --system --gid 10001 ballast \
 && useradd --system --uid 10001 --gid ballast --no-create-home --shell /usr/sbin/nologin ballast
COPY --from=build /wheels /wheels
# Offline, from the wheels built above (whose versions the build stage resolved).
# hadolint ignore=DL3013
RUN pip install --no-cache-dir --no-index --find-links=/wheels "ballast[keda]" \
 && rm -rf /wheels
COPY config/ballast.yaml /etc/ballast/ballast.yaml
USER 10001:10001
EXPOSE 8080 6000
ENTRYPOINT ["ballast"]
CMD ["run", "--config", "/etc/ballast/ballast.yaml"]
