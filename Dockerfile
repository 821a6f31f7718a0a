# One image for every tokenswarm role: simulator, Locust master, Locust worker.
FROM python:3.11-slim
ENV PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1
WORKDIR /app
COPY pyproject.toml setup.py README.md ./
COPY tokenswarm ./tokenswarm
COPY analysis ./analysis
COPY locustfiles ./locustfiles
COPY scenarios ./scenarios
# gcc only for the build of the reader's C fast path (tokenswarm/wire/_fastread.c), then removed
RUN apt-get update && apt-get install -y --no-install-recommends gcc libc6-dev \
    && pip install . \
    && apt-get purge -y gcc libc6-dev && apt-get autoremove -y && rm -rf /var/lib/apt/lists/*
EXPOSE 8000 8089 5557
CMD ["tokenswarm", "--help"]
