# One image for every toolfan process: workers, poller, beat, Flower, emulator.
FROM python:3.11-slim
# Logs reach `docker compose logs` as they happen, and no .pyc files land in the image.
ENV PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
WORKDIR /app
COPY pyproject.toml README.md ./
COPY handlers handlers
COPY tasks tasks
COPY dispatcher dispatcher
COPY emulator emulator
COPY toolfan toolfan
RUN pip install --no-cache-dir .
# Your own tools: build FROM this image, COPY your package and set TOOLFAN_HANDLERS.
USER nobody
# Flower, the emulator, and the metrics endpoint of workers and poller.
EXPOSE 5555 8765 9808
CMD ["toolfan", "worker"]
