"""The Celery side of the pool benchmark (benches/pool.rs, issue 11): the same work as a verdict
stage -- one HTTP call to the fake provider, which answers after a fixed latency -- as a Celery 5
task on the same RabbitMQ, with acks_late and a prefetch of 1, so the two are compared in one
run on the same broker and the same provider.

    python bench_celery.py produce QUEUE N     # enqueue N tasks on QUEUE
    python bench_celery.py delete QUEUE        # delete QUEUE
    celery -A bench_celery worker -Q QUEUE -P threads|gevent -c C --prefetch-multiplier 1

PROVIDER_URL names the fake provider's /v1/chat/completions; BROKER_URL the broker. With
CELERY_QUEUE=QUEUE and CELERY_QUEUE_TYPE=quorum, QUEUE is a durable quorum queue, the kind every
verdict queue is, so the two are also compared on the same guarantees (a classic queue keeps its
messages on one node only).
"""

import json
import os
import sys
import urllib.request

from celery import Celery
from kombu import Exchange, Queue

app = Celery("bench_celery", broker=os.environ.get("BROKER_URL", "amqp://guest:guest@127.0.0.1:5672//"))
app.conf.update(
    task_acks_late=True,
    worker_prefetch_multiplier=1,
    task_ignore_result=True,
    worker_hijack_root_logger=False,
    broker_connection_retry_on_startup=True,
)

QUEUE = os.environ.get("CELERY_QUEUE")
if QUEUE:
    arguments = {"x-queue-type": "quorum"} if os.environ.get("CELERY_QUEUE_TYPE") == "quorum" else {}
    app.conf.task_queues = [Queue(QUEUE, Exchange(QUEUE), routing_key=QUEUE, queue_arguments=arguments)]

BODY = json.dumps(
    {
        "model": os.environ.get("PROVIDER_MODEL", "m-review"),
        "messages": [
            {"role": "system", "content": "You review code changes."},
            {"role": "user", "content": "Review this change."},
        ],
    }
).encode()


@app.task(name="stage")
def stage(i):
    request = urllib.request.Request(
        os.environ["PROVIDER_URL"],
        data=BODY,
        headers={"content-type": "application/json", "authorization": "Bearer bench"},
    )
    with urllib.request.urlopen(request, timeout=60) as response:
        json.load(response)
    return i


def main():
    command, queue = sys.argv[1], sys.argv[2]
    if command == "produce":
        n = int(sys.argv[3])
        with app.producer_or_acquire() as producer:
            for i in range(n):
                stage.apply_async((i,), queue=queue, producer=producer)
    elif command == "delete":
        with app.connection_for_write() as connection:
            connection.default_channel.queue_delete(queue)
    else:
        raise SystemExit(f"unknown command {command}")


if __name__ == "__main__":
    main()
