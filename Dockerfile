# One image for every tokenswarm role: simulator, Locust master, Locust worker.
FROM python:3.11-slim
ENV PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1
WORKDIR /app
COPY pyproject.toml README.md ./
COPY tokenswarm ./tokenswarm
COPY analysis ./analysis
COPY locustfiles ./locustfiles
COPY scenarios ./scenarios
RUN pip install .
EXPOSE 8000 8089 5557
CMD ["tokenswarm", "--help"]
