# One image for every toolfan process: workers, poller, emulator.
FROM python:3.11-slim
WORKDIR /app
COPY pyproject.toml README.md ./
COPY handlers handlers
COPY tasks tasks
COPY dispatcher dispatcher
COPY emulator emulator
RUN pip install --no-cache-dir .
USER nobody
CMD ["toolfan", "worker"]
